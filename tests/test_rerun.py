"""``fourdb rerun``: a record (a run folder, a record file or a board line) run again from its own config into a
fresh folder; it repeats bitwise on the same kind of CPU, within a tolerance where the kind is another or
unknown; a tampered metric does not repeat; a record's text is never resolved by OmegaConf; a bad record or
selector is one line."""
import copy
import json

import pytest
from conftest import config

from fourdb.cli import main
from fourdb.leaderboard.rerun import NEURAL_RTOL, TREE_RTOL, code_notes, rerun_config, rule

SMALL = ["dataset=synthetic", "dataset.params.size=150", "task=purchase-count", "trainer.progress=false"]
SECRET_VAR = "FOURDB_TEST_SECRET"
SECRET = "the-secret-value-4711"


def make_run(folder, *overrides):
    from fourdb.experiment.run import run_experiment

    run_experiment(config(*SMALL, *overrides), folder)
    return folder


@pytest.fixture(scope="module")
def mean_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("mean"), "model=mean")


@pytest.fixture(scope="module")
def gbdt_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("gbdt"), "model=gbdt", "max_train_seeds=300", "model.params.max_iter=20")


def record_of(folder) -> dict:
    return json.loads((folder / "record.json").read_text())


def rerun(capsys, *args):
    """``fourdb rerun`` in this process: exit status, stdout, stderr."""
    code = main(["rerun", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *words) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def write_record(path, record):
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("run", ["mean_run", "gbdt_run"])
def test_a_fast_record_repeats_exactly(request, capsys, tmp_path, run):
    folder = request.getfixturevalue(run)
    code, out, err = rerun(capsys, folder, "--out", tmp_path / "again")
    assert code == 0, out + err
    assert "verdict: repeats exactly: every metric bitwise equal (the same CPU kind" in out
    assert "test  mae" in out and "0 (bitwise)" in out
    again = record_of(tmp_path / "again")
    assert again["metrics"]["test"] == record_of(folder)["metrics"]["test"]
    report = json.loads((tmp_path / "again" / "rerun.json").read_text())
    assert report["repeats"] and report["rule"]["bitwise"]
    assert (tmp_path / "again" / "rerun.log").is_file()


def test_a_tampered_metric_does_not_repeat(mean_run, capsys, tmp_path):
    record = record_of(mean_run)
    record["metrics"]["test"]["mae"] *= 1.01
    code, out, err = rerun(capsys, write_record(tmp_path / "record.json", record), "--out", tmp_path / "again")
    assert code == 1, out + err
    [verdict] = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert "does NOT repeat: test mae" in verdict and "bitwise equal" in verdict
    assert not json.loads((tmp_path / "again" / "rerun.json").read_text())["repeats"]


def test_an_unknown_cpu_kind_is_judged_by_the_tolerance(mean_run, capsys, tmp_path):
    """A record that does not name its CPU (made before records did): within relative TREE_RTOL repeats, past
    it does not."""
    record = record_of(mean_run)
    del record["hardware"]["cpu"]
    for factor, expected in ((1 + TREE_RTOL / 10, 0), (1 + TREE_RTOL * 10, 1)):
        tampered = copy.deepcopy(record)
        tampered["metrics"]["test"]["mae"] *= factor
        path = write_record(tmp_path / f"record-{expected}.json", tampered)
        code, out, err = rerun(capsys, path, "--out", tmp_path / f"again-{expected}")
        assert code == expected, out + err
        assert "unknown CPU kind" in out and f"relative {TREE_RTOL:g}" in out


def test_a_board_line_is_rerun(mean_run, capsys, tmp_path):
    board = tmp_path / "board.jsonl"
    record = record_of(mean_run)
    other = {**record, "seed": 7}
    board.write_text("\n".join([json.dumps(other), "", json.dumps(record)]) + "\n")
    code, out, err = rerun(capsys, f"{board}:3", "--out", tmp_path / "a")
    assert code == 0, out + err
    assert f"rerun of {board}:3:" in out and "verdict: repeats exactly" in out
    code, out, err = rerun(capsys, board, "--line", 3, "--out", tmp_path / "b")
    assert code == 0, out + err
    assert record_of(tmp_path / "b")["seed"] == record["seed"]


@pytest.mark.parametrize("line, words", [(0, ["no such line", "has 3"]), (4, ["no such line", "has 3"]),
                                         (99, ["board.jsonl:99", "no such line"]), (2, ["an empty line"]),
                                         (1, ["not valid JSON"])])
def test_a_bad_line_is_one_line(mean_run, capsys, tmp_path, line, words):
    board = tmp_path / "board.jsonl"
    board.write_text("{not json\n\n" + json.dumps(record_of(mean_run)) + "\n")
    code, out, err = rerun(capsys, f"{board}:{line}", "--out", tmp_path / "again")
    assert code == 2
    one_line(err, *words)
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("args, words", [
    (["{tmp}/nowhere.json"], ["no such record file"]),
    (["{tmp}/board.jsonl"], ["one record a line", "--line N"]),
    (["{tmp}/board.jsonl:1", "--line", "2"], ["two records"]),
    (["{tmp}"], ["no record.json in it"]),
    (["{tmp}/schema.json"], ["missing field 'metrics'"]),
    (["{tmp}/schema.json", "--line", "1"], ["not a board"]),
])
def test_a_bad_path_or_record_is_one_line(mean_run, capsys, tmp_path, args, words):
    record = record_of(mean_run)
    (tmp_path / "board.jsonl").write_text(json.dumps(record) + "\n")
    write_record(tmp_path / "schema.json", {k: v for k, v in record.items() if k != "metrics"})
    code, out, err = rerun(capsys, *[a.format(tmp=tmp_path) for a in args])
    assert code == 2
    one_line(err, *words)


@pytest.mark.parametrize("edit, words", [
    (lambda c: c["trainer"].update(epoch=1), ["trainer has no setting 'epoch'", "did you mean 'epochs'"]),
    (lambda c: c.update(hydra={"run": {"dir": "/tmp/elsewhere"}}), ["the run config has no setting 'hydra'"]),
    (lambda c: c["model"]["params"].update(max_iterr=5), ["max_iterr"]),
])
def test_unknown_config_keys_are_refused(mean_run, capsys, tmp_path, edit, words):
    record = record_of(mean_run)
    record["config"]["model"]["params"] = record["config"]["model"].get("params") or {}
    edit(record["config"])
    code, out, err = rerun(capsys, write_record(tmp_path / "record.json", record), "--out", tmp_path / "again")
    assert code == 2
    one_line(err, *words)
    assert not (tmp_path / "again").exists()  # refused before any folder is made


def test_a_record_value_is_never_resolved(mean_run, capsys, tmp_path, monkeypatch):
    """``${oc.env:VAR}`` and ``${dataset.name}`` in a record's config stay the text they are: in the config the
    rerun runs, in its record, in what it prints and writes."""
    monkeypatch.setenv(SECRET_VAR, SECRET)
    record = record_of(mean_run)
    record["config"]["trainer"]["device"] = f"${{oc.env:{SECRET_VAR}}}"
    record["config"]["engine"]["device"] = "${dataset.name}"
    cfg = rerun_config(record)
    assert cfg.trainer.device == f"${{oc.env:{SECRET_VAR}}}" and cfg.engine.device == "${dataset.name}"
    code, out, err = rerun(capsys, write_record(tmp_path / "record.json", record), "--out", tmp_path / "again")
    assert code == 0, out + err  # the mean reads no device
    again = record_of(tmp_path / "again")
    assert again["config"]["trainer"]["device"] == f"${{oc.env:{SECRET_VAR}}}"
    assert again["config"]["engine"]["device"] == "${dataset.name}"
    assert SECRET not in out + err
    for path in (tmp_path / "again").iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


def test_an_older_records_names_of_settings_are_read_as_todays(mean_run):
    """Older records say graph.kind and sampler.strategy for graph.name and sampler.name (as the boards read them)."""
    record = record_of(mean_run)
    record["config"]["graph"] = {"kind": "r2n"}
    record["config"]["sampler"] = {"strategy": "recent", "fanouts": [5, 10]}
    cfg = rerun_config(record)
    assert cfg.graph.name == "r2n" and cfg.sampler.name == "recent"


def test_the_rule_follows_the_cpu_kind():
    cpu = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "gpu": None}
    assert rule(cpu, dict(cpu), neural=True)[0] is None
    assert rule(cpu, {**cpu, "cpu_capability": "AVX2"}, neural=False) == (TREE_RTOL, pytest.approx(
        "another CPU kind: the record's AMD EPYC, AVX512, here AMD EPYC, AVX2, not a neural model: relative 0.0001"))
    assert rule({"cpus": 2}, cpu, neural=True)[0] == NEURAL_RTOL
    assert rule({**cpu, "gpu": "H100"}, {**cpu, "gpu": "H100"}, neural=True)[0] == NEURAL_RTOL


def test_code_notes_say_when_the_code_differs(tmp_path):
    head = "a" * 40
    clean = {"git_commit": head, "git_dirty": False, "packages": {"numpy": "1"}, "task_spec_hash": "t",
             "num_seeds": {"test": 1}}
    same, notes = code_notes(clean, dict(clean), None)
    assert same and notes == [f"code: the same: commit {head[:12]}, no uncommitted changes"]
    same, notes = code_notes({**clean, "git_commit": "b" * 40}, clean, None)
    assert not same and "NOT the same" in notes[0] and f"git checkout {'b' * 40}" in notes[0]
    patch = tmp_path / "code.patch"
    patch.write_bytes(b"diff --git a/x b/x\n")
    import hashlib

    dirty = {**clean, "git_dirty": True, "code_patch_sha256": hashlib.sha256(patch.read_bytes()).hexdigest()}
    same, notes = code_notes(dirty, clean, tmp_path)
    assert not same and f"git apply {patch}" in notes[1]
    assert code_notes(dirty, dict(dirty), tmp_path)[0]  # the same commit and the same patch: the same code
    same, notes = code_notes(dirty, clean, None)
    assert "no code.patch of them is at hand" in notes[1]
    same, notes = code_notes(clean, {**clean, "packages": {"numpy": "2"}}, None)
    assert "packages: not the record's: numpy 1 -> 2" in notes


def test_a_record_names_its_task_never_a_file(mean_run, capsys, tmp_path):
    """A task file's path in a record's config is not read: the task is found by the record's task name."""
    bait = tmp_path / "elsewhere.yaml"
    bait.write_text("name: [not, a task\n")
    record = record_of(mean_run)
    record["config"]["task"] = str(bait)
    assert rerun_config(record).task == record["task"]
    code, out, err = rerun(capsys, write_record(tmp_path / "record.json", record), "--out", tmp_path / "again")
    assert code == 0, out + err


def test_outside_paths_are_an_opt_in_of_the_command_line(mean_run, capsys, tmp_path):
    record = record_of(mean_run)
    record["config"]["dataset"]["allow_outside_paths"] = True
    path = write_record(tmp_path / "record.json", record)
    code, out, err = rerun(capsys, path, "--out", tmp_path / "refused")
    assert code == 2
    one_line(err, "dataset.allow_outside_paths", "--allow-outside-paths")
    code, out, err = rerun(capsys, path, "--allow-outside-paths", "--out", tmp_path / "again")
    assert code == 0, out + err
