"""A record's regime is checked, not claimed: a model stating ``in-context`` that takes a gradient step on the
target database ends in one line; one that only reads it is recorded as in-context; a record's regime is one of
the known two; an external submission states its own."""
import pandas as pd
import pytest
from conftest import config

from fourdb.contracts import IN_CONTEXT, SUPERVISED
from fourdb.experiment.run import run_experiment
from fourdb.leaderboard import RecordError, validate_record
from fourdb.models import MODELS
from fourdb.train.regime import RegimeError

SMALL = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "trainer.progress=false"]


def test_supervised_by_default():
    record = run_experiment(config(*SMALL, "model=prior"))
    assert record["regime"] == SUPERVISED
    assert validate_record(record)["regime"] == SUPERVISED


def test_in_context_model_without_gradient_steps_is_recorded(monkeypatch):
    monkeypatch.setattr(MODELS.get("prior"), "regime", IN_CONTEXT)
    record = run_experiment(config(*SMALL, "model=prior"))
    assert record["regime"] == IN_CONTEXT


def test_in_context_model_taking_a_gradient_step_is_refused(monkeypatch):
    monkeypatch.setattr(MODELS.get("mlp"), "regime", IN_CONTEXT)
    with pytest.raises(RegimeError, match="took a gradient step"):
        run_experiment(config(*SMALL, "model=mlp", "trainer.epochs=1"))


def test_the_guard_is_gone_after_the_fit(monkeypatch):
    monkeypatch.setattr(MODELS.get("prior"), "regime", IN_CONTEXT)
    run_experiment(config(*SMALL, "model=prior"))
    record = run_experiment(config(*SMALL, "model=mlp", "trainer.epochs=1"))  # a supervised fit after it steps freely
    assert record["regime"] == SUPERVISED and len(record["history"]) == 1


def test_unknown_regime_is_refused():
    record = run_experiment(config(*SMALL, "model=prior"))
    with pytest.raises(RecordError, match="regime must be one of"):
        validate_record({**record, "regime": "few-shot"})
    del record["regime"]  # a record made before the field: supervised
    assert validate_record(record)


def test_external_submission_states_its_regime(tmp_path):
    from fourdb.leaderboard.external import external_record, write_template

    csv = tmp_path / "p.csv"
    write_template("synthetic", "taste", csv, {"size": 150})
    frame = pd.read_csv(csv)
    frame[frame.columns[-1]] = 0.5
    frame.to_csv(csv, index=False)
    record = external_record(csv, "rfm", "synthetic", "taste", params={"size": 150}, regime=IN_CONTEXT)
    assert validate_record(record)["regime"] == IN_CONTEXT
