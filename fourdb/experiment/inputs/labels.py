"""The labels input kind: the task's training labels alone (the trivial baselines: a constant, an entity's
own past labels). Such a run is the floor itself, so it is not scored beside the trivial baselines."""
from __future__ import annotations

from omegaconf import DictConfig

from fourdb.experiment.inputs import INPUT_KINDS, InputKind
from fourdb.tasks import Task


class LabelsKind(InputKind):
    name = "labels"
    scored_beside_trivial = False

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        from fourdb.tasks.past_labels import label_data

        return label_data(task, splits)

    def label(self, cfg: DictConfig, db) -> dict:
        return {"features": "labels"}


INPUT_KINDS.register("labels", LabelsKind())
