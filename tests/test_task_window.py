"""Labels never come from past the data: where a task's cutoffs stop when its file gives no ``end``, what
validate says about label windows that close after the last event and about rows without a time, and which
table's key a foreign key's values fit."""
import numpy as np
import pandas as pd
import pytest
import yaml

from fourdb.cli import main
from fourdb.datasets import load_dataset
from fourdb.errors import SchemaError
from fourdb.rdb import Database, Schema, write_database
from fourdb.rdb import links
from fourdb.rdb.schema import Column, Table
from fourdb.rdb.timeline import last_event
from fourdb.tasks import TaskSpec, find_task, materialize
from fourdb.tasks.checks import late_label_warnings, task_report
from fourdb.tasks.kinds.window import cutoffs

LAST_SALE = pd.Timestamp("2020-12-31")
CHURN = {
    "name": "churn", "kind": "entity_window", "task_type": "binary", "entity_table": "customer", "window": "30 days",
    "timestamps": {"start": "2020-03-01", "val": "2020-09-01", "test": "2020-11-01", "step": "30 days"},
    "sql": "SELECT c.c_customer_sk, t.cutoff, CAST(count(s.ss_id) = 0 AS INTEGER) AS label\n"
           "FROM cutoffs t CROSS JOIN customer c\n"
           "LEFT JOIN (SELECT s.ss_id, s.ss_customer_sk, d.d_date FROM store_sales s\n"
           "           JOIN date_dim d ON d.d_date_sk = s.ss_sold_date_sk) s\n"
           "  ON s.ss_customer_sk = c.c_customer_sk AND s.d_date > t.cutoff AND s.d_date <= t.cutoff + {window}\n"
           "GROUP BY c.c_customer_sk, t.cutoff",
}


def warehouse(folder, undated: int = 10):
    """A retail warehouse: a date dimension running to 2100, customers, promotions dated by their end day (in
    2030), and a year of sales dated through a date key (``undated`` of them with none)."""
    rng = np.random.default_rng(0)
    days = pd.date_range("2019-01-01", "2100-12-31", freq="D")
    date_dim = pd.DataFrame({"d_date_sk": np.arange(1, len(days) + 1), "d_date": days, "d_year": days.year})
    customer = pd.DataFrame({"c_customer_sk": np.arange(1, 31), "c_name": [f"c{i}" for i in range(30)]})
    in_2020 = date_dim.loc[date_dim["d_year"] == 2020, "d_date_sk"].to_numpy()
    dates = pd.array(rng.choice(in_2020, 200), dtype="Int64")
    dates[:2] = [in_2020[0], in_2020[-1]]  # the first and last day of 2020 are sale days
    dates[2:2 + undated] = pd.NA
    sales = pd.DataFrame({"ss_id": np.arange(200), "ss_customer_sk": rng.integers(1, 31, 200), "ss_sold_date_sk": dates,
                          "ss_promo_sk": rng.integers(1, 4, 200), "ss_amount": rng.gamma(2.0, 10.0, 200)})
    in_2030 = date_dim.loc[date_dim["d_year"] == 2030, "d_date_sk"].to_numpy()
    promotion = pd.DataFrame({"p_promo_sk": [1, 2, 3], "p_end_date_sk": in_2030[:3]})
    schema = Schema("warehouse", [
        Table("date_dim", "date_dim.parquet", [Column("d_date_sk", "primary_key"), Column("d_date", "datetime"),
                                               Column("d_year", "numeric")], time_column="d_date"),
        Table("customer", "customer.parquet", [Column("c_customer_sk", "primary_key"), Column("c_name", "category")]),
        Table("promotion", "promotion.parquet", [Column("p_promo_sk", "primary_key"),
                                                 Column("p_end_date_sk", "foreign_key", "date_dim.d_date_sk")]),
        Table("store_sales", "store_sales.parquet", [
            Column("ss_id", "primary_key"), Column("ss_customer_sk", "foreign_key", "customer.c_customer_sk"),
            Column("ss_sold_date_sk", "foreign_key", "date_dim.d_date_sk"),
            Column("ss_promo_sk", "foreign_key", "promotion.p_promo_sk"), Column("ss_amount", "numeric")],
              time_from=["ss_sold_date_sk"]),
    ])
    write_database(folder, schema, {"date_dim": date_dim, "customer": customer, "promotion": promotion,
                                    "store_sales": sales})
    return folder


def churn(**timestamps) -> TaskSpec:
    raw = {**CHURN, "timestamps": {**CHURN["timestamps"], **timestamps}}
    return TaskSpec.from_dict(raw, "churn.yaml")


@pytest.fixture
def db(tmp_path):
    return Database.load(warehouse(tmp_path / "warehouse"))


def test_without_end_no_label_window_runs_past_the_last_sale(db):
    """The date dimension runs to 2100 and promotions end in 2030; the cutoffs stop at the last sale, not there."""
    assert db.max_time == pd.Timestamp("2100-12-31")
    assert db.tables["promotion"][db.schema.table("promotion").time_column].min().year == 2030
    assert last_event(db).time == LAST_SALE and last_event(db).table == "store_sales"
    spec = churn()
    test = cutoffs(spec, db)["test"]
    assert test == [pd.Timestamp("2020-11-01"), pd.Timestamp("2020-12-01")]
    task = materialize(spec, db)
    assert task.frame["cutoff"].max() <= LAST_SALE and task.frame["label_known_at"].max() <= LAST_SALE
    assert late_label_warnings(task, db) == []


def test_validate_warns_when_label_windows_close_after_the_last_event(db):
    """An ``end`` past the data: the last cutoffs' labels are incomplete (every customer 'churned'), and the
    report puts the last event beside the last cutoff."""
    task = materialize(churn(end="2021-06-30"), db)
    [warning] = late_label_warnings(task, db)
    late = task.frame[task.frame["label_known_at"] > LAST_SALE]
    assert len(late) == 30 * 6 and (late["label"] == 1).all()  # nothing after the data's end: all 'churned'
    assert warning.startswith(f"task 'churn': {len(late)} seeds ({len(late)} test; cutoffs 2020-12-31 00:00:00 .. "
                              f"2021-05-30 00:00:00) have a label window that closes after the last event of the "
                              f"tables it reads (2020-12-31 00:00:00, store_sales)")
    assert "last event of the tables it reads: 2020-12-31 00:00:00 (store_sales)" in task_report(task, db)


def test_a_table_of_facts_ending_earlier_than_another_is_the_one_its_task_is_warned_about(db):
    """Each task is held to the tables it reads: returns running months past the last sale do not make a
    sales task's late windows complete."""
    returns = pd.DataFrame({"sr_id": [0, 1], "sr_customer_sk": [1, 2], "returned_at": pd.to_datetime(["2020-06-01",
                                                                                                       "2021-09-01"])})
    schema = Schema("w", [*db.schema.tables, Table("store_returns", "r.parquet", [
        Column("sr_id", "primary_key"), Column("sr_customer_sk", "foreign_key", "customer.c_customer_sk"),
        Column("returned_at", "datetime")], time_column="returned_at")])
    wider = Database(schema, {**db.tables, "store_returns": returns})
    assert last_event(wider).time == pd.Timestamp("2021-09-01")
    task = materialize(churn(end="2021-06-30"), wider)
    assert "(2020-12-31 00:00:00, store_sales)" in late_label_warnings(task, wider)[0]


def test_rows_without_a_time_key_are_counted_and_named(db, tmp_path, capsys):
    note = ("table 'store_sales': 10 of 200 rows (5.0%) have no time (the keys its time comes from "
            "(ss_sold_date_sk -> date_dim) are null or find no parent time), so they are known at every cutoff")
    assert note in db.notes
    folder = db.folder
    (folder / "tasks").mkdir()
    (folder / "tasks" / "churn.yaml").write_text(yaml.safe_dump({**CHURN, "timestamps": {**CHURN["timestamps"],
                                                                                         "end": "2021-03-31"}}))
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"warning: {note}" in out
    assert "last event of the tables it reads: 2020-12-31 00:00:00 (store_sales)" in out
    assert "warning: task 'churn': 90 seeds (90 test;" in out


def test_a_database_without_dimensions_keeps_its_last_time(tmp_path):
    """No date dimension: the data's last event is its last time, as before."""
    events = pd.DataFrame({"id": [0, 1], "at": pd.to_datetime(["2020-01-01", "2020-02-01"])})
    db = Database(Schema("one", [Table("events", "e.parquet", [Column("id", "primary_key"), Column("at", "datetime")],
                                       time_column="at")]), {"events": events})
    assert last_event(db).time == db.max_time == pd.Timestamp("2020-02-01")


@pytest.mark.parametrize("dataset,params", [("synthetic", {"size": 150}), ("browsing", {"size": 200}),
                                            ("lahman", {})])
def test_built_in_tasks_keep_their_cutoffs(dataset, params):
    """Every built-in window task without an ``end``: its cutoffs under the data's last event are the ones the
    database's last time gave (the boards' seeds do not change)."""
    from pathlib import Path

    from fourdb.tasks.spec import TASKS_DIR

    db = load_dataset(dataset, **params)
    checked = 0
    for path in sorted(Path(TASKS_DIR, dataset).glob("*.yaml")):
        spec = find_task(dataset, path.stem)
        if not spec.kind.has_cutoff_grid or not spec.sql or spec.timestamps.get("end"):
            continue
        before = TaskSpec.from_dict({**spec.raw, "timestamps": {**spec.raw["timestamps"], "end": str(db.max_time)}},
                                    "pinned")
        assert cutoffs(spec, db) == cutoffs(before, db), spec.name
        checked += 1
    assert checked


# -- links --------------------------------------------------------------------------------------------------

def shop(folder, policy="error"):
    """Orders whose buyer is declared a user, though the buyers are accounts: 6 users, 10 accounts."""
    frames = {"users": pd.DataFrame({"user_id": np.arange(1, 7)}),
              "accounts": pd.DataFrame({"account_id": np.arange(1, 11)}),
              "codes": pd.DataFrame({"code": [str(i) for i in range(1, 11)]}),  # text keys: never a candidate
              "orders": pd.DataFrame({"order_id": np.arange(100, 110), "buyer": np.arange(1, 11)})}
    schema = Schema("shop", [
        Table("users", "users.parquet", [Column("user_id", "primary_key")]),
        Table("accounts", "accounts.parquet", [Column("account_id", "primary_key")]),
        Table("codes", "codes.parquet", [Column("code", "primary_key")]),
        Table("orders", "orders.parquet", [Column("order_id", "primary_key"),
                                           Column("buyer", "foreign_key", "users.user_id")]),
    ], on_dangling_foreign_key=policy)
    return write_database(folder, schema, frames)


def test_dangling_values_name_the_key_they_fit_and_both_ways_out(tmp_path):
    with pytest.raises(SchemaError) as e:
        Database.load(shop(tmp_path))
    message = str(e.value)
    assert "values of orders.buyer fit accounts.account_id (100%) better than the declared users.user_id (60%)" \
        in message
    assert "4 of 10 values (40.0%)" in message
    assert "Either fix link_to if it names the wrong table, or set on_dangling_foreign_key: null to make the 4 " \
           "dangling values null" in message
    assert "codes" not in message


def test_validate_names_the_better_fitting_link_under_the_null_policy(tmp_path, capsys, monkeypatch):
    folder = shop(tmp_path, "null")
    assert main(["validate", str(folder)]) == 0
    out = capsys.readouterr().out
    assert ("warning: table 'orders', column 'buyer': 4 of 10 values (40.0%) not found in users.user_id were made "
            "null (on_dangling_foreign_key: null); values of orders.buyer fit accounts.account_id (100%) better than "
            "the declared users.user_id (60%)") in out
    monkeypatch.setattr(links, "SAMPLE", 5)  # a large column is measured on a sample, which the line states
    note = Database.load(folder).notes[0]
    assert "on a sample of 5 of its 10 values" in note


def test_a_link_that_resolves_costs_no_search(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("fourdb.rdb.database.link_fit", lambda *a: calls.append(a))
    Database.load(warehouse(tmp_path / "w", undated=0))
    assert calls == []
