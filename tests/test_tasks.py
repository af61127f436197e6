"""Tasks: time-correct splits, labels as the SQL defines them, leak checks and clear errors for bad specs."""
import copy

import numpy as np
import pandas as pd
import pytest
import yaml

from fourdb.errors import TaskError
from fourdb.rdb import Column, Database, Schema, Table, write_database
from fourdb.metrics import METRICS, metrics_for
from fourdb.tasks import DEFAULT_METRICS, TASKS_DIR, TaskSpec, find_task, load_task, materialize

# ---------------------------------------------------------------------------------------------------
# entity-window tasks on the synthetic shop


@pytest.fixture(scope="module")
def taste(synthetic_db):
    return load_task(synthetic_db, "synthetic", "taste")


@pytest.fixture(scope="module")
def leak(synthetic_db):
    return load_task(synthetic_db, "synthetic", "leak")


@pytest.mark.parametrize("name", ["taste", "leak"])
def test_entity_window_splits_are_strictly_ordered_in_time(name, request, synthetic_db):
    task = request.getfixturevalue(name)
    f = task.frame
    val, test = pd.Timestamp(task.spec.timestamps["val"]), pd.Timestamp(task.spec.timestamps["test"])
    window = pd.Timedelta(task.spec.window)
    assert list(f.columns) == ["entity", "node", "cutoff", "label", "label_known_at", "split"]
    assert set(f["split"]) == {"train", "val", "test"}
    assert (f["label_known_at"] == f["cutoff"] + window).all()

    train, valid, tst = task.split("train"), task.split("val"), task.split("test")
    assert len(train) and len(valid) and len(tst)
    # no training label comes from at or after the validation cutoff
    assert (train["cutoff"] < val).all()
    assert (train["label_known_at"] <= val).all()
    assert (valid["cutoff"] >= val).all() and (valid["cutoff"] < test).all()
    assert (valid["label_known_at"] <= test).all()
    assert (tst["cutoff"] >= test).all()
    assert (tst["label_known_at"] <= synthetic_db.max_time).all()
    # train cutoffs step back from val - window (the last train label is known exactly at val);
    # val and test cutoffs step forward from val and test
    step = pd.Timedelta(task.spec.timestamps["step"])
    zero = pd.Timedelta(0)
    assert train["cutoff"].max() == val - window
    assert ((val - window - train["cutoff"]) % step == zero).all()
    assert valid["cutoff"].min() == val and ((valid["cutoff"] - val) % step == zero).all()
    assert tst["cutoff"].min() == test and ((tst["cutoff"] - test) % step == zero).all()
    if task.spec.timestamps.get("start"):
        assert (train["cutoff"] >= pd.Timestamp(task.spec.timestamps["start"])).all()

    # one label per (entity, cutoff); node is the entity's row in the entity table
    assert not f.duplicated(["entity", "cutoff"]).any()
    users = synthetic_db.tables["users"]
    assert (users["user_id"].to_numpy()[f["node"].to_numpy()] == f["entity"].to_numpy()).all()
    assert set(np.unique(f["label"])) <= {0, 1} and f["label"].dtype == np.int64
    assert task.hidden_columns == []


def _taste_label(db, user, cutoff):
    """The taste label recomputed in pandas: does kind A dominate the user's purchases in the window?"""
    p, items = db.tables["purchases"], db.tables["items"].set_index("item_id")
    mask = (p["user_id"] == user) & (p["purchased_at"] > cutoff) & (p["purchased_at"] <= cutoff + pd.Timedelta("14 days"))
    kinds = items.loc[p.loc[mask, "item_id"].to_numpy(), "kind"]
    if len(kinds) == 0:
        return None
    return int((kinds == "A").mean() > 0.5)


def test_taste_labels_match_brute_force(taste, synthetic_db):
    rng = np.random.default_rng(0)
    f = taste.frame
    rows = f.iloc[rng.choice(len(f), 12, replace=False)]
    for _, r in rows.iterrows():
        assert _taste_label(synthetic_db, r["entity"], r["cutoff"]) == r["label"], (r["entity"], r["cutoff"])

    # at one cutoff the entities are exactly the users signed up by then with a purchase in the window
    users = synthetic_db.tables["users"]
    cutoff = taste.split("val")["cutoff"].iloc[0]
    expected = {}
    for u in users.loc[users["signup_at"] <= cutoff, "user_id"]:
        label = _taste_label(synthetic_db, u, cutoff)
        if label is not None:
            expected[int(u)] = label
    at = f[f["cutoff"] == cutoff]
    assert dict(zip(at["entity"].astype(int), at["label"])) == expected
    assert len(expected) > 50  # the check above is not vacuous


def test_leak_labels_come_from_the_audit_after_the_cutoff(leak, synthetic_db):
    audits = synthetic_db.tables["audits"]
    f = leak.split("train").iloc[:40]
    for _, r in f.iterrows():
        a = audits[(audits["user_id"] == r["entity"]) & (audits["audited_at"] > r["cutoff"])
                   & (audits["audited_at"] <= r["cutoff"] + pd.Timedelta("7 days"))]
        assert len(a) == 1 and int(a["flag"].iloc[0]) == r["label"]


# ---------------------------------------------------------------------------------------------------
# row-column task on a small hand-made database

T = pd.Timestamp
ORDERS = [  # (order_id, placed_at, delivered_at, late) -> expected split (None: dropped)
    (1, T("2021-01-10"), T("2021-01-12"), 0, "train"),
    (2, T("2021-02-20"), T("2021-02-25"), 1, "train"),
    (3, T("2021-02-27"), T("2021-03-03"), 1, None),  # asked before val, known only after it
    (4, T("2021-03-05"), T("2021-03-07"), 0, "val"),
    (5, T("2021-03-20"), T("2021-03-22"), 1, "val"),
    (6, T("2021-03-30"), T("2021-04-03"), 0, None),  # asked in val, known only in test time
    (7, T("2021-04-05"), T("2021-04-08"), 1, "test"),
    (8, T("2021-04-20"), T("2021-05-20"), 0, "test"),
]
ROW_SPEC = {
    "name": "late", "kind": "row_column", "task_type": "binary", "table": "orders", "label": "late",
    "cutoff_column": "placed_at", "known_columns": ["customer_id", "placed_at", "amount"],
    "timestamps": {"val": "2021-03-01", "test": "2021-04-01"},
}


def _orders_db(folder, orders=ORDERS):
    schema = Schema("shop", [
        Table("customers", "customers.parquet", [Column("customer_id", "primary_key"), Column("tier", "category")]),
        Table("orders", "orders.parquet", [
            Column("order_id", "primary_key"), Column("customer_id", "foreign_key", "customers.customer_id"),
            Column("placed_at", "datetime"), Column("delivered_at", "datetime"), Column("amount", "numeric"),
            Column("late", "numeric")], time_column="delivered_at"),
    ])
    customers = pd.DataFrame({"customer_id": [10, 11], "tier": ["gold", "basic"]})
    orders = pd.DataFrame({
        "order_id": [o[0] for o in orders], "customer_id": [10 + o[0] % 2 for o in orders],
        "placed_at": [o[1] for o in orders], "delivered_at": [o[2] for o in orders],
        "amount": [float(o[0]) for o in orders], "late": [float(o[3]) for o in orders],
    })
    write_database(folder, schema, {"customers": customers, "orders": orders})
    return Database.load(folder)


def test_row_column_task(tmp_path):
    db = _orders_db(tmp_path)
    task = materialize(TaskSpec.from_dict(copy.deepcopy(ROW_SPEC), "late.yaml"), db)
    assert task.hidden_columns == ["delivered_at", "late"]
    got = dict(zip(task.frame["entity"], task.frame["split"]))
    assert got == {o[0]: o[4] for o in ORDERS if o[4] is not None}
    f = task.frame.set_index("entity")
    for oid, placed, delivered, late, _ in ORDERS:
        if oid in got:
            assert f.loc[oid, "cutoff"] == placed and f.loc[oid, "label_known_at"] == delivered
            assert f.loc[oid, "label"] == late
            assert f.loc[oid, "node"] == oid - 1
    val, test = T("2021-03-01"), T("2021-04-01")
    train, valid = task.split("train"), task.split("val")
    assert (train["label_known_at"] < val).all() and (valid["label_known_at"] < test).all()


@pytest.mark.parametrize("delivered", [T("2021-02-01"), T("2021-02-02")])
def test_row_column_label_known_by_its_cutoff_is_refused(tmp_path, delivered):
    orders = ORDERS + [(9, T("2021-02-02"), delivered, 1, None)]  # known at (or before) it is asked
    db = _orders_db(tmp_path, orders)
    with pytest.raises(TaskError, match=r"row 9 of 'orders' is known \(delivered_at\) at or before its cutoff "
                                        r"\(placed_at\); its label would leak"):
        materialize(TaskSpec.from_dict(copy.deepcopy(ROW_SPEC), "late.yaml"), db)


def test_row_column_bad_columns(tmp_path):
    db = _orders_db(tmp_path)
    raw = copy.deepcopy(ROW_SPEC)
    raw["known_columns"] = ["customer_id", "nope"]
    with pytest.raises(TaskError, match="table 'orders' has no column 'nope'"):
        materialize(TaskSpec.from_dict(raw, "late.yaml"), db)
    raw = copy.deepcopy(ROW_SPEC)
    raw["label"] = "no_such_column + 1"
    with pytest.raises(TaskError, match="label SQL failed"):
        materialize(TaskSpec.from_dict(raw, "late.yaml"), db)
    raw = copy.deepcopy(ROW_SPEC)
    raw["table"] = "customers"
    raw["known_columns"] = ["tier"]
    raw["cutoff_column"] = "tier"
    with pytest.raises(TaskError, match="'customers' needs a time_column"):
        materialize(TaskSpec.from_dict(raw, "late.yaml"), db)


# ---------------------------------------------------------------------------------------------------
# bad specs give clear errors


def _taste_raw(**changes):
    raw = copy.deepcopy(find_task("synthetic", "taste").raw)
    raw.update(changes)
    return raw


def test_the_sql_runs_once_over_every_cutoff_and_each_row_lands_in_its_cutoffs_split(synthetic_db):
    from fourdb.tasks import cutoffs
    from fourdb.tasks.materialize import window_labels
    spec = TaskSpec.from_dict(_taste_raw(), "t.yaml")
    task = materialize(spec, synthetic_db)
    # the same seeds and labels as running the SQL once per split over that split's cutoffs
    by_split = cutoffs(spec, synthetic_db)
    parts = [window_labels(spec, synthetic_db, times).assign(split=s) for s, times in by_split.items()]
    expected = pd.concat(parts).sort_values(["split", "cutoff", "entity"]).reset_index(drop=True)
    got = task.frame[["entity", "cutoff", "label", "label_known_at", "split"]]
    pd.testing.assert_frame_equal(got, expected[got.columns], check_dtype=False)
    assert got["split"].dtype == object and list(got["split"].unique()) == ["test", "train", "val"]
    for split, times in by_split.items():
        assert set(task.split(split)["cutoff"]) <= set(times)

    # one run sees every split's cutoffs; under the RelBench rule, as RelBench does, one run per split
    sql = """SELECT u.user_id, c.cutoff, (SELECT count(*) FROM cutoffs) AS label
             FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff"""
    once = materialize(TaskSpec.from_dict(_taste_raw(sql=sql, task_type="regression", metrics=None), "t.yaml"),
                       synthetic_db)
    assert set(once.frame["label"]) == {sum(len(t) for t in by_split.values())}
    ts = {**_taste_raw()["timestamps"], "rule": "relbench", "num_eval_timestamps": 2}
    spec = TaskSpec.from_dict(_taste_raw(sql=sql, task_type="regression", metrics=None, timestamps=ts), "t.yaml")
    per_split = materialize(spec, synthetic_db)
    counts = {s: len(t) for s, t in cutoffs(spec, synthetic_db).items()}
    assert {s: set(per_split.split(s)["label"]) for s in counts} == {s: {n} for s, n in counts.items()}


def test_two_labels_for_one_seed_are_refused(synthetic_db):
    twice = """SELECT u.user_id, c.cutoff, 1 AS label FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff
               WHERE u.user_id IN (SELECT min(user_id) FROM users)"""
    first = synthetic_db.tables["users"]["user_id"].min()
    with pytest.raises(TaskError, match=rf"the SQL yields two labels for entity {first} at "):
        materialize(TaskSpec.from_dict(_taste_raw(sql=f"{twice} UNION ALL {twice}"), "t.yaml"), synthetic_db)
    # also when another row names an entity the table does not have (checked after duplicates)
    ghost = "SELECT -1 AS user_id, max(cutoff) AS cutoff, 0 AS label FROM cutoffs"
    with pytest.raises(TaskError, match="two labels"):
        materialize(TaskSpec.from_dict(_taste_raw(sql=f"{twice} UNION ALL {twice} UNION ALL {ghost}"), "t.yaml"),
                    synthetic_db)
    with pytest.raises(TaskError, match="entity -1 is not a key of table 'users'"):
        materialize(TaskSpec.from_dict(_taste_raw(sql=f"{twice} UNION ALL {ghost}"), "t.yaml"), synthetic_db)
    # the same entity at two different cutoffs is two seeds, not a repeat
    assert len(materialize(TaskSpec.from_dict(_taste_raw(sql=twice), "t.yaml"), synthetic_db).frame) > 1
    # every user at every cutoff (the seeds are checked in an array over their keys), one of them twice
    everyone = "SELECT u.user_id, c.cutoff, 1 AS label FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff"
    repeated = f"{everyone} UNION ALL (SELECT user_id, cutoff, label FROM ({twice}) ORDER BY cutoff LIMIT 1)"
    with pytest.raises(TaskError, match=rf"the SQL yields two labels for entity {first} at "):
        materialize(TaskSpec.from_dict(_taste_raw(sql=repeated), "t.yaml"), synthetic_db)
    assert len(materialize(TaskSpec.from_dict(_taste_raw(sql=everyone), "t.yaml"), synthetic_db).frame) > 1000


def test_unknown_task_lists_the_available_ones(synthetic_db):
    with pytest.raises(TaskError, match=r"no task 'nope' for dataset 'synthetic' \(available: [a-z, -]+\)") as e:
        load_task(synthetic_db, "synthetic", "nope")
    available = str(e.value).split("available: ")[1].rstrip(")").split(", ")
    assert {"leak", "taste"} <= set(available) and available == sorted(available)
    with pytest.raises(TaskError, match=r"no task 'x' for dataset 'nowhere' \(available: none\)"):
        find_task("nowhere", "x")


def test_sql_missing_a_required_column(synthetic_db):
    sql = "SELECT u.user_id, c.cutoff FROM cutoffs c CROSS JOIN users u"
    with pytest.raises(TaskError, match=r"SQL must return columns user_id, cutoff, label; missing \['label'\]"):
        materialize(TaskSpec.from_dict(_taste_raw(sql=sql), "t.yaml"), synthetic_db)


def test_sql_error(synthetic_db):
    with pytest.raises(TaskError, match="task 'taste': SQL failed: .*no_such_table"):
        materialize(TaskSpec.from_dict(_taste_raw(sql="SELECT * FROM no_such_table"), "t.yaml"), synthetic_db)


def test_empty_split(synthetic_db):
    # train cutoffs run backwards from val - window, which is already before start: nothing to train on
    ts = {"start": "2020-09-25", "val": "2020-10-01", "test": "2020-11-15", "step": "14 days"}
    with pytest.raises(TaskError, match="the train split is empty; check timestamps"):
        materialize(TaskSpec.from_dict(_taste_raw(timestamps=ts), "t.yaml"), synthetic_db)
    # no room for a window between test and the end of the data
    ts = {"val": "2020-10-01", "test": "2020-12-25"}
    with pytest.raises(TaskError, match="no room for a 14 days window"):
        materialize(TaskSpec.from_dict(_taste_raw(timestamps=ts), "t.yaml"), synthetic_db)
    with pytest.raises(TaskError, match=r"timestamps.val .* must be before timestamps.test"):
        ts = {"val": "2020-11-15", "test": "2020-10-01"}
        materialize(TaskSpec.from_dict(_taste_raw(timestamps=ts), "t.yaml"), synthetic_db)


def test_bad_task_type_and_missing_keys():
    with pytest.raises(TaskError, match=r"t.yaml: task_type must be one of \('binary', 'multiclass', "
                                        r"'regression', 'recommendation'\), got 'ranking'"):
        TaskSpec.from_dict(_taste_raw(task_type="ranking"), "t.yaml")
    with pytest.raises(TaskError, match="kind must be one of"):
        TaskSpec.from_dict(_taste_raw(kind="graph"), "t.yaml")
    raw = _taste_raw()
    del raw["sql"]
    with pytest.raises(TaskError, match="t.yaml: missing 'sql'"):
        TaskSpec.from_dict(raw, "t.yaml")
    with pytest.raises(TaskError, match="timestamps needs 'test'"):
        TaskSpec.from_dict(_taste_raw(timestamps={"val": "2020-10-01"}), "t.yaml")


def test_binary_label_must_be_0_or_1(synthetic_db):
    sql = """SELECT p.user_id, c.cutoff, count(*) AS label FROM cutoffs c
             JOIN purchases p ON p.purchased_at > c.cutoff AND p.purchased_at <= c.cutoff + {window}
             GROUP BY p.user_id, c.cutoff"""
    with pytest.raises(TaskError, match=r"task 'taste': binary labels must be 0/1, got \[0?,? ?1, 2"):
        materialize(TaskSpec.from_dict(_taste_raw(sql=sql), "t.yaml"), synthetic_db)
    # the same counts are a fine regression target (scored by its default metrics: YAML null)
    task = materialize(TaskSpec.from_dict(_taste_raw(sql=sql, task_type="regression", metrics=None), "t.yaml"),
                       synthetic_db)
    assert task.frame["label"].dtype == np.float64 and task.frame["label"].max() > 1


def test_step_defaults_to_the_window(synthetic_db):
    ts = {"start": "2020-06-01", "val": "2020-10-01", "test": "2020-11-15"}
    task = materialize(TaskSpec.from_dict(_taste_raw(timestamps=ts), "t.yaml"), synthetic_db)
    for split in ("train", "val", "test"):
        cuts = np.sort(task.split(split)["cutoff"].unique())
        assert len(cuts) and (np.diff(cuts) == np.timedelta64(14, "D")).all(), split
    assert task.spec.timestamps["step"] == "14 days"


# ---------------------------------------------------------------------------------------------------
# a task file is checked when it is loaded: every mistake is one line naming the file and the field


def spec_error(raw, where="t.yaml") -> str:
    with pytest.raises(TaskError) as info:
        TaskSpec.from_dict(raw, where)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{where}"), message
    return message


@pytest.mark.parametrize("path", sorted(TASKS_DIR.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_built_in_task_file_loads(path):
    spec = TaskSpec.load(path)
    assert spec.name == path.stem and spec.dataset == path.parent.name
    assert spec.metrics and set(spec.metrics) <= set(metrics_for(spec.task_type))


def test_unknown_keys_are_refused_with_a_suggestion(tmp_path):
    message = spec_error(_taste_raw(windw="7 days"))
    assert "t.yaml: unknown key 'windw' (did you mean 'window'?)" in message
    assert ("allowed: name, dataset, description, kind, task_type, metrics, timestamps, sanity, remove_columns, "
            "entity_table, sql, window, output") in message
    # through a file: the path is named
    raw = {**ROW_SPEC, "timecolumn": "placed_at"}
    (tmp_path / "late.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(TaskError, match=r"late\.yaml: unknown key 'timecolumn'"):
        TaskSpec.load(tmp_path / "late.yaml")


def test_a_key_of_the_other_kind_says_which_kind_it_belongs_to():
    message = spec_error({**ROW_SPEC, "sql": "SELECT 1"})
    assert message == "t.yaml: 'sql' is a key of entity_window tasks, and this task is row_column"
    message = spec_error(_taste_raw(where="amount > 0"))
    assert message == "t.yaml: 'where' is a key of row_column tasks, and this task is entity_window"
    ts = {**ROW_SPEC["timestamps"], "step": "7 days"}
    message = spec_error({**ROW_SPEC, "timestamps": ts})
    assert message == "t.yaml: 'timestamps.step' is a key of entity_window tasks, and this task is row_column"


def test_unknown_timestamps_key():
    ts = {"val": "2020-10-01", "test": "2020-11-15", "stpe": "14 days"}
    message = spec_error(_taste_raw(timestamps=ts))
    assert "t.yaml, timestamps: unknown key 'stpe' (did you mean 'step'?)" in message
    assert "(allowed: val, test, start, end, step, max_train_cutoffs, rule, num_eval_timestamps)" in message


def test_yaml_null_means_not_set(tmp_path, synthetic_db):
    ts = {"start": None, "val": "2020-10-01", "test": "2020-11-15", "end": None, "step": None,
          "max_train_cutoffs": None}
    raw = _taste_raw(description=None, metrics=None, sanity=None, timestamps=ts)
    (tmp_path / "taste.yaml").write_text(yaml.safe_dump(raw))
    assert "metrics: null" in (tmp_path / "taste.yaml").read_text()
    spec = TaskSpec.load(tmp_path / "taste.yaml")
    assert spec.description == "" and spec.metrics == ["auroc", "accuracy"] and spec.sanity is False
    assert spec.timestamps == {"val": "2020-10-01", "test": "2020-11-15", "step": "14 days"}
    task = materialize(spec, synthetic_db)  # no start (as far back as the data goes), no end (to the data's end)
    assert task.split("train")["cutoff"].min() < pd.Timestamp("2020-02-15")

    raw = {**ROW_SPEC, "where": None, "metrics": None, "description": None, "dataset": None}
    task = materialize(TaskSpec.from_dict(raw, "late.yaml"), _orders_db(tmp_path / "db"))
    assert task.spec.where is None and task.spec.metrics == ["auroc", "accuracy"] and len(task.frame) == 6


@pytest.mark.parametrize("field", ["window", "step"])
@pytest.mark.parametrize("value, unit", [("30 dayz", "dayz"), ("1 year", "year"), ("1 month", "month"),
                                         ("2 weeks", "weeks"), ("P1D", "P")])
def test_bad_duration_unit_names_the_field_and_the_accepted_units(field, value, unit):
    raw = _taste_raw(window=value) if field == "window" else \
        _taste_raw(timestamps={"val": "2020-10-01", "test": "2020-11-15", "step": value})
    name = "window" if field == "window" else "timestamps.step"
    message = spec_error(raw)
    assert f"t.yaml: {name} '{value}' has an unknown unit '{unit}'" in message
    assert "accepted units: w, d/days, h/hours, min/minutes, s/seconds, ms, us" in message
    assert ("years and months have no fixed length" in message) == (unit in ("year", "month"))


@pytest.mark.parametrize("value, problem", [("0 days", "must be positive"), ("-7 days", "must be positive"),
                                            (14, "must be a duration with a unit"), ("days", "is not a duration")])
def test_window_and_step_must_be_positive_durations(value, problem):
    assert f"t.yaml: window {problem}" in spec_error(_taste_raw(window=value)).replace(f" '{value}'", "")
    ts = {"val": "2020-10-01", "test": "2020-11-15", "step": value}
    assert f"t.yaml: timestamps.step {problem}" in spec_error(_taste_raw(timestamps=ts)).replace(f" '{value}'", "")


def test_every_accepted_unit_means_the_same_to_pandas_and_duckdb():
    import duckdb

    from fourdb.tasks import DURATION_UNITS

    con = duckdb.connect()
    for unit in sorted(DURATION_UNITS):
        text = f"3 {unit}"
        assert pd.Timedelta(con.execute(f"SELECT INTERVAL '{text}'").fetchone()[0]) == pd.Timedelta(text), unit
    spec = TaskSpec.from_dict(_taste_raw(window="1d12h", timestamps={"val": "2020-10-01", "test": "2020-11-15"}), "t")
    assert spec.timestamps["step"] == "1d12h"


def test_unparseable_timestamp_names_the_field(tmp_path):
    text = yaml.safe_dump({**ROW_SPEC, "timestamps": {"val": "VAL", "test": "2021-04-01"}}).replace("VAL", "2020-13-45")
    (tmp_path / "late.yaml").write_text(text)
    with pytest.raises(TaskError) as info:
        TaskSpec.load(tmp_path / "late.yaml")
    assert str(info.value) == (f"{tmp_path / 'late.yaml'}: timestamps.val '2020-13-45' is not a timestamp, "
                               f"e.g. 2020-10-01 or 2020-10-01 12:00")
    for field, value, problem in [("test", "next week", "is not a timestamp"), ("start", 2020, "is not a timestamp"),
                                  ("end", "2020-12-01T00:00:00+02:00", "has a time zone")]:
        ts = {"val": "2020-10-01", "test": "2020-11-15", field: value}
        assert f"t.yaml: timestamps.{field} '{value}' {problem}" in spec_error(_taste_raw(timestamps=ts))
    ts = {"val": "2020-10-01", "test": "2020-11-15", "max_train_cutoffs": 0}
    assert "timestamps.max_train_cutoffs must be a positive whole number, got 0" in spec_error(_taste_raw(timestamps=ts))


def test_metrics_are_checked_at_load():
    message = spec_error(_taste_raw(metrics=["aucroc", "accuracy"]))
    assert message == ("t.yaml: unknown metric 'aucroc' (did you mean 'auroc'?) "
                       "(binary metrics: accuracy, auroc, average_precision, roc_auc)")
    message = spec_error(_taste_raw(task_type="regression", metrics=["auroc"]))
    assert message == "t.yaml: metric 'auroc' does not fit a regression task (regression metrics: mae, nmae, r2, rmse)"
    assert "metric 'mae' does not fit a binary task" in spec_error(_taste_raw(metrics=["mae"]))
    assert "metric 'macro_f1' does not fit a binary task" in spec_error(_taste_raw(metrics="macro_f1"))
    assert TaskSpec.from_dict(_taste_raw(metrics="average_precision"), "t.yaml").metrics == ["average_precision"]


def test_every_metric_scores_the_task_types_it_declares():
    from fourdb.metrics import compute

    y = {"binary": np.array([0, 1, 1, 0]), "multiclass": np.array([0, 1, 2, 1]),
         "regression": np.array([0.5, 1.0, 2.0, 3.0]), "recommendation": [[3, 5], [1], [], [2, 4, 6]]}
    score = {"binary": np.array([0.2, 0.7, 0.6, 0.4]), "multiclass": np.eye(3)[[0, 1, 2, 2]],
             "regression": np.array([0.4, 1.2, 2.1, 2.5]),
             "recommendation": np.array([[5, 1, 0], [2, 1, 7], [1, 2, 3], [9, 8, 6]])}
    assert {t for _, m in METRICS.items() for t in m.task_types} == set(y)
    for task_type in y:
        names = metrics_for(task_type)
        assert set(DEFAULT_METRICS[task_type]) <= set(names)
        for name in names:
            assert np.isfinite(compute(name, y[task_type], score[task_type], y_train=y[task_type])), (task_type, name)
