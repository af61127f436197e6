"""The notebooks run top to bottom on small data, so they never rot."""
import copy
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import config

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # the kernel inherits this process's environment (FOURDB_CACHE, the variables set below)
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def outputs(nb, kind: str) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if kind in o.get("data", {})]


def test_dataset_guide_runs(monkeypatch):
    monkeypatch.setenv("FOURDB_GUIDE_SIZE", "150")
    nb = execute("dataset_guide.ipynb")
    assert len(outputs(nb, "image/png")) == 2  # the schema drawing and the label drift
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "purchases" in text and "spec hash" in text
    assert "dropped: key" in text and "entity in train" in text  # the column report and the task's statistics


def test_leaderboard_analysis_runs(monkeypatch, tmp_path):
    from fourdb.leaderboard import submit_records
    from fourdb.run import run_experiment

    overrides = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt", "trainer.progress=false"]
    record = json.loads(json.dumps(run_experiment(config(*overrides)), default=str))
    records = []
    for seed in range(3):
        r = copy.deepcopy(record)
        r["seed"] = r["config"]["seed"] = seed
        records.append((f"seed {seed}", r))
    rec = json.loads(json.dumps(run_experiment(config("dataset=browsing", "dataset.params.size=150", "task=next-views",
                                                      "model=repeat")), default=str))
    records.append(("repeat", rec))
    submit_records(records, tmp_path)
    monkeypatch.setenv("FOURDB_LEADERBOARDS", str(tmp_path))
    nb = execute("leaderboard_analysis.ipynb")
    assert len(outputs(nb, "image/png")) == 2
    assert "2 boards under" in json.dumps(nb.cells[1]["outputs"])
    board = json.dumps(next(c for c in nb.cells if "show(" in "".join(c.source))["outputs"])
    assert "browsing / next-views" in board and "repeat" in board and "test map" in board
