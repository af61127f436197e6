"""Deep Feature Synthesis (DFS) compiled to DuckDB SQL: relational features for tabular models.

From the seed (entity) table, features follow foreign keys in both directions for up to ``depth``
hops, named as featuretools names them:

* a lookup follows a foreign key of the current table to its parent and takes the parent's
  features: ``planes.year``, ``airports[origin].alt`` (the key in brackets when two keys of a table
  point to the same parent), ``planes.MEAN(flights.arr_delay)`` (depth 2);
* an aggregate summarizes the rows of a child table that point to the current row: ``COUNT(purchases)``,
  ``MEAN(purchases.quantity)``, ``MODE(purchases.items.kind)`` (depth 2),
  ``TIME_SINCE_LAST(purchases.purchased_at)`` (in days before the seed's cutoff).

Time is law: a seed (entity, cutoff) sees only rows whose time is at or before its cutoff, at every
hop (``planes.MEAN(flights.arr_delay)`` averages the plane's flights known by the seed's cutoff, the
seed table's own rows included); rows of tables without a time column are always visible, and a
lookup of a parent row whose time is after the cutoff is missing. A row-column task's seed row uses
only its known columns and foreign keys (``Task.hidden_columns`` are left out).

How it runs: every (row, cutoff) pair a seed reaches is a query row, and each step works on whole
query sets (no per-seed loop): DuckDB SQL for keys, lookups, joins and groupings. Aggregates over a
child whose features are fixed per row (its own columns and lookups of parents never newer than it)
are *running* aggregates: the child's rows (up to the parent's latest cutoff) are found from the parent
row ids and sorted per parent in time order in numpy, a sorted search (an ASOF match) finds for each
(parent, cutoff) its last row at or before the cutoff, and vectorized prefix scans (numpy/pandas, exact
per parent) give the state after those rows. That is linear in the child's rows plus the queries whatever the fan-out (``flights -> planes -> flights``
over every flight of the year). A child whose own features depend on the cutoff (an aggregate below
it, depth 3) is joined to its visible rows and grouped by (parent, cutoff) in SQL.

Memory: DFS runs in a session of the database's own DuckDB instance and reads the tables in place
(views over the database's columns, with the parent row ids of the foreign keys its SQL reads, looked
up once). A running aggregate gathers its feature columns from the tables at the rows it scans, one
column at a time, following its lookups for those rows only, and makes each output as soon as its
state is.

Primitives: ``count`` (rows), ``sum`` ``mean`` ``min`` ``max`` ``std`` (sample, ddof=1) of numeric
features, ``mode`` and ``num_unique`` of category features, ``last`` of both (the value, null included,
of the latest row by time, then row order), ``time_since_last`` and ``time_since_first`` for children
with a time column. Empty groups give 0 for count, sum and num_unique and missing otherwise. MODE is
the most frequent non-null value; a tie goes to the value that reached that count first.

Conditional aggregates (``where``, featuretools' "where" features) restrict an aggregate of the seed's
or a looked-up parent's children to the rows holding one interesting value of a category column, or of
a foreign key into a small lookup table: ``MEAN(labs.value WHERE test = HDL)``. The values are the most
frequent among the rows known before validation starts (``plan.interesting_values``); a few per column,
a few primitives over the child's own numbers, and a cap per plan bound them. They run as any aggregate
does, over the rows that meet the condition, which pandas marks (a value never becomes SQL text).

The result is cached as parquet under ``cache_root()/dfs``, keyed by a hash of the schema, the data
files, the task spec, the seeds and the config. ``dfs_features`` (the feature set ``dfs``) adds the seed
row's own columns and encodes everything for tabular models (``columns.encode_features``).

The parts: ``plan`` (the feature tree and its names), ``compile`` (the tree as SQL steps and running
aggregates), ``scan`` (ASOF positions and the vectorized prefix scans); this module runs and caches them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from fourdb.columns import EncodedTable, encode_features
from fourdb.errors import FourdbError
from fourdb.features.base import FEATURES
from fourdb.features.dfs.compile import Compiler
from fourdb.features.dfs.plan import (MAX_DEPTH, PRIMITIVES, WHERE_PRIMITIVES, build_plan, check_config, check_where,
                                     interesting_values, seed_plan, tables_of, unique_names)
from fourdb.features.dfs.scan import asof_positions, column_values
from fourdb.features.single_table import seed_row_features
from fourdb.rdb import Database
from fourdb.rdb.schema import file_stem
from fourdb.untrusted import inside_output
from fourdb.utils import atomic_output, cache_root, progress as progress_bar, stable_hash

__all__ = ["DFS_VERSION", "MAX_DEPTH", "PRIMITIVES", "WHERE_PRIMITIVES", "asof_positions", "build_plan", "cached_dfs",
           "check_config", "check_where", "compute_dfs", "data_fingerprint", "dfs_features", "encode_features",
           "interesting_values", "seed_plan", "seeds_hash"]

log = logging.getLogger("fourdb")

DFS_VERSION = 1  # bump when the computed values change, so stale caches are not read


def compute_dfs(db: Database, seed_table: str, seeds: pd.DataFrame, depth: int | None = None, primitives=None,
                hidden=(), progress: bool = True, threads: int | None = None, where=None,
                fit_until=None) -> pd.DataFrame:
    """DFS features of each seed row (columns ``node``: row number in ``seed_table``, ``cutoff``).

    ``where``: the conditional aggregates' settings (see ``check_where``), their interesting values chosen
    from the rows known by ``fit_until`` (a task's start of validation; not given: the earliest seed
    cutoff, which every seed may see). Returns one row per seed, in order, one column per feature: float32
    for numeric features, strings (object) for category ones.
    """
    depth, primitives = check_config(depth, primitives)
    where = check_where(where)
    if fit_until is None and len(seeds):
        fit_until = pd.to_datetime(seeds["cutoff"]).min()
    plan = seed_plan(db, seed_table, depth, primitives, where, fit_until, frozenset(hidden))
    names = unique_names([f.name for f in plan.features])
    if not plan.features:
        return pd.DataFrame(index=pd.RangeIndex(len(seeds)))
    start = time.perf_counter()
    # a session of the database's own DuckDB instance (its temp tables are the session's own): one
    # instance per process, so one buffer pool under one memory limit, and no second instance to start
    con = db.con.cursor()
    threads_before = con.execute("SELECT current_setting('threads')").fetchone()[0]
    try:
        con.execute(f"SET threads TO {int(threads or os.cpu_count() or 1)}")  # the instance's: set back below
        comp = Compiler(con, db, tables_of(plan, set()))
        comp.register()
        frame = pd.DataFrame({"__i": np.arange(len(seeds), dtype=np.int64),
                              "node": seeds["node"].to_numpy().astype(np.int64),
                              "cutoff": pd.to_datetime(seeds["cutoff"]).to_numpy().astype("datetime64[ns]")})
        con.register("__seeds", frame)
        q0 = comp.query("seeds", "SELECT DISTINCT node AS k, cutoff FROM __seeds")
        gather = comp.assemble(plan, q0)
        where = comp.fetch("seeds", f"SELECT s.__i, q.qid FROM __seeds s JOIN {q0} q ON q.k = s.node AND q.cutoff = s.cutoff")
        steps = comp.with_drops()
        with progress_bar(total=sum(s.desc != "free" for s in steps), enabled=progress, desc="dfs", unit="step") as bar:
            for st in steps:
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    st.run(con) if callable(st.run) else con.execute(st.run)
                except duckdb.Error as e:
                    hint = ""
                    if isinstance(e, duckdb.OutOfMemoryException):
                        hint = (f" (depth {depth} makes {len(names)} features for {len(seeds)} seeds: lower "
                                "features.depth, pass fewer features.primitives, or raise FOURDB_DUCKDB_MEMORY)")
                    raise FourdbError(f"dfs: step '{st.desc}' failed: {str(e).splitlines()[0]}{hint}") from e
                if st.desc != "free":
                    bar.set_postfix_str(st.desc[:40], refresh=False)
                    bar.update(1)
                    log.debug("dfs step %-40s %6.2f s (cpu %6.2f s)", st.desc, time.perf_counter() - t0,
                              time.process_time() - c0)
        order = comp.fetched[where]
        idx = np.full(len(seeds), -1, dtype=np.int64)
        idx[column_values(order, "__i", np.int64)] = column_values(order, "qid", np.int64)
        cols = gather(idx)
        log.info("dfs: %d features for %d seeds in %d steps, %.1f s", len(names), len(seeds),
                 len(comp.steps), time.perf_counter() - start)
    finally:
        con.execute(f"SET threads TO {int(threads_before)}")
        con.close()
    table = pa.table([c.dictionary_encode() if f.dtype == "category" else c for c, f in zip(cols, plan.features)],
                     names=names)
    del cols  # the table holds the only reference, so the conversion frees each column as it goes
    return table.to_pandas(split_blocks=True, self_destruct=True)


# ------------------------------------------------------------------------------------------- caching
def data_fingerprint(db: Database) -> list:
    """Identifies the data: each source file's size and mtime, or a hash of in-memory tables."""
    parts = []
    for t in db.schema.tables:
        path = Path(db.folder) / t.source if db.folder is not None else None
        if path is not None and path.exists():
            st = path.stat()
            parts.append([t.name, str(path.resolve()), st.st_size, st.st_mtime_ns])
        else:
            h = pd.util.hash_pandas_object(db.tables[t.name], index=False).to_numpy()
            parts.append([t.name, len(h), hashlib.sha256(h.tobytes()).hexdigest()[:16]])
    return parts


def seeds_hash(seeds: pd.DataFrame) -> str:
    h = hashlib.sha256(seeds["node"].to_numpy().astype(np.int64).tobytes())
    h.update(pd.to_datetime(seeds["cutoff"]).to_numpy().astype("datetime64[ns]").astype(np.int64).tobytes())
    return h.hexdigest()[:16]


def cached_dfs(db: Database, seed_table: str, seeds: pd.DataFrame, depth: int | None = None, primitives=None,
               hidden=(), task_hash: str = "", progress: bool = True, where=None, fit_until=None) -> pd.DataFrame:
    """``compute_dfs`` through the parquet cache under ``cache_root()/dfs``."""
    depth, primitives = check_config(depth, primitives)
    where = check_where(where)
    args = dict(depth=depth, primitives=primitives, hidden=hidden, progress=progress,
                where=dataclasses.asdict(where) if where else False, fit_until=fit_until)
    if db.folder is None:  # a database made in memory (a certification cut): nothing to key a cache by cheaply
        return compute_dfs(db, seed_table, seeds, **args)
    key = stable_hash(DFS_VERSION, db.schema.to_dict(), data_fingerprint(db), task_hash, seed_table,
                      seeds_hash(seeds), depth, list(primitives), sorted(hidden), args["where"],
                      None if fit_until is None else str(pd.Timestamp(fit_until)))
    # the table's name is text from the schema: the file is named by a plain stem of it (the key holds the name)
    path = inside_output(cache_root() / "dfs", f"{file_stem(seed_table, 'table')}-d{depth}-{key}.parquet",
                         f"dfs cache of table '{seed_table}'")
    if path.exists():
        log.info("dfs: reading cached features %s", path)
        return pd.read_parquet(path)
    out = compute_dfs(db, seed_table, seeds, **args)
    with atomic_output(path) as tmp:
        out.to_parquet(tmp, index=False)
    return out


def _concat(a: EncodedTable, b: EncodedTable) -> EncodedTable:
    return EncodedTable(np.concatenate([a.numeric, b.numeric], 1).astype(np.float32),
                        np.concatenate([a.categorical, b.categorical], 1),
                        a.cardinalities + b.cardinalities, a.numeric_names + b.numeric_names,
                        a.categorical_names + b.categorical_names)


@FEATURES.register("dfs")
def dfs_features(db: Database, task, splits: dict, depth: int | None = None, primitives=None, where=None,
        progress: bool = True) -> dict[str, EncodedTable]:
    """Feature set ``dfs``: the seed row's own (known) columns plus DFS features up to ``depth`` hops, and
    conditional aggregates (``where``) over the values known before validation starts."""
    table = db.schema.table(task.spec.entity_table)
    hidden = tuple(task.hidden_columns)
    names = list(splits)
    seeds = pd.concat([splits[s][["node", "cutoff"]] for s in names], ignore_index=True)
    feats = cached_dfs(db, table.name, seeds, depth, primitives, hidden, task.spec.spec_hash, progress, where,
                       task.fit_until)
    bounds = np.cumsum([0] + [len(splits[s]) for s in names])
    frames = {s: feats.iloc[bounds[i]:bounds[i + 1]].reset_index(drop=True) for i, s in enumerate(names)}
    fit_split = "train" if "train" in frames else names[0]
    encoded = encode_features(frames, fit_split)
    own = seed_row_features(db, task, splits)
    return {s: _concat(own[s], encoded[s]) for s in names}
