"""A wide schema stays readable: a run's log says in brief which columns each table gives (the full list in the
run folder) and where long stages are, with an estimate of the time left, also when stderr is no terminal; the
schema diagram stays a sane size; columns that identify a row or a person are not features unless declared so."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import config
from fourdb.rdb import Column, Database, Schema, Table, write_database

ROOT = Path(__file__).resolve().parents[1]


def wide_shop(root, marked: bool = True):
    """customers (a business id, names and e-mail addresses beside age and region), their orders at stores, and
    stores -> companies -> countries, which DFS at depth 1 does not reach from customers. ``marked``: the
    identifying columns are ``feature: false``, as an import writes them."""
    rng = np.random.default_rng(0)
    n, start = 160, pd.Timestamp("2021-01-01")
    first = [f"name{i % 40}" for i in range(n)]
    customers = pd.DataFrame({"cid": np.arange(n) + 1000, "c_customer_id": [f"AAAB{i:08d}" for i in range(n)],
                              "c_first_name": first, "c_email_address": [f"{f}.{i}@mail.example" for i, f in
                                                                         enumerate(first)],
                              "joined": start + pd.to_timedelta(rng.integers(0, 60, n), unit="D"),
                              "age": rng.integers(18, 80, n).astype(float), "region": rng.choice(list("abcd"), n)})
    countries = pd.DataFrame({"country_id": np.arange(3), "continent": ["eu", "eu", "na"]})
    companies = pd.DataFrame({"company_id": np.arange(5), "country_id": rng.integers(0, 3, 5),
                              "size": rng.integers(1, 100, 5).astype(float)})
    stores = pd.DataFrame({"store_id": np.arange(8), "company_id": rng.integers(0, 5, 8),
                           "floor": rng.integers(100, 900, 8).astype(float)})
    m = 3000
    orders = pd.DataFrame({"oid": np.arange(m), "cid": rng.choice(customers["cid"], m),
                           "store_id": rng.integers(0, 8, m),
                           "at": start + pd.to_timedelta(rng.integers(60 * 24, 365 * 24, m), unit="h"),
                           "amount": rng.gamma(2, 10, m).round(2)})
    keep = not marked
    schema = Schema("wide", [
        Table("customers", "customers.parquet", [
            Column("cid", "primary_key"), Column("c_customer_id", "category", feature=keep),
            Column("c_first_name", "category", feature=keep), Column("c_email_address", "text", feature=keep),
            Column("joined", "datetime"), Column("age", "numeric"), Column("region", "category")],
            time_column="joined"),
        Table("countries", "countries.parquet", [Column("country_id", "primary_key"), Column("continent", "category")]),
        Table("companies", "companies.parquet", [Column("company_id", "primary_key"),
                                                 Column("country_id", "foreign_key", "countries.country_id"),
                                                 Column("size", "numeric")]),
        Table("stores", "stores.parquet", [Column("store_id", "primary_key"),
                                           Column("company_id", "foreign_key", "companies.company_id"),
                                           Column("floor", "numeric")]),
        Table("orders", "orders.parquet", [Column("oid", "primary_key"), Column("cid", "foreign_key", "customers.cid"),
                                           Column("store_id", "foreign_key", "stores.store_id"),
                                           Column("at", "datetime"), Column("amount", "numeric")],
              time_column="at")])
    folder = write_database(root / "wide", schema, {"customers": customers, "countries": countries,
                                                    "companies": companies, "stores": stores, "orders": orders})
    (folder / "tasks").mkdir()
    (folder / "tasks" / "spend.yaml").write_text(yaml.safe_dump({
        "name": "spend", "kind": "entity_window", "task_type": "regression", "entity_table": "customers",
        "window": "30 days", "timestamps": {"val": "2021-10-01", "test": "2021-11-15"},
        "sql": "SELECT c.cid, k.cutoff, coalesce(sum(o.amount), 0) AS label\n"
               "FROM cutoffs k JOIN customers c ON c.joined <= k.cutoff\n"
               "LEFT JOIN orders o ON o.cid = c.cid AND o.at > k.cutoff AND o.at <= k.cutoff + {window}\n"
               "GROUP BY c.cid, k.cutoff"}))
    return folder


def fourdb(*args, cwd, env=None):
    """``fourdb ARGS`` in a process whose stderr is a pipe, not a terminal (as in a job's log)."""
    return subprocess.run([sys.executable, "-m", "fourdb.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


# ---------------------------------------------------------------------------------------------- progress

def test_a_run_logs_epoch_progress_with_an_estimate_when_stderr_is_not_a_terminal(tmp_path):
    run = tmp_path / "run"
    p = fourdb("run", "dataset=synthetic", "dataset.params.size=150", "task=taste", "model=mlp",
               "trainer.epochs=3", "trainer.patience=3", "max_train_seeds=300", "trainer.progress=false",
               f"hydra.run.dir={run}", cwd=tmp_path,
               env={"FOURDB_CACHE": str(tmp_path / "cache"), "FOURDB_PROGRESS_SECONDS": "0"})
    assert p.returncode == 0, p.stderr
    log = next(run.glob("*.log")).read_text()
    epochs = [line for line in log.splitlines() if "] epochs: " in line]
    assert any("epochs: 1/3 (33%)" in line and "so far, about" in line and "left" in line for line in epochs), log
    assert any("epochs: done, 3 epochs in" in line for line in epochs), log
    assert any("] epoch 1/3: " in line for line in log.splitlines()), log  # the batches of an epoch too
    assert "epochs: 1/3" in p.stderr  # and the terminal's stream: no bar is drawn into a pipe


def test_progress_lines_wait_for_the_interval_and_go_beside_a_bar_to_the_file_alone(caplog, monkeypatch):
    from fourdb.utils import BesideBar, ProgressLog

    quiet = ProgressLog("quick", total=10, interval=3600)
    for _ in range(10):
        quiet.update(1)
    quiet.close()
    with caplog.at_level(logging.INFO, logger="fourdb"):
        beside = ProgressLog("stage", total=4, interval=0, beside_bar=True)
        beside.update(1, "loss 0.5")
        beside.close()
    records = [r for r in caplog.records if r.getMessage().startswith(("quick", "stage"))]
    assert [r.getMessage().split(",")[0] for r in records] == ["stage: 1/4 (25%)", "stage: done"]
    assert records[0].getMessage().endswith("left; loss 0.5")
    assert not BesideBar().filter(records[0])  # a terminal's handler leaves it to the bar
    assert BesideBar().filter(logging.LogRecord("fourdb", logging.INFO, "", 0, "x", (), None))


# ---------------------------------------------------------------------------------------------- columns

def test_a_runs_column_report_is_brief_in_the_log_and_whole_in_the_run_folder(tmp_path, caplog, monkeypatch):
    from fourdb.experiment.run import run_experiment

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path / "cache"))
    folder = wide_shop(tmp_path)
    with caplog.at_level(logging.INFO, logger="fourdb"):
        run_experiment(config("dataset=folder", f"dataset.path={folder}", "dataset.name=wide", "task=spend",
                              "model=gbdt", "features=dfs", "features.depth=1"), tmp_path / "run")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("columns")]
    assert "columns of customers (dfs): 3 used (joined, age, region); 4 dropped (3 not a feature (schema.yaml: " \
           "feature: false), 1 key)" in lines
    # the tables DFS does not reach, on one line however many
    far = [line for line in lines if line.startswith("columns of 3 more tables (dfs): none used")]
    assert far and "over 1 hop from customers" in far[0] and "countries (2), companies (3), stores (3)" in far[0]
    left = [r.getMessage() for r in caplog.records if r.getMessage().startswith("left out")]
    assert left and "customers.c_customer_id, customers.c_email_address, customers.c_first_name" in left[0]
    assert "set its feature: true there" in left[0]
    full = pd.read_csv(tmp_path / "run" / "columns.tsv", sep="\t")
    assert len(full) == 20 and set(full["table"]) == {"customers", "countries", "companies", "stores", "orders"}
    assert full.set_index("column").loc["c_email_address", "dfs"] == "dropped: not a feature (schema.yaml: feature: false)"


def test_columns_marked_not_features_reach_no_model(tmp_path):
    """single_table, DFS and the graph alike: the columns are in the database (a task may read them), never in
    a model's inputs; declared features (the same columns, not marked) are."""
    from fourdb.describe import column_report
    from fourdb.tasks import find_task, materialize

    for marked in (True, False):
        folder = wide_shop(tmp_path / str(marked), marked)
        db = Database.load(folder)
        task = materialize(find_task(str(folder), "spend"), db)
        assert "c_email_address" in db.tables["customers"].columns
        seen = task.input_database(db)
        assert ("c_email_address" in seen.tables["customers"].columns) == (not marked)
        used = {(u.kind, u.column) for u in column_report(db, task, depth=1) if u.inputs}
        for kind in ("single_table", "dfs", "graph"):
            assert ((kind, "c_first_name") in used) == (not marked), kind
            assert (kind, "age") in used


def test_feature_false_is_for_feature_columns_only(tmp_path):
    from fourdb.errors import SchemaError

    raw = {"name": "x", "tables": [{"name": "t", "source": "t.parquet", "time_column": "at", "columns": [
        {"name": "id", "dtype": "primary_key"}, {"name": "at", "dtype": "datetime"},
        {"name": "email", "dtype": "text", "feature": False}]}]}
    schema = Schema.from_dict(raw)
    assert [c.name for c in schema.table("t").not_features] == ["email"]
    assert Schema.from_dict(schema.to_dict()).table("t").column("email").feature is False  # written back
    for bad in ({"name": "id", "dtype": "primary_key", "feature": False}, {"name": "at", "dtype": "datetime",
                                                                           "feature": False}):
        cols = [bad if c["name"] == bad["name"] else c for c in raw["tables"][0]["columns"]]
        with pytest.raises(SchemaError):
            Schema.from_dict({**raw, "tables": [{**raw["tables"][0], "columns": cols}]})
    with pytest.raises(SchemaError):
        Schema.from_dict({**raw, "tables": [{**raw["tables"][0], "columns": [
            *raw["tables"][0]["columns"][:2], {"name": "email", "dtype": "text", "feature": "no"}]}]})


# ---------------------------------------------------------------------------------------------- identifiers

@pytest.mark.parametrize("name,dtype,values,why", [
    ("c_customer_id", "category", [f"AAAB{i:08d}" for i in range(500)], "identifies its row"),
    ("c_email_address", "text", [f"u{i % 90}@x.org" for i in range(500)], "personal data (e-mail"),
    ("contact", "category", [f"u{i}@x.org" for i in range(500)], "personal data (its values are e-mail"),
    ("nameFirst", "text", [f"n{i % 50}" for i in range(500)], "personal data (first name"),
    ("c_last_name", "category", [f"n{i % 50}" for i in range(500)], "personal data (last name"),
    ("phone_number", "category", [f"+1 555 01{i % 30:02d}" for i in range(500)], "personal data (phone"),
    ("order_number", "numeric", list(range(500)), "an id number"),
    ("p_channel_email", "category", ["Y", "N"] * 250, None),  # a flag named after e-mail is no address
    ("review", "text", [f"fine product number {i}" for i in range(500)], None),  # free text: unique, kept
    ("price", "numeric", [i * 1.37 for i in range(500)], None),  # unique numbers that are no id
    ("name", "category", [f"Team {i}" for i in range(500)], None),  # a name of a thing, not of a person
    ("theme", "category", [f"t{i}" for i in range(25)], None),  # a small table's names are not ids
])
def test_what_identifies_a_row_or_a_person(name, dtype, values, why):
    from fourdb.rdb.identifiers import identifying

    found = identifying(name, dtype, pd.Series(values))
    assert (found is None) if why is None else (found is not None and why in found), found


def test_an_import_marks_identifying_columns_and_says_how_to_keep_them(tmp_path, capsys):
    """A folder of parquet files, imported: the ids, names and e-mail addresses are feature: false, each with
    why (in the output and in schema.yaml); --keep-identifiers marks none."""
    from fourdb.cli import main

    source = tmp_path / "files"
    source.mkdir()
    db = Database.load(wide_shop(tmp_path, marked=False))
    for name, frame in db.tables.items():
        frame[[c.name for c in db.schema.table(name).declared_columns]].to_parquet(source / f"{name}.parquet")
    for keep in (False, True):
        out = tmp_path / f"db-{keep}"
        assert main(["import", str(source), "--out", str(out), *(["--keep-identifiers"] if keep else [])]) == 0
        printed = capsys.readouterr().out
        marked = {c.name for c in Database.load(out).schema.table("customers").not_features}
        assert marked == (set() if keep else {"c_customer_id", "c_first_name", "c_email_address"})
        if keep:
            assert "column 'c_email_address': personal data (e-mail, by its name); a feature all the same" in printed
        else:
            assert "c_email_address is not a feature (feature: false): personal data (e-mail" in printed
            assert "set feature: true there to use one, or import with --keep-identifiers" in printed
            assert "c_customer_id is not a feature (feature: false): identifies its row" in (out / "schema.yaml").read_text()


def test_no_built_in_database_is_marked():
    """The built-in databases declare their schemas: every feature column of theirs stays a feature."""
    from fourdb.datasets import load_dataset

    for name, params in (("synthetic", {"size": 150}), ("browsing", {"size": 150})):
        assert not any(t.not_features for t in load_dataset(name, **params).schema.tables)


# ---------------------------------------------------------------------------------------------- diagram

def warehouse_schema(facts: int = 7, dims: int = 17) -> Schema:
    """A star schema as wide as a retail warehouse: every fact table keyed to every dimension, some twice."""
    dim_tables = [Table(f"dim_{i}", f"dim_{i}.parquet", [Column(f"d{i}_sk", "primary_key"),
                                                          Column(f"d{i}_name", "category")]) for i in range(dims)]
    fact_tables = []
    for f in range(facts):
        cols = [Column(f"f{f}_sk", "primary_key")]
        for i in range(dims):
            cols.append(Column(f"f{f}_d{i}_sk", "foreign_key", f"dim_{i}.d{i}_sk"))
            if i < 3:  # role-playing keys: bill and ship
                cols.append(Column(f"f{f}_d{i}_ship_sk", "foreign_key", f"dim_{i}.d{i}_sk"))
        fact_tables.append(Table(f"fact_{f}", f"fact_{f}.parquet", cols))
    return Schema("warehouse", fact_tables + dim_tables)


def test_the_diagram_of_a_24_table_warehouse_stays_a_sane_size(tmp_path):
    import xml.etree.ElementTree as ET

    from PIL import Image

    from fourdb.rdb.diagram import MAX_PIXELS, write_diagram

    schema = warehouse_schema()
    svg, png = write_diagram(schema, tmp_path / "warehouse")
    width, height = Image.open(png).size
    assert max(width, height) <= MAX_PIXELS and min(width, height) >= 500, (width, height)
    root = ET.parse(svg).getroot()
    lines = {"".join(e.itertext()).strip() for e in root.iter("{http://www.w3.org/2000/svg}text")}
    assert all(t.name in lines for t in schema.tables)
    # crowded: one arrow per pair of tables, however many keys join them
    arrows = [p for p in root.iter("{http://www.w3.org/2000/svg}path") if "#c44e52" in (p.get("style") or "")]
    assert len(arrows) >= 7 * 17


def test_the_layers_put_facts_above_the_tables_they_reference():
    from fourdb.rdb.diagram import layers

    schema = warehouse_schema(facts=2, dims=3)
    assert layers(schema) == [["fact_0", "fact_1"], ["dim_0", "dim_1", "dim_2"]]
