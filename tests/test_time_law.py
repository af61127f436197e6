"""Time is law on databases fourdb did not write: one planted leak per defect class, on every path that
reads data (task materialization, single-table features, DFS, the online sampler, the offline store,
layer-wise inference), each shown to be a real leak by a model that is let see it, and ``certify``."""
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import config

import planted
from fourdb.errors import TaskError
from fourdb.rdb import Database
from fourdb.experiment.run import run_experiment
from fourdb.tasks import find_task, materialize
from fourdb.utils import to_epoch_ns

FAST = ["trainer.progress=false", "trainer.epochs=4", "trainer.patience=4", "trainer.batch_size=256"]
CHANCE = 0.1  # |AUROC - 0.5| of an honest model on a coin-flip label over these test sets


def run(folder, task, *overrides):
    return run_experiment(config("dataset=folder", f"dataset.path={folder}", f"dataset.name={folder.name}",
                                 f"task={task}", *FAST, *overrides))


def at_chance(record):
    for split in ("val", "test"):
        auroc = record["metrics"][split]["auroc"]
        assert abs(auroc - 0.5) < CHANCE, f"{record['model']} {split} AUROC {auroc:.3f} on a coin-flip task"


# ---------------------------------------------------------------------------------------------------
# sub-second times: a row 1 microsecond after the cutoff is after it, on every path

@pytest.fixture(scope="module")
def subsecond(tmp_path_factory):
    return planted.sub_second(tmp_path_factory.mktemp("subsecond"))


PATHS = {
    "dfs": ["model=gbdt", "features=dfs", "features.depth=1"],
    "online sampler": ["model=sage", "sampler=recent", "sampler.fanouts=[1]"],
    "offline store": ["model=sage", "sampler=recent", "sampler.fanouts=[1]", "engine=offline"],
    "layer-wise inference": ["model=sage", "sampler=recent", "sampler.fanouts=[1]", "engine.inference=layerwise"],
}


@pytest.mark.parametrize("path", PATHS)
def test_a_row_one_microsecond_after_the_cutoff_is_unseen(subsecond, path):
    at_chance(run(subsecond, "flag", *PATHS[path]))


def test_the_microsecond_leak_is_real(subsecond):
    """Asked 2 microseconds later, the same model reads each label off the ping."""
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.models import TaskInfo, create_model
    from fourdb.rdb import Database
    from fourdb.metrics import compute
    from fourdb.train.trainer import TrainerConfig

    db = Database.load(subsecond)
    task = materialize(find_task(str(subsecond), "flag"), db)
    splits = subsample(task, None, None)
    data = graph_inputs(config("model=sage", "sampler=recent", "sampler.fanouts=[1]"), db, task, splits)
    data.cutoffs = {s: c + 2000 for s, c in data.cutoffs.items()}
    model = create_model("sage", TaskInfo("binary", 2, "auroc")).fit(data, TrainerConfig(epochs=4, progress=False))
    assert compute("auroc", splits["test"]["label"].to_numpy(), model.predict(data, "test")) > 0.9


# ---------------------------------------------------------------------------------------------------
# tables without their own time take their timed parent's

@pytest.fixture(scope="module")
def lines(tmp_path_factory):
    return {static: planted.line_items(tmp_path_factory.mktemp(f"lines-{static}"), static=static)
            for static in (False, True)}


def test_line_items_take_their_invoice_time(lines):
    db = Database.load(lines[False])
    t = db.schema.table("lines")
    assert t.inherited_from == ["invoice_id"]
    issued = db.tables["invoices"].set_index("invoice_id")["issued_at"]
    assert (db.tables["lines"][t.time_column].to_numpy() == issued.loc[db.tables["lines"]["invoice_id"]].to_numpy()).all()
    assert any("lines" in n and "invoices" in n for n in db.notes)
    assert Database.load(lines[True]).schema.table("lines").time_column is None


@pytest.mark.parametrize("model", [["model=gbdt", "features=dfs", "features.depth=1"], ["model=sage", "graph=r2n"]])
def test_future_line_items_are_unseen(lines, model):
    at_chance(run(lines[False], "flagged", *model))


@pytest.mark.parametrize("model", [["model=gbdt", "features=dfs", "features.depth=1"], ["model=sage", "graph=r2n"]])
def test_the_line_item_leak_is_real(lines, model):
    """Declared always visible (``static: true``), the same lines give the labels away (validation: a
    model fitted on one cutoff's flag may read another cutoff's the wrong way round on test)."""
    assert run(lines[True], "flagged", *model)["metrics"]["val"]["auroc"] > 0.7


def test_dfs_counts_only_line_items_of_past_invoices(lines):
    from fourdb.features.dfs import compute_dfs

    db = Database.load(lines[False])
    seeds = pd.DataFrame({"node": [0, 1, 2], "cutoff": [planted.CUTOFFS[0], planted.CUTOFFS[1], planted.CUTOFFS[2]]})
    feats = compute_dfs(db, "tracks", seeds, depth=1, primitives=["count"], progress=False)
    issued = db.tables["invoices"].set_index("invoice_id")["issued_at"]
    line_time = issued.loc[db.tables["lines"]["invoice_id"]].to_numpy()
    for i, (node, cut) in enumerate(zip(seeds["node"], seeds["cutoff"])):
        expect = ((db.tables["lines"]["track_id"].to_numpy() == node) & (line_time <= cut)).sum()
        assert feats["COUNT(lines)"].iloc[i] == expect


def test_validate_warns_about_tables_that_inherit_time(lines, tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "validate", str(lines[False])], capture_output=True,
                       text=True, cwd=tmp_path)
    assert p.returncode == 0
    assert "warning: table 'lines' has no time column" in p.stdout and "invoices" in p.stdout
    assert "from invoices (via invoice_id)" in p.stdout


# ---------------------------------------------------------------------------------------------------
# entities that do not exist yet

def test_seeds_of_entities_not_yet_there_are_dropped_and_counted(tmp_path, caplog):
    folder = planted.unborn(tmp_path / "unborn")
    db = Database.load(folder)
    spec = find_task(str(folder), "joins-soon")
    with caplog.at_level(logging.WARNING, logger="fourdb"):
        task = materialize(spec, db)
    signup = db.tables["customers"]["signup"].to_numpy()[task.frame["node"].to_numpy()]
    assert (signup <= task.frame["cutoff"].to_numpy()).all()
    expected = {s: int((db.tables["customers"]["signup"] > c).sum()) for s, c in zip(("train", "val", "test"),
                                                                                    planted.CUTOFFS)}
    assert task.dropped == {s: n for s, n in expected.items() if n}
    assert "dropped" in caplog.text and "customers" in caplog.text and "signup" in caplog.text
    assert (task.frame["label"] == 0).all()  # the only positives were customers who did not exist yet


def test_a_task_of_only_unborn_entities_is_one_clear_error(tmp_path):
    folder = planted.unborn(tmp_path / "unborn")
    db = Database.load(folder)
    spec = find_task(str(folder), "joins-soon")
    spec.sql = ("SELECT u.customer_id, c.cutoff, 1 AS label FROM cutoffs c JOIN customers u "
                "ON u.signup > c.cutoff")
    with pytest.raises(TaskError, match=r"joins-soon.*customers.*signup.*newer than its cutoff") as e:
        materialize(spec, db)
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------------
# statistics fitted only on rows known by the start of validation; datetimes relative to the cutoff

@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    folder = planted.drifting(tmp_path_factory.mktemp("drifting"))
    db = Database.load(folder)
    return folder, db, materialize(find_task(str(folder), "long-session"), db)


def _future_changed(db, val):
    """``db`` with every session after ``val`` given wild values."""
    tables = dict(db.tables)
    s = tables["sessions"].copy()
    late = s["at"] > val
    s.loc[late, "minutes"] = 1e6
    s.loc[late, "device"] = "never-seen"
    tables["sessions"] = s
    return Database(db.schema, tables)


def test_graph_encoders_are_fitted_before_validation(drifting):
    from fourdb.graph import build_graph

    _, db, task = drifting
    a = build_graph(db, "r2n", fit_until=task.fit_until)
    b = build_graph(_future_changed(db, task.fit_until), "r2n", fit_until=task.fit_until)
    early = (db.tables["sessions"]["at"] <= task.fit_until).to_numpy()
    assert np.array_equal(a.features["sessions"].numeric[early], b.features["sessions"].numeric[early])
    assert a.encoders["sessions"].stats["device"] == b.encoders["sessions"].stats["device"]
    assert "robot" not in a.encoders["sessions"].stats["device"]  # only seen after validation starts
    mean, _ = a.encoders["sessions"].stats["minutes"]
    assert mean < 20  # the early sessions' scale, not the late ones' ten times longer


def test_seed_row_features_are_fitted_before_validation(drifting):
    from fourdb.features import build_table_features

    _, db, task = drifting
    splits = {s: task.split(s) for s in ("train", "val", "test")}
    accounts = db.tables["accounts"].copy()
    late = accounts["opened"] > task.fit_until
    assert late.any() and not np.isin(np.flatnonzero(late), task.frame["node"]).any()  # never seeds
    accounts.loc[late, "balance"] = 1e9
    later = Database(db.schema, {**db.tables, "accounts": accounts})
    for name in ("single_table", "dfs"):
        params = {"depth": 1} if name == "dfs" else {}
        a = build_table_features(name, db, task, splits, **params)["train"]
        b = build_table_features(name, later, task, splits, **params)["train"]
        j = a.numeric_names.index("balance")
        assert np.array_equal(a.numeric[:, j], b.numeric[:, j]), name


def test_datetimes_reach_models_as_ages_at_the_cutoff(drifting):
    """Two seeds a year apart (52 weeks: same weekday and month) whose session was seen 3 days before
    their cutoff get the same features: nothing absolute about the time reaches a model."""
    from fourdb.engine.sampling.data import node_inputs
    from fourdb.columns import TableEncoder
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample

    _, db, task = drifting
    table = db.schema.table("sessions")
    enc = TableEncoder(table).fit(db.tables["sessions"], task.fit_until)
    cut = pd.Timestamp("2022-03-09 10:00")
    cuts = np.array([cut, cut + pd.Timedelta(weeks=52)], dtype="datetime64[ns]")
    rows = pd.DataFrame({"session_id": [0, 1], "account_id": [0, 0], "at": cuts - np.timedelta64(3, "D"),
                         "minutes": [1.0, 1.0], "device": ["phone", "phone"], "seen": cuts - np.timedelta64(3, "D")})
    x = enc.transform(rows, cutoffs=to_epoch_ns(cuts))
    assert np.array_equal(x.numeric[0], x.numeric[1])
    assert "seen:age" in x.numeric_names and not any(n.endswith(":epoch") for n in x.numeric_names)
    # the graph path: the same row read at two cutoffs a year apart differs only by its age
    data = graph_inputs(config("model=sage"), db, task, subsample(task, None, None))
    node = np.array([0, 0])
    f = node_inputs(data, "sessions", node, to_epoch_ns(pd.Series(cuts)))["num"]
    width = data.graph.features["sessions"].numeric.shape[1]
    assert torch.equal(f[0, :width], f[1, :width]) and not torch.equal(f[0], f[1])


# ---------------------------------------------------------------------------------------------------
# certify: proves it on any database, and names the first path that breaks it

def test_certify_passes_on_the_planted_databases(subsecond, lines):
    for folder, task, model in ((subsecond, "flag", ["model=gbdt", "features=dfs", "features.depth=1"]),
                                (subsecond, "flag", ["model=lightgbm", "features=dfs", "features.depth=1"]),
                                (subsecond, "flag", ["model=sage", "sampler=recent", "sampler.fanouts=[1]"]),
                                (lines[False], "flagged", ["model=sage", "engine.inference=layerwise"])):
        verdict = run(folder, task, *model, "certify.enabled=true", "certify.max_seeds=60")["certify"]
        assert verdict["passed"], verdict
        assert {c["mode"] for c in verdict["checks"]} == {"delete", "scramble"}


def test_certify_names_a_sampled_edge_type_that_sees_the_future(subsecond, monkeypatch):
    """A graph whose times are rounded down to whole seconds (the old bug) fails, naming the edge type."""
    import fourdb.graph.build as build

    exact = build.time_ns
    monkeypatch.setattr(build, "time_ns", lambda v: np.where(exact(v) == build.ALWAYS, build.ALWAYS,
                                                               exact(v) // 10**9 * 10**9))
    verdict = run(subsecond, "flag", "model=sage", "sampler=recent", "sampler.fanouts=[1]", "certify.enabled=true",
                  "certify.max_seeds=60", "certify.groups=1")["certify"]
    assert not verdict["passed"]
    assert "sampled edge type ('pings'" in verdict["first_failure"]["first_difference"]


def test_certify_names_a_feature_fitted_on_the_future(drifting, monkeypatch):
    import fourdb.columns as columns

    folder, _, _ = drifting
    monkeypatch.setattr(columns, "known_rows", lambda table, df, until: np.ones(len(df), bool))
    verdict = run(folder, "long-session", "model=gbdt", "certify.enabled=true", "certify.max_seeds=60")["certify"]
    assert not verdict["passed"]
    assert verdict["first_failure"]["first_difference"].startswith("feature '")


BUILT_IN = [("synthetic", "size=150", t) for t in ("taste", "purchase-count", "leak")] \
    + [("nycflights13", "fraction=0.03", t) for t in ("late-arrival", "arrival-delay", "plane-flights")] \
    + [("lahman", "min_year=1960", "hall-of-fame")] \
    + [("lahman", "min_year=1990", t) for t in ("plays-next-season", "salary", "team-wins")] \
    + [("browsing", "size=150", "next-views")]  # recommendation: the link history, pair features, two towers
CERTIFIED = {"single_table": ["model=gbdt"], "dfs": ["model=gbdt", "features=dfs", "features.depth=1"],
             "graph": ["model=sage", "trainer.epochs=1"]}


@pytest.mark.slow
@pytest.mark.parametrize("inputs", CERTIFIED)
@pytest.mark.parametrize("dataset,params,task", BUILT_IN)
def test_every_built_in_task_is_certified(dataset, params, task, inputs):
    """Smaller copies of the built-in databases (a random 3% of the flights, seasons from 1960 or 1990)."""
    record = run_experiment(config(f"dataset={dataset}", f"dataset.params.{params}", f"task={task}", *FAST,
                                   *CERTIFIED[inputs], "max_train_seeds=500", "max_val_seeds=300",
                                   "certify.enabled=true", "certify.groups=2", "certify.max_seeds=50"))
    verdict = record["certify"]
    assert verdict["passed"], verdict.get("first_failure")
    assert len(verdict["checks"]) == 4 and all(c["seeds"] > 0 for c in verdict["checks"])


@pytest.mark.parametrize("dataset,task", [("synthetic", "taste"), ("synthetic", "purchase-count"),
                                          ("browsing", "next-views")])
def test_lightgbm_is_certified(dataset, task):
    """Classification, regression and, inside pair_ranker, recommendation: a tree model's predictions must be
    bit-for-bit equal with every row after each cutoff deleted or scrambled."""
    record = run_experiment(config(f"dataset={dataset}", "dataset.params.size=150", f"task={task}", *FAST,
                                   "model=lightgbm", "features=dfs", "features.depth=1", "max_train_seeds=500",
                                   "max_val_seeds=300", "certify.enabled=true", "certify.groups=2",
                                   "certify.max_seeds=50"))
    verdict = record["certify"]
    assert verdict["passed"], verdict.get("first_failure")
    assert len(verdict["checks"]) == 4 and all(c["seeds"] > 0 for c in verdict["checks"])


@pytest.mark.slow
@pytest.mark.parametrize("model,dataset,params,task", [
    ("idgnn", "browsing", "size=150", "next-views"), ("contextgnn", "browsing", "size=150", "next-views"),
    # people debut over the seasons: the cut database numbers its destination rows differently, and a
    # learned embedding per destination must still be found by its key
    ("contextgnn", "lahman", "min_year=1990", "roster-additions")])
def test_the_identity_aware_gnns_are_certified(model, dataset, params, task):
    """Their trees, their reversed edges, the popularity and the destinations' existence all stop at the cutoff."""
    record = run_experiment(config(f"dataset={dataset}", f"dataset.params.{params}", f"task={task}", *FAST,
                                   f"model={model}", "trainer.epochs=1", "max_train_seeds=500", "max_val_seeds=300",
                                   "certify.enabled=true", "certify.groups=2", "certify.max_seeds=50"))
    verdict = record["certify"]
    assert verdict["passed"], verdict.get("first_failure")
    assert len(verdict["checks"]) == 4 and all(c["seeds"] > 0 for c in verdict["checks"])


@pytest.mark.slow
@pytest.mark.parametrize("model", ["two_tower", "idgnn"])
def test_learned_row_vectors_are_certified(model):
    """id_embeddings: people debut over the seasons, so the cut database numbers its destination rows
    differently, and each vector must still be found by its key."""
    record = run_experiment(config("dataset=lahman", "dataset.params.min_year=1990", "task=roster-additions", *FAST,
                                   f"model={model}", "+model.params.id_embeddings=true", "trainer.epochs=1",
                                   "max_train_seeds=500", "max_val_seeds=300", "certify.enabled=true",
                                   "certify.groups=2", "certify.max_seeds=50"))
    verdict = record["certify"]
    assert verdict["passed"], verdict.get("first_failure")
    assert len(verdict["checks"]) == 4 and all(c["seeds"] > 0 for c in verdict["checks"])


def test_the_link_history_holds_only_rows_known_when_each_window_closed():
    """A recommendation model's history (popularity, repeat, pair features, ContextGNN's prior) reads each
    past window as the database stood when it closed: a flight that left in the window but landed after
    it closed (its row is known at arrival) is not yet a link (ContextGNN's certify on plane-destinations
    caught the history that had it)."""
    from fourdb.datasets import load_dataset
    from fourdb.tasks import load_task
    from fourdb.tasks.kinds.recommendation import past_links

    db = load_dataset("nycflights13")
    task = load_task(db, "nycflights13", "plane-destinations")
    links = past_links(task, db).explode("dst")
    flights = db.tables["flights"]
    planes, airports = db.tables["planes"]["tailnum"].to_numpy(), db.tables["airports"]["faa"].to_numpy()
    seen = pd.DataFrame({"tailnum": planes[links["node"].to_numpy()],
                         "dest": airports[links["dst"].to_numpy().astype(np.int64)],
                         "known": links["known"].to_numpy()})
    joined = seen.merge(flights[["tailnum", "dest", "sched_departure", "arrived_at"]], on=["tailnum", "dest"])
    window = task.spec.window_delta
    joined = joined[(joined["sched_departure"] > joined["known"] - window) & (joined["sched_departure"] <= joined["known"])]
    # every link stands on a flight of its window that had landed by the window's close
    landed = joined.assign(ok=joined["arrived_at"] <= joined["known"]).groupby(["tailnum", "dest", "known"])["ok"].any()
    assert len(landed) == len(seen.drop_duplicates()) and landed.all()
