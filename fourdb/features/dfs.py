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
are *running* aggregates: the child's rows (up to the parent's latest cutoff) are sorted per parent in
time order, a sorted search (an ASOF match) finds for each (parent, cutoff) its last row at or before
the cutoff, and vectorized prefix scans (numpy/pandas, exact per parent) give the state after those
rows. That is linear in the child's rows plus the queries whatever the fan-out (``flights -> planes -> flights``
over every flight of the year). A child whose own features depend on the cutoff (an aggregate below
it, depth 3) is joined to its visible rows and grouped by (parent, cutoff) in SQL.

Primitives: ``count`` (rows), ``sum`` ``mean`` ``min`` ``max`` ``std`` (sample, ddof=1) of numeric
features, ``mode`` and ``num_unique`` of category features, ``last`` of both (the value, null included,
of the latest row by time, then row order), ``time_since_last`` and ``time_since_first`` for children
with a time column. Empty groups give 0 for count, sum and num_unique and missing otherwise. MODE is
the most frequent non-null value; a tie goes to the value that reached that count first.

The result is cached as parquet under ``cache_root()/dfs``, keyed by a hash of the schema, the data
files, the task spec, the seeds and the config.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fourdb.errors import FourdbError
from fourdb.features.columns import MAX_CATEGORIES, EncodedTable
from fourdb.features.single_table import seed_row_features
from fourdb.rdb import Database
from fourdb.rdb.schema import Schema, Table
from fourdb.utils import cache_root, duckdb_connect, progress as progress_bar, stable_hash

log = logging.getLogger("fourdb")

NUMERIC_PRIMITIVES = ("sum", "mean", "min", "max", "std", "last")
CATEGORY_PRIMITIVES = ("mode", "num_unique", "last")
PRIMITIVES = ("count", "sum", "mean", "min", "max", "std", "mode", "num_unique", "last",
              "time_since_last", "time_since_first")
MAX_DEPTH = 3
DFS_VERSION = 1  # bump when the computed values change, so stale caches are not read
T_MIN = "TIMESTAMP_NS '1678-01-01 00:00:00'"  # a row without time: always visible
T_MAX = "TIMESTAMP_NS '2262-01-01 00:00:00'"  # cutoff of a per-row (cutoff-free) relation
NS_PER_DAY = 86400e9


# ---------------------------------------------------------------------------------------------- plan
@dataclass
class Feature:
    name: str
    dtype: str  # numeric | category


@dataclass
class Lookup:
    fk: str  # foreign-key column of the current table
    label: str  # parent name as it appears in feature names: "planes" or "airports[origin]"
    node: "Node"


@dataclass
class Agg:
    child: str
    fk: str  # the child's foreign key pointing to the current table
    label: str  # "purchases" or "flights[origin]"
    node: "Node"  # the child's own feature tree
    outputs: list[tuple[str, int | None]] = field(default_factory=list)  # (primitive, input feature index)


@dataclass
class Node:
    """The features of one table reached from the seed: own columns, lookups and aggregates."""

    table: str
    key: str  # identifies the subtree (table, remaining depth, edge it came from, seed hiding)
    own: list[str]
    lookups: list[Lookup]
    aggs: list[Agg]
    features: list[Feature]

    @property
    def has_aggs(self) -> bool:
        return bool(self.aggs) or any(lk.node.has_aggs for lk in self.lookups)


def _label(name: str, fk: str, n_links: int) -> str:
    return name if n_links == 1 else f"{name}[{fk}]"


def _agg_dtype(primitive: str, input_dtype: str | None) -> str:
    return "category" if primitive == "mode" or (primitive == "last" and input_dtype == "category") else "numeric"


def _agg_name(primitive: str, label: str, child: Table, feature: Feature | None) -> str:
    if primitive == "count":
        return f"COUNT({label})"
    if primitive.startswith("time_since"):
        return f"{primitive.upper()}({label}.{child.time_column})"
    return f"{primitive.upper()}({label}.{feature.name})"


def build_plan(schema: Schema, table: str, depth: int, primitives=PRIMITIVES, back_fk: str | None = None,
               seed_hidden: frozenset | None = None) -> Node:
    """The feature tree of ``table`` with ``depth`` hops left.

    ``back_fk`` is the foreign key of ``table`` that led here from its parent (an aggregate): looking
    it up again would only repeat the parent. ``seed_hidden`` marks the seed node (its own columns
    come from the single-table encoder; hidden foreign keys are not followed).
    """
    t = schema.table(table)
    is_seed = seed_hidden is not None
    own = [] if is_seed else [c.name for c in t.columns if c.dtype in ("numeric", "category")]
    features = [Feature(c, t.column(c).dtype) for c in own]
    lookups, aggs = [], []
    if depth >= 1:
        for fk in t.foreign_keys:
            if fk.name == back_fk or (is_seed and fk.name in seed_hidden):
                continue
            parent = fk.link_table
            label = _label(parent, fk.name, sum(c.link_table == parent for c in t.foreign_keys))
            sub = build_plan(schema, parent, depth - 1, primitives)
            lookups.append(Lookup(fk.name, label, sub))
            features += [Feature(f"{label}.{f.name}", f.dtype) for f in sub.features]
        for child in schema.tables:
            links = [c for c in child.foreign_keys if c.link_table == table]
            for fk in links:
                label = _label(child.name, fk.name, len(links))
                sub = build_plan(schema, child.name, depth - 1, primitives, back_fk=fk.name)
                agg = Agg(child.name, fk.name, label, sub)
                if "count" in primitives:
                    agg.outputs.append(("count", None))
                for i, f in enumerate(sub.features):
                    for p in NUMERIC_PRIMITIVES if f.dtype == "numeric" else CATEGORY_PRIMITIVES:
                        if p in primitives:
                            agg.outputs.append((p, i))
                if child.time_column:
                    agg.outputs += [(p, None) for p in ("time_since_last", "time_since_first") if p in primitives]
                if agg.outputs:
                    aggs.append(agg)
                    features += [Feature(_agg_name(p, label, child, None if i is None else sub.features[i]),
                                         _agg_dtype(p, None if i is None else sub.features[i].dtype))
                                 for p, i in agg.outputs]
    hidden_key = "" if not is_seed else "seed:" + ",".join(sorted(seed_hidden))
    key = f"{table}|{depth}|{back_fk}|{hidden_key}"
    return Node(table, key, own, lookups, aggs, features)


def check_config(depth, primitives) -> tuple[int, tuple[str, ...]]:
    try:
        depth = int(depth)
    except (TypeError, ValueError):
        raise FourdbError(f"features=dfs: depth must be an integer 1..{MAX_DEPTH}, got {depth!r}") from None
    if not 1 <= depth <= MAX_DEPTH:
        raise FourdbError(f"features=dfs: depth must be 1..{MAX_DEPTH}, got {depth}")
    if isinstance(primitives, str):
        primitives = [primitives]
    primitives = tuple(str(p).lower() for p in (primitives or ()))
    unknown = [p for p in primitives if p not in PRIMITIVES]
    if unknown:
        raise FourdbError(f"features=dfs: unknown primitive '{unknown[0]}' (choose from {', '.join(PRIMITIVES)})")
    if not primitives:
        raise FourdbError(f"features=dfs: no primitives given (choose from {', '.join(PRIMITIVES)})")
    return depth, tuple(p for p in PRIMITIVES if p in primitives)


# ------------------------------------------------------------------------------------------ compiler
_TEMP = re.compile(r"\b__[a-z]+\d+\b")


@dataclass
class _Step:
    desc: str
    run: str | Callable  # SQL text, or a function of the connection
    uses: set[str] = field(default_factory=set)


class _Compiler:
    """Turns a feature tree into steps: SQL statements over temp tables, one vectorized prefix scan per
    running aggregate, and fetches of the seed-level results. Each temp table is dropped after its
    last use.

    Relations below an aggregate are SQL tables ``(qid, k, cutoff, c0..cn)``. The seed's own tree
    (the seed and the parents it reaches by lookups) is assembled at the end: each of its aggregates
    is fetched once as an Arrow table, and lookups are composed as row-index maps, so the wide result
    is gathered column by column instead of through a chain of wide joins.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, db: Database, tables: set[str]):
        self.con, self.db, self.schema = con, db, db.schema
        self.tables = tables
        self.steps: list[_Step] = []
        self.n = 0
        self.bases: dict[str, str] = {}
        self.relations: dict[tuple[str, str], tuple[str, int]] = {}
        self.views: set[str] = set()
        self.per_row: set[str] = set()  # query sets that are every row of their table, cutoff-free
        self.statics: dict[str, str] = {}  # child node -> relation of its rows' own features
        self.safe: dict[tuple[str, str], bool] = {}
        self.frames: dict[str, pa.Table] = {}  # running-state tables registered with DuckDB
        self.fetched: dict[str, pa.Table] = {}  # seed-level results, gathered at the end

    def new(self, prefix: str) -> str:
        self.n += 1
        return f"__{prefix}{self.n}"

    def emit(self, desc: str, run, uses=()) -> None:
        used = set(_TEMP.findall(run)) if isinstance(run, str) else set(uses)
        self.steps.append(_Step(desc, run, used))

    def fetch(self, desc: str, sql: str) -> str:
        name = self.new("f")

        def run(con, name=name, sql=sql):
            self.fetched[name] = _arrow(con, sql)

        self.emit(desc, run, uses=set(_TEMP.findall(sql)))
        return name

    def with_drops(self) -> list[_Step]:
        """The steps, each temp table dropped right after the last step that reads it."""
        last: dict[str, int] = {}
        reads: dict[str, set[str]] = {}  # a view reads, whenever it is read, what it was made of
        for st in self.steps:
            if isinstance(st.run, str):
                made = re.match(r"CREATE TEMP VIEW (\S+)", st.run)
                if made:
                    reads[made.group(1)] = st.uses - {made.group(1)}

        def closure(names: set[str]) -> set[str]:
            out, todo = set(), list(names)
            while todo:
                name = todo.pop()
                if name not in out:
                    out.add(name)
                    todo += reads.get(name, ())
            return out

        for i, st in enumerate(self.steps):
            for name in closure(st.uses):
                last[name] = i
        keep = set(self.bases.values())
        out = []
        for i, st in enumerate(self.steps):
            out.append(st)
            dead = sorted(n for n, j in last.items() if j == i and n not in keep)
            if dead:
                out.append(_Step("free", lambda con, dead=dead: self.drop(dead)))
        return out

    def drop(self, names: list[str]) -> None:
        for name in names:
            if name in self.frames:
                self.con.unregister(name)
                del self.frames[name]
            elif name in self.views:
                self.con.execute(f"DROP VIEW IF EXISTS {name}")
            else:
                self.con.execute(f"DROP TABLE IF EXISTS {name}")

    # -- base tables: row id, time, time order, parent row ids and feature columns ------------------
    def col(self, table: Table, name: str) -> str:
        return f"v{table.column_names.index(name)}"

    def fk(self, table: Table, name: str) -> str:
        return f"p{table.column_names.index(name)}"

    def register(self) -> None:
        for tname in sorted(self.tables):
            t = self.schema.table(tname)
            df = self.db.tables[tname]
            keep = [i for i, c in enumerate(t.columns)
                    if c.dtype in ("numeric", "category", "primary_key", "foreign_key") or c.name == t.time_column]
            # DuckDB scans the database's own columns in place: renamed, not copied
            frame = {f"v{i}": df[t.columns[i].name] for i in keep}
            frame |= {"__rid": np.arange(len(df), dtype=np.int64), "__ord": _time_order(df, t)}
            frame = pd.DataFrame(frame, copy=False)
            self.con.register(self.src(tname), frame)
        for i, tname in enumerate(sorted(self.tables)):
            self.bases[tname] = f"__b{i}"
        for tname in sorted(self.tables):
            self.base(self.schema.table(tname))

    def src(self, table: str) -> str:
        """The registered frame of a table: named by position, since a table's name may hold any character."""
        return f"__src_{sorted(self.tables).index(table)}"  # not a temp-table name (see _TEMP): never dropped

    def base(self, t: Table) -> None:
        time_expr = f"CAST(s.{self.col(t, t.time_column)} AS TIMESTAMP_NS)" if t.time_column else "NULL::TIMESTAMP_NS"
        sel = ["s.__rid", f"{time_expr} AS __time", f"coalesce({time_expr}, {T_MIN}) AS __t", "s.__ord"]
        joins = []
        for i, c in enumerate(t.columns):
            if c.dtype == "numeric":
                sel.append(f"CAST(s.v{i} AS DOUBLE) AS v{i}")
            elif c.dtype == "category":
                sel.append(f"CAST(s.v{i} AS VARCHAR) AS v{i}")
            elif c.dtype == "foreign_key" and c.link_table in self.tables:
                parent = self.schema.table(c.link_table)
                pk = f"v{parent.column_names.index(parent.primary_key)}"
                same_kind = (pd.api.types.is_integer_dtype(self.db.tables[t.name][c.name])
                             == pd.api.types.is_integer_dtype(self.db.tables[parent.name][parent.primary_key]))
                left, right = (f"s.v{i}", f"j{i}.{pk}") if same_kind else \
                    (f"CAST(s.v{i} AS VARCHAR)", f"CAST(j{i}.{pk} AS VARCHAR)")
                joins.append(f"LEFT JOIN {self.src(parent.name)} j{i} ON {left} = {right}")
                sel.append(f"j{i}.__rid AS p{i}")
        self.emit(f"table {t.name}", f"CREATE TEMP TABLE {self.bases[t.name]} AS SELECT {', '.join(sel)} "
                                     f"FROM {self.src(t.name)} s {' '.join(joins)}")

    def query(self, desc: str, select: str) -> str:
        """A query set: distinct (k, cutoff) rows numbered by ``qid``."""
        q = self.new("q")
        self.emit(desc, f"CREATE TEMP TABLE {q} AS SELECT CAST(row_number() OVER () - 1 AS BIGINT) AS qid, k, cutoff "
                        f"FROM ({select})")
        return q

    def lookup_query(self, t: Table, lk: Lookup, q: str) -> str:
        parent = self.schema.table(lk.node.table)
        b, fkc = self.bases[t.name], self.fk(t, lk.fk)
        src, qa = self.rows(q, b)
        sql = f"SELECT DISTINCT b.{fkc} AS k, {qa}.cutoff FROM {src}"
        if parent.time_column:  # a parent row newer than the cutoff is not there yet
            sql += f" JOIN {self.bases[parent.name]} bp ON bp.__rid = b.{fkc} AND bp.__t <= {qa}.cutoff"
        else:
            sql += f" WHERE b.{fkc} IS NOT NULL"
        return self.query(f"lookup {t.name}.{lk.fk} -> {parent.name}", sql)

    def rows(self, q: str, b: str) -> tuple[str, str]:
        """FROM clause pairing each query row with its table row ``b``, and the alias of (qid, k, cutoff)."""
        if q in self.per_row:  # the query rows are the table's own rows, columns included: no join
            return f"{q} b", "b"
        return f"{q} q JOIN {b} b ON b.__rid = q.k", "q"

    # -- is a child's looked-up value known whenever the child row is? ------------------------------
    def edge_safe(self, table: str, fk: str) -> bool:
        key = (table, fk)
        if key not in self.safe:
            t = self.schema.table(table)
            parent = self.schema.table(t.column(fk).link_table)
            if parent.time_column is None:
                ok = True
            elif t.time_column is None:
                ok = False
            else:
                ptime = self.db.tables[parent.name].set_index(parent.primary_key)[parent.time_column]
                child = self.db.tables[table]
                looked = child[fk].map(ptime)
                ctime = child[t.time_column]
                ok = not bool(((looked > ctime) | (ctime.isna() & looked.notna())).any())
            self.safe[key] = ok
        return self.safe[key]

    def lookups_safe(self, node: Node) -> bool:
        return all(self.edge_safe(node.table, lk.fk) and self.lookups_safe(lk.node) for lk in node.lookups)

    # -- relations below an aggregate: SQL tables (qid, k, cutoff, c0..cn) --------------------------
    def relation(self, node: Node, q: str, view: bool = False) -> tuple[str, int]:
        """``view``: a view rather than a table, for a relation read once (a child's rows for a scan)."""
        memo = (node.key, q)
        if memo in self.relations:
            return self.relations[memo]
        t = self.schema.table(node.table)
        b = self.bases[t.name]
        src, qa = self.rows(q, b)
        sel, joins = [f"b.{self.col(t, c)}" for c in node.own], []
        for li, lk in enumerate(node.lookups):
            ql = self.lookup_query(t, lk, q)
            rl, n = self.relation(lk.node, ql)
            joins.append(f"LEFT JOIN {rl} l{li} ON l{li}.k = b.{self.fk(t, lk.fk)} AND l{li}.cutoff = {qa}.cutoff")
            sel += [f"l{li}.c{m}" for m in range(n)]
        for ai, ag in enumerate(node.aggs):
            ra = self.new("a")
            self.emit(f"aggregate {ag.label}", f"CREATE TEMP TABLE {ra} AS {self.aggregate(ag, q, cast=False)}")
            joins.append(f"LEFT JOIN {ra} a{ai} ON a{ai}.qid = {qa}.qid")
            sel += [f"a{ai}.c{m}" for m in range(len(ag.outputs))]
        r = self.new("r")
        cols = [f"{qa}.qid", f"{qa}.k", f"{qa}.cutoff"] + [f"{e} AS c{m}" for m, e in enumerate(sel)]
        if view:
            self.views.add(r)
        self.emit(f"features {t.name}", f"CREATE TEMP {'VIEW' if view else 'TABLE'} {r} AS SELECT {', '.join(cols)} "
                                        f"FROM {src} {' '.join(joins)}")
        self.relations[memo] = (r, len(sel))
        return r, len(sel)

    # -- the seed's tree: fetched once, gathered at the end ------------------------------------------
    def assemble(self, node: Node, q: str) -> Callable[[np.ndarray], list[pa.Array]]:
        """Steps that compute ``node``'s features for the query rows ``q``, and a function that gathers
        them for given ``qid`` positions (-1: missing) once the steps have run, letting go of each
        fetched table once it is gathered."""
        t = self.schema.table(node.table)
        b = self.bases[t.name]
        parts = []
        if node.own:
            own = self.fetch(f"columns {t.name}", f"SELECT q.qid, {', '.join(f'b.{self.col(t, c)} AS c{m}' for m, c in enumerate(node.own))} "
                                                  f"FROM {q} q JOIN {b} b ON b.__rid = q.k")
            parts.append(lambda idx, own=own: _gather(self.fetched.pop(own), idx))
        for lk in node.lookups:
            ql = self.lookup_query(t, lk, q)
            link = self.fetch(f"link {t.name}.{lk.fk}",
                              f"SELECT q.qid, l.qid AS pq FROM {q} q JOIN {b} b ON b.__rid = q.k "
                              f"JOIN {ql} l ON l.k = b.{self.fk(t, lk.fk)} AND l.cutoff = q.cutoff")
            sub = self.assemble(lk.node, ql)
            parts.append(lambda idx, link=link, sub=sub: sub(_compose(self.fetched.pop(link), idx)))
        for ag in node.aggs:
            fa = self.fetch(f"aggregate {ag.label}", self.aggregate(ag, q, cast=True))
            parts.append(lambda idx, fa=fa: _gather(self.fetched.pop(fa), idx))
        return lambda idx: [col for part in parts for col in part(idx)]

    # -- aggregates: a SELECT of (qid, k, cutoff, c0..cm) for every row of q -------------------------
    def aggregate(self, ag: Agg, q: str, cast: bool) -> str:
        if not ag.node.has_aggs and self.lookups_safe(ag.node):
            sql = self.running_aggregate(ag, q)
        else:
            sql = self.joined_aggregate(ag, q)
        exprs = sql[1]
        outs = []
        for m, ((p, i), e) in enumerate(zip(ag.outputs, exprs)):
            numeric = _agg_dtype(p, None if i is None else ag.node.features[i].dtype) == "numeric"
            outs.append(f"CAST({e} AS FLOAT) AS c{m}" if cast and numeric else f"{e} AS c{m}")
        return sql[0].format(outs=", ".join(outs))

    @staticmethod
    def _inputs(ag: Agg) -> dict[int, set[str]]:
        need: dict[int, set[str]] = {}
        for p, i in ag.outputs:
            if i is not None:
                need.setdefault(i, set()).add(p)
        return need

    def running_aggregate(self, ag: Agg, q: str) -> tuple[str, list[str]]:
        """Prefix aggregates of the child's rows per parent in time order (one sort, then vectorized
        scans), and an ASOF join that picks for each (parent, cutoff) the state after its last row.
        Only the children of parents in ``q``, up to their latest cutoff, are scanned."""
        child = self.schema.table(ag.child)
        need = self._inputs(ag)
        bc = self.bases[child.name]
        fkc = self.fk(child, ag.fk)
        cols = [f"c.{fkc} AS k", "c.__ord", "c.__t", "c.__time"]
        src = f"{bc} c"
        if need:
            if ag.node.key not in self.statics:  # the child's own features, once per row
                qs = self.new("q")
                self.views.add(qs)
                self.per_row.add(qs)
                self.emit(f"rows {child.name}", f"CREATE TEMP VIEW {qs} AS SELECT __rid AS qid, __rid AS k, "
                                                f"{T_MAX} AS cutoff, * FROM {bc}")
                self.statics[ag.node.key] = self.relation(ag.node, qs, view=True)[0]
            src += f" JOIN {self.statics[ag.node.key]} r ON r.k = c.__rid"
            cols += [f"r.c{i} AS x{i}" for i in need]
        # rows after a parent's latest cutoff never reach a query: they are left out of the scan
        sql = (f"SELECT {', '.join(cols)} FROM {src} JOIN (SELECT k, max(cutoff) AS until FROM {q} GROUP BY k) u "
               f"ON u.k = c.{fkc} AND c.__t <= u.until")
        run = self.new("run")
        dtypes = {i: ag.node.features[i].dtype for i in need}

        def scan(con, sql=sql, run=run, need=need, dtypes=dtypes, q=q):
            rows = _arrow(con, sql)  # sorted here: a SQL sort would carry every wide row along
            rows = rows.take(np.lexsort((_numpy(rows, "__ord"), _numpy(rows, "k"))))
            queries = _arrow(con, f"SELECT qid, k, cutoff FROM {q}")
            pos = asof_positions(_numpy(rows, "k", np.int64), _numpy(rows, "__t", "datetime64[ns]").view(np.int64),
                                 _numpy(queries, "k", np.int64),
                                 _numpy(queries, "cutoff", "datetime64[ns]").view(np.int64))
            state = _prefix_scan(rows, need, dtypes, pos)
            del rows
            self.frames[run] = pa.table({"qid": queries.column("qid"), **state})
            con.register(run, self.frames[run])

        self.emit(f"running {ag.label} per {ag.fk}", scan, uses=set(_TEMP.findall(sql)) | {q})
        exprs = [self._running_expr(p, i) for p, i in ag.outputs]
        return (f"SELECT m.qid, m.k, m.cutoff, {{outs}} FROM {q} m LEFT JOIN {run} r ON r.qid = m.qid", exprs)

    @staticmethod
    def _running_expr(p: str, i: int | None) -> str:
        return {
            "count": "coalesce(r.n, 0)",
            "sum": f"coalesce(r.s{i} + r.n{i} * r.m{i}, 0)",
            "mean": f"CASE WHEN r.n{i} > 0 THEN r.s{i} / r.n{i} + r.m{i} END",
            "std": f"CASE WHEN r.n{i} > 1 THEN sqrt(greatest((r.q{i} - r.s{i} * r.s{i} / r.n{i}) / (r.n{i} - 1), 0)) END",
            "min": f"r.mn{i}", "max": f"r.mx{i}", "last": f"r.l{i}",
            "mode": f"r.mo{i}", "num_unique": f"coalesce(r.u{i}, 0)",
            "time_since_last": f"(epoch_ns(m.cutoff) - epoch_ns(r.tl)) / {NS_PER_DAY}",
            "time_since_first": f"(epoch_ns(m.cutoff) - epoch_ns(r.tf)) / {NS_PER_DAY}",
        }[p]

    def joined_aggregate(self, ag: Agg, q: str) -> tuple[str, list[str]]:
        """The child's visible rows per (parent, cutoff), with their cutoff-dependent features, grouped."""
        child = self.schema.table(ag.child)
        bc = self.bases[child.name]
        fkc = self.fk(child, ag.fk)
        need = self._inputs(ag)
        pairs = self.new("p")
        self.emit(f"rows {ag.label} per {ag.fk}",
                  f"CREATE TEMP TABLE {pairs} AS SELECT q.qid AS pq, c.__rid AS k, q.cutoff, c.__ord, c.__time "
                  f"FROM {q} q JOIN {bc} c ON c.{fkc} = q.k AND c.__t <= q.cutoff")
        src = f"{pairs} p"
        cols = ["p.pq", "p.__ord", "p.__time"]
        if need:
            qc = self.query(f"rows {ag.label}", f"SELECT DISTINCT k, cutoff FROM {pairs}")
            rc, _ = self.relation(ag.node, qc)
            src += f" LEFT JOIN {rc} r ON r.k = p.k AND r.cutoff = p.cutoff"
            cols += [f"r.c{i} AS x{i}" for i in need]
        ctes = [f"j AS (SELECT {', '.join(cols)} FROM {src})"]
        g = ["pq", "count(*) AS n", "max(__time) AS tl", "min(__time) AS tf"]
        big = len(self.db.tables[child.name]) + 1
        modes = []
        agg_sql = {"sum": "sum(x{i}) AS s{i}", "mean": "avg(x{i}) AS mu{i}", "std": "stddev_samp(x{i}) AS sd{i}",
                   "min": "min(x{i}) AS mn{i}", "max": "max(x{i}) AS mx{i}", "last": "arg_max_null(x{i}, __ord) AS l{i}",
                   "num_unique": "count(DISTINCT x{i}) AS u{i}"}
        for i, prims in need.items():
            g += [agg_sql[p].format(i=i) for p in sorted(prims) if p in agg_sql]
            if "mode" in prims:
                modes.append(i)
        ctes.append(f"g AS (SELECT {', '.join(g)} FROM j GROUP BY pq)")
        joins = ["LEFT JOIN g ON g.pq = q.qid"]
        for i in modes:  # most frequent value; a tie goes to the value that reached the count first
            ctes.append(f"v{i} AS (SELECT pq, x{i}, count(*) AS cnt, max(__ord) AS lo FROM j "
                        f"WHERE x{i} IS NOT NULL GROUP BY pq, x{i})")
            ctes.append(f"mo{i} AS (SELECT pq, arg_max(x{i}, cnt * {big} - lo) AS mo FROM v{i} GROUP BY pq)")
            joins.append(f"LEFT JOIN mo{i} ON mo{i}.pq = q.qid")
        exprs = {
            "count": "coalesce(g.n, 0)", "sum": "coalesce(g.s{i}, 0)", "mean": "g.mu{i}", "std": "g.sd{i}",
            "min": "g.mn{i}", "max": "g.mx{i}", "last": "g.l{i}", "num_unique": "coalesce(g.u{i}, 0)",
            "mode": "mo{i}.mo",
            "time_since_last": f"(epoch_ns(q.cutoff) - epoch_ns(g.tl)) / {NS_PER_DAY}",
            "time_since_first": f"(epoch_ns(q.cutoff) - epoch_ns(g.tf)) / {NS_PER_DAY}",
        }
        out = [exprs[p].format(i=i) for p, i in ag.outputs]
        return (f"WITH {', '.join(ctes)} SELECT q.qid, q.k, q.cutoff, {{outs}} FROM {q} q {' '.join(joins)}", out)


def _time_order(df: pd.DataFrame, t: Table) -> np.ndarray:
    """Each row's rank (from 1) by (time, row number), rows without time first: numbered here rather
    than by a window in SQL, which would sort every column of the table along with the time."""
    # NaT is the smallest time; a table without time is in row order
    ns = df[t.time_column].to_numpy(dtype="datetime64[ns]").view(np.int64) if t.time_column else np.zeros(len(df))
    rank = np.empty(len(df), dtype=np.int64)
    rank[np.argsort(ns, kind="stable")] = np.arange(1, len(df) + 1)
    return rank


def _positions(table: pa.Table, idx: np.ndarray) -> pa.Array:
    """Row of ``table`` (which has a ``qid`` column) for each wanted qid (-1 or absent: null)."""
    qid = _numpy(table, "qid", np.int64)
    row = np.full(int(qid.max()) + 1 if len(qid) else 0, -1, dtype=np.int64)
    row[qid] = np.arange(len(qid))
    ok = (idx >= 0) & (idx < len(row))
    pos = np.where(ok, row[np.where(ok, idx, 0)] if len(row) else -1, -1)
    return pa.array(pos, mask=pos < 0)


def _gather(table: pa.Table, idx: np.ndarray) -> list[pa.Array]:
    pos = _positions(table, idx)
    names = [n for n in table.column_names if n.startswith("c") and n[1:].isdigit()]
    return [table.column(n).take(pos).combine_chunks() if table.num_rows else
            pa.nulls(len(idx), table.column(n).type) for n in names]


def _compose(link: pa.Table, idx: np.ndarray) -> np.ndarray:
    """Follow a (qid -> parent qid) link for each position in ``idx``; missing stays -1."""
    qid, pq = _numpy(link, "qid", np.int64), _numpy(link, "pq", np.int64)
    up = np.full(int(qid.max()) + 1 if len(qid) else 0, -1, dtype=np.int64)
    up[qid] = pq
    ok = (idx >= 0) & (idx < len(up))
    return np.where(ok, up[np.where(ok, idx, 0)] if len(up) else -1, -1)


def _segments(k: np.ndarray):
    """Group id, group start and 'previous row in the same group' for rows sorted by group."""
    n = len(k)
    new = np.ones(n, dtype=bool)
    new[1:] = k[1:] != k[:-1]
    gid = np.cumsum(new) - 1
    start = np.flatnonzero(new)[gid]
    return gid, start


def _arrow(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    rel = con.sql(sql)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


def _numpy(table: pa.Table, name: str, dtype=None) -> np.ndarray:
    out = table.column(name).to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype)


def asof_positions(k: np.ndarray, t: np.ndarray, qk: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """For each query (qk, qt), the last row with k == qk and t <= qt among rows sorted by (k, t), or -1."""
    if not len(k) or not len(qk):
        return np.full(len(qk), -1, dtype=np.int64)
    times, rank = np.unique(np.concatenate([t, qt]), return_inverse=True)
    width = len(times) + 1
    base = min(int(k.min()), int(qk.min()))
    rows = (k - base) * width + rank[:len(k)]
    wanted = (qk - base) * width + rank[len(k):]
    pos = np.searchsorted(rows, wanted, side="right") - 1
    ok = pos >= 0
    ok[ok] = k[pos[ok]] == qk[ok]
    return np.where(ok, pos, -1)


_CHUNK = 16  # columns per 2-D scan: bounds the scratch memory of a wide child table


def _prefix_scan(df: pa.Table, need: dict[int, set[str]], dtypes: dict[int, str], pos: np.ndarray) -> dict:
    """The running state of a child table sorted by (k, time order) after row ``pos[j]`` (-1: before any
    row) for each query j: count, shifted sums and sums of squares, min, max, last value, number of
    distinct values, mode, first and last time. Every scan is exact per group: nothing carries over
    from one parent's rows to the next. Returns Arrow arrays, one entry per query."""
    k = _numpy(df, "k", np.int64)
    n = len(k)
    gid, start = _segments(k)
    idx = np.arange(n)
    hit = pos >= 0
    at = np.where(hit, pos, 0) if n else np.zeros(len(pos), dtype=np.int64)
    out = {}

    def keep(name, values, missing=None, rows=at):
        """The state at the wanted rows only."""
        if isinstance(values, _Categories):
            code = np.where(hit, values.code[at], -1) if n else np.full(len(pos), -1)
            out[name] = pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32), mask=code < 0), values.uniques)
        else:
            v = values[rows] if n else np.zeros(len(pos), dtype=values.dtype)
            mask = ~hit if missing is None else ~hit | missing[rows] if n else ~hit
            out[name] = pa.array(v, mask=mask)

    keep("n", (idx - start + 1).astype(np.float64))
    tl = _numpy(df, "__time", "datetime64[ns]")
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if n else np.zeros(0, dtype=np.int64)
    first_timed = np.minimum.reduceat(np.where(~np.isnat(tl), idx, n), starts)[gid] if n else idx
    keep("tl", tl, np.isnat(tl))  # rows without time sort first, so the latest known time is the row's own
    tf = tl[np.minimum(first_timed, max(n - 1, 0))] if n else tl
    keep("tf", tf, idx < first_timed)
    scans = {"cumsum": {}, "cummin": {}, "cummax": {}}  # column name -> values, scanned per group in 2-D
    # The scans are read at the query rows only: the rows are first reduced stretch by stretch, a stretch
    # ending at a query row or a group's end, and only those partial results are scanned per group.
    cuts = np.unique(np.r_[starts, pos[hit] + 1])
    cuts = cuts[cuts < n]
    stretch = np.searchsorted(cuts, at, side="right") - 1  # the stretch that ends at each query's row

    def flush(how: str, at_least: int = 1) -> None:
        """Exact per-group scans of the pending columns, a few at a time in one 2-D pass."""
        cols = scans[how]
        if len(cols) < at_least:
            return
        names = list(cols)
        matrix = np.empty((n, len(names)), order="F")  # column by column: each column contiguous
        for j, name in enumerate(names):
            matrix[:, j] = cols.pop(name)
        reduce = {"cumsum": np.add, "cummin": np.minimum, "cummax": np.maximum}[how]
        parts = reduce.reduceat(matrix, cuts, axis=0) if n else matrix
        del matrix
        scanned = getattr(pd.DataFrame(parts, copy=False).groupby(gid[cuts], sort=False), how)().to_numpy()
        for j, name in enumerate(names):
            v = scanned[:, j]
            keep(name, v, None if how == "cumsum" else np.isinf(v), rows=stretch)

    for i, prims in need.items():
        for how in scans:
            flush(how, _CHUNK)
        if dtypes[i] == "numeric":
            x = _numpy(df, f"x{i}", np.float64)
            ok = ~np.isnan(x)
            if prims & {"sum", "mean", "std"}:
                # shift by the group's first known value, so sums of squares keep their precision
                first = np.minimum.reduceat(np.where(ok, idx, n), starts)[gid] if n else idx
                m = np.where(first < n, x[np.minimum(first, max(n - 1, 0))], 0.0)
                z = np.where(ok, x - m, 0.0)
                keep(f"m{i}", m)
                scans["cumsum"][f"n{i}"], scans["cumsum"][f"s{i}"] = ok.astype(np.float64), z
                if "std" in prims:
                    scans["cumsum"][f"q{i}"] = z * z
            if "min" in prims:
                scans["cummin"][f"mn{i}"] = np.where(ok, x, np.inf)
            if "max" in prims:
                scans["cummax"][f"mx{i}"] = np.where(ok, x, -np.inf)
            if "last" in prims:
                keep(f"l{i}", x, ~ok)
        else:
            code, uniques = _codes(df.column(f"x{i}"))
            if "last" in prims:
                keep(f"l{i}", _Categories(code, uniques))
            if prims & {"mode", "num_unique"}:
                order = np.lexsort((idx, code, gid))
                sg, sc = gid[order], code[order]
                new = np.ones(n, dtype=bool)
                new[1:] = (sg[1:] != sg[:-1]) | (sc[1:] != sc[:-1])
                run_start = np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else new
                cnt = np.empty(n, dtype=np.int64)
                cnt[order] = np.arange(n) - run_start + 1  # running count of the row's value
                cnt[code < 0] = 0
                if "num_unique" in prims:
                    scans["cumsum"][f"u{i}"] = (cnt == 1).astype(np.float64)
                if "mode" in prims and n:
                    big = n + 1
                    best = np.maximum.accumulate(cnt + gid * big) - gid * big  # running max count per group
                    prev = np.where(idx > start, np.r_[0, best[:-1]], 0)
                    record = cnt > prev  # this value's count beats every earlier count: it leads now
                    last_rec = np.maximum.accumulate(np.where(record, idx, -1))
                    mode_code = np.where(last_rec >= start, code[np.maximum(last_rec, 0)], -1)
                    keep(f"mo{i}", _Categories(mode_code, uniques))
                elif "mode" in prims:
                    keep(f"mo{i}", _Categories(code, uniques))
    for how in scans:
        flush(how)
    return out


class _Categories:
    """Category values as codes into a dictionary (-1: missing), kept as codes until they go to Arrow."""

    def __init__(self, code: np.ndarray, uniques: pa.Array):
        self.code, self.uniques = code, uniques


def _codes(column) -> tuple[np.ndarray, pa.Array]:
    """Codes (-1: missing) and dictionary of a string column."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    code = pc.fill_null(arr.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return code, arr.dictionary


def _tables_of(node: Node, out: set[str]) -> set[str]:
    out.add(node.table)
    for lk in node.lookups:
        _tables_of(lk.node, out)
    for ag in node.aggs:
        _tables_of(ag.node, out)
    return out


def compute_dfs(db: Database, seed_table: str, seeds: pd.DataFrame, depth: int = 2, primitives=PRIMITIVES,
                hidden=(), progress: bool = True, threads: int | None = None) -> pd.DataFrame:
    """DFS features of each seed row (columns ``node``: row number in ``seed_table``, ``cutoff``).

    Returns one row per seed, in order, one column per feature: float32 for numeric features,
    strings (object) for category ones.
    """
    depth, primitives = check_config(depth, primitives)
    plan = build_plan(db.schema, seed_table, depth, primitives, seed_hidden=frozenset(hidden))
    names = _unique([f.name for f in plan.features])
    if not plan.features:
        return pd.DataFrame(index=pd.RangeIndex(len(seeds)))
    start = time.perf_counter()
    con = duckdb_connect()
    try:
        con.execute(f"SET threads TO {int(threads or os.cpu_count() or 1)}")
        comp = _Compiler(con, db, _tables_of(plan, set()))
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
                    raise FourdbError(f"dfs: step '{st.desc}' failed: {str(e).splitlines()[0]}") from e
                if st.desc != "free":
                    bar.set_postfix_str(st.desc[:40], refresh=False)
                    bar.update(1)
                    log.debug("dfs step %-40s %6.2f s (cpu %6.2f s)", st.desc, time.perf_counter() - t0,
                              time.process_time() - c0)
        order = comp.fetched[where]
        idx = np.full(len(seeds), -1, dtype=np.int64)
        idx[_numpy(order, "__i", np.int64)] = _numpy(order, "qid", np.int64)
        cols = gather(idx)
        log.info("dfs: %d features for %d seeds in %d steps, %.1f s", len(names), len(seeds),
                 len(comp.steps), time.perf_counter() - start)
    finally:
        con.close()
    table = pa.table([c.dictionary_encode() if f.dtype == "category" else c for c, f in zip(cols, plan.features)],
                     names=names)
    del cols  # the table holds the only reference, so the conversion frees each column as it goes
    return table.to_pandas(split_blocks=True, self_destruct=True)


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        out.append(n if k == 0 else f"{n}#{k}")
        seen[n] = k + 1
    return out


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


def cached_dfs(db: Database, seed_table: str, seeds: pd.DataFrame, depth: int = 2, primitives=PRIMITIVES,
               hidden=(), task_hash: str = "", progress: bool = True) -> pd.DataFrame:
    """``compute_dfs`` through the parquet cache under ``cache_root()/dfs``."""
    depth, primitives = check_config(depth, primitives)
    if db.folder is None:  # a database made in memory (a certification cut): nothing to key a cache by cheaply
        return compute_dfs(db, seed_table, seeds, depth, primitives, hidden, progress)
    key = stable_hash(DFS_VERSION, db.schema.to_dict(), data_fingerprint(db), task_hash, seed_table,
                      seeds_hash(seeds), depth, list(primitives), sorted(hidden))
    path = cache_root() / "dfs" / f"{seed_table}-d{depth}-{key}.parquet"
    if path.exists():
        log.info("dfs: reading cached features %s", path)
        return pd.read_parquet(path)
    out = compute_dfs(db, seed_table, seeds, depth, primitives, hidden, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        out.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


# ------------------------------------------------------------------------------------------ encoding
def encode_features(frames: dict[str, pd.DataFrame], fit_split: str = "train") -> dict[str, EncodedTable]:
    """Numeric features standardized with ``fit_split`` statistics (NaN -> 0 plus a missing flag for
    features missing anywhere in it); category features as codes of its values (0 = unknown)."""
    fit = frames[fit_split]
    numeric = [c for c in fit.columns if pd.api.types.is_numeric_dtype(fit[c])]
    category = [c for c in fit.columns if c not in numeric]
    stats = {}
    for c in numeric:
        v = fit[c].to_numpy(dtype=np.float64)
        ok = ~np.isnan(v)
        mean = float(v[ok].mean()) if ok.any() else 0.0
        std = float(v[ok].std()) if ok.sum() > 1 else 1.0
        stats[c] = (mean, std if std > 0 else 1.0, not ok.all())
    vocab = {}
    for c in category:
        counts = fit[c].dropna().astype(str).value_counts()
        vocab[c] = list(counts.index[:MAX_CATEGORIES])
    out = {}
    for split, df in frames.items():
        n = len(df)
        nums, flags, num_names, flag_names = [], [], [], []
        for c in numeric:
            mean, std, flagged = stats[c]
            v = (df[c].to_numpy(dtype=np.float64) - mean) / std
            miss = np.isnan(v)
            nums.append(np.where(miss, 0.0, v).astype(np.float32))
            num_names.append(c)
            if flagged:
                flags.append(miss.astype(np.float32))
                flag_names.append(f"{c}:missing")
        cats = []
        for c in category:  # code i + 1 for the i-th most frequent training value, 0 for unknown or missing
            values = df[c].astype(object)
            values = values.where(values.isna(), values.astype(str))
            cats.append(pd.Categorical(values, categories=vocab[c]).codes.astype(np.int64) + 1)
        cols = nums + flags
        out[split] = EncodedTable(np.stack(cols, 1) if cols else np.zeros((n, 0), np.float32),
                                  np.stack(cats, 1) if cats else np.zeros((n, 0), np.int64),
                                  [len(vocab[c]) + 1 for c in category], num_names + flag_names, list(category))
    return out


def _concat(a: EncodedTable, b: EncodedTable) -> EncodedTable:
    return EncodedTable(np.concatenate([a.numeric, b.numeric], 1).astype(np.float32),
                        np.concatenate([a.categorical, b.categorical], 1),
                        a.cardinalities + b.cardinalities, a.numeric_names + b.numeric_names,
                        a.categorical_names + b.categorical_names)


def dfs_features(db: Database, task, splits: dict, depth: int = 2, primitives=PRIMITIVES,
        progress: bool = True) -> dict[str, EncodedTable]:
    """Feature set ``dfs``: the seed row's own (known) columns plus DFS features up to ``depth`` hops."""
    table = db.schema.table(task.spec.entity_table)
    hidden = tuple(task.hidden_columns)
    names = list(splits)
    seeds = pd.concat([splits[s][["node", "cutoff"]] for s in names], ignore_index=True)
    feats = cached_dfs(db, table.name, seeds, depth, primitives, hidden, task.spec.spec_hash, progress)
    bounds = np.cumsum([0] + [len(splits[s]) for s in names])
    frames = {s: feats.iloc[bounds[i]:bounds[i + 1]].reset_index(drop=True) for i, s in enumerate(names)}
    fit_split = "train" if "train" in frames else names[0]
    encoded = encode_features(frames, fit_split)
    own = seed_row_features(db, task, splits)
    return {s: _concat(own[s], encoded[s]) for s in names}
