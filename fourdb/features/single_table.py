"""Feature set ``single_table``: the seed row's own columns (the known ones for a row-column task)."""
from __future__ import annotations

from fourdb.columns import EncodedTable, TableEncoder
from fourdb.features.base import FEATURES
from fourdb.rdb import Database
from fourdb.tasks import Task
from fourdb.utils import to_epoch_ns


def seed_row_features(db: Database, task: Task, splits: dict) -> dict[str, EncodedTable]:
    """Each seed's own row, encoded with encoders fitted before validation, datetimes as ages at its cutoff."""
    table = db.schema.table(task.spec.entity_table)
    rows = db.tables[table.name]
    enc = TableEncoder(table, exclude=tuple(task.hidden_columns)).fit(rows, task.fit_until)
    return {s: enc.transform(rows.iloc[f["node"].to_numpy()].reset_index(drop=True), cutoffs=to_epoch_ns(f["cutoff"]))
            for s, f in splits.items()}


@FEATURES.register("single_table")
def single_table(db: Database, task: Task, splits: dict) -> dict[str, EncodedTable]:
    return seed_row_features(db, task, splits)
