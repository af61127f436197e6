"""RelBench's key contract: a table's primary key is its row position (0..n-1), and foreign keys hold
their parent's positions.

RelBench cuts a table at a time by keeping the rows whose time is at or before it and then requires the
keys left to still be 0..n-1, so a timed table's rows must be in time order (rows without a time last,
as RelBench drops them at every cut). Every export maps keys through ``Positions``, so a dataset folder
and a prediction table of the same database agree; a table already in that form maps to itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fourdb.rdb import Database


@dataclass
class Positions:
    order: dict[str, np.ndarray]  # table -> its rows (as loaded) in RelBench row order
    keys: dict[str, pd.Index]  # table with a primary key -> the key at each position

    def of(self, table: str, keys) -> np.ndarray:
        """Positions of primary-key values of ``table`` (-1: not a key)."""
        return self.keys[table].get_indexer(pd.Index(keys))

    def of_rows(self, table: str, rows) -> np.ndarray:
        """Positions of row numbers of ``table`` as loaded (what a materialized task calls ``node``)."""
        where = np.empty(len(self.order[table]), dtype=np.int64)
        where[self.order[table]] = np.arange(len(where))
        return where[np.asarray(rows, dtype=np.int64)]


def positions(db: Database) -> Positions:
    order, keys = {}, {}
    for t in db.schema.tables:
        df = db.tables[t.name]
        if t.time_column is None:
            rows = np.arange(len(df))
        else:  # stable: a table already in time order keeps its order
            rows = df[t.time_column].reset_index(drop=True).sort_values(kind="stable", na_position="last").index
            rows = rows.to_numpy()
        order[t.name] = rows
        if t.primary_key is not None:
            keys[t.name] = pd.Index(df[t.primary_key].to_numpy()[rows])
    return Positions(order, keys)


def reindexed(db: Database, pos: Positions) -> dict[str, pd.DataFrame]:
    """Every table in RelBench row order with its keys as positions; a foreign key with no parent is null.

    A key column with nulls is float64 (as pandas reads such a column back), since RelBench compares foreign
    keys with ``>=`` and masks with the result, which a nullable integer column's missing values break.
    """
    out = {}
    for t in db.schema.tables:
        df = db.tables[t.name].iloc[pos.order[t.name]].reset_index(drop=True)
        if t.primary_key is not None:
            df[t.primary_key] = np.arange(len(df), dtype=np.int64)
        for fk in t.foreign_keys:
            at = pos.of(fk.link_table, df[fk.name])
            df[fk.name] = at if (at >= 0).all() else np.where(at >= 0, at, np.nan)
        out[t.name] = df
    return out
