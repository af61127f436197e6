"""Recoverable provenance: a run from uncommitted code writes its patch beside the record (``code.patch``,
its sha256 in ``code_patch_sha256``); ``leaderboard submit --replace`` puts a certified run in its plain
twin's place."""
import copy
import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from conftest import config

import fourdb.utils
from fourdb.experiment import run as run_module
from fourdb.leaderboard import RecordError, read_board, submit_records, validate_record
from fourdb.leaderboard.boards import board_path
from fourdb.utils import code_patch

SMALL = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "trainer.progress=false", "model=gbdt"]


def git(*args, cwd):
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def dirty_repo(tmp_path):
    """A checkout whose code differs from HEAD: a tracked file changed, a new source file, a board changed."""
    repo = tmp_path / "repo"
    for name, text in {"fourdb/model.py": "A = 1\n", "leaderboards/b.jsonl": "{}\n", "README.md": "x\n"}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "base", cwd=repo)
    (repo / "fourdb/model.py").write_text("A = 2\n")
    (repo / "fourdb/new_model.py").write_text("B = 3\n")
    (repo / "leaderboards/b.jsonl").write_text("{}\n{}\n")
    (repo / "scratch.txt").write_text("not source\n")
    return repo


@pytest.fixture(scope="module")
def record():
    from fourdb.experiment.run import run_experiment

    return json.loads(json.dumps(run_experiment(config(*SMALL)), default=str))


def test_patch_leaves_index_and_applies_to_head(dirty_repo, tmp_path):
    index = (dirty_repo / ".git/index").read_bytes()
    patch = code_patch(dirty_repo / "fourdb")
    assert (dirty_repo / ".git/index").read_bytes() == index  # read only
    text = patch.decode()
    assert "fourdb/model.py" in text and "fourdb/new_model.py" in text
    assert "leaderboards" not in text and "scratch.txt" not in text
    clone = tmp_path / "clone"
    git("clone", "-q", str(dirty_repo), str(clone), cwd=tmp_path)
    (tmp_path / "code.patch").write_bytes(patch)
    git("apply", "--check", str(tmp_path / "code.patch"), cwd=clone)
    git("apply", str(tmp_path / "code.patch"), cwd=clone)
    assert (clone / "fourdb/new_model.py").read_text() == "B = 3\n"
    assert (clone / "fourdb/model.py").read_text() == "A = 2\n"
    git("stash", "-q", "-u", cwd=dirty_repo)  # the clean checkout: an empty patch
    assert code_patch(dirty_repo / "fourdb") == b""
    assert code_patch(tmp_path / "not-a-checkout") is None


def test_dirty_run_writes_patch_its_record_hashes(dirty_repo, tmp_path, monkeypatch):
    commit = git("rev-parse", "HEAD", cwd=dirty_repo)
    monkeypatch.setattr(fourdb.utils, "git_state", lambda folder: (commit, True))
    monkeypatch.setattr(run_module, "code_patch", lambda folder: code_patch(dirty_repo / "fourdb"))
    out = tmp_path / "run"
    out.mkdir()
    record = run_module.run_experiment(config(*SMALL), out)
    patch = (out / "code.patch").read_bytes()
    assert record["git_dirty"] is True
    assert record["code_patch_sha256"] == hashlib.sha256(patch).hexdigest()
    on_disk = json.loads((out / "record.json").read_text())
    assert on_disk["code_patch_sha256"] == record["code_patch_sha256"]
    validate_record(on_disk)
    keys = list(on_disk)
    assert keys.index("code_patch_sha256") == keys.index("git_dirty") + 1
    worktree = tmp_path / "head"
    git("worktree", "add", "-q", "--detach", str(worktree), commit, cwd=dirty_repo)
    git("apply", "--check", str(out / "code.patch"), cwd=worktree)


def test_clean_run_has_no_patch(tmp_path, monkeypatch):
    monkeypatch.setattr(fourdb.utils, "git_state", lambda folder: ("a" * 40, False))
    out = tmp_path / "run"
    out.mkdir()
    record = run_module.run_experiment(config(*SMALL), out)
    assert "code_patch_sha256" not in record and not (out / "code.patch").exists()
    assert "code_patch_sha256" not in json.loads((out / "record.json").read_text())


def test_patch_hash_must_be_64_hex_digits(record):
    validate_record({**record, "code_patch_sha256": "ab" * 32})
    for bad in ("AB" * 32, "ab" * 31, 5):
        with pytest.raises(RecordError, match="code_patch_sha256' must be 64 hex digits"):
            validate_record({**record, "code_patch_sha256": bad}, "r.json")


def test_replace_puts_a_certified_run_in_its_plain_twins_place(record, tmp_path):
    plain = copy.deepcopy(record)
    plain["git_dirty"] = False
    other = copy.deepcopy(plain)
    other["seed"] = other["config"]["seed"] = 1
    submit_records([("plain", plain), ("other", other)], tmp_path)
    certified = {**copy.deepcopy(plain), "certify": {"passed": True, "checks": []}}
    with pytest.raises(RecordError, match="already on the leaderboard"):
        submit_records([("certified", certified)], tmp_path)
    failed = {**copy.deepcopy(plain), "certify": {"passed": False, "checks": []}}
    for bad, verdict in ((copy.deepcopy(plain), "not run"), (failed, "failed")):
        with pytest.raises(RecordError, match=f"only with a certified run.*verdict is {verdict}") as e:
            submit_records([("bad", bad)], tmp_path, replace=True)
        assert "\n" not in str(e.value)
    board = board_path(tmp_path, plain["dataset"], plain["task"])
    assert [r.get("certify") for r in read_board(board)] == [None, None]
    result = submit_records([("certified", certified)], tmp_path, replace=True)
    assert len(result.replaced) == 1 and len(result.added) == 1
    rows = read_board(board)
    assert [r["seed"] for r in rows] == [plain["seed"], 1]
    assert rows[0]["certify"]["passed"] is True


def test_replace_on_the_command_line(record, tmp_path, capsys):
    plain = copy.deepcopy(record)
    plain["git_dirty"] = False
    for name, r in (("plain", plain), ("certified", {**plain, "certify": {"passed": True, "checks": []}})):
        (tmp_path / name).mkdir()
        r = {k: v for k, v in r.items() if k != "predictions"}
        (tmp_path / name / "record.json").write_text(json.dumps(r))
    from fourdb.cli import main

    root = str(tmp_path / "boards")
    assert main(["leaderboard", "submit", "--root", root, str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert main(["leaderboard", "submit", "--root", root, "--replace", str(tmp_path / "plain")]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "only with a certified run" in err and "verdict is not run" in err
    assert main(["leaderboard", "submit", "--root", root, "--replace", str(tmp_path / "certified")]) == 0
    rows = read_board(board_path(Path(root), plain["dataset"], plain["task"]))
    assert len(rows) == 1 and rows[0]["certify"]["passed"] is True
    assert "replaced 1 record(s)" in capsys.readouterr().out
