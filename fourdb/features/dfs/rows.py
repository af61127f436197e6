"""The tables as DFS reads them in numpy: each row's parent row through a foreign key, a running
aggregate's child rows in (parent, time order), and the features of those rows, a column at a time.

``Compiler`` builds on ``TableRows``: what SQL does not compute (the running aggregates' inputs, and
whether a lookup is known whenever its child row is) is read here, from the database's own columns.
"""
from __future__ import annotations

from typing import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from fourdb.features.dfs.plan import Condition, Node
from fourdb.features.dfs.scan import arrow_table
from fourdb.rdb import Database
from fourdb.rdb.database import RowLookup, take_rows
from fourdb.rdb.schema import Table

_CHECK_ROWS = 1 << 20  # child rows per slice where a pass over a whole child table needs temporaries
_NEVER = np.iinfo(np.int64).min  # the cutoff of a parent no query asks for


class TableRows:
    """Row-level reads of the tables a plan reaches, each foreign key's parent rows looked up once."""

    def __init__(self, con: duckdb.DuckDBPyConnection, db: Database, tables: set[str]):
        self.con, self.db, self.schema = con, db, db.schema
        self.tables = tables
        self.sources: dict[str, pd.DataFrame] = {}  # table -> the frame its base view reads
        self.key_rows: dict[str, RowLookup] = {}  # table -> row of each primary key value
        self.parents: dict[tuple[str, str], np.ndarray] = {}  # (table, fk) -> each row's parent row (-1: none)
        # row ids, time ranks and parent row ids as int32 where every table's rows fit (half the memory)
        self.ids = np.int32 if max([len(db.tables[t]) for t in tables] + [0]) < np.iinfo(np.int32).max else np.int64
        self.safe: dict[tuple[str, str], bool] = {}

    def meets(self, table: str, cond: Condition | None) -> np.ndarray | None:
        """Whether each row of ``table`` meets ``cond`` (None: no condition)."""
        if cond is None:
            return None
        return self.db.tables[table][cond.column].isin([cond.value]).to_numpy(dtype=bool)

    def parents_of(self, table: str, fk: str) -> np.ndarray:
        """Each row's parent row through ``fk`` (-1: none), looked up once."""
        if (table, fk) not in self.parents:
            self.parents[(table, fk)] = self.parent_rows(table, fk).astype(self.ids)
        return self.parents[(table, fk)]

    def parent_rows(self, table: str, fk: str, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The parent row (-1: none) through ``fk`` of the given rows of ``table`` (-1 rows: none)."""
        if (table, fk) in self.parents:
            known = self.parents[(table, fk)]
            if isinstance(rows, slice):
                return known[rows]
            return np.where(rows >= 0, known[np.maximum(rows, 0)] if len(known) else -1, -1)
        parent = self.schema.table(self.schema.table(table).column(fk).link_table)
        if parent.name not in self.key_rows:
            self.key_rows[parent.name] = RowLookup(self.db.tables[parent.name][parent.primary_key])
        keys = self.db.tables[table][fk]
        if isinstance(rows, slice):
            return self.key_rows[parent.name](keys.iloc[rows])
        out = np.full(len(rows), -1, dtype=np.int64)
        known = rows >= 0
        out[known] = self.key_rows[parent.name](pd.Series(take_rows(keys, rows[known]), copy=False))
        return out

    def edge_safe(self, table: str, fk: str) -> bool:
        key = (table, fk)
        if key not in self.safe:
            t = self.schema.table(table)
            parent = self.schema.table(t.column(fk).link_table)
            if parent.time_column is None:
                ok = True
            elif t.time_column is None:
                ok = False
            else:  # a slice at a time: the parent ids of a large table are not held for a yes or no
                ptime = self.db.tables[parent.name][parent.time_column].to_numpy("datetime64[ns]")
                ctimes = self.db.tables[table][t.time_column].to_numpy("datetime64[ns]")
                ok = True
                for at in range(0, len(ctimes), _CHECK_ROWS):
                    rows = self.parent_rows(table, fk, slice(at, at + _CHECK_ROWS))
                    looked = np.full(len(rows), np.datetime64("NaT"), dtype="datetime64[ns]")
                    looked[rows >= 0] = ptime[rows[rows >= 0]]
                    ctime = ctimes[at:at + _CHECK_ROWS]
                    if ((looked > ctime) | (np.isnat(ctime) & ~np.isnat(looked))).any():
                        ok = False
                        break
            self.safe[key] = ok
        return self.safe[key]

    def lookups_safe(self, node: Node) -> bool:
        return all(self.edge_safe(node.table, lk.fk) and self.lookups_safe(lk.node) for lk in node.lookups)

    def child_rows(self, child: Table, fk: str, qk: np.ndarray, cutoff: np.ndarray,
                   meets: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows of ``child`` whose parent through ``fk`` is among the query keys ``qk``, up to that
        parent's latest cutoff (later rows never reach a query), and where ``meets`` is given, only the rows
        it marks (a conditional aggregate), sorted by (parent, time order): their row
        numbers, their parents and their times (NaT: none). A slice of the child at a time, so a large
        child is never copied whole."""
        parents = self.parents_of(child.name, fk)
        n_parents = len(self.db.tables[child.column(fk).link_table])
        until = np.full(n_parents + 1, _NEVER)  # each parent's latest cutoff; the last entry: no parent (-1)
        np.maximum.at(until, qk, cutoff)
        times = self.db.tables[child.name][child.time_column].to_numpy("datetime64[ns]") \
            if child.time_column else None  # NaT is the smallest value: a row without time is always there
        rows = []
        for at in range(0, len(parents), _CHECK_ROWS):
            seen = until[parents[at:at + _CHECK_ROWS]]
            ok = seen > _NEVER
            if times is not None:
                ok &= times[at:at + _CHECK_ROWS].view(np.int64) <= seen
            if meets is not None:
                ok &= meets[at:at + _CHECK_ROWS]
            rows.append(np.flatnonzero(ok) + at)
        rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        k = parents[rows].astype(np.int64)
        order = np.lexsort((self.sources[child.name]["__ord"].to_numpy()[rows], k))
        rows = rows[order]
        tl = times[rows] if times is not None else np.full(len(rows), np.datetime64("NaT"), dtype="datetime64[ns]")
        return rows, k[order], tl

    def row_features(self, node: Node, rids: np.ndarray) -> Callable[[int], np.ndarray | tuple]:
        """Feature ``i`` of ``node`` (own columns and lookups, no aggregates) at its table's rows ``rids``,
        read from the tables: float64 (NaN: missing) for a numeric feature, (codes, dictionary) for a
        category, the values the base views give (a lookup through a missing parent is missing). Each
        lookup's parent rows are found once, for these rows only."""
        paths = _feature_paths(node)
        assert len(paths) == len(node.features), (node.key, len(paths), len(node.features))
        hops: dict[tuple, np.ndarray] = {(): rids}

        def rows_at(path: tuple) -> np.ndarray:
            if path not in hops:
                table, fk = path[-1]
                hops[path] = self.parent_rows(table, fk, rows_at(path[:-1]))
            return hops[path]

        def column(i: int):
            path, table, name = paths[i]
            rows = rows_at(path)
            values = self.db.tables[table][name]
            known = rows >= 0
            if node.features[i].dtype == "numeric":
                out = np.full(len(rows), np.nan)
                out[known] = self.cast(pd.Series(take_rows(values, rows[known]), copy=False), "DOUBLE")
                return out
            codes = np.full(len(rows), -1, dtype=np.int64)
            codes[known], uniques = pd.factorize(take_rows(values, rows[known]))
            if not (uniques.dtype == object and pd.api.types.infer_dtype(uniques, skipna=False) == "string"):
                # other values become the strings the base views' CAST gives, and values that give the same
                # string are one value
                strings = self.cast(pd.Series(uniques), "VARCHAR")
                remap, uniques = pd.factorize(strings)
                codes = np.where(codes >= 0, remap[np.maximum(codes, 0)] if len(remap) else -1, -1)
            return codes, pa.array(np.asarray(uniques, dtype=object), type=pa.string())

        return column

    def cast(self, values: pd.Series, to: str) -> np.ndarray:
        """``values`` as DuckDB casts them (``DOUBLE``: float64 with NaN for missing; ``VARCHAR``: strings),
        directly where numpy gives the same."""
        if to == "DOUBLE" and isinstance(values.dtype, np.dtype) and values.dtype.kind in "fiub":
            return values.to_numpy().astype(np.float64, copy=False)
        self.con.register("__cast", pd.DataFrame({"v": values.reset_index(drop=True)}))
        try:
            got = arrow_table(self.con, f"SELECT CAST(v AS {to}) AS v FROM __cast").column("v")
        finally:
            self.con.unregister("__cast")
        if to == "DOUBLE":
            return got.to_numpy(zero_copy_only=False).astype(np.float64)
        return np.asarray(got.to_pylist(), dtype=object)


def _feature_paths(node: Node, path: tuple = ()) -> list[tuple[tuple, str, str]]:
    """Where each feature of ``node`` (own columns, then each lookup's features) is read: the foreign
    keys followed from ``node``'s table, as (table, fk) hops, then the table and column."""
    out = [(path, node.table, c) for c in node.own]
    for lk in node.lookups:
        out += _feature_paths(lk.node, path + ((node.table, lk.fk),))
    return out
