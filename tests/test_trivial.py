"""Trivial baselines (the floor every board shows) and regression's training objective."""
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import config

from fourdb.errors import FourdbError
from fourdb.tasks.past_labels import label_data
from fourdb.models import TaskInfo, create_model
from fourdb.experiment.run import run_experiment, warn_if_trivial_wins
from fourdb.tasks.types import TaskType, regression_objective

DAY = pd.Timedelta(days=1)
T0 = pd.Timestamp("2024-01-01")


class FakeTask:
    """A task's frame as materialize gives it: entity, cutoff, label, label_known_at, split."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame

    def split(self, name):
        return self.frame[self.frame["split"] == name].reset_index(drop=True)


def frame():
    rows = []
    # entity "a": labels 1, 5, 9 at weekly cutoffs, each known a week later (its window)
    for i, label in enumerate([1.0, 5.0, 9.0]):
        rows.append(("a", T0 + 7 * i * DAY, label, "train"))
    rows.append(("b", T0, 100.0, "train"))
    rows += [("a", T0 + 15 * DAY, 0.0, "val"), ("a", T0 + 30 * DAY, 0.0, "test"), ("c", T0 + 30 * DAY, 0.0, "test")]
    f = pd.DataFrame(rows, columns=["entity", "cutoff", "label", "split"])
    f["label_known_at"] = f["cutoff"] + 7 * DAY
    f["node"] = f["entity"].map({"a": 0, "b": 1, "c": 2})
    return FakeTask(f)


def test_entity_baselines_read_only_the_labels_known_by_the_cutoff():
    """At day 15 entity a's labels of days 0 and 7 are known (their windows closed on days 7 and 14), the
    one of day 14 is not (day 21); at day 30 all three are. An entity with no past label gets the global one."""
    task = frame()
    splits = {s: task.split(s) for s in ("train", "val", "test")}
    data = label_data(task, splits)
    info = TaskInfo("regression", 0, "mae")
    mean, median, zero, overall = (create_model(n, info).fit(data) for n in ("entity_mean", "entity_median", "zero", "mean"))
    assert mean.predict(data, "val").tolist() == [3.0]
    assert mean.predict(data, "test").tolist() == [5.0, np.mean([1, 5, 9, 100])]
    assert median.predict(data, "test").tolist() == [5.0, np.median([1, 5, 9, 100])]
    assert zero.predict(data, "test").tolist() == [0.0, 0.0]
    assert overall.predict(data, "val").tolist() == [np.mean([1, 5, 9, 100])]


def test_classification_baselines_give_class_frequencies():
    task = frame()
    task.frame["label"] = [1, 0, 1, 0, 0, 0, 0]
    splits = {s: task.split(s) for s in ("train", "val", "test")}
    data = label_data(task, splits)
    binary = TaskInfo("binary", 2, "auroc")
    assert create_model("prior", binary).fit(data).predict(data, "test").tolist() == [0.5, 0.5]
    assert create_model("entity_mean", binary).fit(data).predict(data, "test").tolist() == [2 / 3, 0.5]
    multi = TaskInfo("multiclass", 3, "accuracy")
    p = create_model("entity_mean", multi).fit(data).predict(data, "test")
    assert p.shape == (2, 3) and np.allclose(p.sum(1), 1) and np.allclose(p[0], [1 / 3, 2 / 3, 0])
    with pytest.raises(FourdbError, match="model 'zero' does not do binary tasks"):
        create_model("zero", binary)


def test_every_run_records_the_trivial_baselines_and_they_equal_the_baselines_run_alone():
    base = ["dataset=synthetic", "dataset.params.size=150", "task=purchase-count", "trainer.progress=false"]
    record = run_experiment(config(*base, "model=gbdt"))
    alone = run_experiment(config(*base, "model=entity_median"))
    assert set(record["trivial"]) == {"zero", "mean", "median", "entity_mean", "entity_median"}
    assert record["trivial"]["entity_median"]["test"] == alone["metrics"]["test"]
    assert alone["trivial"] == {}  # a trivial baseline is not compared with itself


def test_a_model_that_does_not_beat_the_floor_is_warned_about(caplog):
    trivial = {"zero": {"val": {"nmae": 0.31}, "test": {"nmae": 0.31}}, "mean": {"val": {"nmae": 0.5}, "test": {"nmae": 0.5}}}
    with caplog.at_level(logging.WARNING, logger="fourdb"):
        warn_if_trivial_wins("sage", "nmae", {"test": {"nmae": 0.35}}, trivial)
        assert "does not beat the trivial baseline 'zero': test nmae 0.3500 against 0.3100" in caplog.text
        caplog.clear()
        warn_if_trivial_wins("sage", "nmae", {"test": {"nmae": 0.30}}, trivial)
        warn_if_trivial_wins("gbdt", "auroc", {"test": {"auroc": 0.6}}, {"prior": {"test": {"auroc": 0.5}}})
        assert caplog.text == ""


# -- recommendation's floor: the history baselines ---------------------------------------------------------

REC = ["dataset=browsing", "dataset.params.size=150", "task=next-views", "trainer.progress=false",
       "max_train_seeds=600", "max_val_seeds=300"]


def test_a_recommendation_run_records_popularity_and_repeat_as_its_floor(tmp_path, caplog):
    """A ranker's record holds the history baselines scored on its own seeds (the same numbers as their own runs
    on that budget); a board marks a model that does not beat the better of them."""
    from fourdb.leaderboard import submit_records
    from fourdb.leaderboard.render import all_tables

    record = run_experiment(config(*REC, "model=lightgbm"))
    alone = {m: run_experiment(config(*REC, f"model={m}")) for m in ("popularity", "repeat")}
    assert set(record["trivial"]) == {"popularity", "repeat"}
    for name, run in alone.items():
        assert record["trivial"][name] == {s: run["metrics"][s] for s in ("val", "test")}
        assert run["trivial"] == {}  # the floor is not compared with itself
    below = dict(record, seed=1, config={**record["config"], "seed": 1},
                 metrics={s: {**m, "map": 0.0011} for s, m in record["metrics"].items()})
    with caplog.at_level(logging.WARNING, logger="fourdb"):
        warn_if_trivial_wins("lightgbm", "map", below["metrics"], record["trivial"])
    assert "does not beat the trivial baseline 'repeat': test map 0.0011" in caplog.text
    submit_records([(f"record {i}", r) for i, r in enumerate([below, alone["popularity"], alone["repeat"]])], tmp_path)
    [board] = all_tables(tmp_path)
    repeat = alone["repeat"]["metrics"]["test"]["map"]
    assert board["floor"] == ("repeat", pytest.approx(repeat))
    marks = dict(zip(board["frame"]["model"], board["frame"]["floor"]))
    assert marks == {"lightgbm": "below floor", "popularity": "", "repeat": ""}  # the floor's own rows are not


# -- regression's objective ------------------------------------------------------------------------------

def test_the_objective_resolves_to_the_loss_the_metric_scores():
    assert regression_objective(None, "mae") == "mse" and regression_objective("metric", "nmae") == "l1"
    assert regression_objective("metric", "rmse") == "mse" and regression_objective("l1", "rmse") == "l1"
    out, y = torch.tensor([0.0, 2.0, 10.0]), torch.tensor([1.0, 1.0, 1.0])
    assert TaskType.REGRESSION.loss(out, y, objective="l1").item() == pytest.approx((1 + 1 + 9) / 3)
    assert TaskType.REGRESSION.loss(out, y).item() == pytest.approx((1 + 1 + 81) / 3)


@pytest.mark.parametrize("model", ["gbdt", "lightgbm", "mlp"])
def test_an_l1_objective_predicts_the_median_where_the_features_say_nothing(model):
    """Skewed labels and one constant feature: squared error is minimized by the mean, absolute error by the
    median; each model, trained on each, predicts near the one its objective asks for."""
    from fourdb.columns import EncodedTable
    from fourdb.features import TableData
    from fourdb.experiment.prepare import trainer_config

    rng = np.random.default_rng(0)
    y = {s: rng.exponential(1.0, n) ** 3 for s, n in (("train", 3000), ("val", 1000))}
    table = {s: EncodedTable(np.zeros((n, 1), np.float32), np.zeros((n, 0), np.int64), [], ["x"], [])
             for s, n in (("train", 3000), ("val", 1000), ("test", 10))}
    data = TableData(table, y)
    info = TaskInfo("regression", 0, "mae")
    got = {}
    for objective in ("mse", "l1"):
        cfg = config(f"objective={objective}", f"model={model}", "trainer.progress=false", "trainer.epochs=30",
                     "trainer.patience=30")
        fitted = create_model(model, info, **dict(cfg.model.params)).fit(data, trainer_config(cfg))
        got[objective] = float(np.mean(fitted.predict(data, "test")))
    median, mean = np.median(y["train"]), np.mean(y["train"])
    assert abs(got["l1"] - median) < 0.3 * abs(mean - median), (got, median, mean)
    assert abs(got["mse"] - mean) < 0.3 * abs(mean - median), (got, median, mean)


def test_an_objective_on_a_classification_task_is_one_line_before_the_data_is_read():
    with pytest.raises(FourdbError, match=r"^objective=l1 sets the loss of regression tasks; task 'taste' is binary"):
        run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "objective=l1"))

