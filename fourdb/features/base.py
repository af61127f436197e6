"""Feature sets for tabular models, one registry.

A feature set is ``fn(db, task, splits, **params) -> {split: EncodedTable}``, registered by name
(``@FEATURES.register("dfs")``) in a module of this package, which the registry finds itself;
``params`` are the keys of its ``conf/features/<name>.yaml`` other than ``name``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from fourdb.columns import EncodedTable
from fourdb.errors import refuse_unknown
from fourdb.rdb import Database
from fourdb.registry import Registry
from fourdb.tasks import Task

FEATURES: Registry = Registry("feature set", package="fourdb.features")


@dataclass
class TableData:
    features: dict[str, EncodedTable]  # split -> encoded seed rows
    labels: dict[str, np.ndarray]  # train and val only


def check_feature_params(name: str, params: dict) -> None:
    """A one-line error for a parameter that feature set ``name`` does not take (needs no data)."""
    refuse_unknown(f"feature set '{name}'", params, list(inspect.signature(FEATURES.get(name)).parameters)[3:],
                   noun="parameter")


def build_table_features(name: str, db: Database, task: Task, splits: dict, **params) -> dict[str, EncodedTable]:
    check_feature_params(name, params)
    return FEATURES.get(name)(db, task, splits, **params)
