"""Table features for tabular models, one registry (single_table now; DFS joins it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fourdb.errors import FourdbError
from fourdb.features.columns import EncodedTable, TableEncoder
from fourdb.rdb import Database
from fourdb.tasks import Task


@dataclass
class TableData:
    features: dict[str, EncodedTable]  # split -> encoded seed rows
    labels: dict[str, np.ndarray]  # train and val only


def single_table(db: Database, task: Task, splits: dict) -> dict[str, EncodedTable]:
    """The seed row's own columns: all of them for an entity, the known ones for a row-column task."""
    table = db.schema.table(task.spec.entity_table)
    enc = TableEncoder(table, exclude=tuple(task.hidden_columns)).fit(db.tables[table.name])
    rows = db.tables[table.name]
    return {s: enc.transform(rows.iloc[f["node"].to_numpy()].reset_index(drop=True)) for s, f in splits.items()}


FEATURES = {"single_table": single_table}


def build_table_features(name: str, db: Database, task: Task, splits: dict) -> dict[str, EncodedTable]:
    if name not in FEATURES:
        raise FourdbError(f"unknown feature set '{name}' (choose from {', '.join(FEATURES)})")
    return FEATURES[name](db, task, splits)
