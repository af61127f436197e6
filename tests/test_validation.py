"""Database.load rejects every bad database folder with one SchemaError line naming table, column and value."""
import pandas as pd
import pytest
import yaml

from fourdb.errors import FourdbError, SchemaError
from fourdb.rdb import Database


def base_data() -> dict[str, dict[str, list]]:
    return {
        "users": {
            "user_id": [1, 2, 3],
            "signup_at": ["2021-01-01", "2021-02-01", "2021-03-01"],
            "country": ["fr", "de", "fr"],
        },
        "products": {"product_id": ["p1", "p2"], "price": [9.5, 20.0]},
        "orders": {
            "order_id": [10, 11, 12, 13],
            "user_id": [1, 2, 2, 3],
            "product_id": ["p1", "p2", "p1", "p2"],
            "ordered_at": ["2021-03-05", "2021-04-01", "2021-05-01 12:30", "2021-06-01"],
            "amount": [1.5, 2.0, 3.25, 4.0],
        },
    }


def base_columns() -> dict[str, list[dict]]:
    return {
        "users": [
            {"name": "user_id", "dtype": "primary_key"},
            {"name": "signup_at", "dtype": "datetime"},
            {"name": "country", "dtype": "category"},
        ],
        "products": [
            {"name": "product_id", "dtype": "primary_key"},
            {"name": "price", "dtype": "numeric"},
        ],
        "orders": [
            {"name": "order_id", "dtype": "primary_key"},
            {"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
            {"name": "product_id", "dtype": "foreign_key", "link_to": "products.product_id"},
            {"name": "ordered_at", "dtype": "datetime"},
            {"name": "amount", "dtype": "numeric"},
        ],
    }


BASE_TIME_COLUMNS = {"users": "signup_at", "products": None, "orders": "ordered_at"}


def write_db(folder, fmt="csv", policy="error", data=None, columns=None, time_column=None):
    """A small shop database in `folder`, with one thing changed.

    data: {table: {column: values}} replaces the values of those columns (or adds them).
    columns: {table: [column spec]} replaces the same-named column spec of the schema (or adds it).
    time_column: {table: name} replaces a table's time column.
    """
    tables = base_data()
    for table, values in (data or {}).items():
        tables[table].update(values)
    specs = base_columns()
    for table, replacements in (columns or {}).items():
        for new in replacements:
            names = [c["name"] for c in specs[table]]
            if new["name"] in names:
                specs[table][names.index(new["name"])] = new
            else:
                specs[table].append(new)
    time_columns = {**BASE_TIME_COLUMNS, **(time_column or {})}

    schema = {"name": "shop", "on_dangling_foreign_key": policy, "tables": []}
    for table, values in tables.items():
        source = f"{table}.{fmt}"
        df = pd.DataFrame(values)
        if fmt == "csv":
            df.to_csv(folder / source, index=False)
        else:
            for spec in specs[table]:
                if spec["dtype"] == "datetime" and spec["name"] in df:
                    try:
                        df[spec["name"]] = pd.to_datetime(df[spec["name"]], format="mixed")
                    except (ValueError, TypeError):
                        pass
            df.to_parquet(folder / source, index=False)
        entry = {"name": table, "source": source, "columns": specs[table]}
        if time_columns[table] is not None:
            entry["time_column"] = time_columns[table]
        schema["tables"].append(entry)
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema, sort_keys=False))
    return folder


@pytest.fixture(params=["csv", "parquet"])
def fmt(request):
    return request.param


def load_error(folder) -> str:
    with pytest.raises(SchemaError) as info:
        Database.load(folder)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---- a valid database -----------------------------------------------------------------------------

def test_valid_database_loads_with_declared_dtypes(tmp_path, fmt):
    db = Database.load(write_db(tmp_path, fmt))
    assert db.schema.table_names == ["users", "products", "orders"]
    assert db.tables["orders"]["amount"].dtype == "float64"
    assert db.tables["products"]["price"].dtype == "float64"
    assert db.tables["orders"]["ordered_at"].dtype == "datetime64[ns]"
    assert db.tables["users"]["signup_at"].dtype == "datetime64[ns]"
    assert db.tables["orders"]["ordered_at"].iloc[2] == pd.Timestamp("2021-05-01 12:30")
    assert db.tables["orders"]["amount"].tolist() == [1.5, 2.0, 3.25, 4.0]
    assert db.tables["users"]["country"].tolist() == ["fr", "de", "fr"]


def test_valid_database_answers_sql_through_duckdb(tmp_path, fmt):
    db = Database.load(write_db(tmp_path, fmt))
    assert db.sql("select count(*) as n from orders")["n"].iloc[0] == 4
    per_country = db.sql(
        "select u.country, sum(o.amount) as total from orders o join users u using (user_id) "
        "group by u.country order by u.country"
    )
    assert per_country["country"].tolist() == ["de", "fr"]
    assert per_country["total"].tolist() == [5.25, 5.5]


def test_as_of_drops_later_rows_and_keeps_tables_without_time_column(tmp_path, fmt):
    db = Database.load(write_db(tmp_path, fmt))
    past = db.as_of("2021-04-15")
    assert past.tables["orders"]["order_id"].tolist() == [10, 11]
    assert past.tables["users"]["user_id"].tolist() == [1, 2, 3]
    assert past.tables["products"]["product_id"].tolist() == ["p1", "p2"]

    earlier = db.as_of(pd.Timestamp("2021-01-15"))
    assert len(earlier.tables["orders"]) == 0
    assert earlier.tables["users"]["user_id"].tolist() == [1]
    assert earlier.tables["products"]["product_id"].tolist() == ["p1", "p2"]
    assert earlier.sql("select count(*) as n from products")["n"].iloc[0] == 2
    assert earlier.sql("select count(*) as n from orders")["n"].iloc[0] == 0
    assert len(db.tables["orders"]) == 4


def test_as_of_keeps_a_row_stamped_exactly_at_the_cutoff(tmp_path, fmt):
    db = Database.load(write_db(tmp_path, fmt))
    assert db.as_of("2021-05-01 12:30").tables["orders"]["order_id"].tolist() == [10, 11, 12]


def test_timestamps_with_mixed_utc_offsets_are_converted_to_utc(tmp_path):
    times = ["2021-03-05T10:00:00+01:00", "2021-04-01T10:00:00+05:00", "2021-05-01", "2021-06-01T00:00:00Z"]
    db = Database.load(write_db(tmp_path, "csv", data={"orders": {"ordered_at": times}}))
    assert db.tables["orders"]["ordered_at"].dtype == "datetime64[ns]"
    assert db.tables["orders"]["ordered_at"].tolist() == [
        pd.Timestamp("2021-03-05 09:00"),
        pd.Timestamp("2021-04-01 05:00"),
        pd.Timestamp("2021-05-01"),
        pd.Timestamp("2021-06-01"),
    ]


# ---- the folder -----------------------------------------------------------------------------------

def test_missing_source_file(tmp_path, fmt):
    write_db(tmp_path, fmt)
    (tmp_path / f"products.{fmt}").unlink()
    message = load_error(tmp_path)
    assert "table 'products'" in message
    assert f"'products.{fmt}' not found" in message


def test_missing_schema_yaml(tmp_path, fmt):
    write_db(tmp_path, fmt)
    (tmp_path / "schema.yaml").unlink()
    message = load_error(tmp_path)
    assert "no schema.yaml" in message
    assert str(tmp_path) in message


def test_empty_table(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, data={"products": {"product_id": [], "price": []}}))
    assert "table 'products'" in message
    assert f"'products.{fmt}' has no rows" in message


# ---- the schema -----------------------------------------------------------------------------------

def test_unknown_dtype(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, columns={"users": [{"name": "country", "dtype": "currency"}]}))
    assert "table 'users', column 'country'" in message
    assert "unknown dtype 'currency'" in message


def test_column_declared_in_schema_but_absent_from_file(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, columns={"orders": [{"name": "discount", "dtype": "numeric"}]}))
    assert "table 'orders', column 'discount'" in message
    assert f"not in 'orders.{fmt}'" in message


def test_time_column_that_is_not_datetime(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, time_column={"orders": "amount"}))
    assert "table 'orders', column 'amount'" in message
    assert "time_column must have dtype datetime, not numeric" in message


def test_time_column_that_is_not_declared(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, time_column={"orders": "created_at"}))
    assert "table 'orders', column 'created_at'" in message
    assert "not a declared column" in message


# ---- keys -----------------------------------------------------------------------------------------

def test_duplicate_primary_key(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, data={"products": {"product_id": ["p1", "p1"]}}))
    assert "table 'products', column 'product_id'" in message
    assert "duplicate primary key 'p1'" in message


def test_null_primary_key(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, data={"users": {"user_id": [1, None, 3]}}))
    assert "table 'users', column 'user_id'" in message
    assert "primary key is null in row 2" in message


def test_foreign_key_to_unknown_table(tmp_path, fmt):
    fk = {"name": "user_id", "dtype": "foreign_key", "link_to": "customers.user_id"}
    message = load_error(write_db(tmp_path, fmt, columns={"orders": [fk]}))
    assert "table 'orders', column 'user_id'" in message
    assert "unknown table 'customers'" in message


def test_foreign_key_to_unknown_column(tmp_path, fmt):
    fk = {"name": "user_id", "dtype": "foreign_key", "link_to": "users.customer_id"}
    message = load_error(write_db(tmp_path, fmt, columns={"orders": [fk]}))
    assert "table 'orders', column 'user_id'" in message
    assert "unknown column 'customer_id' of table 'users'" in message


def test_foreign_key_link_to_that_is_not_a_string(tmp_path, fmt):
    fk = {"name": "user_id", "dtype": "foreign_key", "link_to": 1.5}
    message = load_error(write_db(tmp_path, fmt, columns={"orders": [fk]}))
    assert "table 'orders', column 'user_id'" in message
    assert "link_to '1.5'" in message


def test_dangling_foreign_keys_are_an_error_by_default(tmp_path, fmt):
    message = load_error(write_db(tmp_path, fmt, data={"orders": {"user_id": [1, 7, 2, 8]}}))
    assert "table 'orders', column 'user_id'" in message
    assert "2 dangling foreign-key values not found in users.user_id" in message
    assert "first: 7" in message
    assert "on_dangling_foreign_key: null" in message


def test_dangling_foreign_keys_become_null_under_null_policy(tmp_path, fmt):
    db = Database.load(write_db(tmp_path, fmt, policy="null", data={"orders": {"user_id": [1, 7, 2, 8],
                                                                               "product_id": ["p1", "p9", "p2", "p1"]}}))
    users = db.tables["orders"]["user_id"]
    assert users.isna().tolist() == [False, True, False, True]
    assert users.dropna().tolist() == [1, 2]
    assert pd.api.types.is_integer_dtype(users)
    products = db.tables["orders"]["product_id"]
    assert products.isna().tolist() == [False, True, False, False]
    assert len(db.tables["orders"]) == 4
    assert db.sql("select count(*) as n from orders where user_id is null")["n"].iloc[0] == 2


# ---- values ---------------------------------------------------------------------------------------

def test_unparseable_timestamps(tmp_path, fmt):
    times = ["2021-03-05", "2021-04-01", "next tuesday", "sometime"]
    message = load_error(write_db(tmp_path, fmt, data={"orders": {"ordered_at": times}}))
    assert "table 'orders', column 'ordered_at'" in message
    assert "value 'next tuesday' (row 3; 2 bad rows) is not a parseable timestamp" in message


def test_values_that_are_not_numeric(tmp_path, fmt):
    amounts = ["1.5", "2", "lots", "4"]
    message = load_error(write_db(tmp_path, fmt, data={"orders": {"amount": amounts}}))
    assert "table 'orders', column 'amount'" in message
    assert "value 'lots' (row 3; 1 bad rows) is not numeric" in message


# ---- a database given by path on the command line -------------------------------------------------

def fourdb_run(*args, cwd):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "fourdb.cli", "run", *args, f"hydra.run.dir={cwd / 'run'}"],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_mistyped_dataset_path_is_one_line_before_hydra_starts(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "shop.sqlite").write_bytes(b"")
    expected = {
        "./no/such/folder": "error: dataset './no/such/folder': no such database folder, and not a built-in dataset "
                            "(built-in: browsing, lahman, nycflights13, synthetic)",
        "empty": "error: dataset 'empty': no schema.yaml in that folder, so it is not a database folder",
        "shop.sqlite": "error: dataset 'shop.sqlite': a file, not a database folder "
                       "(fourdb import shop.sqlite --out DIR converts a SQLite or DuckDB file)",
    }
    for value, line in expected.items():
        p = fourdb_run(f"dataset={value}", "task=x", cwd=tmp_path)
        assert p.returncode == 2, (value, p.stderr[-2000:])
        assert p.stderr.startswith(line) and p.stderr.strip().count("\n") == 0, p.stderr
        assert "Traceback" not in p.stderr and "Could not find" not in p.stderr
    assert not (tmp_path / "run").exists()  # refused before Hydra made a run folder


def test_dataset_values_reaching_hydra(tmp_path):
    from fourdb.cli.run import folder_dataset

    folder = write_db(tmp_path)
    assert folder_dataset([f"dataset={folder}", "model=gbdt"]) == [
        "dataset=folder", f"dataset.name='{folder.name}'", f"dataset.path='{folder.resolve()}'", "model=gbdt"]
    same = ["dataset=synthetic", "dataset=synthetic,lahman", "dataset.params.size=10"]
    assert folder_dataset(same) == same  # config names and sweeps are Hydra's to resolve
    with pytest.raises(FourdbError, match=r"dataset 'nycflight13'.*did you mean 'nycflights13'"):
        folder_dataset(["dataset=nycflight13"])  # a mistyped name, not only a mistyped path


def test_load_dataset_names_what_it_could_not_find(tmp_path):
    from fourdb.datasets import load_dataset

    with pytest.raises(FourdbError, match=r"^dataset 'nycflight13': no such database folder, and not a built-in "
                                          r"dataset \(did you mean 'nycflights13'\?\) \(built-in: browsing, lahman, "):
        load_dataset("nycflight13")
    assert "no schema.yaml" in load_error(tmp_path)  # an existing folder: the database's own error


def test_a_bad_task_file_fails_through_the_cli_in_one_line(tmp_path):
    (tmp_path / "db").mkdir()
    folder = write_db(tmp_path / "db")
    task = tmp_path / "churn.yaml"
    task.write_text("name: churn\nkind: entity_window\ntask_type: binary\nentity_table: users\nwindow: 30 dayz\n"
                    "timestamps: {val: 2021-04-01, test: 2021-05-01}\nsql: SELECT 1\n")
    p = fourdb_run(f"dataset={folder}", f"task={task}", "model=gbdt", cwd=tmp_path)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.strip() == (f"error: {task}: window '30 dayz' has an unknown unit 'dayz' "
                                f"(accepted units: w, d/days, h/hours, min/minutes, s/seconds, ms, us)")
