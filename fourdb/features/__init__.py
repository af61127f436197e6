"""Table features for tabular models, one registry: ``single_table`` and ``dfs``.

A feature set is ``fn(db, task, splits, **params) -> {split: EncodedTable}``; ``params`` are the keys of
its ``conf/features/<name>.yaml`` other than ``name``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from fourdb.errors import FourdbError
from fourdb.features.columns import EncodedTable
from fourdb.features.single_table import single_table
from fourdb.rdb import Database
from fourdb.tasks import Task


@dataclass
class TableData:
    features: dict[str, EncodedTable]  # split -> encoded seed rows
    labels: dict[str, np.ndarray]  # train and val only


FEATURES = {"single_table": single_table}


def build_table_features(name: str, db: Database, task: Task, splits: dict, **params) -> dict[str, EncodedTable]:
    if name not in FEATURES:
        raise FourdbError(f"unknown feature set '{name}' (choose from {', '.join(FEATURES)})")
    fn = FEATURES[name]
    accepted = list(inspect.signature(fn).parameters)[3:]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise FourdbError(f"feature set '{name}' has no parameter '{unknown[0]}' "
                          f"(it takes: {', '.join(accepted) or 'none'})")
    return fn(db, task, splits, **params)


from fourdb.features.dfs import dfs_features  # noqa: E402  (registration)

FEATURES["dfs"] = dfs_features
