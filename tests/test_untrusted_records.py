"""A record is checked, not believed: hostile records through the real CLI (leaderboard submit, show, render,
export) end in one line or a neutralised render, and an honest run still submits and shows as verified."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

HOSTILE = ["line\n## injected heading", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))",
           "pipe | breaks | rows", "$\\frac{$"]


def fourdb(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "fourdb.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=300)


def one_error(p, *words):
    """Refused in one line naming what is wrong, with no traceback."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout and "\x1b" not in p.stderr + p.stdout
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """A real certified run folder (GBDT on the small synthetic shop): record.json, predictions.parquet, its log."""
    tmp = tmp_path_factory.mktemp("honest")
    p = fourdb("certify", "dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt",
               "trainer.progress=false", f"hydra.run.dir={tmp / 'run'}", cwd=tmp)
    assert p.returncode == 0, p.stderr
    return tmp / "run"


def copy_run(honest, tmp_path, name="run", edit=None):
    run = tmp_path / name
    shutil.copytree(honest, run)
    if edit:
        record = json.loads((run / "record.json").read_text())
        edit(record)
        (run / "record.json").write_text(json.dumps(record))
    return run


def board_lines(root):
    return [json.loads(line) for p in sorted(Path(root).glob("*/*.jsonl")) for line in p.read_text().splitlines()]


def test_an_honest_run_submits_and_shows_as_verified(honest, tmp_path):
    p = fourdb("leaderboard", "submit", honest, "--root", tmp_path / "lb", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    [record] = board_lines(tmp_path / "lb")
    assert record["checked"]["metrics"] == "recomputed" and record["checked"]["certify"] is True
    assert len(record["predictions_sha256"]) == 64
    shown = fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "lb", cwd=tmp_path)
    assert re.search(r"\byes\s+passed\b", shown.stdout), shown.stdout


def test_forged_metrics_and_mismatched_predictions_are_refused(honest, tmp_path):
    def forge(record):
        record["metrics"]["test"]["auroc"] = 0.999999

    run = copy_run(honest, tmp_path, "forged", forge)
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "auroc", "not accepted")
    run = copy_run(honest, tmp_path, "swapped")  # the record as it was, the file's predictions reversed
    frame = pd.read_parquet(run / "predictions.parquet")
    frame["prediction"] = 1 - frame["prediction"]
    frame.to_parquet(run / "predictions.parquet")
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "not accepted")
    assert not (tmp_path / "lb").exists()


def test_a_predictions_file_outside_the_run_folder_is_refused_by_submit_and_export(honest, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(honest / "predictions.parquet", elsewhere / "private.parquet")
    for name in ("../../elsewhere/private.parquet", str(elsewhere / "private.parquet")):
        run = copy_run(honest, tmp_path, f"out{len(name)}", lambda r: r.update(predictions=name))
        one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "predictions")
        one_error(fourdb("export", run, "--out", tmp_path / "p.csv", cwd=tmp_path), "predictions")
    run = copy_run(honest, tmp_path, "link")
    (run / "predictions.parquet").unlink()
    (run / "predictions.parquet").symlink_to(elsewhere / "private.parquet")
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "outside the run folder")
    one_error(fourdb("export", run, "--out", tmp_path / "p.csv", cwd=tmp_path), "outside the run folder")
    assert not (tmp_path / "lb").exists() and not (tmp_path / "p.csv").exists()


def test_a_record_without_predictions_or_certify_log_is_never_shown_as_verified(honest, tmp_path):
    def forge(record):
        record["metrics"]["test"]["auroc"] = 0.999999
        record.pop("predictions")

    run = copy_run(honest, tmp_path, "bare", forge)
    (run / "predictions.parquet").unlink()
    nolog = copy_run(honest, tmp_path, "nolog")  # honest metrics, but certify's own output is gone
    for log in nolog.glob("*.log"):
        log.unlink()
    nolog_record = json.loads((nolog / "record.json").read_text())
    nolog_record["seed"] = nolog_record["config"]["seed"] = 1
    (nolog / "record.json").write_text(json.dumps(nolog_record))
    p = fourdb("leaderboard", "submit", run, nolog, "--root", tmp_path / "lb", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    shown = fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "lb", cwd=tmp_path).stdout
    # one setting, two seeds: one recomputed, one not; neither certify pass can be checked
    assert re.search(r"\byes 1, no 1\s+unverified\b", shown) and " passed " not in shown, shown
    readme = fourdb("leaderboard", "render", "--root", tmp_path / "lb", cwd=tmp_path)
    assert readme.returncode == 0, readme.stderr
    assert "| yes 1, no 1 | unverified |" in (tmp_path / "lb" / "README.md").read_text()


def test_a_copied_stamp_does_not_verify_a_forged_board_line(honest, tmp_path):
    assert fourdb("leaderboard", "submit", honest, "--root", tmp_path / "lb", cwd=tmp_path).returncode == 0
    board = tmp_path / "lb" / "synthetic" / "taste.jsonl"
    record = json.loads(board.read_text())
    record["metrics"]["test"]["auroc"] = 0.999999  # edited after submit, its stamp kept
    board.write_text(json.dumps(record) + "\n")
    shown = fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "lb", cwd=tmp_path).stdout
    assert "1.0000 (1 seed)" in shown and re.search(r"\bno\s+unverified\b", shown), shown


def test_hostile_names_render_as_text(honest, tmp_path):
    runs = []
    for i, name in enumerate(HOSTILE):
        def hostile(record, name=name.replace("\n", " ")):  # a name holds no newline: that is refused
            record["model"] = record["config"]["model"]["name"] = name
            record["inputs"]["features"] = name
            record["config"]["model"]["params"][name] = HOSTILE[0]
            record.pop("predictions")

        runs.append(copy_run(honest, tmp_path, f"hostile{i}", hostile))
    root = tmp_path / "lb"
    p = fourdb("leaderboard", "submit", *runs, honest, "--root", root, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    p = fourdb("leaderboard", "render", "--root", root, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    readme = (root / "README.md").read_text()
    assert "<img" not in readme and "\n## injected" not in readme
    assert not re.search(r"(?<!\\)\[[^\]]*(?<!\\)\]\(", readme)  # no link: its brackets are escaped
    board = readme.split("## synthetic / taste")[1].split("\n\n")[2].splitlines()  # its table: header, rule, rows
    assert len(board) == 2 + len(runs) + 1
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in board}) == 1, board  # no cell splits a row
    assert all(p.resolve().parent == (root / "plots").resolve() for p in root.rglob("*.png"))
    shown = fourdb("leaderboard", "show", "synthetic", "taste", "--root", root, cwd=tmp_path)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout and "\n## injected" not in shown.stdout


def test_control_characters_in_a_name_are_refused_and_never_reach_the_terminal(honest, tmp_path):
    esc = "\x1b]52;c;cHduZWQ=\x07\x1b[2J"
    run = copy_run(honest, tmp_path, "esc", lambda r: r.update(model=f"gbdt{esc}"))
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "control character")
    # planted straight on a board: show stops in one line naming the file and line
    record = json.loads((honest / "record.json").read_text())
    record["inputs"][f"key{esc}"] = "x"
    board = tmp_path / "planted" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text(json.dumps(record) + "\n")
    one_error(fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "planted", cwd=tmp_path),
              "taste.jsonl:1")
    one_error(fourdb("leaderboard", "render", "--root", tmp_path / "planted", cwd=tmp_path), "taste.jsonl:1")


WRONG_TYPES = [
    (lambda r: r["config"]["dataset"]["params"].update(size=[1, 2]), "config.dataset.params.size"),
    (lambda r: r["metrics"]["test"].update(auroc=[0.5]), "metrics.test.auroc"),
    (lambda r: r.update(config="a string"), "config"),
    (lambda r: r["num_seeds"].update(test="many"), "num_seeds.test"),
    (lambda r: r.update(trivial="x"), "trivial"),
    (lambda r: r.update(certify={"passed": "yes"}), "certify.passed"),
    (lambda r: r["config"].update(max_train_seeds="all"), "config.max_train_seeds"),
    (lambda r: r["config"]["trainer"].update(epochs={"a": 1}), "config.trainer.epochs"),
    (lambda r: r["metrics"]["test"].update(bogus=1.0), "bogus"),
    (lambda r: r.update(git_commit="`rm -rf`"), "git_commit"),
    (lambda r: r["inputs"].update({"": 1}), "inputs key"),
    (lambda r: r["inputs"].update(features="x" * 300), "inputs.features"),
]


def test_wrong_types_are_one_line_at_submit_and_when_a_board_is_read(honest, tmp_path):
    """Through the CLI for one; every other kind through the same validation, in this process."""
    from fourdb.leaderboard import RecordError, read_board
    from fourdb.leaderboard.store import submit_run_dirs

    run = copy_run(honest, tmp_path, "lots", lambda r: r["config"]["dataset"]["params"].update(size="lots"))
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "params.size")
    board = tmp_path / "planted" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text((run / "record.json").read_text().replace("\n", " ") + "\n")
    one_error(fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "planted", cwd=tmp_path),
              "taste.jsonl:1", "params.size")
    for i, (edit, words) in enumerate(WRONG_TYPES):
        record = json.loads((honest / "record.json").read_text())
        edit(record)
        run = tmp_path / f"typed{i}"
        run.mkdir()
        (run / "record.json").write_text(json.dumps(record, default=repr))
        with pytest.raises(RecordError, match=re.escape(words)):
            submit_run_dirs([run], tmp_path / "lb")
        board.write_text((run / "record.json").read_text() + "\n")
        with pytest.raises(RecordError, match=re.escape(f"taste.jsonl:1: {words}") + "|" + re.escape(words)):
            read_board(board)
    assert not (tmp_path / "lb").exists()


def test_deep_nesting_is_one_line(tmp_path):
    run = tmp_path / "deep"
    run.mkdir()
    (run / "record.json").write_text("[" * 100_000 + "]" * 100_000)
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "record.json")
    one_error(fourdb("export", run, "--out", tmp_path / "p.csv", cwd=tmp_path), "record.json")
    board = tmp_path / "planted" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    board.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n")
    one_error(fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "planted", cwd=tmp_path),
              "taste.jsonl:1")


def test_huge_dataset_parameters_build_nothing(honest, tmp_path):
    from fourdb.leaderboard import RecordError, validate_record

    run = copy_run(honest, tmp_path, "huge", lambda r: r["config"]["dataset"]["params"].update(size=3e7))
    start = time.time()
    one_error(fourdb("leaderboard", "submit", run, "--root", tmp_path / "lb", cwd=tmp_path), "config.dataset.params.size")
    one_error(fourdb("export", run, "--out", tmp_path / "p.csv", cwd=tmp_path), "config.dataset.params.size")
    assert time.time() - start < 60 and not (tmp_path / "lb").exists()
    record = json.loads((honest / "record.json").read_text())
    for params, words in (({"size": 30_000_000}, "from 1 to 100000"), ({"size": True}, "params.size"),
                          ({"rows": 5}, "not a parameter"), ({"seed": -1}, "params.seed")):
        record["config"]["dataset"]["params"] = params
        with pytest.raises(RecordError, match=words):
            validate_record(record)


def test_committed_records_are_read_and_shown_as_committed(tmp_path):
    from fourdb.leaderboard.boards import COMMITTED_ROOT

    p = fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "none", "--with-committed",
               cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if re.match(r"\s*\d+ ", line)]
    assert rows and all(" committed " in line and " yes " not in line and " no " not in line for line in rows)
    # a copy of a committed board is still fourdb's own records, line for line
    copy = tmp_path / "copy" / "synthetic"
    copy.mkdir(parents=True)
    shutil.copy(COMMITTED_ROOT / "synthetic" / "taste.jsonl", copy / "taste.jsonl")
    p = fourdb("leaderboard", "show", "synthetic", "taste", "--root", tmp_path / "copy", cwd=tmp_path)
    assert p.returncode == 0 and " committed " in p.stdout, p.stderr
