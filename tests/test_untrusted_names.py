"""A name is text, never a path or SQL; a file is plain data; a task's cutoffs are bounded (issue #44).

Hostile schemas, task files and folder names are made here, as an attacker would write them, and run through
the real command line (validate, describe, export-dataset, run): each ends in one ``error:`` line (exit 2, no
traceback) or is neutralised, within a timeout, writes nothing outside its output folder and shows no secret.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fourdb.errors import FourdbError
from fourdb.rdb import Database
from fourdb.tasks import find_task, materialize
from test_trust import GOOD_SQL, write_shop, write_task

SECRET_VAR = "FOURDB_TEST_SECRET"
SECRET = "hunter2-never-shown"
QUICK = 60  # seconds any one hostile command may take (a bomb or a runaway cutoff grid would take hours)


def cli(*args, cwd, timeout=QUICK):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "FOURDB_QUERY_SECONDS": "20", SECRET_VAR: SECRET}
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", *args], cwd=cwd, capture_output=True, text=True,
                       env=env, timeout=timeout)
    p.seconds = time.monotonic() - start
    return p


def one_error(p, *words) -> str:
    """The command ended in exactly one ``error:`` line (exit 2, no traceback) holding ``words`` (on stderr, or on
    stdout where ``validate`` reports a task among the others)."""
    errors = [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1, (p.returncode, p.stdout[-2000:], p.stderr[-3000:])
    assert "Traceback" not in p.stdout + p.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def no_secret(p, *roots):
    """No secret in the output, nor in the name of anything created under ``roots``."""
    assert SECRET not in p.stdout + p.stderr
    for root in roots:
        assert not [q for q in Path(root).rglob("*") if SECRET in str(q)]


def bomb(levels: int = 11) -> str:
    """YAML flow text for a value that expands to 9**levels items through aliases: about 2 KB on disk."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x]"]
    parts += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


@pytest.fixture
def shop(tmp_path):
    folder = write_shop(tmp_path / "db")
    write_task(folder)
    return folder


def edit_schema(folder: Path, change) -> None:
    raw = yaml.safe_load((folder / "schema.yaml").read_text())
    change(raw)
    (folder / "schema.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


def rename_table(raw: dict, old: str, new: str) -> None:
    for t in raw["tables"]:
        if t["name"] == old:
            t["name"] = new
        for c in t["columns"]:
            if c.get("link_to", "").startswith(old + "."):
                c["link_to"] = new + c["link_to"][len(old):]


# ------------------------------------------------------------------------------------------- bombs in files

def test_an_alias_bomb_in_a_schema_ends_in_one_line(shop, tmp_path):
    text = (shop / "schema.yaml").read_text().replace("name: shop", f"name: {bomb()}", 1)
    (shop / "schema.yaml").write_text(text)
    assert len(text) < 4000
    for args in (["validate", str(shop)], ["describe", str(shop), "--out", str(tmp_path / "d")],
                 ["export-dataset", str(shop), "--out", str(tmp_path / "x")]):
        p = cli(*args, cwd=tmp_path)
        one_error(p, "schema.yaml", "alias")
        assert p.seconds < QUICK


def test_an_alias_bomb_in_a_task_ends_in_one_line(shop, tmp_path):
    path = shop / "tasks" / "buys.yaml"
    path.write_text(path.read_text() + f"description: {bomb()}\n")
    one_error(cli("validate", str(shop), cwd=tmp_path), "buys.yaml", "alias")
    one_error(cli("run", f"dataset={shop}", "task=buys", "model=prior", cwd=tmp_path), "buys.yaml", "alias")
    assert not list(tmp_path.glob("outputs/*/record.json"))


def test_a_task_nested_past_the_bound_ends_in_one_line(shop, tmp_path):
    path = shop / "tasks" / "buys.yaml"
    path.write_text(path.read_text() + "description: " + "[" * 5000 + "]" * 5000 + "\n")
    one_error(cli("validate", str(shop), cwd=tmp_path), "buys.yaml")


# ------------------------------------------------------------------------------------------ names are text

@pytest.mark.parametrize("where", ["table", "column", "source", "schema"])
def test_a_control_character_in_a_name_ends_in_one_line(shop, tmp_path, where):
    def change(raw):
        users = raw["tables"][0]
        if where == "table":
            rename_table(raw, "users", "us\x00ers")
        elif where == "column":
            users["columns"][2]["name"] = "coun\x00try"
        elif where == "source":
            users["source"] = "users.parquet\x00.csv"
        else:
            raw["name"] = "shop\x1b[2J"
    edit_schema(shop, change)
    err = one_error(cli("validate", str(shop), cwd=tmp_path), "schema.yaml", "control character")
    assert "\x00" not in err and "\x1b" not in err


@pytest.mark.parametrize("name", ["ABS/pwned", "../../../pwned", "..", ".pwned", "a\\pwned", "x/../../pwned"])
def test_a_task_name_never_becomes_a_path_in_export(shop, tmp_path, name):
    target = tmp_path / "elsewhere" / "pwned"
    name = name.replace("ABS/pwned", str(target))
    path = shop / "tasks" / "buys.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["name"] = name
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "deep" / "er" / "out"
    p = cli("export-dataset", str(shop), "--out", str(out), cwd=tmp_path)
    one_error(p, "buys.yaml", "task name", "not allowed")
    assert not target.parent.exists() and not list(tmp_path.rglob("*pwned*")) and not out.exists()


@pytest.mark.parametrize("name", ["../../../pwned", "ABS/pwned", "..", "db\\pwned", ".pwned"])
def test_a_table_name_never_becomes_a_path_in_export(shop, tmp_path, name):
    target = tmp_path / "elsewhere" / "pwned"
    edit_schema(shop, lambda raw: rename_table(raw, "orders", name.replace("ABS/pwned", str(target))))
    out = tmp_path / "deep" / "er" / "out"
    p = cli("export-dataset", str(shop), "--out", str(out), "--tasks", "buys", cwd=tmp_path)
    one_error(p, "table name", "not allowed")
    assert not target.parent.exists() and not list(tmp_path.rglob("*pwned*")) and not out.exists()


def test_odd_but_plain_names_still_export(shop, tmp_path):
    """A name is text: quotes, spaces, brackets and SQL in a table's or a task's name are kept, and written."""
    table = "o'rders; DROP TABLE users --[x]"
    edit_schema(shop, lambda raw: rename_table(raw, "orders", table))
    sql = GOOD_SQL.replace("LEFT JOIN orders o", 'LEFT JOIN "o\'rders; DROP TABLE users --[x]" o')
    write_task(shop, sql, name="buys ${" + SECRET_VAR + "} 'x'")
    out = tmp_path / "out"
    p = cli("export-dataset", str(shop), "--out", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (out / "db" / f"{table}.parquet").is_file()
    assert (out / "tasks" / ("buys ${" + SECRET_VAR + "} 'x'") / "train.parquet").is_file()
    no_secret(p, tmp_path)


def test_a_schema_name_never_becomes_a_path_in_describe(shop, tmp_path):
    target = tmp_path / "elsewhere" / "pwned"
    target.parent.mkdir()
    for i, name in enumerate((str(target), "../../pwned", "$\\frac{a}{b}$ <b>", f"${{oc.env:{SECRET_VAR}}}")):
        edit_schema(shop, lambda raw: raw.update(name=name))
        out = tmp_path / f"out{i}"
        p = cli("describe", str(shop), "--out", str(out), cwd=tmp_path)
        assert p.returncode in (0, 2) and "Traceback" not in p.stderr, p.stderr[-3000:]
        if p.returncode == 2:
            one_error(p)
        else:
            made = sorted(out.iterdir())
            assert [q.suffix for q in made] == [".png", ".svg"], made
        assert not list(tmp_path.rglob("pwned*")), list(tmp_path.rglob("pwned*"))
        no_secret(p, tmp_path)


# ------------------------------------------------------------------------------ folder names are not Hydra

@pytest.mark.parametrize("leaf", [f"${{oc.env:{SECRET_VAR}}}", f"a,b[c]'d\"e ${{oc.env:{SECRET_VAR},x}}\\",
                                  "${dataset.path}", "shop=1 ~x +y"])
def test_a_folder_name_is_not_interpolated_by_run(tmp_path, leaf):
    parent = tmp_path / f"p${{oc.env:{SECRET_VAR}}}"
    folder = write_shop(parent / leaf, n_users=40, n_orders=600)
    write_task(folder)
    p = cli("run", "dataset=.", "task=buys", "model=prior", cwd=folder, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    no_secret(p, folder)
    records = list((folder / "outputs").glob("*/record.json"))
    assert len(records) == 1, list(folder.rglob("*"))
    p = cli("run", f"dataset={folder}", "task=buys", "model=prior", cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    no_secret(p, tmp_path)


# -------------------------------------------------------------------------------------- cutoffs are bounded

@pytest.mark.parametrize("step", ["1 second", "1 microsecond", "1 us"])
def test_cutoffs_are_bounded_per_split(shop, tmp_path, step):
    write_task(shop, timestamps={"start": "2021-03-01", "val": "2021-09-01", "test": "2021-10-15",
                                 "end": "2021-11-20", "step": step})
    err = one_error(cli("validate", str(shop), cwd=tmp_path), "buys", "cutoffs", "FOURDB_MAX_CUTOFFS")
    assert "val" in err or "test" in err or "train" in err


def test_relbench_cutoffs_are_bounded(shop, tmp_path):
    write_task(shop, window="1 second", timestamps={"val": "2021-09-01", "test": "2021-10-15", "rule": "relbench"})
    one_error(cli("validate", str(shop), cwd=tmp_path), "buys", "cutoffs", "FOURDB_MAX_CUTOFFS")


def test_train_cutoffs_keep_their_own_cap(shop):
    write_task(shop, timestamps={"val": "2021-09-01", "test": "2021-10-15", "end": "2021-11-20", "step": "1 day",
                                 "max_train_cutoffs": 5})
    task = materialize(find_task(str(shop), "buys"), Database.load(shop))
    assert task.split("train")["cutoff"].nunique() == 5


# ------------------------------------------------------------------------------ malformed values, one line

@pytest.mark.parametrize("when", ["9999-01-01", "0001-01-01", "2300-01-01"])
def test_a_timestamp_out_of_range_in_a_task_ends_in_one_line(shop, tmp_path, when):
    write_task(shop, timestamps={"val": "2021-09-01", "test": "2021-10-15", "end": when})
    one_error(cli("validate", str(shop), cwd=tmp_path), "buys", "timestamps.end")


def test_a_timestamp_out_of_range_in_the_data_ends_in_one_line(shop, tmp_path):
    users = pd.read_parquet(shop / "users.parquet")
    users["signup"] = users["signup"].astype("datetime64[us]")
    users.loc[3, "signup"] = pd.Timestamp("9999-01-01").as_unit("us")
    users.to_parquet(shop / "users.parquet")
    p = cli("validate", str(shop), cwd=tmp_path)
    one_error(p, "users", "signup")


@pytest.mark.parametrize("label", ["[1, 2]", "{'a': 1}", "'text'", "DATE '2021-01-01'", "[1, 2]::INTEGER[]"])
@pytest.mark.parametrize("task_type", ["binary", "regression", "multiclass"])
def test_a_label_of_the_wrong_shape_ends_in_one_line(shop, tmp_path, label, task_type):
    sql = GOOD_SQL.replace("CAST(count(o.order_id) > 0 AS INTEGER) AS label", f"{label} AS label")
    write_task(shop, sql, task_type=task_type)
    try:
        materialize(find_task(str(shop), "buys"), Database.load(shop))
    except FourdbError as e:
        message = str(e)
        assert "\n" not in message and "buys" in message and "label" in message, message


def test_the_cutoff_bound_is_a_setting(shop, monkeypatch):
    """Each split's cutoffs are counted against FOURDB_MAX_CUTOFFS before any is made; the split is named."""
    write_task(shop, timestamps={"start": "2021-07-30", "val": "2021-09-01", "test": "2021-10-15",
                                 "end": "2021-11-20", "step": "1 hour"})
    spec, db = find_task(str(shop), "buys"), Database.load(shop)
    monkeypatch.setenv("FOURDB_MAX_CUTOFFS", "300")
    with pytest.raises(FourdbError, match=r"task 'buys': the val split would have 337 cutoffs, over the bound of 300 "
                                          r"per split \(FOURDB_MAX_CUTOFFS"):
        materialize(spec, db)
    monkeypatch.setenv("FOURDB_MAX_CUTOFFS", "400")
    assert materialize(spec, db).split("val")["cutoff"].nunique() == 337


def test_a_time_out_of_range_from_task_sql_ends_in_one_line(shop, tmp_path):
    sql = GOOD_SQL.replace("c.cutoff, CAST", "TIMESTAMP '9999-12-31' AS cutoff, CAST").replace(
        "GROUP BY u.user_id, c.cutoff", "GROUP BY u.user_id")
    write_task(shop, sql)
    one_error(cli("validate", str(shop), cwd=tmp_path), "buys", "cutoff")


def test_a_list_label_ends_in_one_line_on_run(shop, tmp_path):
    write_task(shop, GOOD_SQL.replace("CAST(count(o.order_id) > 0 AS INTEGER) AS label", "[1, 2] AS label"))
    one_error(cli("run", f"dataset={shop}", "task=buys", "model=prior", cwd=tmp_path), "task 'buys'", "a list")
