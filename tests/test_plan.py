"""``fourdb plan`` and ``engine=auto`` under an objective and a memory limit, end to end on a tiny database."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import config
from fourdb.errors import SettingError

ROOT = Path(__file__).resolve().parents[1]
TINY = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", "trainer.progress=false",
        "trainer.batch_size=64", "max_train_seeds=400", "engine.profile_batches=3"]


def test_fourdb_plan_prints_every_strategy_marks_the_frontier_and_draws_it(tmp_path):
    png = tmp_path / "frontier.png"
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "plan", *TINY, "--out", str(png)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "FOURDB_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line[3:].startswith(("online", "offline"))]
    assert any("online" in r for r in rows) and any("offline" in r for r in rows), p.stdout
    assert any(r[2] == "*" for r in rows) and sum(r.startswith("->") for r in rows) == 1, p.stdout
    # every dimension: both evaluations, half and twice the batch, 1 and 2 processes where there are 2 cores
    assert any(" layerwise " in r for r in rows) and {r.split()[-6] for r in rows} >= {"32", "64", "128"}, p.stdout
    assert "calibration" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_engine_auto_with_the_memory_objective_and_a_limit_records_prediction_and_measurement(tmp_path, monkeypatch):
    from fourdb.experiment.run import run_experiment

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    record = run_experiment(config(*TINY, "engine=auto", "engine.objective=memory", "engine.memory_limit_gb=64",
                                   "trainer.epochs=2", "trainer.patience=2"), tmp_path)
    eng = json.loads((tmp_path / "record.json").read_text())["engine"]
    assert eng == record["engine"] and eng["objective"] == "memory" and eng["memory_limit_gb"] == 64
    assert 0 < eng["predicted_peak_mb"] <= 64 * 1024 and eng["measured_peak_mb"] > 0
    assert eng["predicted_epoch_seconds"] > 0 and len(eng["epoch_seconds"]) == 2
    assert eng["mode"] == "online" and eng["prefetch"] == 1  # the least memory: nothing stored, one batch ahead
    assert eng["strategy"].startswith("online workers=1 prefetch=1") and eng["predicted_eval_seconds"] > 0
    # the model's own error, kept for fourdb plan to show
    from fourdb.engine.planning.auto import last_calibration

    line = last_calibration()
    assert line and "\n" not in line and "off by" in line and eng["strategy"] in line, line


def test_engine_auto_with_a_limit_no_strategy_meets_stops_in_one_line(tmp_path, monkeypatch):
    from fourdb.experiment.run import run_experiment

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    with pytest.raises(SettingError) as err:
        run_experiment(config(*TINY, "engine=auto", "engine.memory_limit_gb=0.01", "trainer.epochs=1"))
    assert "\n" not in str(err.value) and "online workers=1 prefetch=1" in str(err.value), str(err.value)


REC = ["dataset=browsing", "dataset.params.size=150", "task=next-views", "trainer.progress=false",
       "trainer.batch_size=64", "max_train_seeds=300", "max_val_seeds=200", "engine.profile_batches=2"]


@pytest.mark.parametrize("model", ["two_tower", "idgnn", "contextgnn"])
def test_plan_prices_a_recommendation_gnn_online(tmp_path, monkeypatch, model):
    """A recommendation GNN's batches (towers, trees, context) are timed as it trains on them: online only."""
    from fourdb.experiment.plan import plan_run

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    text, verdict = plan_run(config(*REC, f"model={model}"), tmp_path, tmp_path / "plan.png")
    assert verdict is None, verdict
    rows = [line for line in text.splitlines() if line[3:].startswith(("online", "offline"))]
    assert rows and all(r[3:].startswith("online") for r in rows) and sum(r.startswith("->") for r in rows) == 1, text
    assert "no offline strategy" in text and (tmp_path / "plan.png").is_file()


@pytest.mark.parametrize("overrides", [["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt"],
                                       [*REC, "model=gbdt"]], ids=["tabular", "pair-ranker"])
def test_plan_of_a_model_outside_the_graph_engine_says_so(tmp_path, monkeypatch, overrides):
    from fourdb.experiment.plan import plan_run

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    text, verdict = plan_run(config(*overrides), tmp_path)
    assert verdict is None and "\n" not in text and "no engine strategies to price" in text, text
