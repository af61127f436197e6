"""`fourdb import`: SQLite and DuckDB files (declared and inferred keys), 4DBInfer and RelBench folders."""
import json
import sqlite3

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fourdb.cli import main
from fourdb.errors import DatabaseImportError
from fourdb.importers import import_database, infer_dtype
from fourdb.rdb import Database
from fourdb.tasks import find_task, materialize


def shop_frames(n_users=30, n_orders=120, seed=0):
    rng = np.random.default_rng(seed)
    users = pd.DataFrame({
        "id": np.arange(1, n_users + 1),
        "country": rng.choice(["fr", "de", "us"], n_users),
        "signup": pd.date_range("2021-01-01", periods=n_users, freq="D").strftime("%Y-%m-%d"),
    })
    items = pd.DataFrame({
        "item_id": [f"sku{i}" for i in range(10)],
        "price": rng.gamma(2, 5, 10).round(2),
        "description": [f"a rather long description of item number {i} in the shop" for i in range(10)],
    })
    orders = pd.DataFrame({
        "order_id": np.arange(n_orders),
        "user_id": rng.integers(1, n_users + 1, n_orders),
        "item_id": rng.choice(items["item_id"], n_orders),
        "ordered_at": pd.date_range("2021-02-01", periods=n_orders, freq="6h").strftime("%Y-%m-%d %H:%M:%S"),
        "amount": rng.integers(1, 5, n_orders).astype(float),
    })
    return {"users": users, "items": items, "orders": orders}


def write_sqlite(path, frames, declare=True):
    con = sqlite3.connect(path)
    if declare:
        con.executescript("""
            CREATE TABLE users (id INTEGER PRIMARY KEY, country TEXT, signup DATE);
            CREATE TABLE items (item_id TEXT PRIMARY KEY, price REAL, description TEXT);
            CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id),
                                 item_id TEXT REFERENCES items, ordered_at TIMESTAMP, amount REAL);
        """)
        for name, df in frames.items():
            df.to_sql(name, con, if_exists="append", index=False)
    else:
        for name, df in frames.items():
            df.to_sql(name, con, index=False)
    con.commit()
    con.close()
    return path


def write_duckdb(path, frames, declare=True):
    import duckdb

    con = duckdb.connect(str(path))
    if declare:
        con.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, country VARCHAR, signup DATE)")
        con.execute("CREATE TABLE items (item_id VARCHAR PRIMARY KEY, price DOUBLE, description VARCHAR)")
        con.execute("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id), "
                    "item_id VARCHAR REFERENCES items(item_id), ordered_at TIMESTAMP, amount DOUBLE)")
    for name, df in frames.items():
        con.register("df", df)
        con.execute(f"INSERT INTO {name} SELECT * FROM df" if declare else f"CREATE TABLE {name} AS SELECT * FROM df")
        con.unregister("df")
    con.close()
    return path


def check_round_trip(out, frames, inferred):
    db = Database.load(out)
    assert set(db.schema.table_names) == set(frames)
    for name, df in frames.items():
        assert len(db.tables[name]) == len(df)
    users, items, orders = (db.schema.table(n) for n in ("users", "items", "orders"))
    assert users.primary_key == "id" and items.primary_key == "item_id" and orders.primary_key == "order_id"
    fks = {c.name: c.link_to for c in orders.foreign_keys}
    assert fks == {"user_id": "users.id", "item_id": "items.item_id"}
    assert all(c.inferred == inferred for c in orders.foreign_keys)
    assert users.column("id").inferred == inferred
    assert orders.time_column == "ordered_at" and users.time_column == "signup"
    assert users.column("country").dtype == "category"
    assert items.column("description").dtype == "text"
    assert orders.column("amount").dtype == "numeric"
    pd.testing.assert_series_equal(db.tables["orders"]["user_id"].astype("int64"),
                                   frames["orders"]["user_id"].astype("int64"), check_names=False)
    assert db.tables["orders"]["ordered_at"].iloc[1] == pd.Timestamp("2021-02-01 06:00")
    return db


@pytest.mark.parametrize("declare", [True, False])
def test_sqlite_round_trip(tmp_path, declare):
    frames = shop_frames()
    src = write_sqlite(tmp_path / "shop.sqlite", frames, declare)
    report = import_database(src, tmp_path / "out")
    check_round_trip(tmp_path / "out", frames, inferred=not declare)
    text = report.format()
    assert "time column ordered_at (guessed: its only datetime column)" in text
    raw = yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())
    marked = [c for t in raw["tables"] for c in t["columns"] if c.get("inferred")]
    assert bool(marked) == (not declare)


@pytest.mark.parametrize("declare", [True, False])
def test_duckdb_round_trip(tmp_path, declare):
    frames = shop_frames()
    src = write_duckdb(tmp_path / "shop.duckdb", frames, declare)
    import_database(src, tmp_path / "out")
    check_round_trip(tmp_path / "out", frames, inferred=not declare)


def test_inference_is_conservative(tmp_path):
    """A column named like a key whose values are not all in the other table stays a plain column."""
    frames = shop_frames()
    frames["orders"].loc[3, "user_id"] = 999
    src = write_sqlite(tmp_path / "shop.sqlite", frames, declare=False)
    report = import_database(src, tmp_path / "out")
    orders = Database.load(tmp_path / "out").schema.table("orders")
    assert {c.name for c in orders.foreign_keys} == {"item_id"}
    assert any("user_id" in n and "1 values are not there" in n for n in report.notes)


def test_declared_dangling_foreign_keys_become_null(tmp_path):
    frames = shop_frames()
    frames["orders"].loc[3, "user_id"] = 999  # SQLite does not enforce foreign keys by default
    src = write_sqlite(tmp_path / "shop.sqlite", frames, declare=True)
    report = import_database(src, tmp_path / "out")
    db = Database.load(tmp_path / "out")
    assert db.schema.on_dangling_foreign_key == "null" and db.tables["orders"]["user_id"].isna().sum() == 1
    assert any("orders.user_id (1 values" in n for n in report.notes)


def test_dtype_inference():
    assert infer_dtype(pd.Series(["2021-01-01", "2021-02-03 10:00", None])) == "datetime"
    assert infer_dtype(pd.Series(["1", "2.5", None])) == "numeric"
    assert infer_dtype(pd.Series(["a", "b", "a"] * 20)) == "category"
    assert infer_dtype(pd.Series(["x" * 40, "y" * 50])) == "text"
    assert infer_dtype(pd.Series([1, 2, 3])) == "numeric"
    assert infer_dtype(pd.Series(["20"] * 3), "DATE") == "numeric"  # unparseable as a date: kept as it is
    assert infer_dtype(pd.Series([[1, 2], [3]])) is None


# ---- bad imports ----------------------------------------------------------------------------------
def run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_not_a_database(tmp_path, capsys):
    bad = tmp_path / "notes.db"
    bad.write_text("just some text, not a database\n")
    code, _, err = run_cli(["import", str(bad), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "not a SQLite or DuckDB database file" in err and "Traceback" not in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_no_tables(tmp_path, capsys):
    src = tmp_path / "empty.sqlite"
    con = sqlite3.connect(src)
    con.execute("CREATE TABLE t (x)")
    con.execute("DROP TABLE t")
    con.commit()
    con.close()
    code, _, err = run_cli(["import", str(src), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "has no tables" in err


def test_foreign_key_to_missing_table(tmp_path, capsys):
    src = tmp_path / "broken.sqlite"
    con = sqlite3.connect(src)
    con.executescript("""CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id));
                         INSERT INTO orders VALUES (1, 1);""")
    con.commit()
    con.close()
    code, _, err = run_cli(["import", str(src), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "table 'orders', column 'user_id'" in err and "missing table 'users'" in err


def test_foreign_key_to_missing_column(tmp_path):
    src = tmp_path / "broken.sqlite"
    con = sqlite3.connect(src)
    con.executescript("""CREATE TABLE users (id INTEGER PRIMARY KEY);
                         CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(uid));
                         INSERT INTO users VALUES (1); INSERT INTO orders VALUES (1, 1);""")
    con.commit()
    con.close()
    with pytest.raises(DatabaseImportError, match="missing column 'uid' of table 'users'"):
        import_database(src, tmp_path / "out")


def test_out_must_be_new(tmp_path):
    src = write_sqlite(tmp_path / "shop.sqlite", shop_frames())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(DatabaseImportError, match="already exists"):
        import_database(src, tmp_path / "out")


def test_unknown_folder(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(DatabaseImportError, match="not a 4DBInfer folder"):
        import_database(tmp_path / "src", tmp_path / "out")


# ---- damaged data: values that break their declared type or key ------------------------------------
def sqlite_file(path, script):
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()
    return path


def orders_with(amount_values, at_values):
    """orders(order_id, amount INTEGER, at DATETIME) with the given values, 20 rows, in SQLite."""
    rows = ", ".join(f"({i + 1}, {a!r}, {t!r})" for i, (a, t) in enumerate(zip(amount_values, at_values)))
    return ("CREATE TABLE orders (order_id INTEGER PRIMARY KEY, amount INTEGER, at DATETIME);"
            f"INSERT INTO orders VALUES {rows};")


GOOD_TIMES = [f"2021-01-{d:02d} 10:00:00" for d in range(1, 21)]


def test_text_in_numeric_column_is_an_error(tmp_path):
    amounts = list(range(20))
    amounts[16], amounts[18], amounts[19] = "abc", "n/a", ""
    src = sqlite_file(tmp_path / "shop.sqlite", orders_with(amounts, GOOD_TIMES))
    with pytest.raises(DatabaseImportError) as e:
        import_database(src, tmp_path / "out")
    assert str(e.value).startswith(f"{src}: table 'orders', column 'amount': value 'abc' (row 17; 3 bad rows) is "
                                   f"not numeric (declared INTEGER)")
    assert "--lenient" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == [src]  # no folder, no leftovers


def test_text_in_numeric_column_lenient(tmp_path):
    amounts = list(range(20))
    amounts[16], amounts[18] = "abc", "n/a"
    src = sqlite_file(tmp_path / "shop.sqlite", orders_with(amounts, GOOD_TIMES))
    report = import_database(src, tmp_path / "out", lenient=True)
    orders = pd.read_parquet(tmp_path / "out" / "orders.parquet")
    assert orders["amount"].isna().tolist() == [i in (16, 18) for i in range(20)]
    assert orders["amount"].iloc[3] == 3
    assert "warning: table 'orders', column 'amount': value 'abc' (row 17; 2 bad rows) is not numeric " \
           "(declared INTEGER); 2 values set to NULL" in report.format()


def test_bad_datetime_is_an_error_not_a_lost_time_column(tmp_path):
    times = list(GOOD_TIMES)
    times[4], times[9] = "next tuesday", 1612345678  # a number is no timestamp: seconds? days?
    src = sqlite_file(tmp_path / "shop.sqlite", orders_with(list(range(20)), times))
    with pytest.raises(DatabaseImportError, match=r"table 'orders', column 'at': value 'next tuesday' \(row 5; "
                                                  r"2 bad rows\) is not a timestamp from 1677 to 2262 "
                                                  r"\(declared DATETIME\)"):
        import_database(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()

    report = import_database(src, tmp_path / "out", lenient=True)
    raw = yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())
    assert raw["tables"][0]["time_column"] == "at"
    assert "time column at (guessed: its only datetime column)" in report.format()
    assert any("column 'at'" in w and "2 values set to NULL" in w for w in report.warnings)
    at = pd.read_parquet(tmp_path / "out" / "orders.parquet")["at"]
    assert at.isna().tolist() == [i in (4, 9) for i in range(20)]
    assert at.iloc[0] == pd.Timestamp("2021-01-01 10:00")


def test_date_beyond_2262_is_an_error(tmp_path):
    """DuckDB holds dates up to year 9999 (a common "no end" value); fourdb's nanosecond times stop in 2262."""
    import duckdb

    src = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(src))
    con.execute("CREATE TABLE offers (offer_id INTEGER PRIMARY KEY, valid_until DATE)")
    con.execute("INSERT INTO offers VALUES (1, '2021-05-01'), (2, '9999-12-31'), (3, '2021-06-01')")
    con.close()
    with pytest.raises(DatabaseImportError, match=r"column 'valid_until': value Timestamp\('9999-12-31 00:00:00'\) "
                                                  r"\(row 2; 1 bad rows\) is not a timestamp from 1677 to 2262"):
        import_database(src, tmp_path / "out")
    import_database(src, tmp_path / "out", lenient=True)
    assert pd.read_parquet(tmp_path / "out" / "offers.parquet")["valid_until"].isna().tolist() == [False, True, False]


def test_primary_key_with_nulls(tmp_path):
    src = sqlite_file(tmp_path / "shop.sqlite", """
        CREATE TABLE users (id TEXT PRIMARY KEY, country TEXT);  -- SQLite lets a non-INTEGER primary key be NULL
        INSERT INTO users VALUES ('a', 'fr'), ('b', 'de'), (NULL, 'us'), ('c', 'fr'), (NULL, 'de');
        CREATE TABLE orders (order_id INTEGER PRIMARY KEY, user_id TEXT REFERENCES users(id));
        INSERT INTO orders VALUES (1, 'a'), (2, 'c');""")
    with pytest.raises(DatabaseImportError, match=r"shop.sqlite: table 'users', column 'id': declared primary key is null in "
                                                  r"row 3 \(2 null rows\); import with --lenient to drop"):
        import_database(src, tmp_path / "out")
    report = import_database(src, tmp_path / "out", lenient=True)
    raw = yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())
    users, orders = raw["tables"]
    assert users["columns"][0] == {"name": "id", "dtype": "primary_key"}  # the key and the link to it stay
    assert orders["columns"][1]["link_to"] == "users.id"
    assert pd.read_parquet(tmp_path / "out" / "users.parquet")["id"].tolist() == ["a", "b", "c"]
    assert any("null in row 3 (2 null rows); 2 rows dropped" in w for w in report.warnings)


def test_primary_key_with_duplicates(tmp_path):
    src = sqlite_file(tmp_path / "shop.sqlite", """
        CREATE TABLE users (id TEXT, country TEXT);
        INSERT INTO users VALUES ('a', 'fr'), ('b', 'de'), ('a', 'us'), ('c', 'fr'), ('a', 'de'), ('b', 'us');""")
    # SQLite enforces declared keys, so declare one after the fact, as a damaged or hand-edited file can
    con = sqlite3.connect(src)
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE users (id TEXT PRIMARY KEY, country TEXT)' "
                "WHERE name = 'users'")
    con.commit()
    con.close()
    with pytest.raises(DatabaseImportError, match=r"shop.sqlite: table 'users', column 'id': declared primary key repeats 'a' "
                                                  r"in row 3 \(3 duplicate rows\)"):
        import_database(src, tmp_path / "out")
    report = import_database(src, tmp_path / "out", lenient=True)
    users = pd.read_parquet(tmp_path / "out" / "users.parquet")
    assert users["id"].tolist() == ["a", "b", "c"] and users["country"].tolist() == ["fr", "de", "fr"]  # first kept
    assert any("3 rows dropped, the first row of each key kept" in w for w in report.warnings)
    assert yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())["tables"][0]["columns"][0]["dtype"] \
        == "primary_key"


def test_empty_table_is_skipped_with_a_note(tmp_path):
    frames = shop_frames()
    src = write_sqlite(tmp_path / "shop.sqlite", frames)
    sqlite_file(src, "CREATE TABLE coupons (coupon_id INTEGER PRIMARY KEY, code TEXT);")
    report = import_database(src, tmp_path / "out")
    assert "coupons" not in Database.load(tmp_path / "out").schema.table_names
    assert "note: table 'coupons' has no rows; skipped" in report.format()


def test_undeclared_column_of_mixed_values(tmp_path):
    """SQLite lets an untyped column hold numbers and text together; it is imported as strings."""
    src = sqlite_file(tmp_path / "shop.sqlite", """
        CREATE TABLE items (item_id INTEGER PRIMARY KEY, size);
        INSERT INTO items VALUES (1, 1), (2, 'XL'), (3, 2.5), (4, NULL), (5, 'XL');""")
    import_database(src, tmp_path / "out")
    assert pd.read_parquet(tmp_path / "out" / "items.parquet")["size"].tolist() == ["1", "XL", "2.5", None, "XL"]


def test_cli_error_is_one_line(tmp_path):
    """The real command: a damaged value ends in one line on stderr and exit code 2, never a traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    amounts = list(range(20))
    amounts[5] = "abc"
    src = sqlite_file(tmp_path / "shop.sqlite", orders_with(amounts, GOOD_TIMES))
    cmd = [sys.executable, "-m", "fourdb.cli", "import", str(src), "--out", str(tmp_path / "out")]
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"error: {src}: table 'orders', column 'amount': value 'abc' (row 6; 1 bad rows) is "
                                        "not numeric (declared INTEGER); import with --lenient to make such values "
                                        "NULL"]
    assert not (tmp_path / "out").exists()
    done = subprocess.run(cmd + ["--lenient"], capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert done.returncode == 0 and "1 values set to NULL" in done.stdout


# ---- 4DBInfer -------------------------------------------------------------------------------------
def write_4dbinfer(root, fmt="parquet"):
    """A tiny 4DBInfer dataset: users, purchases (link to users and to an item table that is not stored),
    a churn task keyed by a foreign key to users, a task over item pairs, and a retrieval task."""
    rng = np.random.default_rng(0)
    (root / "data").mkdir(parents=True)
    users = {"user_id": np.arange(40), "age": rng.integers(18, 70, 40).astype(np.float32),
             "city": rng.choice(["a", "b", "c"], 40).astype(object)}
    n = 400
    purchases = {"purchase_id": np.arange(n), "user_id": rng.integers(0, 40, n),
                 "item_id": rng.integers(100, 130, n),
                 "time": (np.datetime64("2022-01-01") + rng.integers(0, 300, n).astype("timedelta64[D]")),
                 "emb": rng.normal(size=(n, 3)).astype(np.float32)}

    def write(path, data):
        if fmt == "parquet":
            cols = {k: (list(v) if v.ndim > 1 else v) for k, v in data.items()}
            pd.DataFrame(cols).to_parquet(root / f"{path}.pqt")
            return f"{path}.pqt"
        np.savez(root / f"{path}.npz", **data)
        return f"{path}.npz"

    if fmt == "parquet":  # parquet cannot hold a 2-d column; 4DBInfer's numpy format can
        purchases.pop("emb")
    tables = [
        {"name": "users", "source": write("data/users", users), "format": fmt, "time_column": None,
         "columns": [{"name": "user_id", "dtype": "primary_key"}, {"name": "age", "dtype": "float"},
                     {"name": "city", "dtype": "category"}]},
        {"name": "purchases", "source": write("data/purchases", purchases), "format": fmt, "time_column": "time",
         "columns": [{"name": "purchase_id", "dtype": "primary_key"},
                     {"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                     {"name": "item_id", "dtype": "foreign_key", "link_to": "items.item_id"},
                     {"name": "time", "dtype": "datetime"}]
         + ([{"name": "emb", "dtype": "float", "in_size": 3}] if fmt == "numpy" else [])},
    ]
    (root / "churn").mkdir()
    for split, (lo, hi) in {"train": (0, 200), "validation": (200, 250), "test": (250, 300)}.items():
        days = np.arange(lo, hi, 10)
        m = len(days) * 40
        write(f"churn/{split}", {"user_id": np.tile(np.arange(40), len(days)),
                                 "timestamp": np.repeat(np.datetime64("2022-01-01") + days.astype("timedelta64[D]"), 40),
                                 "churn": rng.integers(0, 2, m)})
    tasks = [
        {"name": "churn", "source": f"churn/{{split}}.{'pqt' if fmt == 'parquet' else 'npz'}", "format": fmt,
         "columns": [{"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                     {"name": "timestamp", "dtype": "datetime"}, {"name": "churn", "dtype": "category"}],
         "time_column": "timestamp", "evaluation_metric": "auroc", "target_column": "churn",
         "target_table": "purchases", "task_type": "classification", "num_classes": 2},
        {"name": "pair", "source": "pair/{split}.pqt", "format": "parquet",
         "columns": [{"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                     {"name": "item_id", "dtype": "foreign_key", "link_to": "items.item_id"},
                     {"name": "label", "dtype": "float"}],
         "time_column": None, "evaluation_metric": "auroc", "target_column": "label",
         "target_table": "purchases", "task_type": "classification"},
        {"name": "next-item", "source": "x/{split}.pqt", "format": "parquet", "columns": [],
         "evaluation_metric": "mrr", "target_column": "item_id", "target_table": "purchases",
         "task_type": "retrieval"},
    ]
    meta = {"dataset_name": "tinyshop", "tables": tables, "tasks": tasks}
    (root / "metadata.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return root


@pytest.mark.parametrize("fmt", ["parquet", "numpy"])
def test_4dbinfer_folder(tmp_path, fmt):
    src = write_4dbinfer(tmp_path / "dbb", fmt)
    out = tmp_path / "out"
    report = import_database(src, out)
    db = Database.load(out)
    assert db.schema.name == "tinyshop"
    assert db.schema.table("items").primary_key == "item_id" and len(db.tables["items"]) == 30  # created
    assert db.schema.table("purchases").time_column == "time"
    fks = {c.name: c.link_to for c in db.schema.table("purchases").foreign_keys}
    assert fks == {"user_id": "users.user_id", "item_id": "items.item_id"}
    assert db.schema.table("users").column("city").dtype == "category"
    if fmt == "numpy":
        assert {"emb_0", "emb_1", "emb_2"} <= set(db.schema.table("purchases").column_names)
    notes = " ".join(report.notes)
    assert "'pair' not converted" in notes and "'next-item' not converted" in notes
    assert (out / "tasks" / "churn.yaml").exists() and not (out / "tasks" / "pair.yaml").exists()
    task = materialize(find_task(str(out), "churn"), db)
    counts = task.frame["split"].value_counts()
    assert counts["train"] == 800 and counts["val"] == 200 and counts["test"] == 200
    assert report.tasks["churn"] == {"train": 800, "val": 200, "test": 200}
    train, val = task.split("train"), task.split("val")
    assert train["label_known_at"].max() <= val["cutoff"].min()
    assert task.hidden_columns and "churn" in task.hidden_columns


# ---- RelBench -------------------------------------------------------------------------------------
def save_relbench(df, path, fkeys, pkey, time_col):
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {b"fkey_col_to_pkey_table": json.dumps(fkeys).encode(), b"pkey_col": json.dumps(pkey).encode(),
            b"time_col": json.dumps(time_col).encode()}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, **meta}), path)


def write_relbench(root):
    rng = np.random.default_rng(1)
    customers = pd.DataFrame({"customer_id": np.arange(25), "segment": rng.choice(["x", "y"], 25)})
    products = pd.DataFrame({"product_id": np.arange(8), "brand": rng.choice(["p", "q", "r"], 8),
                             "tags": [["a", "b"]] * 8})
    n = 300
    tx = pd.DataFrame({"customer_id": rng.integers(0, 25, n), "product_id": rng.integers(0, 8, n),
                       "t": pd.Timestamp("2023-01-01") + pd.to_timedelta(rng.integers(0, 200, n), unit="D"),
                       "price": rng.gamma(2, 3, n)})
    save_relbench(customers, root / "db" / "customers.parquet", {}, "customer_id", None)
    save_relbench(products, root / "db" / "products.parquet", {}, "product_id", None)
    save_relbench(tx, root / "db" / "transactions.parquet",
                  {"customer_id": "customers", "product_id": "products"}, None, "t")
    for split, days in {"train": range(0, 120, 20), "val": [140], "test": [170]}.items():
        rows = [(c, pd.Timestamp("2023-01-01") + pd.Timedelta(days=d), int(rng.integers(0, 2)))
                for d in days for c in range(25)]
        df = pd.DataFrame(rows, columns=["customer_id", "timestamp", "churn"])
        save_relbench(df, root / "tasks" / "customer-churn" / f"{split}.parquet",
                      {"customer_id": "customers"}, None, "timestamp")
    return root


def test_relbench_folder(tmp_path):
    src = write_relbench(tmp_path / "rel-tiny")
    out = tmp_path / "out"
    report = import_database(src, out)
    db = Database.load(out)
    tx = db.schema.table("transactions")
    assert tx.primary_key is None and tx.time_column == "t"
    assert {c.name: c.link_to for c in tx.foreign_keys} == {"customer_id": "customers.customer_id",
                                                            "product_id": "products.product_id"}
    assert not any(c.inferred for t in db.schema.tables for c in t.columns if t.name != "task_customer-churn")
    assert "tags" not in db.schema.table("products").column_names  # lists are dropped, and said so
    assert any("'tags'" in n for n in report.notes)
    assert report.tasks["customer-churn"] == {"train": 150, "val": 25, "test": 25}
    task = materialize(find_task(str(out), "customer-churn"), db)
    assert task.split("train")["label_known_at"].max() <= task.split("val")["cutoff"].min()


def test_import_then_validate_and_run(tmp_path, capsys):
    """The CLI end to end: import, validate, and a GBDT run on the converted task by folder path."""
    src = write_relbench(tmp_path / "rel-tiny")
    out = tmp_path / "out"
    code, text, _ = run_cli(["import", str(src), "--out", str(out)], capsys)
    assert code == 0 and "task customer-churn: train 150, val 25, test 25" in text
    code, text, _ = run_cli(["validate", str(out)], capsys)
    assert code == 0 and "is a valid database" in text
    from fourdb.cli.run import folder_dataset

    args = folder_dataset([f"dataset={out}", "task=customer-churn"])
    assert args[0] == "dataset=folder" and args[2] == f"dataset.path='{out.resolve()}'"
    from conftest import config
    from fourdb.experiment.run import run_experiment

    record = run_experiment(config(*args, "model=gbdt"))
    assert record["dataset"] == "out" and record["task"] == "customer-churn"
    assert record["num_seeds"] == {"train": 150, "val": 25, "test": 25}


# ---- tables without a time column take their timed parents' time ---------------------------------------
def write_invoices(path, kind):
    """invoices (dated) <- invoice_lines <- line_notes, and products (a dimension) <- invoice_lines."""
    ddl = ["CREATE TABLE products (product_id INTEGER PRIMARY KEY, name VARCHAR)",
           "CREATE TABLE invoices (invoice_id INTEGER PRIMARY KEY, issued_at TIMESTAMP, total DOUBLE)",
           "CREATE TABLE invoice_lines (line_id INTEGER PRIMARY KEY, "
           "invoice_id INTEGER REFERENCES invoices(invoice_id), "
           "product_id INTEGER REFERENCES products(product_id), qty INTEGER)",
           "CREATE TABLE line_notes (note_id INTEGER PRIMARY KEY, line_id INTEGER REFERENCES invoice_lines(line_id), "
           "note VARCHAR)"]
    rows = ["INSERT INTO products VALUES (1, 'pen'), (2, 'ink')",
            "INSERT INTO invoices VALUES (1, '2021-03-01 09:00:00', 5.0), (2, '2021-03-02 11:30:00', 7.5)",
            "INSERT INTO invoice_lines VALUES (1, 1, 1, 2), (2, 1, 2, 1), (3, 2, 1, 3)",
            "INSERT INTO line_notes VALUES (1, 1, 'gift'), (2, 3, 'rush')"]
    if kind == "sqlite":
        return sqlite_file(path, ";".join(ddl + rows) + ";")
    import duckdb

    con = duckdb.connect(str(path))
    for statement in ddl + rows:
        con.execute(statement)
    con.close()
    return path


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_line_items_take_their_parents_time(tmp_path, kind):
    src = write_invoices(tmp_path / f"shop.{kind}", kind)
    report = import_database(src, tmp_path / "out")
    raw = {t["name"]: t for t in yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())["tables"]}
    assert raw["invoices"]["time_column"] == "issued_at" and "time_from" not in raw["invoices"]
    assert raw["invoice_lines"]["time_from"] == ["invoice_id"]  # not product_id: products have no time
    assert raw["line_notes"]["time_from"] == ["line_id"]  # a chain: notes -> lines -> invoices
    assert "time_from" not in raw["products"] and "time_column" not in raw["products"]
    text = report.format()
    assert "invoice_lines: 3 rows, primary key line_id, invoice_id -> invoices.invoice_id, product_id -> " \
           "products.product_id, time from invoice_id -> invoices" in text
    assert "line_notes: 2 rows, primary key note_id, line_id -> invoice_lines.line_id, time from line_id -> " \
           "invoice_lines" in text
    assert "note: table 'invoice_lines' has no time column; its rows take the time of the invoices row they " \
           "reference (time_from: invoice_id)" in text


def test_relbench_line_items_take_their_parents_time(tmp_path):
    root = tmp_path / "rel-lines"
    orders = pd.DataFrame({"order_id": np.arange(4), "at": pd.date_range("2023-01-01", periods=4, freq="D")})
    shipments = pd.DataFrame({"shipment_id": np.arange(3), "sent": pd.date_range("2023-01-05", periods=3, freq="D")})
    lines = pd.DataFrame({"line_id": np.arange(6), "order_id": [0, 0, 1, 2, 3, 3], "shipment_id": [0, 0, 1, 1, 2, 2],
                          "qty": np.arange(6) + 1.0})
    save_relbench(orders, root / "db" / "orders.parquet", {}, "order_id", "at")
    save_relbench(shipments, root / "db" / "shipments.parquet", {}, "shipment_id", "sent")
    save_relbench(lines, root / "db" / "lines.parquet", {"order_id": "orders", "shipment_id": "shipments"},
                  "line_id", None)
    report = import_database(root, tmp_path / "out")
    raw = {t["name"]: t for t in yaml.safe_load((tmp_path / "out" / "schema.yaml").read_text())["tables"]}
    assert raw["lines"]["time_from"] == ["order_id", "shipment_id"]
    text = report.format()
    assert "time from order_id -> orders, shipment_id -> shipments (the latest)" in text
    assert "its rows take the latest time of the orders and shipments rows they reference " \
           "(time_from: order_id, shipment_id)" in text
