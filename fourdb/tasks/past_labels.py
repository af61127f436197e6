"""What a trivial baseline may know at a seed's cutoff: the training labels, and each entity's own past
labels, those of the task's training rows whose label was known by then (its window closed).

A baseline that always predicts 0, the mean, or an entity's past mean is the floor a model must clear
to have learned anything: on a count task the zero prediction can beat every trained model, and a board
that does not show it misleads. The histories are keyed by the entity's key, not its row number, so a
database rebuilt with other row numbers (as ``fourdb certify`` makes) gives the same ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fourdb.tasks import Task
from fourdb.utils import to_epoch_ns


@dataclass
class LabelData:
    entities: dict[str, np.ndarray]  # split -> the seeds' entity keys
    cutoffs: dict[str, np.ndarray]  # int64 ns
    labels: dict[str, np.ndarray]  # train and val: the run's (budgeted) training and validation labels
    history: pd.DataFrame  # every training row of the task: entity, label, known (int64 ns), by (entity, known)

    def past(self, split: str) -> list[np.ndarray]:
        """Per seed of ``split``, its entity's training labels known by its cutoff (oldest first)."""
        h = self.history
        codes = pd.Index(pd.unique(h["entity"]))
        starts = np.searchsorted(h["entity_code"].to_numpy(), np.arange(len(codes) + 1))
        known, values = h["known"].to_numpy(), h["label"].to_numpy()
        out = []
        for code, cutoff in zip(codes.get_indexer(self.entities[split]), self.cutoffs[split]):
            if code < 0:
                out.append(values[:0])
                continue
            lo, hi = starts[code], starts[code + 1]
            out.append(values[lo:lo + np.searchsorted(known[lo:hi], cutoff, side="right")])
        return out


def label_data(task: Task, splits: dict) -> LabelData:
    train = task.split("train")
    history = pd.DataFrame({"entity": train["entity"].to_numpy(), "label": train["label"].to_numpy(),
                            "known": to_epoch_ns(train["label_known_at"])})
    history["entity_code"] = pd.Index(pd.unique(history["entity"])).get_indexer(history["entity"])
    history = history.sort_values(["entity_code", "known"], kind="stable").reset_index(drop=True)
    return LabelData({s: f["entity"].to_numpy() for s, f in splits.items()},
                     {s: to_epoch_ns(f["cutoff"]) for s, f in splits.items()},
                     {s: splits[s]["label"].to_numpy() for s in ("train", "val")}, history)
