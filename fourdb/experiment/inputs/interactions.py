"""The interactions input kind: a recommendation task's link history alone (popularity, repeat). Such a run is
a recommendation task's floor itself, so it is not scored beside the history baselines."""
from __future__ import annotations

from omegaconf import DictConfig

from fourdb.experiment.inputs import INPUT_KINDS, InputKind
from fourdb.tasks import Task


class InteractionsKind(InputKind):
    name = "interactions"
    scored_beside_trivial = False
    reads_instead = "link history"

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        from fourdb.tasks.interactions import rec_data

        return rec_data(db, task, splits)

    def label(self, cfg: DictConfig, db) -> dict:
        return {"features": "history"}


INPUT_KINDS.register("interactions", InteractionsKind())
