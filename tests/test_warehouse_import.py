"""A warehouse with no key declared, from the generator to validate: every key inferred with its evidence,
composite keys said, the date dimension found and used as the facts' time, NULL date keys counted."""
import shutil

import duckdb
import pandas as pd
import pytest
import yaml

from fourdb.cli import main
from fourdb.datasets.warehouse import TRUTH, write_tasks, write_warehouse
from fourdb.importers import SourceTable, import_database, infer_foreign_keys
from fourdb.importers import containment
from fourdb.importers.base import ImportReport
from fourdb.rdb import Database
from fourdb.tasks import find_task, materialize

ROWS = 10_000


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("warehouse")
    write_warehouse(root / "shop.duckdb", rows=ROWS, seed=3)
    write_warehouse(root / "shop", rows=ROWS, seed=3, format="parquet")
    return root


@pytest.fixture(scope="module", params=["shop.duckdb", "shop"], ids=["duckdb", "parquet"])
def imported(request, source, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported") / "db"
    report = import_database(source / request.param, out)
    return report, out


@pytest.fixture(scope="module")
def loaded(imported):
    return Database.load(imported[1])


def test_every_key_found(imported, loaded):
    report, out = imported
    schema = loaded.schema
    assert {t.name: t.primary_key for t in schema.tables} == {
        **TRUTH.primary_keys, **{fact: None for fact in TRUTH.composite_keys}}
    links = {(t.name, fk.name, fk.link_table, fk.link_column) for t in schema.tables for fk in t.foreign_keys}
    assert links == TRUTH.links()
    assert all(c.inferred for t in schema.tables for c in t.columns if c.dtype in ("primary_key", "foreign_key"))
    text = report.format()
    assert "store_sales: ss_customer_sk -> customer.c_customer_sk: customer_sk = customer_sk; 100.0% of" in text
    assert "customer: primary key c_customer_sk: named after the table (customer_sk); unique and never null" in text


def test_role_playing_keys(imported):
    report, _ = imported
    why = report.evidence["web_sales"]
    for role in ("bill", "ship"):
        assert any(line.startswith(f"ws_{role}_customer_sk -> customer.c_customer_sk: {role}_customer_sk = {role} + "
                                   f"customer_sk (a role)") for line in why)
    assert any(line.startswith("ws_ship_cdemo_sk -> customer_demographics.cd_demo_sk") for line in why)


def test_composite_keys_said_not_dropped(imported):
    report, out = imported
    text = (out / "schema.yaml").read_text()
    for fact, parts in TRUTH.composite_keys.items():
        line = f"composite key ({', '.join(parts)}): unique together and never null"
        assert any(w.startswith(line) for w in report.evidence[fact]), fact
        assert "has no primary key" in " ".join(report.evidence[fact])
        assert f"composite key ({', '.join(parts)})" in " ".join(text.split())  # wrapped comment lines
    for returns, sales in TRUTH.composite_foreign_keys.items():
        parts = TRUTH.composite_keys[sales]
        assert any(f"-> {sales} ({', '.join(parts)}): the same names, 100.0% of" in w
                   for w in report.evidence[returns]), returns


def test_evidence_is_in_schema_yaml_as_comments(imported):
    report, out = imported
    text = (out / "schema.yaml").read_text()
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "ss_addr_sk -> customer_address.ca_address_sk: addr_sk abbreviates address_sk; 100.0% of" in comments
    assert "a date dimension: one row per day from 2000-01-01 to 2100-12-31 in d_date" in comments
    assert yaml.safe_load(text) == report.schema.to_dict()  # comments change nothing


def test_date_dimension_is_the_facts_time(imported):
    report, out = imported
    raw = {t["name"]: t for t in yaml.safe_load((out / "schema.yaml").read_text())["tables"]}
    assert raw["date_dim"]["time_column"] == "d_date"
    for fact, keys in TRUTH.fact_date_keys.items():
        assert raw[fact]["time_from"] == list(keys), fact
    why = " ".join(report.evidence["web_sales"])
    assert "time from ws_sold_date_sk -> date_dim, ws_ship_date_sk -> date_dim (the latest), through a date dimension" \
           in why and "not from customer, web_page, web_site, promotion" in why


def test_load_prefers_the_date_dimension(imported, tmp_path):
    """Without time_from in schema.yaml, loading infers the time of a sale from its date keys, not from the latest
    of its customer's, web page's and promotion's."""
    _, out = imported
    raw = yaml.safe_load((out / "schema.yaml").read_text())
    for t in raw["tables"]:
        t.pop("time_from", None)
    folder = tmp_path / "db"
    folder.mkdir()
    for f in out.glob("*.parquet"):
        shutil.copy(f, folder / f.name)
    (folder / "schema.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    db = Database.load(folder)
    for fact, keys in TRUTH.fact_date_keys.items():
        assert db.schema.table(fact).inherited_from == list(keys), fact
    assert db.schema.table("customer").inherited_from == ["c_first_shipto_date_sk", "c_first_sales_date_sk"]


def test_validate_counts_null_date_keys(imported, source, capsys):
    _, out = imported
    con = duckdb.connect(str(source / "shop.duckdb"), read_only=True)
    nulls, total = con.execute("SELECT count(*) - count(ss_sold_date_sk), count(*) FROM store_sales").fetchone()
    con.close()
    assert 0 < nulls < 0.05 * total
    assert main(["validate", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"table 'store_sales': {nulls:,} of {total:,} rows" in text
    line = next(x for x in text.splitlines() if f"table 'store_sales': {nulls:,} of" in x)
    assert "ss_sold_date_sk" in line and "known at every cutoff" in line


def test_no_infer_keys(source, tmp_path, capsys):
    out = tmp_path / "db"
    assert main(["import", str(source / "shop.duckdb"), "--out", str(out), "--no-infer-keys"]) == 0
    assert "keys not inferred (--no-infer-keys)" in capsys.readouterr().out
    schema = Database.load(out).schema
    assert not any(c.dtype in ("primary_key", "foreign_key") for t in schema.tables for c in t.columns)
    assert schema.table("date_dim").time_column == "d_date"  # a lone datetime is still the time
    comments = [line for line in (out / "schema.yaml").read_text().splitlines() if line.startswith("#")]
    assert not any(word in line for line in comments for word in ("values found", "primary key", "composite key"))


def test_task_files_materialize(imported, loaded):
    _, out = imported
    write_tasks(out / "tasks")
    db = loaded
    churn = materialize(find_task(str(out), "churn"), db)
    labels = churn.frame["label"]
    assert 0.05 < labels.mean() < 0.95
    nxt = materialize(find_task(str(out), "next-items"), db)
    assert len(nxt.split("train")) and len(nxt.split("test"))


def test_generator_is_deterministic_and_scales(tmp_path):
    a = write_warehouse(tmp_path / "a.duckdb", rows=5_000, seed=1)
    b = write_warehouse(tmp_path / "b.duckdb", rows=5_000, seed=1)
    big = write_warehouse(tmp_path / "c", rows=40_000, seed=1, format="parquet")
    assert a == b and len(a) == 24
    assert big["store_sales"] > 4 * a["store_sales"]
    frames = [duckdb.connect(str(tmp_path / f"{n}.duckdb"), read_only=True).execute(
        "SELECT * FROM web_sales").df() for n in "ab"]
    pd.testing.assert_frame_equal(*frames)
    assert not (tmp_path / ".a.duckdb.tmp").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "a.duckdb", "b.duckdb", "c"]


# ---- the rules, on frames made for them --------------------------------------------------------------------
def tables_of(**frames):
    return {name: SourceTable(name, frame) for name, frame in frames.items()}


def test_a_strong_name_tolerates_a_few_dangling_values_and_a_loose_one_none():
    customer = pd.DataFrame({"c_customer_sk": range(1, 201), "c_name": ["x"] * 200})
    sales = pd.DataFrame({"s_customer_sk": list(range(1, 200)) + [999], "s_cust_sk": list(range(1, 200)) + [999],
                          "s_qty": [1] * 200})
    tables = tables_of(customer=customer, sales=sales)
    tables["customer"].primary_key = "c_customer_sk"
    report = ImportReport("test", "test")
    infer_foreign_keys(tables, report)
    assert tables["sales"].foreign_keys == {"s_customer_sk": ("customer", "c_customer_sk")}  # 99.5% found
    assert any("'s_cust_sk'" in n and "1 values are not there" in n and "a name this loose" in n
               for n in report.notes)


def test_a_large_column_is_checked_on_a_sample(monkeypatch):
    monkeypatch.setattr(containment, "MAX_CHECKED", 100)
    item = pd.DataFrame({"i_item_sk": range(1, 51), "i_name": ["x"] * 50})
    sales = pd.DataFrame({"s_item_sk": [k % 50 + 1 for k in range(1000)], "s_qty": [1] * 1000})
    tables = tables_of(item=item, sales=sales)
    tables["item"].primary_key = "i_item_sk"
    report = ImportReport("test", "test")
    infer_foreign_keys(tables, report)
    assert report.evidence["sales"] == ["s_item_sk -> item.i_item_sk: item_sk = item_sk; 100.0% of a sample of 100 "
                                        "of its 1,000 values found"]


def test_a_sqlite_file_with_warehouse_names(tmp_path):
    """The same rules on a SQLite file: prefixed keys, role-playing keys, a calendar as the time of the sales."""
    import sqlite3

    days = pd.date_range("2021-01-01", periods=60, freq="D")
    date_dim = pd.DataFrame({"d_date_sk": range(2459216, 2459276), "d_date": days.strftime("%Y-%m-%d"),
                             "d_dow": days.dayofweek})
    customer = pd.DataFrame({"c_customer_sk": range(1, 21), "c_first_sales_date_sk": 2459216 + pd.Series(range(20)),
                             "c_city": ["a", "b"] * 10})
    n = 200
    ticket = [k // 2 for k in range(n)]  # two lines a ticket, sold on one day to one customer
    sales = pd.DataFrame({"s_sold_date_sk": [2459226 + t % 50 for t in ticket],
                          "s_bill_customer_sk": [t % 20 + 1 for t in ticket],
                          "s_ship_customer_sk": [(t * 7) % 20 + 1 for t in ticket],
                          "s_ticket_number": ticket, "s_line_number": [k % 2 for k in range(n)],
                          "s_amount": [float(k) for k in range(n)]})
    con = sqlite3.connect(tmp_path / "shop.sqlite")
    for name, frame in {"date_dim": date_dim, "customer": customer, "sales": sales}.items():
        frame.to_sql(name, con, index=False)
    con.close()
    report = import_database(tmp_path / "shop.sqlite", tmp_path / "out")
    schema = Database.load(tmp_path / "out").schema
    assert schema.table("date_dim").primary_key == "d_date_sk" and schema.table("customer").primary_key == "c_customer_sk"
    assert {fk.name: fk.link_to for fk in schema.table("sales").foreign_keys} == {
        "s_sold_date_sk": "date_dim.d_date_sk", "s_bill_customer_sk": "customer.c_customer_sk",
        "s_ship_customer_sk": "customer.c_customer_sk"}
    assert schema.table("sales").time_from == ["s_sold_date_sk"]  # not the customers' first purchases
    assert any(w.startswith("composite key (s_ticket_number, s_line_number)") for w in report.evidence["sales"])
