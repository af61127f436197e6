"""The table input kind: the seed rows' features from the run's feature set (single-table or DFS), for
tabular models on classification and regression tasks."""
from __future__ import annotations

from omegaconf import DictConfig

from fourdb.experiment.inputs import INPUT_KINDS, InputKind, feature_params, train_val_labels
from fourdb.tasks import Task


class TableKind(InputKind):
    name = "table"

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        from fourdb.features import TableData, build_table_features

        return TableData(build_table_features(cfg.features.name, db, task, splits, **feature_params(cfg)),
                         train_val_labels(splits))

    def label(self, cfg: DictConfig, db) -> dict:
        return {"features": cfg.features.name}

    def column_view(self, cfg: DictConfig) -> str:
        return cfg.features.name


INPUT_KINDS.register("table", TableKind())
