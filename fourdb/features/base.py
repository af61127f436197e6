"""Feature sets for tabular models, one registry.

A feature set is ``fn(db, task, splits, **params) -> {split: EncodedTable}``, registered by name
(``@FEATURES.register("dfs")``) in a module of this package, which the registry finds itself;
``params`` are the keys of its ``conf/features/<name>.yaml`` other than ``name``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from fourdb.errors import FourdbError
from fourdb.features.columns import EncodedTable
from fourdb.rdb import Database
from fourdb.registry import Registry
from fourdb.tasks import Task

FEATURES: Registry = Registry("feature set", package="fourdb.features")


@dataclass
class TableData:
    features: dict[str, EncodedTable]  # split -> encoded seed rows
    labels: dict[str, np.ndarray]  # train and val only


def build_table_features(name: str, db: Database, task: Task, splits: dict, **params) -> dict[str, EncodedTable]:
    fn = FEATURES.get(name)
    accepted = list(inspect.signature(fn).parameters)[3:]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise FourdbError(f"feature set '{name}' has no parameter '{unknown[0]}' "
                          f"(it takes: {', '.join(accepted) or 'none'})")
    return fn(db, task, splits, **params)
