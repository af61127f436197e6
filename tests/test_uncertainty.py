"""Every board says which differences are real: bootstrap replicates of the test metric per run (paired across
models, checked at submit), a 95% interval on every row, ties with the leader, marks for fewer seeds and runs cut
short at their epoch cap, an interval on average ranks, and regimes never ranked together."""
import copy
import json
import time

import numpy as np
import pandas as pd
import pytest

from conftest import config
from fourdb.leaderboard import RecordError, read_board, submit_records, validate_record
from fourdb.leaderboard.boards import board_path
from fourdb.leaderboard.marks import CUT_SHORT, cut_short
from fourdb.leaderboard.render import render, show
from fourdb.leaderboard.render.aggregation import aggregate, average_ranks
from fourdb.leaderboard.render.uncertainty import SEEDS_ONLY, SEEDS_ONLY_MARK, row_interval
from fourdb.leaderboard.stamp import stamp
from fourdb.leaderboard.store import submit_run_dirs
from fourdb.metrics import (
    BOOTSTRAP_REPLICATES,
    bootstrap,
    bootstrap_record,
    bootstrap_seed,
    compute,
    resample_indices,
)
from fourdb.tasks import find_task

SMALL = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "trainer.progress=false"]


# ---- replicates ---------------------------------------------------------------------------------------------

def scored(kind: str, n: int = 400, seed: int = 1):
    """(labels, scores, metrics) of a task type, with some signal."""
    rng = np.random.default_rng(seed)
    if kind == "binary":
        y = rng.integers(0, 2, n)
        return y, np.round(rng.random(n) * 0.5 + 0.3 * y, 2), ["auroc", "roc_auc", "average_precision", "accuracy"]
    if kind == "regression":
        y = rng.normal(size=n)
        return y, y + rng.normal(size=n), ["mae", "rmse", "r2", "nmae"]
    if kind == "multiclass":
        return rng.integers(0, 4, n), rng.dirichlet(np.ones(4), n), ["accuracy", "macro_f1"]
    y = [rng.choice(30, rng.integers(0, 4), replace=False) for _ in range(n)]
    return y, np.stack([rng.permutation(30)[:8] for _ in range(n)]), ["map", "precision", "recall", "mrr", "hit_rate",
                                                                       "ndcg"]


@pytest.mark.parametrize("kind", ["binary", "regression", "multiclass", "recommendation"])
def test_replicates_are_the_metric_on_resamples_deterministic_and_paired(kind):
    """Two models on one test set are scored on the same resampled rows: replicate i of each is the metric of
    its own scores on resample i (``resample_indices``), whichever model it is, and a rerun gives the same."""
    y, first, names = scored(kind)
    _, second, _ = scored(kind, seed=2)
    train = np.random.default_rng(3).normal(size=50)
    seed = bootstrap_seed("0123abcd", len(y))
    assert seed == bootstrap_seed("0123abcd", len(y)) != bootstrap_seed("0123abcd", len(y) + 1)
    for name in names:
        for scores in (first, second):
            got = bootstrap(name, y, scores, seed, train, replicates=15)
            assert got == bootstrap(name, y, scores, seed, train, replicates=15)
            want = [compute(name, [y[i] for i in idx] if kind == "recommendation" else y[idx], scores[idx], train)
                    for idx in resample_indices(len(y), seed, 15)]
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), name


def test_an_undefined_replicate_is_null_and_the_record_field_has_its_form():
    y = np.zeros(30, dtype=int)
    y[0] = 1  # one positive: many resamples hold none, where AUROC is undefined
    field = bootstrap_record("auroc", y, np.linspace(0, 1, 30), "feedbeef")
    assert set(field) == {"metric", "seed", "replicates"} and field["metric"] == "auroc"
    assert field["seed"] == bootstrap_seed("feedbeef", 30) and len(field["replicates"]) == BOOTSTRAP_REPLICATES
    assert None in field["replicates"] and all(v is None or 0 <= v <= 1 for v in field["replicates"])


def test_two_hundred_replicates_of_auroc_on_100k_rows_take_seconds():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 100_000)
    start = time.perf_counter()
    bootstrap("auroc", y, rng.random(100_000) + 0.2 * y, 7)
    assert time.perf_counter() - start < 10  # about a second on one idle core


# ---- a run's replicates, checked at submit ----------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders of two models on one test set (record.json and predictions.parquet)."""
    from fourdb.experiment.run import run_experiment

    out = {}
    for model in ("gbdt", "prior"):
        folder = tmp_path_factory.mktemp(model)
        run_experiment(config(*SMALL, f"model={model}"), folder)
        out[model] = folder
    return out


def record_of(folder) -> dict:
    return json.loads((folder / "record.json").read_text())


def test_a_run_records_replicates_on_the_resamples_every_model_shares(runs):
    gbdt, prior = record_of(runs["gbdt"]), record_of(runs["prior"])
    for record in (gbdt, prior):
        boot = record["test_bootstrap"]
        assert boot["metric"] == record["metric"] == "auroc"
        assert boot["seed"] == bootstrap_seed(record["task_spec_hash"], record["num_seeds"]["test"])
        assert len(boot["replicates"]) == BOOTSTRAP_REPLICATES
        validate_record(record)
    assert gbdt["test_bootstrap"]["seed"] == prior["test_bootstrap"]["seed"]  # paired
    assert gbdt["test_bootstrap"]["replicates"] != prior["test_bootstrap"]["replicates"]


def copied(folder, tmp_path, name, edit=None):
    import shutil

    run = tmp_path / name
    shutil.copytree(folder, run)
    record = record_of(run)
    if edit:
        edit(record)
    (run / "record.json").write_text(json.dumps(record))
    return run


def test_submit_keeps_genuine_replicates_and_refuses_tampered_ones(runs, tmp_path):
    genuine = record_of(runs["gbdt"])
    submit_run_dirs([copied(runs["gbdt"], tmp_path, "genuine")], tmp_path / "lb")
    [stored] = read_board(board_path(tmp_path / "lb", "synthetic", "taste"))
    assert stored["test_bootstrap"] == genuine["test_bootstrap"] and stored["checked"]["metrics"] == "recomputed"

    def nudge(record):
        record["test_bootstrap"]["replicates"][3] += 0.01

    def reseed(record):
        record["test_bootstrap"]["seed"] += 1

    def shorten(record):
        record["test_bootstrap"]["replicates"].pop()

    for name, edit, words in (("nudged", nudge, "test_bootstrap.replicates[3]"), ("reseeded", reseed, "seed"),
                              ("short", shorten, "199 replicates")):
        with pytest.raises(RecordError, match=r"test_bootstrap.*not accepted") as e:
            submit_run_dirs([copied(runs["gbdt"], tmp_path, name, edit)], tmp_path / "other")
        assert words in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "other").exists()


def test_a_record_gains_replicates_from_its_predictions_and_keeps_none_without_them(runs, tmp_path):
    run = copied(runs["prior"], tmp_path, "older", lambda r: r.pop("test_bootstrap"))
    submit_run_dirs([run], tmp_path / "lb")
    [stored] = read_board(board_path(tmp_path / "lb", "synthetic", "taste"))
    assert stored["test_bootstrap"] == record_of(runs["prior"])["test_bootstrap"]
    alone = {k: v for k, v in record_of(runs["gbdt"]).items() if k != "predictions"}
    submit_records([("alone", alone)], tmp_path / "lb2")  # nothing to recompute from: unverifiable, dropped
    [stored] = read_board(board_path(tmp_path / "lb2", "synthetic", "taste"))
    assert "test_bootstrap" not in stored and "checked" not in stored


def test_an_external_csv_gets_the_same_replicates_as_the_run_that_made_it(runs, tmp_path):
    from fourdb.leaderboard.external import external_record

    frame = pd.read_parquet(runs["gbdt"] / "predictions.parquet")
    frame["cutoff"] = pd.to_datetime(frame["cutoff"]).dt.strftime("%Y-%m-%d %H:%M:%S")
    frame.to_csv(tmp_path / "preds.csv", index=False)
    record = external_record(tmp_path / "preds.csv", "outside", "synthetic", "taste", params={"size": 150})
    want = record_of(runs["gbdt"])["test_bootstrap"]
    assert record["test_bootstrap"]["seed"] == want["seed"]
    assert record["test_bootstrap"]["replicates"] == pytest.approx(want["replicates"], rel=1e-5)


@pytest.mark.parametrize("change, words", [
    ({"replicates": [0.5] * 1001}, "at most 1000"),
    ({"replicates": [0.5, float("inf")]}, "replicates[1] must be a finite number or null"),
    ({"replicates": [0.5, "0.6"]}, "replicates[1] must be a finite number"),
    ({"metric": "f2"}, "test_bootstrap.metric must be a metric"),
    ({"seed": -1}, "test_bootstrap.seed"),
    ({"extra": 1}, "unknown key"),
])
def test_the_schema_checks_the_replicates(runs, change, words):
    record = record_of(runs["gbdt"])
    record["test_bootstrap"] = {**record["test_bootstrap"], **change}
    with pytest.raises(RecordError, match=None) as e:
        validate_record(record, "r.json")
    assert words in str(e.value) and "\n" not in str(e.value)


# ---- intervals, ties and marks on a board -------------------------------------------------------------------

@pytest.fixture(scope="module")
def base(runs):
    return record_of(runs["gbdt"])


def row_records(base, model, tests, boots=None, regime=None, history=None, epochs=None) -> list[dict]:
    """One setting's seeds on synthetic/taste at the default parameters; ``boots``: per seed its replicates, as
    fourdb's own (sealed) numbers; validation equals test, so the order is the test order."""
    spec = find_task("synthetic", "taste")
    out = []
    for seed, test in enumerate(tests):
        r = copy.deepcopy(base)
        for key in ("test_bootstrap", "predictions", "database_fingerprint", "checked"):
            r.pop(key, None)
        r.update(model=model, seed=seed, git_dirty=False, task_spec_hash=spec.spec_hash,
                 metrics={"val": {"auroc": test}, "test": {"auroc": test}})
        r["config"].update(seed=seed, dataset={"name": "synthetic", "params": {}})
        r["config"]["model"]["name"] = model
        if regime:
            r["regime"] = regime
        if history is not None:
            r["history"], r["config"]["trainer"] = history, {**(r["config"].get("trainer") or {}), "epochs": epochs}
        if boots is not None:
            r["test_bootstrap"] = {"metric": "auroc", "seed": 11, "replicates": list(boots[seed])}
            r = stamp(r, metrics="recomputed")
        r["config_hash"] = f"{model}-{regime}"
        out.append(r)
    return out


def replicates_around(values, n_rows: int, seed: int = 0):
    """Per seed, 200 replicates of a mean over ``n_rows`` noisy test rows (a metric whose spread shrinks as
    1/sqrt(rows)), all seeds on the same resamples."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=n_rows)
    out = []
    for v in values:
        per_row = v + 0.05 * (rows + rng.normal(size=n_rows))
        out.append([float(per_row[idx].mean()) for idx in resample_indices(n_rows, 11)])
    return out


def test_the_two_level_interval_covers_the_mean_and_narrows_with_more_test_rows():
    values = [0.80, 0.81, 0.79]
    widths = []
    for rows in (100, 10_000):
        interval = row_interval(values, [{"metric": "auroc", "seed": 11, "replicates": r}
                                         for r in replicates_around(values, rows)], "auroc")
        assert interval.kind != SEEDS_ONLY and interval.low < np.mean(values) < interval.high
        widths.append(interval.high - interval.low)
    assert widths[1] < widths[0]
    only_seeds = row_interval(values, [None, *[{"metric": "auroc", "seed": 11, "replicates": [0.8] * 200}] * 2],
                              "auroc")
    assert only_seeds.kind == SEEDS_ONLY and only_seeds.low <= np.mean(values) <= only_seeds.high
    assert row_interval([0.8], [None], "auroc") is None


def board_of(records: list[dict]) -> dict:
    [t] = [t for t in aggregate(records) if t.get("regime", "supervised") == "supervised"]
    return t


def test_a_row_overlapping_the_leader_is_tied_a_clearly_worse_one_is_not(base):
    leader = row_records(base, "gbdt", [0.80, 0.81, 0.82], replicates_around([0.80, 0.81, 0.82], 400))
    close = row_records(base, "lightgbm", [0.805, 0.8, 0.81], replicates_around([0.805, 0.8, 0.81], 400, 1))
    worse = row_records(base, "prior", [0.60, 0.61, 0.62], replicates_around([0.60, 0.61, 0.62], 400, 2))
    t = board_of(leader + close + worse)
    frame = t["frame"]
    assert list(frame["model"]) == ["gbdt", "lightgbm", "prior"]
    assert list(frame["tied"]) == ["leader", "tied", ""]
    assert all(SEEDS_ONLY_MARK not in cell and " [" in cell for cell in frame["test auroc"])  # two-level
    low, high = t["summaries"][0].interval.low, t["summaries"][0].interval.high
    assert frame["test auroc"][0] == f"0.8100 ± 0.0100 [{low:.4f}, {high:.4f}]"


def test_seeds_only_fewer_seeds_and_one_seed_are_marked(base):
    three = row_records(base, "gbdt", [0.80, 0.81, 0.82])  # committed-style records: no replicates
    two = row_records(base, "lightgbm", [0.70, 0.72])
    one = row_records(base, "prior", [0.60])
    frame = board_of(three + two + one)["frame"].set_index("model")
    assert frame.loc["gbdt", "test auroc"].endswith(SEEDS_ONLY_MARK) and frame.loc["gbdt", "marks"] == ""
    assert frame.loc["lightgbm", "test auroc"].endswith("]" + SEEDS_ONLY_MARK)
    assert frame.loc["lightgbm", "marks"] == "2 of 3 seeds"
    assert frame.loc["prior", "test auroc"] == "0.6000 (1 seed)" and frame.loc["prior", "tied"] == "-"
    assert frame.loc["prior", "marks"] == "1 of 3 seeds"


def history(values, metric="auroc"):
    return [{"epoch": i + 1, "loss": 1.0, f"val_{metric}": v, "seconds": 1.0} for i, v in enumerate(values)]


@pytest.mark.parametrize("values, epochs, metric, expected", [
    ([0.6, 0.7, 0.8], 3, "auroc", True),  # ran every epoch allowed, best at the last
    ([0.6, 0.8, 0.7], 3, "auroc", False),  # best before the last: patience would have had its say
    ([0.6, 0.7, 0.8], 10, "auroc", False),  # stopped before the cap
    ([0.6, 0.8, 0.8], 3, "auroc", False),  # the last only equals the best: the trainer keeps the first
    ([12.0, 11.0, 10.0], 3, "mae", True),  # lower is better
    ([10.0, 11.0, 12.0], 3, "mae", False),
    ([0.6, 0.7, None], 3, "auroc", False),  # no validation score at the last epoch
])
def test_cut_short(values, epochs, metric, expected):
    record = {"metric": metric, "history": history(values, metric), "config": {"trainer": {"epochs": epochs}}}
    assert cut_short(record) is expected
    assert cut_short({"metric": metric, "config": {"trainer": {"epochs": epochs}}}) is False  # no history: GBDT


def test_a_row_with_a_seed_cut_short_is_marked(base):
    capped = row_records(base, "mlp", [0.8, 0.8, 0.8], history=history([0.6, 0.7, 0.8]), epochs=3)
    capped[1]["history"] = history([0.6, 0.8, 0.7])
    patient = row_records(base, "gbdt", [0.7, 0.7, 0.7], history=history([0.6, 0.8, 0.7]), epochs=3)
    frame = board_of(capped + patient)["frame"].set_index("model")
    assert frame.loc["mlp", "marks"] == CUT_SHORT and frame.loc["gbdt", "marks"] == ""


def test_regimes_are_never_ranked_in_one_table(base):
    records = (row_records(base, "gbdt", [0.8, 0.8, 0.8]) + row_records(base, "lightgbm", [0.7, 0.7, 0.7])
               + row_records(base, "pretrained", [0.9, 0.9, 0.9], regime="in-context"))
    tables = aggregate(records)
    assert [(t["regime"], list(t["frame"]["model"])) for t in tables] == [
        ("supervised", ["gbdt", "lightgbm"]), ("in-context", ["pretrained"])]
    assert list(tables[0]["frame"]["rank"]) == [1, 2] and list(tables[1]["frame"]["rank"]) == [1]
    ranks = average_ranks(tables)
    assert sorted(budget for _, budget in ranks) == ["train all / val all seeds",
                                                     "train all / val all seeds; in-context"]
    for (_, budget), ranking in ranks.items():
        methods = set(ranking.frame["method"])
        assert methods == ({"pretrained (single_table)"} if "in-context" in budget else
                           {"gbdt (single_table)", "lightgbm (single_table)"})


def test_average_ranks_carry_a_test_rank_interval(base):
    records = (row_records(base, "gbdt", [0.80, 0.81, 0.82], replicates_around([0.80, 0.81, 0.82], 400))
               + row_records(base, "lightgbm", [0.70, 0.72, 0.71], replicates_around([0.70, 0.72, 0.71], 400, 1))
               + row_records(base, "prior", [0.805, 0.8, 0.81]))
    [ranking] = average_ranks(aggregate(records)).values()
    cells = ranking.frame.set_index("method")["test rank [95% interval]"]
    assert cells["lightgbm (single_table)"] == "3.00 [3.00, 3.00]"  # clearly last on test
    point, low, high = ranking.test_ranks["gbdt (single_table)"]
    assert low <= point <= high and low >= 1 and high <= 2  # first or second: tied with prior's seeds


def test_every_surface_shows_the_intervals_and_explains_them(base, tmp_path):
    records = row_records(base, "gbdt", [0.80, 0.81, 0.82]) + row_records(base, "lightgbm", [0.70, 0.72])
    for r in records:
        r.pop("config_hash")
    submit_records([(f"r{i}", r) for i, r in enumerate(records)], tmp_path)
    text = show("synthetic", "taste", tmp_path)
    assert "95% interval" in text and "tied" in text and "2 of 3 seeds" in text and SEEDS_ONLY_MARK in text
    readme = render(tmp_path).read_text()
    assert "Which differences are real" in readme and "two-level bootstrap" in readme and CUT_SHORT in readme
    assert "test rank \\[95% interval\\]" in readme and "\\[0.8" in readme
    assert (tmp_path / "plots" / "classification_average_rank__train-all-val-all-seeds.png").exists()
