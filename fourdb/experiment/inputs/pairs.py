"""The pairs input kind: a recommendation task's link history and, for each seed, its candidate
destinations with (seed, candidate) pair features from the run's feature set (a tabular model ranking)."""
from __future__ import annotations

from omegaconf import DictConfig

from fourdb.experiment.inputs import INPUT_KINDS, InputKind, feature_params
from fourdb.tasks import Task


class PairsKind(InputKind):
    name = "pairs"

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        from fourdb.features.pairs import pair_data
        from fourdb.tasks.interactions import rec_data

        return pair_data(rec_data(db, task, splits), db, task, splits, cfg.features.name, **feature_params(cfg))

    def label(self, cfg: DictConfig, db) -> dict:
        return {"features": cfg.features.name}

    def column_view(self, cfg: DictConfig) -> str:
        return cfg.features.name


INPUT_KINDS.register("pairs", PairsKind())
