"""Leaderboards: schema, locked atomic submission, external predictions, render and show."""
import copy
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import config
from fourdb.errors import FourdbError
from fourdb.leaderboard import RecordError, config_hash, read_board, submit_records, submit_run_dirs, validate_record
from fourdb.leaderboard.external import external_record, load_test_split
from fourdb.leaderboard.render import DUCKDB_SQL, render, show
from fourdb.leaderboard.render.uncertainty import interval_text, row_interval
from fourdb.leaderboard.boards import board_path
from fourdb.tasks import TASKS_DIR, find_task
from fourdb.untrusted import markdown_text


def row(*cells) -> str:
    """The start of a rendered board row: every cell escaped as the renderer escapes record text."""
    return "| " + " | ".join(markdown_text(c) for c in cells) + " |"

SMALL = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "trainer.progress=false"]
REPO = Path(__file__).resolve().parents[1]
ALL = "train all / val all seeds"  # the budget of runs that set neither max_train_seeds nor max_val_seeds


def fourdb(*args, cwd, env=None):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([sys.executable, "-m", "fourdb.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def base_record():
    """One real run record (GBDT on the small synthetic shop)."""
    from fourdb.experiment.run import run_experiment

    cfg = config(*SMALL, "model=gbdt")
    return json.loads(json.dumps(run_experiment(cfg), default=str))


def variant(record, seed, model=None, test=None, val=None):
    """``record`` as another seed or model; ``test`` sets its test metric and, unless ``val`` says otherwise,
    its validation metric alike (validation is what ranks a board)."""
    r = copy.deepcopy(record)
    r["seed"] = r["config"]["seed"] = seed
    r["git_dirty"] = False  # rendered tables mark dirty records; keep them independent of this checkout's state
    if model:
        r["model"] = r["config"]["model"]["name"] = model
    if test is not None:
        r["metrics"]["test"][r["metric"]] = test
    if val is not None or test is not None:
        r["metrics"]["val"][r["metric"]] = test if val is None else val
    return r


def submit(root, *records, **kw):
    return submit_records([(f"record {i}", r) for i, r in enumerate(records)], root, **kw)


def task_record(record, dataset, task, model, test, seed=0, **extra):
    """A record of ``model`` on another task, on the dataset's default parameters."""
    spec = find_task(dataset, task)
    r = variant(record, seed, model=model)
    r.update(dataset=dataset, task=task, task_spec_hash=spec.spec_hash, task_type=spec.task_type, metric=spec.metric,
             metrics={"val": {spec.metric: test}, "test": {spec.metric: test}}, **extra)
    r["config"]["dataset"] = {"name": dataset, "params": {}}
    r["config"]["task"] = task
    r.pop("database_fingerprint")
    return r


# ---- schema -------------------------------------------------------------------------------------


def test_schema_errors_are_one_line_and_name_the_field(base_record):
    assert validate_record(base_record) is base_record
    cases = [
        ({"seed": None}, "field 'seed' must be integer"),
        ({"seed": True}, "field 'seed' must be integer"),
        ({"record_version": 99}, "record_version 99 is not supported"),
        ({"task_type": "ranking"}, "task_type must be one of"),
        ({"metric": "f2"}, "unknown metric 'f2'"),
        ({"metrics": {"val": {"auroc": 0.5}}}, "metrics.test.auroc is missing"),
        ({"metrics": {"test": {"auroc": "0.9"}}}, "metrics.test.auroc must be a number"),
        ({"wall_seconds": None}, "allowed only for external"),
    ]
    for change, message in cases:
        bad = {**base_record, **change}
        with pytest.raises(RecordError, match=message) as e:
            validate_record(bad, "r.json")
        assert "\n" not in str(e.value) and str(e.value).startswith("r.json: ")
    missing = {k: v for k, v in base_record.items() if k != "task_spec_hash"}
    with pytest.raises(RecordError, match="missing field 'task_spec_hash'"):
        validate_record(missing)


# ---- submission ---------------------------------------------------------------------------------


def test_submit_appends_and_refuses_duplicates(tmp_path, base_record):
    result = submit(tmp_path, variant(base_record, 0), variant(base_record, 1))
    path = board_path(tmp_path, "synthetic", "taste")
    assert [r["seed"] for r in read_board(path)] == [0, 1] and len(result.added) == 2
    before = path.read_bytes()
    with pytest.raises(RecordError, match="already on the leaderboard"):
        submit(tmp_path, variant(base_record, 2), variant(base_record, 1))
    assert path.read_bytes() == before  # all or nothing: seed 2 was not added either
    with pytest.raises(RecordError, match="duplicate of record 0 in this submission"):
        submit(tmp_path, variant(base_record, 5), variant(base_record, 5))
    # another config of the same model and seed is a different setting, not a duplicate
    other = variant(base_record, 1)
    other["config"]["max_train_seeds"] = 100
    skipped = submit(tmp_path, other, variant(base_record, 0), skip_duplicates=True)
    assert len(skipped.added) == 1 and len(skipped.skipped) == 1
    # the seed and display-only keys do not change a setting's config hash
    lines = read_board(path)
    assert lines[0]["config_hash"] == lines[1]["config_hash"] != lines[2]["config_hash"]


def test_stale_task_version_refused(tmp_path, base_record):
    stale = variant(base_record, 0)
    stale["task_spec_hash"] = "0123456789abcdef"
    with pytest.raises(RecordError, match="another version of task synthetic/taste"):
        submit(tmp_path, stale)
    assert not board_path(tmp_path, "synthetic", "taste").exists()
    assert base_record["task_spec_hash"] == find_task("synthetic", "taste").spec_hash


def test_records_scored_on_other_splits_are_not_pooled(tmp_path, base_record):
    """A change to how a task is made can move seeds between splits with the same SQL: the board shows the
    records on the newest record's splits and says how many it leaves out."""
    old = variant(base_record, 0, test=0.99)
    old["num_seeds_available"] = {**old["num_seeds_available"], "train": old["num_seeds_available"]["train"] + 3}
    old["submitted_at"] = "2026-01-01T00:00:00Z"
    submit(tmp_path, old)
    submit(tmp_path, variant(base_record, 1, test=0.5))
    text = show("synthetic", "taste", tmp_path)
    assert "0.99" not in text and "0.5000" in text
    assert "1 record(s) made against an earlier version of this task" in text


def _submitter(root, record, seeds, barrier):
    barrier.wait()
    for s in seeds:
        submit(root, variant(record, s))


def test_eight_concurrent_submitters_lose_no_record(tmp_path, base_record):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(8)
    procs = [ctx.Process(target=_submitter, args=(tmp_path, base_record, range(10 * i, 10 * i + 5), barrier))
             for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8
    seeds = sorted(r["seed"] for r in read_board(board_path(tmp_path, "synthetic", "taste")))
    assert seeds == sorted(10 * i + j for i in range(8) for j in range(5))


def test_submitter_killed_mid_write_leaves_valid_file(tmp_path, base_record):
    path = board_path(tmp_path, "synthetic", "taste")
    submit(tmp_path, *(variant(base_record, s) for s in range(3)))
    before = path.read_bytes()
    rec = tmp_path / "record.json"
    rec.write_text(json.dumps(variant(base_record, 7)))
    # the submitter stalls once its temp file is written, before it is renamed into place
    code = ("import os, sys, time; sync = os.fsync; os.fsync = lambda fd: (time.sleep(60), sync(fd)); "
            "from fourdb.leaderboard import submit_run_dirs; submit_run_dirs([sys.argv[1]], sys.argv[2])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(rec), str(tmp_path)])
    try:
        deadline = time.time() + 60
        while not list(path.parent.glob(f".{path.name}.*.tmp")):  # inside the write: temp file half written
            assert proc.poll() is None and time.time() < deadline, "submitter never reached the write"
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert path.read_bytes() == before and len(read_board(path)) == 3
    # the lock died with the submitter; the next submission goes through and clears the temp file
    submit(tmp_path, variant(base_record, 7))
    assert [r["seed"] for r in read_board(path)] == [0, 1, 2, 7]
    assert not list(path.parent.glob(f".{path.name}.*.tmp"))


def test_submit_finds_a_folder_database_from_any_working_directory(tmp_path, monkeypatch, synthetic_db):
    """A run on a database folder given by a relative path is submitted, shown and scored from a folder that
    has nothing to do with it: the record's absolute path of the folder finds its task, not the cwd."""
    import shutil

    from fourdb.rdb import write_database
    from fourdb.experiment.run import run_experiment

    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = write_database(work / "shop", synthetic_db.schema, synthetic_db.tables)
    (folder / "tasks").mkdir()
    shutil.copy(TASKS_DIR / "synthetic" / "taste.yaml", folder / "tasks" / "taste.yaml")
    monkeypatch.chdir(work)
    record = run_experiment(config("dataset=folder", "dataset.path=shop", "dataset.name=shop", "task=taste",
                                   "model=gbdt", "trainer.progress=false"), "run")
    assert record["config"]["dataset"]["path"] == str(folder.resolve())
    task, test = load_test_split("shop", "taste")
    preds = tmp_path / "preds.csv"
    pd.DataFrame({"entity": test["entity"], "cutoff": test["cutoff"].dt.strftime("%Y-%m-%d %H:%M:%S"),
                  "prediction": 0.5}).to_csv(preds, index=False)
    external = external_record(preds, "coin", "shop", "taste")
    assert external["dataset"] == "shop" and external["config"]["dataset"]["path"] == str(folder.resolve())
    monkeypatch.chdir(elsewhere)
    submit_records([("coin", external)], tmp_path / "lb")
    p = fourdb("leaderboard", "submit", str(work / "run"), "--root", str(tmp_path / "lb"), cwd=elsewhere)
    assert p.returncode == 0, p.stderr
    assert "submitted 1 record(s)" in p.stdout
    text = show("shop", "taste", tmp_path / "lb")
    assert "gbdt" in text and "coin" in text and "earlier version" not in text
    assert find_task(str(folder), "taste").spec_hash in text  # the task file was found, not left unchecked
    # a record names its task; a task file path in its config is not followed
    elsewhere_task = elsewhere / "taste.yaml"
    elsewhere_task.write_text((folder / "tasks" / "taste.yaml").read_text().replace("window: 14 days", "window: 7 days"))
    pointed = json.loads((work / "run" / "record.json").read_text())
    pointed.update(seed=1, task_spec_hash=find_task("shop", str(elsewhere_task)).spec_hash)
    pointed["config"].update(task=str(elsewhere_task), seed=1)
    with pytest.raises(RecordError, match="another version of task shop/taste"):
        submit_records([("pointed", pointed)], tmp_path / "lb")


def test_a_graph_is_named_as_built_when_run_and_when_old_records_are_read(tmp_path, base_record, synthetic_db):
    """r2ne on a database without link tables builds r2n's graph: the run says r2n, and older records that
    say r2ne are read as r2n, so the same work is one row; where link tables exist the two stay apart."""
    import yaml

    from fourdb.experiment.inputs.graph import graph_label
    from fourdb.leaderboard.render.aggregation import aggregate
    from fourdb.leaderboard.store import load_all
    from fourdb.rdb import Database, Schema

    schema = synthetic_db.schema.to_dict()
    schema["tables"] = [t for t in schema["tables"] if t["name"] != "purchases"]  # its one link table
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "schema.yaml").write_text(yaml.safe_dump(schema, sort_keys=False))
    no_links = Database(Schema.load(flat), {})
    assert graph_label(config(*SMALL, "graph=r2ne"), no_links)["graph"] == "r2n"
    assert graph_label(config(*SMALL, "graph=r2ne"), synthetic_db)["graph"] == "r2ne"

    def old_record(dataset, seed, graph, test):
        r = variant(base_record, seed, model="sage", test=test)
        r["dataset"] = dataset
        r["inputs"] = {"graph": graph, "sampler": {"strategy": "recent", "fanouts": [10, 10]}}
        r["config"]["graph"] = {"kind": graph}  # as records said before graph.kind became graph.name
        r["config_hash"] = f"hash of {graph}"  # stored by the code of the time
        if dataset == "flat":
            r["config"]["dataset"] = {"name": "flat", "path": str(flat), "params": {}}
        return r

    root = tmp_path / "lb"
    for dataset in ("flat", "synthetic"):
        lines = [json.dumps(old_record(dataset, 0, "r2ne", 0.8)), json.dumps(old_record(dataset, 1, "r2n", 0.6))]
        board_path(root, dataset, "taste").parent.mkdir(parents=True)
        board_path(root, dataset, "taste").write_text("\n".join(lines) + "\n")
    boards = load_all(root)
    [flat_board] = aggregate(boards[("flat", "taste")])
    assert list(flat_board["frame"]["inputs"]) == ["graph r2n, recent sampler [10, 10]"]
    assert list(flat_board["frame"]["seeds"]) == [2] and flat_board["summaries"][0].test_mean == pytest.approx(0.7)
    # in the average ranks, the run stands for the r2n and the r2ne method alike
    assert [s.methods for s in flat_board["summaries"]] == [["sage (graph r2n)", "sage (graph r2ne)"]]
    [synthetic_board] = aggregate(boards[("synthetic", "taste")])
    assert sorted(synthetic_board["frame"]["inputs"].str[:10]) == ["graph r2n,", "graph r2ne"]
    assert sorted(s.methods[0] for s in synthetic_board["summaries"]) == ["sage (graph r2n)", "sage (graph r2ne)"]
    assert "r2ne" in board_path(root, "flat", "taste").read_text()  # the records themselves are not rewritten


# ---- external predictions -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_keys():
    task, test = load_test_split("synthetic", "taste", {"size": 150})
    frame = pd.DataFrame({"entity": test["entity"], "cutoff": test["cutoff"].dt.strftime("%Y-%m-%d %H:%M:%S"),
                          "prediction": np.random.default_rng(0).random(len(test))})
    return frame, test


def _bad_files(frame):
    extra = pd.concat([frame, frame.iloc[[0]].assign(entity=10**6)])
    nan = frame.copy()
    nan.loc[3, "prediction"] = np.nan
    inf = frame.copy()
    inf["prediction"] = inf["prediction"].astype(object)
    inf.loc[4, "prediction"] = "inf"
    prob = frame.copy()
    prob.loc[5, "prediction"] = 1.7
    return {
        "missing keys": (frame.iloc[:-3], r"3 of \d+ test keys have no prediction"),
        "extra keys": (extra, "1 rows are not test keys of the task .first: line"),
        "nan": (nan, "line 5: prediction is empty, not a finite number"),
        "inf": (inf, "line 6: prediction is 'inf', not a finite number"),
        "probability 1.7": (prob, "line 7: prediction 1.7 is outside \\[0, 1\\]"),
        "wrong column": (frame.rename(columns={"prediction": "score"}), "missing column 'prediction'"),
        "unexpected column": (frame.assign(note="x"), "unexpected column 'note'"),
        "duplicate key": (pd.concat([frame, frame.iloc[[2]]]), "duplicate key .entity=.* at lines 4, "),
        "bad cutoff": (frame.assign(cutoff=["soon"] + list(frame["cutoff"][1:])), "line 2: cutoff 'soon' is not"),
    }


def test_bad_prediction_files_change_nothing(tmp_path, test_keys, base_record):
    frame, _ = test_keys
    submit(tmp_path, variant(base_record, 0))
    path = board_path(tmp_path, "synthetic", "taste")
    before = path.read_bytes()
    for case, (bad, message) in _bad_files(frame).items():
        f = tmp_path / f"{case.replace(' ', '_')}.csv"
        bad.to_csv(f, index=False)
        with pytest.raises(RecordError, match=message) as e:
            external_record(f, "mine", "synthetic", "taste", params={"size": 150})
        assert "\n" not in str(e.value), case
    assert path.read_bytes() == before
    # through the command line: one line on stderr, exit 2, board untouched
    f = tmp_path / "probability_1.7.csv"
    p = fourdb("leaderboard", "submit", "--root", str(tmp_path), "--predictions", str(f), "--method", "mine",
               "--dataset", "synthetic", "--task", "taste", "--dataset-param", "size=150", cwd=tmp_path)
    assert p.returncode == 2 and "outside [0, 1]" in p.stderr and p.stderr.strip().count("\n") == 0, p.stderr
    assert path.read_bytes() == before


def test_external_predictions_are_scored_against_fourdb_labels(tmp_path, test_keys):
    frame, test = test_keys
    shuffled = frame.assign(prediction=test["label"].to_numpy().astype(float)).sample(frac=1, random_state=0)
    f = tmp_path / "oracle.csv"
    shuffled.to_csv(f, index=False)  # row order is free; keys decide
    record = external_record(f, "oracle", "synthetic", "taste", seed=3, params={"size": 150})
    assert record["external"] and record["metrics"]["test"]["auroc"] == 1.0 and record["seed"] == 3
    assert record["num_seeds"]["test"] == len(test)
    submit(tmp_path, record)
    with pytest.raises(RecordError, match="already on the leaderboard"):
        submit(tmp_path, external_record(f, "oracle", "synthetic", "taste", seed=3, params={"size": 150}))


def test_cli_template_and_external_submit(tmp_path):
    out = tmp_path / "keys.csv"
    p = fourdb("leaderboard", "template", "--dataset", "synthetic", "--task", "taste", "--dataset-param", "size=150",
               "--out", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    keys = pd.read_csv(out)
    assert list(keys.columns) == ["entity", "cutoff", "prediction"] and keys["prediction"].isna().all()
    keys["prediction"] = 0.5
    keys.to_csv(out, index=False)
    p = fourdb("leaderboard", "submit", "--predictions", str(out), "--method", "coin", "--dataset", "synthetic",
               "--task", "taste", "--dataset-param", "size=150", cwd=tmp_path,
               env={"FOURDB_LEADERBOARDS": str(tmp_path / "lb")})
    assert p.returncode == 0, p.stderr
    assert "test auroc 0.5000" in p.stdout
    assert "validating" not in p.stderr  # no progress bar when stderr is not a terminal
    [r] = read_board(board_path(tmp_path / "lb", "synthetic", "taste"))
    assert r["model"] == "coin" and r["inputs"] == {"external": True}


# ---- render, show, query ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filled_root(tmp_path_factory, base_record):
    """Boards with known values: gbdt 0.6/0.7/0.8, 'other' 0.9/0.92, and a regression board."""
    root = tmp_path_factory.mktemp("boards")
    recs = [variant(base_record, s, test=v) for s, v in zip(range(3), (0.6, 0.7, 0.8))]
    recs += [variant(base_record, s, model="other", test=v) for s, v in zip(range(2), (0.9, 0.92))]
    spec = find_task("nycflights13", "arrival-delay")
    reg = copy.deepcopy(base_record)
    reg.update(dataset="nycflights13", task="arrival-delay", task_spec_hash=spec.spec_hash, task_type="regression",
               metric="mae", metrics={"val": {"mae": 11.0, "rmse": 20.0}, "test": {"mae": 12.5, "rmse": 21.0}})
    reg["config"]["dataset"] = {"name": "nycflights13", "params": {"max_flights": None}}
    submit(root, *recs, reg)
    return root


def test_render_writes_readme_with_mean_std_ranks_and_plots(filled_root):
    readme = render(filled_root).read_text()
    assert "## synthetic / taste [size=150]" in readme and "## nycflights13 / arrival-delay" in readme
    # records without test-row replicates: each mean's 95% interval resamples its seeds only
    other, gbdt = (interval_text(row_interval(v, [None] * len(v), "auroc")) for v in ([0.9, 0.92], [0.6, 0.7, 0.8]))
    assert other.endswith("†") and gbdt.endswith("†")
    assert row(1, "other", "single_table", 2, "0.9100 ± 0.0141" + other, "leader") in readme
    assert row(2, "gbdt", "single_table", 3, "0.7000 ± 0.1000" + gbdt, "") in readme
    assert markdown_text("12.5000 (1 seed)") in readme and "lower is better" in readme
    assert "## Classification: average rank" in readme and "## Regression: average rank" in readme
    assert ("No task on default dataset parameters to average over. Left out: "
            f"{markdown_text('synthetic/taste [size=150]')}." in readme)  # a table on other dataset parameters is not in the average ranks
    assert "read_json_auto('leaderboards/*/*.jsonl')" in readme
    plots = sorted(p.name for p in (filled_root / "plots").glob("*.png"))
    assert plots == ["nycflights13__arrival-delay__train-all-val-all-seeds.png",
                     "regression_average_rank__train-all-val-all-seeds.png",
                     "synthetic__taste__size-150__train-all-val-all-seeds.png"]
    for name in plots:
        assert f"(plots/{name})" in readme
        assert (filled_root / "plots" / name).read_bytes()[:4] == b"\x89PNG"


def test_average_rank_counts_a_method_once_per_task_across_its_settings(base_record):
    """Per-task settings (sampler fanouts) of one model on one kind of input are one method."""
    from fourdb.leaderboard.render.aggregation import aggregate, average_ranks

    def graph_run(seed, fanouts, test):
        r = variant(base_record, seed, model="sage", test=test)
        r["inputs"] = {"graph": "r2n", "sampler": {"strategy": "recent", "fanouts": fanouts}}
        r["config_hash"] = fanouts
        return r

    gbdt = {**variant(base_record, 0), "config_hash": "gbdt"}
    records = [gbdt, graph_run(0, "[10, 10]", 0.99), graph_run(0, "[5, 20]", 0.01)]
    for r in records:
        r["config"]["dataset"]["params"] = {}  # the default parameters, which average ranks count
    [ranking] = average_ranks(aggregate(records)).values()
    frame = ranking.frame
    assert sorted(frame["method"]) == ["gbdt (single_table)", "sage (graph r2n)"]
    assert frame.set_index("method").loc["sage (graph r2n)", "average rank"] == "1.00"  # its best setting


def test_show_prints_one_board(filled_root, tmp_path):
    p = fourdb("leaderboard", "show", "synthetic", "taste", "--root", str(filled_root), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "synthetic / taste [size=150] (train all / val all seeds)"
    assert "0.9100 ± 0.0141" in p.stdout and "0.7000 ± 0.1000" in p.stdout and "arrival-delay" not in p.stdout
    with pytest.raises(FourdbError, match="no results for synthetic/leak"):
        show("synthetic", "leak", filled_root)


def test_boards_are_queryable_with_duckdb(filled_root):
    import duckdb

    sql = DUCKDB_SQL.replace("leaderboards/", f"{filled_root}/")
    rows = duckdb.sql(sql).fetchall()
    got = {(d, t, m): v for d, t, m, v in rows}
    assert got[("synthetic", "taste", "gbdt")] == pytest.approx(0.7)
    assert got[("synthetic", "taste", "other")] == pytest.approx(0.91)
    assert got[("nycflights13", "arrival-delay", "gbdt")] is None  # a regression board has no auroc


def test_cli_submit_run_folders(tmp_path, base_record):
    sweep = tmp_path / "multirun"
    for s in range(3):
        (sweep / f"{s}_run").mkdir(parents=True)
        (sweep / f"{s}_run" / "record.json").write_text(json.dumps(variant(base_record, s)))
    p = fourdb("leaderboard", "submit", "--root", str(tmp_path / "lb"), str(sweep), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "submitted 3 record(s)" in p.stdout
    again = fourdb("leaderboard", "submit", "--root", str(tmp_path / "lb"), str(sweep / "1_run"), cwd=tmp_path)
    assert again.returncode == 2 and "already on the leaderboard" in again.stderr
    with pytest.raises(RecordError, match="no such run folder"):
        submit_run_dirs([tmp_path / "nothing"], tmp_path / "lb")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordError, match="no record.json in it or below it"):
        submit_run_dirs([tmp_path / "empty"], tmp_path / "lb")


# ---- results that cannot be mixed up ------------------------------------------------------------


def test_record_carries_database_fingerprint_and_git_state(base_record, tmp_path):
    from fourdb.datasets import load_dataset
    from fourdb.rdb import Database, write_database
    from fourdb.rdb.fingerprint import database_fingerprint

    db = load_dataset("synthetic", size=150)
    assert base_record["database_fingerprint"] == database_fingerprint(db)
    assert len(base_record["database_fingerprint"]) == 16
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", ":(top)",
                             ":(top,exclude)leaderboards"], cwd=REPO, capture_output=True, text=True).stdout
    code = [line for line in status.splitlines()
            if not line.startswith("??") or line[3:].startswith(("fourdb/", "conf/", "tasks/"))]
    assert base_record["git_dirty"] is bool(code)
    # another database under the same name: another fingerprint; the same content in memory: its own
    assert database_fingerprint(load_dataset("synthetic", size=160)) != base_record["database_fingerprint"]
    folder = write_database(tmp_path / "shop", db.schema, db.tables)
    before = database_fingerprint(Database.load(folder))
    memory = Database(db.schema, db.tables)
    assert database_fingerprint(memory) == database_fingerprint(Database(db.schema, dict(db.tables)))
    users = db.tables["users"].copy()
    users.loc[0, "age"] = users["age"].max() + 1
    write_database(folder, db.schema, {**db.tables, "users": users})
    assert database_fingerprint(Database.load(folder)) != before
    assert database_fingerprint(Database(db.schema, {**db.tables, "users": users})) != database_fingerprint(memory)


def test_git_dirty_counts_new_source_files_but_not_results_or_ignored_files(tmp_path):
    """A model added as a new file is code the commit does not hold; new results, outputs and ignored files
    are not code."""
    from fourdb.utils import git_state

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    assert git_state(tmp_path) == (None, None)  # not a checkout
    git("init", "-q")
    for name in ("fourdb/model.py", "conf/model/a.yaml", "tasks/d/t.yaml", "leaderboards/d/t.jsonl", ".gitignore"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("*.pyc\n" if name == ".gitignore" else "x\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start")
    commit, dirty = git_state(tmp_path / "fourdb")
    assert len(commit) == 40 and dirty is False
    clean = ["fourdb/cache.pyc", "outputs/run/record.json", "leaderboards/d/new.jsonl", "notes.txt"]
    for name in clean:  # ignored, outside the source folders, or results
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    (tmp_path / "leaderboards/d/t.jsonl").write_text("y\n")
    assert git_state(tmp_path) == (commit, False)
    for name in ("fourdb/models/new_model.py", "conf/model/new.yaml", "tasks/d/new.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
        assert git_state(tmp_path) == (commit, True), name
        (tmp_path / name).unlink()
    (tmp_path / "fourdb/model.py").write_text("changed\n")
    assert git_state(tmp_path) == (commit, True)


def test_databases_that_differ_under_one_name_are_refused(tmp_path, base_record):
    a, b = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
    path = board_path(tmp_path, "synthetic", "taste")
    with pytest.raises(RecordError, match=f"record 1: database 'synthetic \\[size=150\\]' has fingerprint {b}, "
                                          f"but record 0 .*fingerprint {a}.*another dataset.name.*--root") as e:
        submit(tmp_path, {**variant(base_record, 0), "database_fingerprint": a},
               {**variant(base_record, 1), "database_fingerprint": b})
    assert "\n" not in str(e.value) and not path.exists()
    submit(tmp_path, {**variant(base_record, 0), "database_fingerprint": a})
    with pytest.raises(RecordError, match=f"fingerprint {b}, but {path} .*fingerprint {a}"):
        submit(tmp_path, {**variant(base_record, 1), "database_fingerprint": b})
    # the dataset's other boards count too: one name is one database across its tasks
    spec = find_task("synthetic", "purchase-count")
    other_task = {**variant(base_record, 1), "task": "purchase-count", "task_spec_hash": spec.spec_hash,
                  "task_type": "regression", "metric": "mae", "database_fingerprint": b,
                  "metrics": {"test": {"mae": 1.0}}}
    with pytest.raises(RecordError, match=f"fingerprint {b}, but {path}"):
        submit(tmp_path, other_task)
    before = path.read_bytes()
    # other dataset parameters are another database; records without a fingerprint are not compared
    other_size = variant(base_record, 1)
    other_size.update(database_fingerprint=b)
    other_size["config"]["dataset"]["params"]["size"] = 200
    older = {k: v for k, v in variant(base_record, 2).items() if k != "database_fingerprint"}
    submit(tmp_path, other_size, older, {**variant(base_record, 3), "database_fingerprint": a})
    assert path.read_bytes() != before
    assert [r.get("database_fingerprint") for r in read_board(path)] == [a, b, None, a]


def test_dirty_records_are_marked_and_the_readme_names_the_code_versions(tmp_path, base_record):
    clean = [{**variant(base_record, s), "git_commit": "1111111aaaa", "git_dirty": False} for s in range(2)]
    dirty = [{**variant(base_record, s, model="other"), "git_commit": c, "git_dirty": d}
             for s, c, d in ((0, "1111111aaaa", True), (1, "2222222bbbb", False))]
    older = {k: v for k, v in variant(base_record, 2, model="other").items() if k != "git_dirty"}
    older["git_commit"] = None
    submit(tmp_path, *clean, *dirty, older)
    readme = render(tmp_path).read_text()
    assert ("Records from code version(s): `1111111` (3 records, 1 with uncommitted changes), `2222222` (1 record), "
            "unknown commit (1 record).") in readme
    assert row(1, "other*", "single_table", 3) in readme and row(1, "gbdt", "single_table", 2) in readme
    assert "\n\\* made with uncommitted code changes\n" in readme
    text = show("synthetic", "taste", tmp_path)
    assert "other*" in text and "gbdt*" not in text and text.endswith("* made with uncommitted code changes")


def test_average_ranks_leave_out_sanity_tasks_and_rank_over_common_tasks(tmp_path, base_record):
    """A, B and C ran the three tasks; D only two of them. On the sanity task (leak) C would win, and
    D beats everyone where it ran: neither may move the ranks of A, B and C."""
    from fourdb.leaderboard.render import all_tables
    from fourdb.leaderboard.render.aggregation import average_ranks

    taste, fame, late, leak = ("synthetic", "taste"), ("lahman", "hall-of-fame"), ("nycflights13", "late-arrival"), \
        ("synthetic", "leak")
    values = {"A": {taste: 0.9, fame: 0.75, late: 0.9, leak: 0.5},
              "B": {taste: 0.8, fame: 0.7, late: 0.9, leak: 0.6},
              "C": {taste: 0.7, fame: 0.8, late: 0.5, leak: 0.99},
              "D": {taste: 0.95, late: 0.99}}
    records = [task_record(base_record, d, t, m, v) for m, runs in values.items() for (d, t), v in runs.items()]
    records.append(variant(base_record, 0, model="D", test=0.1))  # synthetic/taste [size=150]: another protocol
    records.append(task_record(base_record, "synthetic", "purchase-count", "A", 3.0))
    records.append(task_record(base_record, "synthetic", "purchase-count", "B", 2.0))
    submit(tmp_path, *records)
    ranks = average_ranks(all_tables(tmp_path))
    assert list(ranks) == [("classification", ALL), ("regression", ALL)]
    cls = ranks[("classification", ALL)]
    assert cls.tasks == ["lahman/hall-of-fame", "nycflights13/late-arrival", "synthetic/taste"]
    assert sorted(cls.left_out) == ["synthetic/leak (sanity task)", "synthetic/taste [size=150]"]
    got = [tuple(row) for row in cls.frame[["method", "average rank", "ranks"]].itertuples(index=False)]
    assert got == [
        ("A (single_table)", "1.33", "lahman/hall-of-fame: 2, nycflights13/late-arrival: 1, synthetic/taste: 1"),
        ("B (single_table)", "2.00", "lahman/hall-of-fame: 3, nycflights13/late-arrival: 1, synthetic/taste: 2"),
        ("C (single_table)", "2.33", "lahman/hall-of-fame: 1, nycflights13/late-arrival: 3, synthetic/taste: 3"),
    ]
    assert cls.unranked_lines() == ["D (single_table): not ranked: ran only 2 of the 3 tasks (not lahman/hall-of-fame)"]
    reg = ranks[("regression", ALL)]  # lower MAE is better
    assert [tuple(r) for r in reg.frame[["method", "average rank"]].itertuples(index=False)] == \
        [("B (single_table)", "1.00"), ("A (single_table)", "2.00")]
    readme = render(tmp_path).read_text()
    assert "- " + markdown_text("D (single_table): not ranked: ran only 2 of the 3 tasks (not lahman/hall-of-fame)") \
        in readme
    assert "sanity tasks left out" in readme and "is ranked only if it ran every one of those tasks" in readme
    assert "a sanity task, left out of the average ranks" in readme


def budgeted(record, train, val):
    r = copy.deepcopy(record)
    r["config"]["max_train_seeds"], r["config"]["max_val_seeds"] = train, val
    return r


def test_learning_curves_plot_each_method_across_budgets_and_say_where_the_order_changes(tmp_path, base_record):
    def at(model, train, test, seed):
        r = budgeted(task_record(base_record, "synthetic", "taste", model, test, seed=seed), train, 30)
        r["num_seeds"] = {**r["num_seeds"], "train": train}
        return r

    # A leads on the small budget, B with ten times the seeds; C ran one budget only (no curve)
    records = [at("A", 50, v, s) for s, v in enumerate((0.80, 0.82))] + [at("B", 50, 0.7, 0)]
    records += [at("A", 500, 0.83, 0), at("B", 500, 0.9, 0), at("B", 500, 0.92, 1), at("C", 500, 0.99, 0)]
    submit(tmp_path, *records)
    readme = render(tmp_path).read_text()
    assert "## Learning curves" in readme and "### Classification" in readme
    ma, mb = markdown_text("A (single_table)"), markdown_text("B (single_table)")
    assert f"- synthetic/taste: train 50 / val 30 seeds: {ma} > {mb}; train 500 / val 30 seeds: {mb} > {ma}" in readme
    assert (tmp_path / "plots" / "curve__synthetic__taste.png").stat().st_size > 0
    from fourdb.leaderboard.curves import curve_points
    from fourdb.leaderboard.render import all_tables

    points = curve_points(all_tables(tmp_path))
    assert set(points["method"]) == {"A (single_table)", "B (single_table)"}
    a = points[points["method"] == "A (single_table)"]
    assert list(a["train_seeds"]) == [50, 500] and list(a["test_mean"]) == pytest.approx([0.81, 0.83])
    # a middle budget run for B alone: the swap of A and B between the outer budgets is still reported
    submit(tmp_path, at("B", 200, 0.85, 0))
    readme = render(tmp_path).read_text()
    assert (f"- synthetic/taste: train 50 / val 30 seeds: {ma} > {mb}; train 200 / val 30 seeds: {mb}; train 500 / val "
            f"30 seeds: {mb} > {ma}") in readme


def test_a_budget_is_its_own_board_and_its_own_average_rank(tmp_path, base_record):
    """The same model and inputs at two training budgets are two boards and two rankings, never one row,
    one rank or one average rank."""
    from fourdb.leaderboard.render import all_tables
    from fourdb.leaderboard.render.aggregation import average_ranks

    capped = "train 50 / val 30 seeds"
    records = [task_record(base_record, "synthetic", "taste", "A", v, seed=s) for s, v in enumerate((0.9, 0.8))]
    records += [budgeted(task_record(base_record, "synthetic", "taste", "A", v, seed=s), 50, 30)
                for s, v in enumerate((0.6, 0.5))]
    records += [task_record(base_record, "synthetic", "taste", "B", 0.7)]
    submit(tmp_path, *records)
    tables = all_tables(tmp_path)
    assert [(t["budget"], list(t["frame"]["model"]), list(t["frame"]["rank"])) for t in tables] == \
        [(ALL, ["A", "B"], [1, 2]), (capped, ["A"], [1])]
    assert [t["summaries"][0].test_mean for t in tables] == pytest.approx([0.85, 0.55])  # never pooled to 0.7
    ranks = average_ranks(tables)
    assert list(ranks) == [("classification", ALL), ("classification", capped)]
    assert list(ranks[("classification", capped)].frame["method"]) == ["A (single_table)"]
    readme = render(tmp_path).read_text()
    assert "## synthetic / taste (train all / val all seeds)" in readme
    assert "## synthetic / taste (train 50 / val 30 seeds)" in readme
    assert "## Classification: average rank (train 50 / val 30 seeds)" in readme
    text = show("synthetic", "taste", tmp_path)
    assert [line for line in text.splitlines() if line.startswith("synthetic")] == ["synthetic / taste (train all / val all seeds)",
                                                  "synthetic / taste (train 50 / val 30 seeds)"]


def test_a_row_shows_what_sets_it_apart_its_epochs_certify_verdict_and_commit(tmp_path, base_record):
    def sage(seed, epochs, ran, certify=None, commit="1111111aaaa"):
        r = variant(base_record, seed, model="sage")
        r["inputs"] = {"graph": "r2n", "sampler": {"strategy": "recent", "fanouts": [10, 10]}}
        r["config"]["trainer"]["epochs"] = epochs
        r["history"] = [{"epoch": i + 1, "loss": 1.0} for i in range(ran)]
        r["git_commit"] = commit
        if certify is not None:
            r["certify"] = {"passed": certify, "checks": []}
        return r

    submit(tmp_path, sage(0, 10, 4, certify=True), sage(1, 10, 6, certify=True), sage(0, 20, 20, certify=False),
           sage(1, 20, 20, commit="2222222bbbb"), variant(base_record, 0))
    [t] = aggregate_of(tmp_path)
    patience = base_record["config"]["trainer"]["patience"]
    rows = {(r.model, r.setting): r for r in t["frame"].itertuples()}
    ten, twenty = rows[("sage", "trainer.epochs=10")], rows[("sage", "trainer.epochs=20")]
    # a pass claimed by records with no run folder (so no certify log) to check it against is not shown as passed
    assert (ten.epochs, ten.certify, ten.commit) == (f"4-6 of 10, patience {patience}", "unverified", "1111111")
    assert (ten.verified, rows[("gbdt", "")].verified) == ("no", "no")
    assert (twenty.epochs, twenty.certify, twenty.commit) == \
        (f"20 of 20, patience {patience}", "FAILED 1, not run 1", "1111111, 2222222")
    gbdt = rows[("gbdt", "")]  # one setting of its label: nothing to set apart; no epoch trainer
    assert (gbdt.epochs, gbdt.certify) == ("-", "not run")
    text = show("synthetic", "taste", tmp_path)
    assert "trainer.epochs=20" in text and "FAILED 1, not run 1" in text and "certify" in text
    assert "| trainer.epochs=10 |" in render(tmp_path).read_text()


def aggregate_of(root):
    from fourdb.leaderboard.render import all_tables

    return all_tables(root)


def test_boards_of_several_roots_side_by_side(tmp_path, base_record):
    """A researcher's own root read beside another: rows say which root they come from, share the board's
    ranks, and are never pooled with the other root's rows of the same setting."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    submit(theirs, *(variant(base_record, s, test=v) for s, v in ((0, 0.6), (1, 0.7))))
    submit(mine, variant(base_record, 0, test=0.9), variant(base_record, 0, model="new", test=0.95))
    text = show("synthetic", "taste", [mine, theirs])
    lines = text.splitlines()
    header = lines[3]
    assert "root" in header.split()
    rows = [line.split() for line in lines[4:]]
    assert [(r[0], r[1], r[3]) for r in rows] == [("1", "new", str(mine)), ("2", "gbdt", str(mine)),
                                                 ("3", "gbdt", str(theirs))]
    p = fourdb("leaderboard", "show", "synthetic", "taste", "--root", str(mine), "--root", str(theirs), cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip() == text, p.stderr
    readme = render([mine, theirs]).read_text()
    assert (mine / "README.md").exists() and not (theirs / "README.md").exists()
    assert row(3, "gbdt", "single_table", theirs) in readme
    # the committed boards beside one's own: rows from both, the committed ones labelled so
    p = fourdb("leaderboard", "show", "synthetic", "taste", "--root", str(mine), "--with-committed", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert " committed " in p.stdout and str(mine) in p.stdout and "new" in p.stdout


def test_engine_auto_records_the_mode_that_ran(tmp_path):
    """``engine=auto``: the record's ``engine.mode`` is the mode the cost model chose and training used."""
    from fourdb.experiment.run import run_experiment

    cfg = config(*SMALL, "model=sage", "graph=r2n", "engine=auto", "trainer.epochs=2", "trainer.device=cpu")
    record = run_experiment(cfg)
    engine = record["engine"]
    assert record["inputs"]["engine"]["mode"] == "auto"
    assert engine["mode"] in ("online", "offline") and engine["auto_reason"]
    assert ("store" in engine) == (engine["mode"] == "offline")  # a store exists only if batches were replayed
    assert len(engine["epoch_seconds"]) == len(record["history"])


def test_a_board_shows_its_floor_and_marks_the_models_below_it(tmp_path, base_record):
    """The floor is the best trivial baseline on the board (its rows, or those every run records beside its
    model); a model that does not beat it is marked, in the terminal and in the rendered README."""
    def row(model, test, inputs=None, trivial=None, seed=0):
        r = task_record(base_record, "synthetic", "purchase-count", model, test, seed=seed)
        if inputs:
            r["inputs"] = inputs
        r["trivial"] = trivial or {}
        return r

    labels = {"features": "labels"}
    submit(tmp_path, row("zero", 0.31, labels), row("mean", 0.50, labels), row("sage", 0.35), row("gbdt", 0.30))
    [t] = aggregate_of(tmp_path)
    marks = dict(zip(t["frame"]["model"], t["frame"]["floor"]))
    assert t["floor"] == ("zero", pytest.approx(0.31))
    assert marks == {"gbdt": "", "zero": "", "sage": "below floor", "mean": ""}
    text = show("synthetic", "purchase-count", tmp_path)
    assert "floor: the best trivial baseline, zero, at 0.3100" in text and "below floor" in text
    assert "below floor" in render(tmp_path).read_text()
    # no trivial rows: the ones a run records beside its model set the floor (higher is better here)
    other = tmp_path / "other"
    floor = {"prior": {"test": {"auroc": 0.5}}, "entity_mean": {"test": {"auroc": 0.62}}}
    submit(other, *(task_record(base_record, "synthetic", "taste", m, v, trivial=floor)
                    for m, v in (("sage", 0.85), ("gbdt", 0.6))))
    [t] = aggregate_of(other)
    assert t["floor"] == ("entity_mean", pytest.approx(0.62))
    assert dict(zip(t["frame"]["model"], t["frame"]["floor"])) == {"sage": "", "gbdt": "below floor"}


def load_produce():
    """leaderboards/produce.py as a module (a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("produce", REPO / "leaderboards" / "produce.py")
    produce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(produce)
    return produce


@pytest.mark.parametrize("cell", ["lightgbm:dfs", "gbdt:dfs", "sage:r2n"])
def test_a_committed_full_data_record_reproduces_from_the_code(tmp_path, monkeypatch, cell):
    """A cell of the committed full-data board (every training and validation seed), run again from the
    code with the overrides produce.py ran it with and a cold cache, gives the metrics the board holds: DFS
    cells and a GNN cell, whose sampling, engine pick and training must all repeat (exactly on the kind of
    CPU the record names, within float round-off on another)."""
    from fourdb.experiment.run import run_experiment

    produce = load_produce()
    full = produce.BUDGETS["full"]
    record = next(r for r in produce.cell_runs("synthetic-taste", cell, full) if r["seed"] == 0)
    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path / "cache"))  # no DFS frame or graph made before this run
    monkeypatch.chdir(tmp_path)
    again = run_experiment(config("experiment=synthetic-taste", *produce.overrides(cell), "seed=0",
                                  *produce.budget_overrides(full), *produce.large_budget_overrides(cell),
                                  # the cap it trained under (caps were raised since; patience stopped it first)
                                  f"trainer.epochs={record['config']['trainer']['epochs']}",
                                  "trainer.progress=false"))
    assert config_hash(again) == record["config_hash"]
    # a neural model trained on another kind of CPU (instruction set) rounds differently from its first step:
    # here a loss 2e-9 apart after one epoch and metrics up to 2e-3 apart after early stopping; the trees repeat exactly
    same_cpu = all(record["hardware"].get(k) == again["hardware"][k] for k in ("cpu", "cpu_capability"))
    tolerance = 1e-9 if same_cpu or "graph" not in produce.cell_inputs(cell)[1] else 5e-3
    for split in ("val", "test"):
        assert again["metrics"][split] == pytest.approx(record["metrics"][split], rel=0, abs=tolerance)


def test_a_capped_budget_runs_nothing_on_a_task_whose_training_split_fits_under_its_cap(monkeypatch):
    """30,000 training seeds on a task of 26,770 is the full-data run again: produce.py leaves it to the full
    board (the learning curve's point at that size) and runs the 30k cells of larger tasks only."""
    produce = load_produce()
    sizes = {"small-one": 26770, "edge-one": 30000, "large-one": 273110}
    monkeypatch.setattr(produce, "task_splits", lambda e: {"train": sizes[e], "val": 10, "test": 10})
    monkeypatch.setattr(produce, "headline_cells", lambda e, link: ["gbdt:dfs"])
    monkeypatch.setattr(produce, "done_seeds", lambda e, c, budget: set())
    monkeypatch.setattr(produce, "estimate_s", lambda e, c, budget: 1.0)
    monkeypatch.setattr(produce, "load_status", dict)
    assert produce.large_todo("30k", list(sizes), {}) == [("large-one", "gbdt:dfs")]
    assert produce.large_todo("full", list(sizes), {}) == [(e, "gbdt:dfs") for e in sizes]
    section = "\n".join(produce.large_section("30k", list(sizes), {}, {}))
    assert "Not run on this budget: small-one, edge-one" in section


def test_seeds_a_stopped_pass_finished_reach_the_board_on_the_next_pass(tmp_path, monkeypatch):
    """A pass stopped inside a cell leaves the records of the seeds it finished in the cell's sweep folder:
    the next pass puts them on the board instead of running them again, and leaves off one of another
    budget and one made on other splits than today's task has."""
    produce = load_produce()
    full = produce.BUDGETS["full"]
    cell = "lightgbm:dfs"
    records = sorted(produce.cell_runs("synthetic-taste", cell, full), key=lambda r: r["seed"])
    assert [r["seed"] for r in records] == [0, 1, 2]
    monkeypatch.setattr(produce, "ROOT", tmp_path)
    monkeypatch.delenv("FOURDB_LEADERBOARDS", raising=False)
    board = tmp_path / "leaderboards" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text(json.dumps(records[0]) + "\n")
    sweep = tmp_path / "multirun" / "leaderboard" / "full" / "synthetic-taste" / "lightgbm_dfs"
    other_budget = {**records[2], "config": {**records[2]["config"], "max_train_seeds": 30000}}
    other_splits = {**records[2], "num_seeds_available": {**records[2]["num_seeds_available"], "train": 1}}
    for folder, record in {"0": records[1], "1": other_budget, "2": other_splits}.items():
        (sweep / folder).mkdir(parents=True)  # a folder without its predictions file: submitted unverified
        record = {k: v for k, v in record.items() if k != "predictions"}
        (sweep / folder / "record.json").write_text(json.dumps(record))

    def no_run(*args):
        raise AssertionError("a seed the stopped pass finished was run again")

    monkeypatch.setattr(produce, "run_logged", no_run)
    status = produce.run_cell("synthetic-taste", cell, full, 1, 60, seeds=(0, 1))
    assert status["submitted"] == "already on the board"
    assert sorted(r["seed"] for r in produce.cell_runs("synthetic-taste", cell, full)) == [0, 1]
    assert produce.done_seeds("synthetic-taste", cell, full) == {0, 1}
    monkeypatch.setattr(produce, "headline_cells", lambda e, link: [cell])
    [row] = [line for line in produce.large_section("full", ["synthetic-taste"], {}, {}) if cell in line]
    minutes = f"{records[0]['wall_seconds'] / 60:.1f}"  # no status was written: seed 0's record tells its time
    assert row.startswith(f"| synthetic-taste | {cell} | 2 | {minutes} |") and "pass was stopped" in row


def test_jobs_run_larger_budget_cells_side_by_side_but_one_full_data_dfs_cell_at_a_time(monkeypatch):
    """`--jobs 2` on the full budget runs two cells at once, except DFS cells, each of which holds its
    database's whole feature table (10 to 15 GB): those run one at a time. On a capped budget their table
    is small, and they run side by side too."""
    import types

    produce = load_produce()
    active, most, saved = [], {"dfs": 0}, []
    guard = threading.Lock()

    def fake_run_meeting(meet: str, barrier: threading.Barrier):
        """A cell run that waits at ``barrier`` if its name starts with ``meet``: a test that fails unless two
        such cells run at the same time."""
        def run(e, c, budget_name, jobs):
            assert jobs == 2
            with guard:
                active.append(c)
                most["dfs"] = max(most["dfs"], sum(a.endswith(":dfs") for a in active))
            barrier.wait() if c.startswith(meet) else time.sleep(0.3)
            with guard:
                active.remove(c)
            return {"experiment": e, "cell": c, "rc": 0}
        return run

    monkeypatch.setattr(produce, "large_todo", lambda *a: [("t", "gbdt:dfs"), ("t", "lightgbm:dfs"),
                                                           ("t", "sage:r2n"), ("t", "sage:r2ne")])
    monkeypatch.setattr(produce, "run_large_cell", fake_run_meeting("sage", threading.Barrier(2, timeout=30)))
    monkeypatch.setattr(produce, "save_status", lambda key, value: saved.append(key))
    monkeypatch.setattr(produce, "write_matrix", lambda *a: None)
    monkeypatch.setattr(produce, "subprocess", types.SimpleNamespace(run=lambda *a, **k: None))
    assert produce.run_large("full", ["t"], None, False, {}, jobs=2) == 0
    assert most["dfs"] == 1 and len(saved) == 4
    most["dfs"] = 0
    monkeypatch.setattr(produce, "large_todo", lambda *a: [("t", "gbdt:dfs"), ("t", "lightgbm:dfs")])
    monkeypatch.setattr(produce, "run_large_cell", fake_run_meeting("", threading.Barrier(2, timeout=30)))
    assert produce.run_large("30k", ["t"], None, False, {}, jobs=2) == 0
    assert most["dfs"] == 2


def test_remake_dirty_makes_again_the_seeds_made_from_uncommitted_code(tmp_path, monkeypatch, capsys):
    """`--remake-dirty` moves the selected cells' records made from uncommitted code (on the pass's budget, and
    no other) to the archive, and the pass makes exactly those seeds again; a cell named that the pass does
    not make (not a headline cell here) keeps its records, else they would leave the board for good; from a
    checkout with uncommitted code it refuses, since the new records would be no better."""
    import types

    import fourdb.utils

    produce = load_produce()
    full, cell = produce.BUDGETS["full"], "lightgbm:dfs"
    records = sorted(produce.cell_runs("synthetic-taste", cell, full), key=lambda r: r["seed"])
    dirty = {**records[1], "git_dirty": True}
    other_budget = {**dirty, "config": {**dirty["config"], "max_train_seeds": 30000}}
    other_cell = {**dirty, "model": "gbdt"}
    monkeypatch.setattr(produce, "ROOT", tmp_path)
    monkeypatch.setattr(produce, "STATUS", tmp_path / "status.json")
    monkeypatch.delenv("FOURDB_LEADERBOARDS", raising=False)
    board = tmp_path / "leaderboards" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text("".join(json.dumps(r) + "\n" for r in (records[0], dirty, records[2], other_budget, other_cell)))
    ran = []

    def fake_run(args, log, timeout_s, env):
        ran.append(next(a for a in args if a.startswith("seed=")))
        return 0

    monkeypatch.setattr(produce, "run_logged", fake_run)
    monkeypatch.setattr(produce, "has_link_tables", lambda d: False)
    monkeypatch.setattr(produce, "headline_cells", lambda e, link: [cell])
    monkeypatch.setattr(produce, "write_matrix", lambda *a: None)
    monkeypatch.setattr(produce, "subprocess", types.SimpleNamespace(run=lambda *a, **k: None))
    argv = ["--budget", "full", "--only", "synthetic-taste", "--cells", f"{cell},gbdt:dfs", "--remake-dirty"]
    monkeypatch.setattr(fourdb.utils, "git_state", lambda folder: ("abc", True))
    with pytest.raises(SystemExit):
        produce.main(argv)
    assert "uncommitted code changes" in capsys.readouterr().err and board.read_text().count("\n") == 5 and not ran
    monkeypatch.setattr(fourdb.utils, "git_state", lambda folder: ("abc", False))
    assert produce.main(argv) == 0
    assert "1 record(s) made from uncommitted code moved" in capsys.readouterr().out
    assert ran == ["seed=1"]
    left = [json.loads(line) for line in board.read_text().splitlines()]
    assert [(r["model"], r["seed"], r["git_dirty"]) for r in left] == [
        ("lightgbm", 0, records[0]["git_dirty"]), ("lightgbm", 2, records[2]["git_dirty"]), ("lightgbm", 1, True),
        ("gbdt", 1, True)]
    [archived] = [json.loads(line) for line in (tmp_path / "leaderboards" / "archive" / "synthetic" /
                                                "taste.jsonl").read_text().splitlines()]
    assert archived == dirty


def test_matrix_hours_count_every_pass_of_a_cell_and_a_run_stopped_at_the_limit(tmp_path, monkeypatch):
    """A cell whose seeds came from two passes counts the time of all its runs on the board (its status has
    the last pass's alone) and shows the largest peak memory of them, and a cell stopped at the limit, which
    left no record, counts its status's time."""
    produce = load_produce()
    full, cell = produce.BUDGETS["full"], "lightgbm:dfs"
    records = [{**r, "wall_seconds": 1800.0, "peak_memory_mb": 1024.0 * (1 + r["seed"])}
               for r in produce.cell_runs("synthetic-taste", cell, full)]
    assert {r["seed"] for r in records} == {0, 1, 2}
    monkeypatch.setattr(produce, "ROOT", tmp_path)
    board = tmp_path / "leaderboards" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(produce, "headline_cells", lambda e, link: [cell, "sage:r2n"])
    status = {produce.status_key("full", "synthetic-taste", cell): {"rc": 0, "seconds": 1800.0,
                                                                     "peak_memory_mb": 1024.0},
              produce.status_key("full", "synthetic-taste", "sage:r2n"): {"rc": "timeout", "seconds": 5400.0}}
    section = "\n".join(produce.large_section("full", ["synthetic-taste"], {}, status))
    assert "These cells took 3.0 hours" in section and "stopped: a run went past the 90 min limit" in section
    assert f"| synthetic-taste | {cell} | 3 | 30.0 | " in section and " | 3.0 |  |" in section


def test_matrix_and_its_status_agree_on_every_certify_verdict():
    """MATRIX.md's certify column says what matrix_status.json recorded: a certified rerun that passed is
    'passed' even where its record has left the board since (a plain remake of seed 0), never 'not run'."""
    produce = load_produce()
    assert produce.certify_verdict({"passed": True}, {}) == "passed"
    assert produce.certify_verdict({"passed": False}, {"verdict": "passed"}) == "FAILED"
    assert produce.certify_verdict(None, {"verdict": "passed", "rc": 0}).startswith("passed (its record has left")
    assert produce.certify_verdict(None, {"rc": "timeout"}) == "not run (timed out)"
    assert produce.certify_verdict(None, {"rc": 1}) == "not run (failed)"
    assert produce.certify_verdict(None, {}) == "not run"
    status = json.loads((REPO / "leaderboards" / "matrix_status.json").read_text())
    for key, s in status.items():
        if key.startswith("certify ") and s.get("verdict"):
            assert produce.certify_verdict(None, s).split()[0] == s["verdict"]


def test_remake_cut_short_makes_again_every_seed_of_a_cell_cut_short_at_its_cap(tmp_path, monkeypatch, capsys):
    """`--remake-cut-short` moves every seed of a cell of which one seed ended on its best epoch at the cap (on
    the pass's budget) to the archive, so the cell is made again as one setting under today's cap; a cell whose
    seeds patience stopped keeps its records, and so does the cut-short cell on another budget."""
    import types

    produce = load_produce()
    small = produce.BUDGETS["small"]
    runs = sorted(produce.cell_runs("synthetic-taste", "sage:r2n", small), key=lambda r: r["seed"])
    assert len(runs) == 3 and all(r["history"] for r in runs)

    def with_history(record, values, cap):
        history = [{"epoch": i + 1, "loss": 0.5, "val_auroc": v, "seconds": 1.0} for i, v in enumerate(values)]
        return {**record, "history": history, "metric": "auroc",
                "config": {**record["config"], "trainer": {**record["config"]["trainer"], "epochs": cap}}}

    stopped = [with_history(r, [0.6, 0.7, 0.69, 0.68, 0.67], 10) for r in runs]  # patience ended it
    short = [with_history(runs[0], [0.6, 0.7, 0.8], 3), *stopped[1:]]  # seed 0 still improving at its cap
    other_budget = [{**r, "config": {**r["config"], "max_train_seeds": 30000}} for r in short]
    monkeypatch.setattr(produce, "ROOT", tmp_path)
    monkeypatch.setattr(produce, "STATUS", tmp_path / "status.json")
    board = tmp_path / "leaderboards" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text("".join(json.dumps(r) + "\n" for r in (*short, *[{**r, "model": "hgt"} for r in stopped],
                                                             *other_budget)))
    ran = []

    def fake_run(args, log, timeout_s, env):
        ran.append((next(a for a in args if a.startswith("model=")), next(a for a in args if a.startswith("seed="))))
        return 0

    monkeypatch.setattr(produce, "run_logged", fake_run)
    monkeypatch.setattr(produce, "has_link_tables", lambda d: False)
    monkeypatch.setattr(produce, "write_matrix", lambda *a: None)
    monkeypatch.setattr(produce, "subprocess", types.SimpleNamespace(run=lambda *a, **k: None))
    assert produce.cut_short_count(["synthetic-taste"]) == (2, 9)
    assert produce.main(["--only", "synthetic-taste", "--cells", "sage:r2n,hgt:r2n", "--remake-cut-short"]) == 0
    assert "3 record(s) of cells cut short at their epoch cap moved" in capsys.readouterr().out
    assert ran == [("model=sage", "seed=0,1,2")]
    left = [json.loads(line) for line in board.read_text().splitlines()]
    assert sorted((r["model"], r["config"]["max_train_seeds"]) for r in left) == \
        [("hgt", 5000)] * 3 + [("sage", 30000)] * 3
