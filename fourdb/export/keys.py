"""The database as RelBench reads it: a table's primary key is its row position (0..n-1), and foreign keys
hold their parent's positions.

RelBench cuts a table at a time by keeping the rows whose time is at or before it and then requires the
keys left to still be 0..n-1, so a table with a time column must be in time order (rows without a time
last, as RelBench drops them at every cut). A table whose time fourdb inherits from its parents has no time
column in RelBench (the importer reads such a table back the same way), so it keeps its row order. Every
export maps keys through ``Positions``, so a dataset folder and a prediction table of the same database
agree; a table already in RelBench's form, as one imported from RelBench, maps to itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fourdb.rdb import Database, Schema, Table


@dataclass
class Positions:
    order: dict[str, np.ndarray]  # table -> its rows (as loaded) in RelBench row order
    keys: dict[str, pd.Index]  # table with a primary key -> the key at each position

    def of(self, table: str, keys) -> np.ndarray:
        """Positions of primary-key values of ``table`` (-1: not a key)."""
        return self.keys[table].get_indexer(pd.Index(keys))

    def renumbered(self, table: str) -> bool:
        """Whether RelBench's key of a row of ``table`` (its position) differs from the database's own key:
        false only where the keys already are 0..n-1 in RelBench's order (a database imported from RelBench)."""
        keys = self.keys[table]
        return not (pd.api.types.is_numeric_dtype(keys) and keys.equals(pd.RangeIndex(len(keys))))

    def of_rows(self, table: str, rows) -> np.ndarray:
        """Positions of row numbers of ``table`` as loaded (what a materialized task calls ``node``)."""
        where = np.empty(len(self.order[table]), dtype=np.int64)
        where[self.order[table]] = np.arange(len(where))
        return where[np.asarray(rows, dtype=np.int64)]


def positions(db: Database) -> Positions:
    order, keys = {}, {}
    for t in db.schema.tables:
        df = db.tables[t.name]
        rows = np.arange(len(df))
        if t.has_own_time:  # stable: a table already in time order keeps its order
            rows = df[t.time_column].reset_index(drop=True).sort_values(kind="stable", na_position="last").index
            rows = rows.to_numpy()
        order[t.name] = rows
        if t.primary_key is not None:
            keys[t.name] = pd.Index(df[t.primary_key].to_numpy()[rows])
    return Positions(order, keys)


def relbench_tables(db: Database, pos: Positions) -> Database:
    """``db`` as the exported folder holds it: rows in RelBench order, keys as positions (a foreign key with
    no parent null), inherited times gone. A key column with nulls is float64 (as pandas reads one back),
    since RelBench compares foreign keys with ``>=`` and masks with the result, which a nullable integer
    column's missing values break."""
    tables, frames = [], {}
    for t in db.schema.tables:
        cols = t.declared_columns
        df = db.tables[t.name][[c.name for c in cols]].iloc[pos.order[t.name]].reset_index(drop=True)
        if t.primary_key is not None:
            df[t.primary_key] = np.arange(len(df), dtype=np.int64)
        for fk in t.foreign_keys:
            at = pos.of(fk.link_table, df[fk.name])
            df[fk.name] = at if (at >= 0).all() else np.where(at >= 0, at, np.nan)
        frames[t.name] = df
        tables.append(Table(t.name, t.source, list(cols), t.time_column if t.has_own_time else None,
                            static=bool(t.inherited_from)))
    schema = Schema(db.schema.name, tables, db.schema.on_dangling_foreign_key)
    return Database(schema, frames, db.folder, db.notes)
