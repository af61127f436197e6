"""The DFS compiler: a feature plan turned into steps over DuckDB temp tables.

SQL computes keys, lookups, joins and groupings; a running aggregate finds its child's rows and their
features in numpy (from the parent row ids and the tables' own columns) and hands them to the
vectorized prefix scans of ``scan``; the seed-level results are fetched as Arrow tables and gathered
at the end.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from fourdb.features.dfs.plan import Agg, Condition, Lookup, Node, agg_dtype
from fourdb.features.dfs.rows import TableRows
from fourdb.features.dfs.scan import (NS_PER_DAY, arrow_table, asof_positions, column_values, compose_links,
                                      gather_columns, prefix_scan, time_order)
from fourdb.rdb import Database
from fourdb.rdb.schema import Table

T_MIN = "TIMESTAMP_NS '1678-01-01 00:00:00'"  # a row without time: always visible

_TEMP = re.compile(r"\b__[a-z]+\d+\b")


@dataclass
class _Step:
    desc: str
    run: str | Callable  # SQL text, or a function of the connection
    uses: set[str] = field(default_factory=set)


class Compiler(TableRows):
    """Turns a feature tree into steps: SQL statements over temp tables, one vectorized prefix scan per
    running aggregate, and fetches of the seed-level results. Each temp table is dropped after its
    last use. The row-level reads of the tables (parent rows, a running aggregate's child rows and
    their features) are ``TableRows``'.

    Relations below an aggregate are SQL tables ``(qid, k, cutoff, c0..cn)``. The seed's own tree
    (the seed and the parents it reaches by lookups) is assembled at the end: each of its aggregates
    is fetched once as an Arrow table, and lookups are composed as row-index maps, so the wide result
    is gathered column by column instead of through a chain of wide joins.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, db: Database, tables: set[str]):
        super().__init__(con, db, tables)
        self.steps: list[_Step] = []
        self.n = 0
        self.bases: dict[str, str] = {}  # table -> its base view
        self.sql_fks: set[tuple[str, str]] = set()  # the foreign keys SQL reads: only their parent ids are made
        self.sql_where: dict[str, list[Condition]] = {}  # table -> the conditions SQL reads, as columns w0, w1..
        self.relations: dict[tuple[str, str], tuple[str, int]] = {}
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
            self.fetched[name] = arrow_table(con, sql)

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
            else:
                self.con.execute(f"DROP TABLE IF EXISTS {name}")

    # -- base tables: row id, time, time order, parent row ids and feature columns ------------------
    def col(self, table: Table, name: str) -> str:
        return f"v{table.column_names.index(name)}"

    def fk(self, table: Table, name: str) -> str:
        """The base view's column of a foreign key's parent row ids, which SQL then reads."""
        self.sql_fks.add((table.name, name))
        return f"p{table.column_names.index(name)}"

    def where(self, table: Table, cond: Condition) -> str:
        """The base view's column that says whether a row meets ``cond``: worked out in pandas, so that a
        value (any text) never becomes SQL."""
        conds = self.sql_where.setdefault(table.name, [])
        if cond not in conds:
            conds.append(cond)
        return f"w{conds.index(cond)}"

    def register(self) -> None:
        for tname in sorted(self.tables):
            t = self.schema.table(tname)
            df = self.db.tables[tname]
            keep = [i for i, c in enumerate(t.columns)
                    if c.dtype in ("numeric", "category", "primary_key", "foreign_key") or c.name == t.time_column]
            # DuckDB scans the database's own columns in place: renamed, not copied
            frame = {f"v{i}": df[t.columns[i].name] for i in keep}
            frame |= {"__rid": np.arange(len(df), dtype=self.ids), "__ord": time_order(df, t, self.ids)}
            self.sources[tname] = pd.DataFrame(frame, copy=False)
            self.con.register(self.src(tname), self.sources[tname])
        for i, tname in enumerate(sorted(self.tables)):
            self.bases[tname] = f"__b{i}"
        for tname in sorted(self.tables):
            self.base(self.schema.table(tname))

    def src(self, table: str) -> str:
        """The registered frame of a table: named by position, since a table's name may hold any character."""
        return f"__src_{sorted(self.tables).index(table)}"  # not a temp-table name (see _TEMP): never dropped

    def base(self, t: Table) -> None:
        """A view of the table with typed columns, time, time order and parent row ids. The view reads the
        registered frame in place, so that no table is copied; the parent row ids are looked up once into
        the frame, as the graph looks them up (``RowLookup``), for the foreign keys the steps' SQL reads
        (known once every step is compiled, before this one runs)."""
        time_expr = f"CAST(s.{self.col(t, t.time_column)} AS TIMESTAMP_NS)" if t.time_column else "NULL::TIMESTAMP_NS"
        sel = ["s.__rid", f"{time_expr} AS __time", f"coalesce({time_expr}, {T_MIN}) AS __t", "s.__ord"]
        for i, c in enumerate(t.columns):
            if c.dtype == "numeric":
                sel.append(f"CAST(s.v{i} AS DOUBLE) AS v{i}")
            elif c.dtype == "category":
                sel.append(f"CAST(s.v{i} AS VARCHAR) AS v{i}")

        def run(con, t=t, sel=sel):
            frame = self.sources[t.name]
            parents = [(i, c.name) for i, c in enumerate(t.columns) if (t.name, c.name) in self.sql_fks]
            for i, fk in parents:
                frame[f"p{i}"] = self.parent_ids(t.name, fk)
            marks = [f"w{j}" for j in range(len(self.sql_where.get(t.name, ())))]
            for w, cond in zip(marks, self.sql_where.get(t.name, ())):
                frame[w] = self.meets(t.name, cond)
            con.register(self.src(t.name), frame)
            con.execute(f"CREATE TEMP VIEW {self.bases[t.name]} AS SELECT "
                        f"{', '.join(sel + [f's.p{i}' for i, _ in parents] + [f's.{w}' for w in marks])} "
                        f"FROM {self.src(t.name)} s")

        self.emit(f"table {t.name}", run)

    def parent_ids(self, table: str, fk: str) -> pd.arrays.IntegerArray:
        """Each row's parent row through ``fk`` as SQL reads it (missing: no parent)."""
        rows = self.parents_of(table, fk)
        return pd.arrays.IntegerArray(rows, rows < 0)

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
        return f"{q} q JOIN {b} b ON b.__rid = q.k", "q"


    # -- relations below an aggregate: SQL tables (qid, k, cutoff, c0..cn) --------------------------
    def relation(self, node: Node, q: str) -> tuple[str, int]:
        """A table of ``node``'s features for the query rows ``q`` (made once per node and query set)."""
        memo = (node.key, q)
        if memo not in self.relations:
            src, qa, sel, joins, _ = self.layout(node, q)
            r = self.new("r")
            cols = [f"{qa}.qid", f"{qa}.k", f"{qa}.cutoff"] + [f"{e} AS c{m}" for m, e in enumerate(sel)]
            self.emit(f"features {self.schema.table(node.table).name}",
                      f"CREATE TEMP TABLE {r} AS SELECT {', '.join(cols)} FROM {src} {' '.join(joins)}")
            self.relations[memo] = (r, len(sel))
        return self.relations[memo]

    def layout(self, node: Node, q: str) -> tuple[str, str, list[str], list[str], list[int | None]]:
        """How ``node``'s features for the query rows ``q`` are selected: the FROM of its rows (aliased b)
        and the alias of (qid, k, cutoff) there (``rows``), each feature's expression, the joins they come
        through, and the join of each feature (None: the row's own column). The lookups and aggregates
        below it are made as steps."""
        t = self.schema.table(node.table)
        src, qa = self.rows(q, self.bases[t.name])
        sel, joins = [f"b.{self.col(t, c)}" for c in node.own], []
        join_of = [None] * len(sel)
        for li, lk in enumerate(node.lookups):
            ql = self.lookup_query(t, lk, q)
            rl, n = self.relation(lk.node, ql)
            joins.append(f"LEFT JOIN {rl} l{li} ON l{li}.k = b.{self.fk(t, lk.fk)} AND l{li}.cutoff = {qa}.cutoff")
            sel += [f"l{li}.c{m}" for m in range(n)]
            join_of += [len(joins) - 1] * n
        for ai, ag in enumerate(node.aggs):
            ra = self.new("a")
            self.emit(f"aggregate {ag.label}", f"CREATE TEMP TABLE {ra} AS {self.aggregate(ag, q, cast=False)}")
            joins.append(f"LEFT JOIN {ra} a{ai} ON a{ai}.qid = {qa}.qid")
            sel += [f"a{ai}.c{m}" for m in range(len(ag.outputs))]
            join_of += [len(joins) - 1] * len(ag.outputs)
        return src, qa, sel, joins, join_of

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
            parts.append(lambda idx, own=own: gather_columns(self.fetched.pop(own), idx))
        for lk in node.lookups:
            ql = self.lookup_query(t, lk, q)
            link = self.fetch(f"link {t.name}.{lk.fk}",
                              f"SELECT q.qid, l.qid AS pq FROM {q} q JOIN {b} b ON b.__rid = q.k "
                              f"JOIN {ql} l ON l.k = b.{self.fk(t, lk.fk)} AND l.cutoff = q.cutoff")
            sub = self.assemble(lk.node, ql)
            parts.append(lambda idx, link=link, sub=sub: sub(compose_links(self.fetched.pop(link), idx)))
        for ag in node.aggs:
            if self.runs(ag):  # its frame already holds the seed-level outputs: no pass through DuckDB
                run = self.running_aggregate(ag, q, np.float32)[2]
                parts.append(lambda idx, run=run: gather_columns(self.let_go(run), idx))
            else:
                fa = self.fetch(f"aggregate {ag.label}", self.aggregate(ag, q, cast=True))
                parts.append(lambda idx, fa=fa: gather_columns(self.fetched.pop(fa), idx))
        return lambda idx: [col for part in parts for col in part(idx)]

    def let_go(self, frame: str) -> pa.Table:
        """A running frame, unregistered: it is freed once its caller lets go of it."""
        self.con.unregister(frame)
        return self.frames.pop(frame)

    # -- aggregates: a SELECT of (qid, k, cutoff, c0..cm) for every row of q -------------------------
    def aggregate(self, ag: Agg, q: str, cast: bool) -> str:
        sql = self.running_aggregate(ag, q, np.float32 if cast else np.float64) if self.runs(ag) else \
            self.joined_aggregate(ag, q)
        exprs = sql[1]
        outs = []
        for m, ((p, i), e) in enumerate(zip(ag.outputs, exprs)):
            numeric = agg_dtype(p, None if i is None else ag.node.features[i].dtype) == "numeric"
            outs.append(f"CAST({e} AS FLOAT) AS c{m}" if cast and numeric else f"{e} AS c{m}")
        return sql[0].format(outs=", ".join(outs))

    def runs(self, ag: Agg) -> bool:
        """Whether ``ag`` is a running aggregate: its child's features are fixed per row."""
        return not ag.node.has_aggs and self.lookups_safe(ag.node)

    @staticmethod
    def _inputs(ag: Agg) -> dict[int, set[str]]:
        need: dict[int, set[str]] = {}
        for p, i in ag.outputs:
            if i is not None:
                need.setdefault(i, set()).add(p)
        return need

    def running_aggregate(self, ag: Agg, q: str, real=np.float64) -> tuple[str, list[str], str]:
        """Prefix aggregates of the child's rows per parent in time order (one sort, then vectorized
        scans), and an ASOF join that picks for each (parent, cutoff) the state after its last row.
        Only the children of parents in ``q``, up to their latest cutoff, are scanned, and their feature
        values are gathered from the tables at those rows, a column at a time. Numeric outputs are of
        type ``real``. Returns the SELECT, its output expressions and the name of the frame (``qid``,
        ``c{m}``) the scan registers."""
        child = self.schema.table(ag.child)
        need = self._inputs(ag)
        run = self.new("run")
        dtypes = {i: ag.node.features[i].dtype for i in need}

        def scan(con, run=run, need=need, dtypes=dtypes, q=q, real=real):
            queries = arrow_table(con, f"SELECT qid, k, cutoff FROM {q}")
            qk = column_values(queries, "k", np.int64)
            cutoff = column_values(queries, "cutoff", "datetime64[ns]").view(np.int64)
            rows, k, tl = self.child_rows(child, ag.fk, qk, cutoff, self.meets(child.name, ag.where))
            pos = asof_positions(k, tl.view(np.int64), qk, cutoff)  # NaT, the smallest value: always visible
            out = prefix_scan(k, tl, self.row_features(ag.node, rows), need, dtypes, pos, ag.outputs, cutoff, real)
            ordered = {f"c{m}": out[f"c{m}"] for m in range(len(out))}  # out is in the order outputs were made
            self.frames[run] = pa.table({"qid": queries.column("qid"), **ordered})
            con.register(run, self.frames[run])

        self.emit(f"running {ag.label}{_where_desc(ag)} per {ag.fk}", scan, uses={q})
        exprs = [f"r.c{m}" for m in range(len(ag.outputs))]  # every query of q has its row in run
        return (f"SELECT m.qid, m.k, m.cutoff, {{outs}} FROM {q} m LEFT JOIN {run} r ON r.qid = m.qid", exprs, run)

    def joined_aggregate(self, ag: Agg, q: str) -> tuple[str, list[str]]:
        """The child's visible rows per (parent, cutoff), with their cutoff-dependent features, grouped."""
        child = self.schema.table(ag.child)
        bc = self.bases[child.name]
        fkc = self.fk(child, ag.fk)
        need = self._inputs(ag)
        pairs = self.new("p")
        meets = f" AND c.{self.where(child, ag.where)}" if ag.where else ""
        self.emit(f"rows {ag.label}{_where_desc(ag)} per {ag.fk}",
                  f"CREATE TEMP TABLE {pairs} AS SELECT q.qid AS pq, c.__rid AS k, q.cutoff, c.__ord, c.__time "
                  f"FROM {q} q JOIN {bc} c ON c.{fkc} = q.k AND c.__t <= q.cutoff{meets}")
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


def _where_desc(ag: Agg) -> str:
    return f" where {ag.where.column}" if ag.where else ""  # the value is data: it stays out of step names
