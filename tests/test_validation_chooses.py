"""Validation chooses, test reports: every surface that chooses between settings (a board's order and ranks,
the average ranks, the learning curves, ``leaderboard show``, a sweep's summary) picks on the validation
metric, with test shown beside it.

The root: gbdt setting A (val 0.90 / test 0.70), gbdt setting B (val 0.80 / test 0.80) and lightgbm (val 0.85 /
test 0.75) on AUROC; chosen on test, gbdt would be B and lightgbm would beat A. A regression task (MAE, lower is
better) has the same shape mirrored.
"""
import copy
import json

import pytest

from conftest import config
from fourdb.experiment.run import format_records
from fourdb.leaderboard import submit_records
from fourdb.leaderboard.curves import curve_points
from fourdb.leaderboard.render import all_tables, render, show
from fourdb.leaderboard.render.aggregation import average_ranks, best_settings
from fourdb.tasks import find_task

CLASSIFICATION = ("synthetic", "taste", {"A": (0.90, 0.70), "B": (0.80, 0.80), "lightgbm": (0.85, 0.75)})
REGRESSION = ("synthetic", "purchase-count", {"A": (10.0, 14.0), "B": (12.0, 11.0), "lightgbm": (11.0, 12.0)})
CAPPED = 50  # a second training budget, so that the learning curves have two points per method


@pytest.fixture(scope="module")
def base_record():
    """One real run record (GBDT on the small synthetic shop), the template of the fake ones."""
    from fourdb.experiment.run import run_experiment

    cfg = config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt", "trainer.progress=false")
    return json.loads(json.dumps(run_experiment(cfg), default=str))


def fake(base: dict, dataset: str, task: str, name: str, val: float, test: float, seed: int = 0,
         train: int | None = None) -> dict:
    """A record of ``name`` (gbdt setting A or B, or lightgbm) on a task's default parameters."""
    spec = find_task(dataset, task)
    r = copy.deepcopy(base)
    model = "lightgbm" if name == "lightgbm" else "gbdt"
    r.update(dataset=dataset, task=task, task_spec_hash=spec.spec_hash, task_type=spec.task_type, metric=spec.metric,
             metrics={"val": {spec.metric: val}, "test": {spec.metric: test}}, model=model, seed=seed, git_dirty=False)
    r.pop("database_fingerprint")
    r["config"].update(seed=seed, task=task, dataset={"name": dataset, "params": {}}, max_train_seeds=train)
    r["config"]["model"]["name"] = model
    # gbdt's two settings differ by one value: one method (gbdt on single_table), two board rows
    r["config"]["model"]["setting"] = name
    if train is not None:
        r["num_seeds"] = {**r["num_seeds"], "train": train}
    return r


def records(base: dict, case: tuple, train: int | None = None) -> list[dict]:
    dataset, task, values = case
    return [fake(base, dataset, task, name, val, test, seed, train) for name, (val, test) in values.items()
            for seed in (0, 1)]


@pytest.fixture(scope="module")
def root(tmp_path_factory, base_record):
    root = tmp_path_factory.mktemp("boards")
    recs = [r for case in (CLASSIFICATION, REGRESSION) for r in records(base_record, case)]
    recs += records(base_record, CLASSIFICATION, train=CAPPED)
    submit_records([(f"record {i}", r) for i, r in enumerate(recs)], root)
    return root


def board(root, task: str, capped: bool = False) -> dict:
    [t] = [t for t in all_tables(root) if t["task"] == task and ("50" in t["budget"]) == capped]
    return t


@pytest.mark.parametrize("task, metric", [("taste", "auroc"), ("purchase-count", "mae")])
def test_a_board_is_ordered_and_ranked_by_validation(root, task, metric):
    t = board(root, task)
    frame = t["frame"]
    assert list(frame["rank"]) == [1, 2, 3]
    assert list(frame["model"]) == ["gbdt", "lightgbm", "gbdt"]
    assert list(frame["setting"]) == ["model.setting=A", "", "model.setting=B"]
    # two seeds without test-row replicates: an interval over seeds only (†)
    test_first = {"auroc": "0.7000 ± 0.0000 [0.7000, 0.7000]†", "mae": "14.0000 ± 0.0000 [14.0000, 14.0000]†"}[metric]
    assert frame[f"test {metric}"][0] == test_first  # the validation-best row, whatever its test says


@pytest.mark.parametrize("task, val", [("taste", 0.90), ("purchase-count", 10.0)])
def test_the_average_rank_counts_a_methods_validation_best_setting(root, task, val):
    tables = [t for t in all_tables(root) if t["task"] == task and "50" not in t["budget"]]
    chosen = best_settings(tables)
    name = f"synthetic/{task}"
    assert chosen["gbdt (single_table)"][name].val_mean == pytest.approx(val)  # setting A
    [ranking] = [r for (_, budget), r in average_ranks(tables).items()]
    assert list(ranking.frame["method"]) == ["gbdt (single_table)", "lightgbm (single_table)"]
    assert list(ranking.frame["ranks"]) == [f"{name}: 1", f"{name}: 2"]


def test_learning_curves_pick_the_validation_best_setting(root):
    points = curve_points([t for t in all_tables(root) if t["task"] == "taste"])
    gbdt = points[points["method"] == "gbdt (single_table)"]
    assert list(gbdt["test_mean"]) == pytest.approx([0.70, 0.70])  # setting A's test, on both budgets
    assert list(gbdt["val_mean"]) == pytest.approx([0.90, 0.90])


def test_show_and_render_say_validation_chooses(root):
    text = show("synthetic", "taste", root)
    assert "ranked by mean validation auroc" in text
    first = next(line for line in text.splitlines() if line.lstrip().startswith("1 "))
    assert "gbdt" in first and "model.setting=A" in first and "0.9000" in first and "0.7000" in first
    readme = render(root).read_text()
    assert "Validation chooses, test reports" in readme
    assert "ranked by mean validation mae (lower is better)" in readme


@pytest.mark.parametrize("case", [CLASSIFICATION, REGRESSION])
def test_the_sweep_summary_names_the_validation_best_run(base_record, case):
    recs = records(base_record, case)
    overrides = [{"model.setting": r["config"]["model"]["setting"]} for r in recs]
    for r in recs:
        r["wall_seconds"] = 1.0
    lines = format_records(recs, overrides).splitlines()
    best = [line for line in lines if line.startswith("best on ")]
    assert len(best) == 1
    val, test = case[2]["A"]
    assert "model=gbdt, model.setting=A" in best[0] and f"val {val:.4f}, test {test:.4f}" in best[0]
