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


@pytest.fixture(scope="module")
def family_records():
    """Records of two families: classification (gbdt, 3 seeds) and recommendation (repeat)."""
    from fourdb.experiment.run import run_experiment

    overrides = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt", "trainer.progress=false"]
    record = json.loads(json.dumps(run_experiment(config(*overrides)), default=str))
    records = []
    for seed in range(3):
        r = copy.deepcopy(record)
        r["seed"] = r["config"]["seed"] = seed
        records.append((f"seed {seed}", r))
    rec = json.loads(json.dumps(run_experiment(config("dataset=browsing", "dataset.params.size=150", "task=next-views",
                                                      "model=repeat")), default=str))
    return {"classification": records, "recommendation": [("repeat", rec)]}


@pytest.mark.parametrize("families", [("classification", "recommendation"), ("classification",), ("recommendation",)])
def test_leaderboard_analysis_runs(monkeypatch, tmp_path, family_records, families):
    """On a root holding any of the families, not only on one holding every family."""
    from fourdb.leaderboard import submit_records

    submit_records([r for f in families for r in family_records[f]], tmp_path)
    monkeypatch.setenv("FOURDB_LEADERBOARDS", str(tmp_path))
    nb = execute("leaderboard_analysis.ipynb")
    assert len(outputs(nb, "image/png")) == 2
    assert f"{len(families)} boards under" in json.dumps(nb.cells[1]["outputs"])
    board = json.dumps(next(c for c in nb.cells if "show(" in "".join(c.source))["outputs"])
    for family, title, model, metric in (("classification", "synthetic / taste [size=150]", "gbdt", "test auroc"),
                                         ("recommendation", "browsing / next-views [size=150]", "repeat", "test map")):
        assert (title in board and model in board and metric in board) == (family in families), family
