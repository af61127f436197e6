"""`fourdb import` of a RelBench 3 folder: the labels of every converted task equal the ones RelBench itself
generates from the same folder, removed columns reach no model, and a broken manifest is one line."""
import numpy as np
import pandas as pd
import pytest
import yaml

relbench = pytest.importorskip("relbench", minversion="3")
from relbench.manifest import DatasetManifest, TableSpec, TaskManifest  # noqa: E402

from fourdb.errors import DatabaseImportError  # noqa: E402
from fourdb.features import build_table_features  # noqa: E402
from fourdb.importers import import_database  # noqa: E402
from fourdb.rdb import Database  # noqa: E402
from fourdb.tasks import find_task, materialize  # noqa: E402

START, END = pd.Timestamp("2023-01-01"), pd.Timestamp("2023-12-31")
VAL, TEST = "2023-10-01", "2023-11-15"
SPLITS = ("train", "val", "test")

CHURN_SQL = """
SELECT t.timestamp, u.user_id,
       CAST(NOT EXISTS (SELECT 1 FROM events e WHERE e.user_id = u.user_id AND e.event_time > t.timestamp
                        AND e.event_time <= t.timestamp + INTERVAL '{timedelta}') AS INTEGER) AS churn
FROM timestamps t, users u
WHERE EXISTS (SELECT 1 FROM events e WHERE e.user_id = u.user_id
              AND e.event_time > t.timestamp - INTERVAL '{timedelta}' AND e.event_time <= t.timestamp)
"""
SPEND_SQL = """
SELECT t.timestamp, u.user_id, COALESCE(SUM(e.amount), 0) AS spend
FROM timestamps t JOIN users u ON u.signup_time <= t.timestamp
LEFT JOIN events e ON e.user_id = u.user_id AND e.event_time > t.timestamp
                   AND e.event_time <= t.timestamp + INTERVAL '{timedelta}'
GROUP BY t.timestamp, u.user_id
"""
ITEMS_SQL = """
SELECT t.timestamp, e.user_id, LIST(DISTINCT e.item_id) AS item_id
FROM timestamps t
JOIN events e ON e.event_time > t.timestamp AND e.event_time <= t.timestamp + INTERVAL '{timedelta}'
JOIN users u ON u.user_id = e.user_id AND u.signup_time <= t.timestamp
GROUP BY t.timestamp, e.user_id
"""


def shop(seed=0, n_users=60, n_items=15, n_events=1500):
    """users (signing up all year, a few after test), items (static), events after their user's signup."""
    rng = np.random.default_rng(seed)
    signup = (START + pd.to_timedelta(np.sort(rng.integers(0, 345 * 24, n_users)), unit="h")).to_numpy()
    users = pd.DataFrame({"user_id": np.arange(n_users), "signup_time": signup,
                          "country": rng.choice(["fr", "de", "us"], n_users)})
    items = pd.DataFrame({"item_id": np.arange(n_items), "category": rng.choice(["a", "b", "c"], n_items),
                          "price": rng.gamma(2, 5, n_items).round(2)})
    who = rng.integers(0, n_users, n_events)
    room = (END.to_datetime64() - signup[who]) / np.timedelta64(1, "h")
    when = signup[who] + pd.to_timedelta((rng.random(n_events) * room).astype(int), unit="h").to_numpy()
    events = pd.DataFrame({"user_id": who, "item_id": rng.integers(0, n_items, n_events), "event_time": when,
                           "channel": rng.choice(["web", "app", "store"], n_events),
                           "amount": rng.gamma(2, 10, n_events).round(2)})
    events = events.sort_values("event_time", kind="stable").reset_index(drop=True)
    events.insert(0, "event_id", np.arange(n_events))
    # a label source: a model that saw it would read the spend off it
    users["lifetime_value"] = events.groupby("user_id")["amount"].sum().reindex(users["user_id"]).fillna(0).to_numpy()
    return {"users": users, "items": items, "events": events}


TASKS = {
    "user-churn": TaskManifest(
        name="user-churn", kind="forecast", task_type="binary_classification", entity_table="users",
        entity_col="user_id", target_col="churn", time_col="timestamp", timedelta="14 days",
        num_eval_timestamps=2, sql=CHURN_SQL),
    "user-spend": TaskManifest(
        name="user-spend", kind="forecast", task_type="regression", entity_table="users", entity_col="user_id",
        target_col="spend", time_col="timestamp", timedelta="30 days", sql=SPEND_SQL,
        remove_columns=[["users", "lifetime_value"]]),
    "user-items": TaskManifest(
        name="user-items", kind="forecast", task_type="recommendation", src_entity_table="users",
        src_entity_col="user_id", dst_entity_table="items", dst_entity_col="item_id", time_col="timestamp",
        eval_k=5, timedelta="30 days", sql=ITEMS_SQL),
    "event-channel": TaskManifest(
        name="event-channel", kind="autocomplete", task_type="multiclass_classification", entity_table="events",
        target_col="channel"),
    "user-vip": TaskManifest(
        name="user-vip", kind="external", task_type="binary_classification", entity_table="users",
        entity_col="user_id", target_col="vip", time_col="timestamp"),
}


def vip_labels(users, seed=1):
    """Shipped labels of the external task: users signed up by each time, split by the dataset's timestamps."""
    rng = np.random.default_rng(seed)
    times = {"train": ["2023-06-01", "2023-07-01", "2023-08-01", "2023-09-01"], "val": [VAL], "test": [TEST]}
    out = {}
    for split, stamps in times.items():
        rows = [(pd.Timestamp(t), u) for t in stamps for u in users.loc[users["signup_time"] <= t, "user_id"]]
        df = pd.DataFrame(rows, columns=["timestamp", "user_id"])
        df["vip"] = rng.integers(0, 2, len(df))
        out[split] = df
    return out


def write_folder(root, tasks=tuple(TASKS), tables=None):
    """A RelBench 3 folder written with RelBench's own manifest classes."""
    frames = tables or shop()
    for name, df in frames.items():
        (root / "db").mkdir(parents=True, exist_ok=True)
        df.to_parquet(root / "db" / f"{name}.parquet", index=False)
    DatasetManifest(name="rel-shop", val_timestamp=VAL, test_timestamp=TEST, tables={
        "users": TableSpec(pkey="user_id", time_col="signup_time"),
        "items": TableSpec(pkey="item_id"),
        "events": TableSpec(pkey="event_id", time_col="event_time",
                            fkeys={"user_id": "users", "item_id": "items"}),
    }).save(root / "manifest.yaml")
    for name in tasks:
        TASKS[name].save(root / "tasks" / name / "manifest.yaml")
        if TASKS[name].kind == "external":
            for split, df in vip_labels(frames["users"]).items():
                df.to_parquet(root / "tasks" / name / f"{split}.parquet", index=False)
    return root


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("relbench3")
    src = write_folder(root / "rel-shop")
    report = import_database(src, root / "out")
    return src, root / "out", report, Database.load(root / "out")


def relbench_table(src, name, split):
    ds = relbench.load_dataset(src)
    task = ds.load_task(name, regenerate=TASKS[name].kind == "forecast")
    return task.get_table(split, mask_input_cols=False).df


def by_key(df):
    return df.sort_values(["cutoff", "entity"], kind="stable").reset_index(drop=True)


def test_tables_keys_and_time_columns_come_from_the_manifest(imported):
    _, out, report, db = imported
    assert report.kind == "relbench3" and db.schema.name == "rel-shop"
    events = db.schema.table("events")
    assert events.primary_key == "event_id" and events.time_column == "event_time"
    assert {c.name: c.link_to for c in events.foreign_keys} == {"user_id": "users.user_id",
                                                               "item_id": "items.item_id"}
    assert db.schema.table("items").time_column is None and db.schema.table("users").time_column == "signup_time"
    assert not any(c.inferred for t in db.schema.tables for c in t.columns)
    assert (db.tables["users"]["user_id"].to_numpy() == np.arange(60)).all()  # RelBench's ids, kept
    assert db.schema.table("events").column("channel").dtype == "category"
    assert set(report.tasks) == set(TASKS)
    assert all(report.tasks[t][s] > 0 for t in TASKS for s in SPLITS)
    assert "task user-churn: train" in report.format()


def test_forecast_task_file(imported):
    src, out, _, _ = imported
    text = (out / "tasks" / "user-churn.yaml").read_text()
    raw = yaml.safe_load(text)
    verbatim = TaskManifest.load(src / "tasks" / "user-churn" / "manifest.yaml").sql
    assert raw["kind"] == "entity_window" and raw["task_type"] == "binary" and raw["sql"] == verbatim
    assert "\n" in verbatim and "\nsql: |" in text  # the SQL as a block a person can read and edit, not one escaped line
    assert raw["window"] == "14 days" and raw["metrics"][0] == "roc_auc"
    assert raw["output"] == {"entity": "user_id", "cutoff": "timestamp", "label": "churn"}
    assert raw["timestamps"] == {"val": VAL, "test": TEST, "rule": "relbench", "num_eval_timestamps": 2}
    spend = yaml.safe_load((out / "tasks" / "user-spend.yaml").read_text())
    assert spend["metrics"] == ["nmae", "mae", "rmse"] and spend["remove_columns"] == [["users", "lifetime_value"]]
    items = yaml.safe_load((out / "tasks" / "user-items.yaml").read_text())
    assert items["kind"] == "recommendation" and items["eval_k"] == 5 and items["metrics"][0] == "map"


@pytest.mark.parametrize("name", ["user-churn", "user-spend"])
def test_forecast_labels_equal_relbench(imported, name):
    src, out, _, db = imported
    task = materialize(find_task(str(out), name), db)
    tm = TASKS[name]
    for split in SPLITS:
        theirs = relbench_table(src, name, split)
        theirs = pd.DataFrame({"entity": theirs[tm.entity_col].astype("int64"),
                               "cutoff": theirs[tm.time_col].astype("datetime64[ns]"),
                               "label": theirs[tm.target_col].astype("float64")})
        ours = task.split(split)[["entity", "cutoff", "label"]].astype({"entity": "int64", "label": "float64"})
        pd.testing.assert_frame_equal(by_key(ours), by_key(theirs), check_exact=False, obj=f"{name} {split}")
    assert task.split("val")["cutoff"].nunique() == (2 if name == "user-churn" else 1)
    if name == "user-churn":  # users who join after test and are active by the second test cutoff: both drop them
        users, events = db.tables["users"], db.tables["events"]
        known = int((users["signup_time"] <= pd.Timestamp(TEST)).sum())
        second = task.split("test")["cutoff"].max()
        late = events[(events["user_id"] >= known) & (events["event_time"] <= second)
                      & (events["event_time"] > second - pd.Timedelta(tm.timedelta))]
        assert len(late) and task.split("test")["entity"].max() < known


def test_recommendation_labels_equal_relbench(imported):
    src, out, _, db = imported
    task = materialize(find_task(str(out), "user-items"), db)
    item_ids = db.tables["items"]["item_id"].to_numpy()
    for split in SPLITS:
        theirs = relbench_table(src, "user-items", split)
        theirs = {(int(u), pd.Timestamp(t)): set(map(int, items))
                  for u, t, items in zip(theirs["user_id"], theirs["timestamp"], theirs["item_id"])}
        ours = {(int(u), pd.Timestamp(t)): set(map(int, item_ids[rows]))
                for u, t, rows in zip(*(task.split(split)[c] for c in ("entity", "cutoff", "label")))}
        assert ours == theirs, split


def test_autocomplete_labels_equal_relbench(imported):
    src, out, _, db = imported
    task = materialize(find_task(str(out), "event-channel"), db)
    tables = {s: relbench_table(src, "event-channel", s) for s in SPLITS}
    classes = np.unique(pd.concat([t["channel"] for t in tables.values()]))  # fourdb codes index the sorted classes
    for split, theirs in tables.items():
        theirs = pd.DataFrame({"entity": theirs["event_id"].astype("int64"),
                               "cutoff": theirs["event_time"].astype("datetime64[ns]"), "label": theirs["channel"]})
        ours = task.split(split)[["entity", "cutoff", "label"]].astype({"entity": "int64"})
        ours["label"] = classes[ours["label"].to_numpy()]
        pd.testing.assert_frame_equal(by_key(ours), by_key(theirs), obj=split)
    seen = task.input_database(db)
    assert "channel" not in seen.schema.table("events").column_names and "channel" not in seen.tables["events"]


def test_external_labels_are_the_shipped_ones(imported):
    src, out, _, db = imported
    task = materialize(find_task(str(out), "user-vip"), db)
    samples = db.tables[task.spec.entity_table].set_index("sample_id")["user_id"]
    assert task.spec.metrics[0] == "roc_auc"
    for split in SPLITS:
        theirs = relbench_table(src, "user-vip", split)
        theirs = pd.DataFrame({"entity": theirs["user_id"].astype("int64"),
                               "cutoff": theirs["timestamp"].astype("datetime64[ns]"),
                               "label": theirs["vip"].astype("int64")})
        ours = task.split(split)
        ours = pd.DataFrame({"entity": samples.loc[ours["entity"]].to_numpy().astype("int64"),
                             "cutoff": ours["cutoff"], "label": ours["label"].astype("int64")})
        pd.testing.assert_frame_equal(by_key(ours), by_key(theirs), obj=split)


def test_removed_columns_reach_no_model(imported):
    _, out, _, db = imported
    task = materialize(find_task(str(out), "user-spend"), db)
    seen = task.input_database(db)
    assert "lifetime_value" not in seen.schema.table("users").column_names
    assert "lifetime_value" not in seen.tables["users"].columns
    splits = {s: task.split(s) for s in SPLITS}
    features = build_table_features("single_table", seen, task, splits)["train"]
    names = features.numeric_names + features.categorical_names + features.datetime_names
    assert any("country" in n for n in names) and not any("lifetime_value" in n for n in names)
    # the same feature set over the full database would show it: the check above is not vacuous
    full = build_table_features("single_table", db, task, splits)["train"]
    assert any("lifetime_value" in n for n in full.numeric_names)


def test_autocomplete_on_a_table_without_a_key(tmp_path):
    """RelBench keys such a table by row position (``primary_key``); fourdb gets the same key."""
    src = write_folder(tmp_path / "rel-shop", tasks=("event-channel",))
    _edit_yaml(src / "manifest.yaml", lambda m: m["tables"]["events"].__setitem__("pkey", None))
    report = import_database(src, tmp_path / "out")
    assert any("'primary_key'" in n for n in report.notes)
    db = Database.load(tmp_path / "out")
    task = materialize(find_task(str(tmp_path / "out"), "event-channel"), db)
    for split in SPLITS:
        theirs = relbench_table(src, "event-channel", split)
        assert sorted(theirs["primary_key"]) == sorted(task.split(split)["entity"]), split


def test_cli_import(tmp_path, capsys):
    from fourdb.cli import main

    src = write_folder(tmp_path / "rel-shop", tasks=("user-churn",))
    assert main(["import", str(src), "--out", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "(relbench3)" in text and "task user-churn: train " in text


def test_unsupported_tasks_are_notes(tmp_path):
    src = write_folder(tmp_path / "rel-shop", tasks=("user-churn",))
    TaskManifest(name="user-tags", kind="forecast", task_type="multilabel_classification", entity_table="users",
                 entity_col="user_id", target_col="tags", time_col="timestamp", timedelta="14 days",
                 sql="SELECT timestamp, 0 AS user_id, [1] AS tags FROM timestamps").save(
        src / "tasks" / "user-tags" / "manifest.yaml")
    TaskManifest(name="user-links", kind="external", task_type="recommendation", src_entity_table="users",
                 src_entity_col="user_id", dst_entity_table="items", dst_entity_col="item_id",
                 eval_k=5).save(src / "tasks" / "user-links" / "manifest.yaml")
    report = import_database(src, tmp_path / "out")
    assert set(report.tasks) == {"user-churn"}
    text = "\n".join(report.notes)
    assert "'user-tags' not converted: multilabel" in text and "'user-links' not converted" in text


# ---- malformed manifests: one line naming the file and the field -----------------------------------------
def _edit_yaml(path, change):
    raw = yaml.safe_load(path.read_text())
    change(raw)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _task_field(field, value):
    return lambda src: _edit_yaml(src / "tasks" / "user-churn" / "manifest.yaml",
                                  lambda raw: raw.__setitem__(field, value))


MALFORMED = {
    "pkey not in parquet": (
        lambda src: _edit_yaml(src / "manifest.yaml", lambda m: m["tables"]["users"].__setitem__("pkey", "uid")),
        "manifest.yaml, tables.users.pkey: column 'uid' is not in db/users.parquet"),
    "fkey to unknown table": (
        lambda src: _edit_yaml(src / "manifest.yaml",
                               lambda m: m["tables"]["events"]["fkeys"].__setitem__("user_id", "people")),
        "manifest.yaml, tables.events.fkeys.user_id: points to unknown table 'people'"),
    "unknown kind": (_task_field("kind", "predict"),
                     "user-churn/manifest.yaml, kind: 'predict' is not one of forecast, autocomplete, external"),
    "missing required field": (_task_field("sql", None),
                               "user-churn/manifest.yaml: a forecast binary_classification task needs field(s) sql"),
    "missing time_col": (_task_field("time_col", ""), "task needs field(s) time_col"),
    "sql error": (_task_field("sql", CHURN_SQL.replace("u.user_id,", "u.no_such_column,")),
                  "user-churn/manifest.yaml, sql: the SQL failed: Binder Error"),
    "sql output": (_task_field("target_col", "is_churn"),
                   "user-churn/manifest.yaml, target_col: the SQL returns no column 'is_churn'"),
    "bad timedelta": (_task_field("timedelta", "a fortnight"), "user-churn/manifest.yaml, timedelta: 'a fortnight'"),
    "task yaml": (lambda src: (src / "tasks" / "user-churn" / "manifest.yaml").write_text("name: [user-churn\n"),
                  "user-churn/manifest.yaml: not valid YAML"),
    "dataset yaml": (lambda src: (src / "manifest.yaml").write_text("name: rel-shop\ntables: {users: [\n"),
                     "rel-shop/manifest.yaml: not valid YAML"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_manifest_is_one_line(tmp_path, case):
    break_it, message = MALFORMED[case]
    src = write_folder(tmp_path / "rel-shop", tasks=("user-churn",))
    break_it(src)
    with pytest.raises(DatabaseImportError) as e:
        import_database(src, tmp_path / "out")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


# -- a RelBench dataset by name: fetched with RelBench's own loader ------------------------------------------

def test_a_dataset_fetched_by_relbenchs_loader_imports_as_its_folder_does(imported, tmp_path):
    """``relbench:<spec>`` goes through ``relbench.load_dataset`` (a name, a Hub path or, as here, offline, a
    local folder) and its task list; the result equals importing the folder itself, from any directory."""
    import subprocess
    import sys

    src, direct, _, db = imported
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "import", f"relbench:{src}", "--out", str(tmp_path / "db")],
                       cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    fetched = Database.load(tmp_path / "db")
    assert fetched.schema.name == "rel-shop"
    assert sorted(t.name for t in fetched.schema.tables) == sorted(t.name for t in db.schema.tables)
    for t in db.schema.tables:
        pd.testing.assert_frame_equal(fetched.tables[t.name], db.tables[t.name])
    assert sorted(f.name for f in (tmp_path / "db" / "tasks").iterdir()) == sorted(f.name for f in (direct / "tasks").iterdir())
    assert not list(tmp_path.glob(".relbench-*"))  # the staging folder is gone


def test_a_relbench_name_without_a_network_is_one_line(tmp_path):
    import os
    import subprocess
    import sys

    import socket

    try:  # where the Hub is reachable, only the client's own offline mode can stand for no network
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        modes = ("1",)
    except OSError:
        modes = ("1", "0")
    for offline in modes:  # the Hub client told it is offline, or finding out
        p = subprocess.run([sys.executable, "-m", "fourdb.cli", "import", "rel-f1", "--out", str(tmp_path / "f1")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "HF_HUB_OFFLINE": offline})
        out = (p.stdout + p.stderr).strip()
        assert p.returncode == 2 and out.count("\n") == 0, out
        assert out.startswith("error: rel-f1: not a local file or folder, and RelBench's loader could not fetch it"), out
        assert not (tmp_path / "f1").exists() and not list(tmp_path.glob(".relbench-*"))
