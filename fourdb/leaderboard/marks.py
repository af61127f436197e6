"""What a board marks about a row's records, read from the records alone: fewer seeds than the boards' standard,
training stopped by its epoch cap while validation still improved, and the regime that keeps tables apart.

``cut_short`` is public: ``leaderboards/produce.py`` reads it to tell which cells to run again with more epochs.
"""
from __future__ import annotations

import math

from fourdb.contracts import SUPERVISED
from fourdb.experiment.record import NUMBER, of_type
from fourdb.metrics import METRICS, higher_is_better

STANDARD_SEEDS = 3  # the seeds every board row is meant to have (produce.py runs seeds 0, 1 and 2)
CUT_SHORT = "cut short at the epoch cap"


def regime(record: dict) -> str:
    """How the record's model learned the database; records made before it was stated are supervised."""
    return record.get("regime", SUPERVISED)


def fewer_seeds(seeds: int) -> str:
    """The mark of a row of ``seeds`` seeds: '' at the standard or above."""
    return f"{seeds} of {STANDARD_SEEDS} seeds" if seeds < STANDARD_SEEDS else ""


def cut_short(record: dict) -> bool:
    """Whether a neural run was stopped by its epoch cap while still improving: its ``history`` ran every epoch
    ``config.trainer.epochs`` allowed and its best validation epoch (``val_<metric>``, the first of equal bests,
    as the trainer keeps it) is the last one. False for a run without a history (one that fits without the
    epoch trainer) or without a validation score."""
    history = record.get("history") or []
    epochs = ((record.get("config") or {}).get("trainer") or {}).get("epochs")
    if not history or not of_type(epochs, NUMBER) or len(history) < epochs or record.get("metric") not in METRICS:
        return False
    sign = 1 if higher_is_better(record["metric"]) else -1
    scored = [(sign * h[f"val_{record['metric']}"], -i) for i, h in enumerate(history)
              if isinstance(h, dict) and of_type(h.get(f"val_{record['metric']}"), NUMBER)
              and math.isfinite(h[f"val_{record['metric']}"])]
    return bool(scored) and -max(scored)[1] == len(history) - 1
