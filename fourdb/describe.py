"""Which columns each kind of model reads, what it makes of them, and which it leaves out and why.

Worked out by the code the models run, not restated beside it: the column encoder (``TableEncoder``) for
a table's own columns (single-table features, graph nodes, r2ne edges), the DFS plan (``build_plan``)
for lookups and aggregates, the graph construction for which tables become edges. A test compares it
with the inputs the models receive.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fourdb.columns import ENCODINGS, TableEncoder
from fourdb.features.dfs.plan import (OWN_DTYPES, PRIMITIVES, check_config, check_where, seed_plan, tables_of,
                                      unique_names)
from fourdb.graph.build import GRAPHS
from fourdb.rdb import Database
from fourdb.rdb.schema import Column, Table
from fourdb.tasks import Task
from fourdb.utils import progress

KINDS = ("single_table", "dfs", "graph")


@dataclass
class ColumnUse:
    table: str
    column: str
    dtype: str
    kind: str  # one of KINDS
    inputs: list[str]  # the model inputs made from the column; empty: left out
    how: str  # how it is encoded, or why it is left out


def seed_tables(db: Database, task: Task | None) -> list[str]:
    """Tables whose rows are seeds: the task's entity table (and a recommendation's destination table,
    whose rows are ranked); without a task, every table, each read as if it were the entity table."""
    if task is None:
        return db.schema.table_names
    return [t for t in (task.spec.entity_table, task.spec.destination_table) if t]


def column_report(db: Database, task: Task | None = None, kinds=KINDS, graph: str = "r2ne", depth: int | None = None,
                  primitives=None, encoders: dict[str, TableEncoder] | None = None, where=None) -> list[ColumnUse]:
    """A ``ColumnUse`` per column of ``db`` and model kind. With a task, as a run of it reads them (its
    removed and hidden columns, its entity table, encoders fitted before validation); ``encoders``: the
    graph's, already fitted."""
    if "dfs" in kinds:
        depth, primitives = check_config(depth, primitives)
        where = check_where(where)
    seen = task.input_database(db) if task is not None else db
    fit_until = task.fit_until if task is not None else None
    hidden = frozenset(task.hidden_columns) if task is not None else frozenset()
    entity = task.spec.entity_table if task is not None else None
    seeds = seed_tables(db, task)
    fitted = dict(encoders or {})
    done: dict[tuple, dict] = {}

    def own(name: str, exclude=frozenset()) -> dict[str, tuple[list[str], str]]:
        """The table's columns as ``TableEncoder`` encodes them (each table fitted once)."""
        if (name, exclude) not in done:
            t = seen.schema.table(name)
            enc = fitted.get(name) if not exclude else None
            enc = enc or TableEncoder(t, exclude=tuple(exclude)).fit(seen.tables[name], fit_until)
            done[(name, exclude)] = encoded(t, enc, seen.tables[name])
        return done[(name, exclude)]

    def hide(table: str) -> frozenset:  # only the seed row of a row-column task hides columns
        return hidden if table == entity else frozenset()

    used: dict[str, dict[tuple[str, str], tuple[list[str], str]]] = {}
    reached: set[str] = set()
    edges: set[str] = set()
    if "single_table" in kinds:
        used["single_table"] = {(s, c): v for s in seeds for c, v in own(s, hide(s)).items()}
    if "dfs" in kinds:
        used["dfs"], reached = dfs_uses(seen, seeds, hide, depth, primitives, own, where, fit_until)
    if "graph" in kinds:
        edges = GRAPHS.get(graph)(seen)
        used["graph"] = {}
        for t in progress(seen.schema.tables, desc="columns", unit="table", leave=False):
            for c, (names, how) in own(t.name).items():
                how += ", on edges" if t.name in edges else ""
                how += ", masked at the seed row" if c in hide(t.name) else ""
                used["graph"][(t.name, c)] = (names, how)

    out = []
    for t in db.schema.tables:
        for col in t.columns:
            for kind in kinds:
                names, how = used[kind].get((t.name, col.name), ([], ""))
                if not names:
                    how = left_out(kind, t, col, seen, task, seeds, reached, edges, depth)
                out.append(ColumnUse(t.name, col.name, col.dtype, kind, names, how))
    return out


def dfs_uses(seen: Database, seeds: list[str], hide, depth: int, primitives, own, where=None,
             fit_until=None) -> tuple[dict, set[str]]:
    """The DFS features made from each column (by the plan compute_dfs runs, named as it names them), with
    the seed rows' own columns as single_table encodes them; and the tables DFS reaches."""
    made: dict[tuple[str, str], list[str]] = {}
    reached: set[str] = set()
    for s in seeds:
        plan = seed_plan(seen, s, depth, primitives, where, fit_until, hide(s))
        reached |= tables_of(plan, set())
        for f, name in zip(plan.features, unique_names([f.name for f in plan.features])):
            made.setdefault(f.source, []).append(name)
    rows = {}
    for (table, column), names in made.items():
        names = list(dict.fromkeys(names))
        col = seen.schema.table(table).column(column)
        counts = f"key (joins {col.link_table}), counts rows in " if col.dtype == "foreign_key" else ""
        hidden = ", not the seed row's own" if column in hide(table) else ""
        rows[(table, column)] = (names, f"{counts}{len(names)} DFS feature{'s' if len(names) > 1 else ''}{hidden}")
    for s in seeds:
        for c, (names, how) in own(s, hide(s)).items():
            more = rows.get((s, c))
            rows[(s, c)] = (names + more[0], f"{how}; {more[1]}") if more else (names, how)
    return rows, reached


def encoded(t: Table, enc: TableEncoder, df: pd.DataFrame) -> dict[str, tuple[list[str], str]]:
    """Each column the encoder turns into inputs: their names (as a model receives them) and how."""
    out = enc.transform(df.iloc[:1])  # one row tells the names (a table has at least one)
    columns = sorted((c.name for c in enc.columns), key=len, reverse=True)
    mine: dict[str, list[str]] = {}
    for name in out.numeric_names + out.categorical_names + out.datetime_names:
        # an input is "column" or "column:part"; the longest column name it fits is its own
        owner = next(c for c in columns if name == c or name.startswith(c + ":"))
        mine.setdefault(owner, []).append(name)
    rows = {}
    for col in enc.columns:
        if col.name in mine:
            extra = f", {len(enc.stats[col.name])} values" if col.dtype == "category" else \
                f" ({len(mine[col.name])} numbers)" if col.dtype == "text" else ""
            rows[col.name] = (mine[col.name], ENCODINGS[col.dtype] + extra)
    return rows


def left_out(kind: str, t: Table, col: Column, seen: Database, task: Task | None, seeds: list[str],
             reached: set[str], edges: set[str], depth: int) -> str:
    """Why ``kind`` makes no input of a column, in a few words."""
    if col.derived:
        return "inherited time (says which rows are visible)"
    if col.name not in seen.schema.table(t.name).column_names:
        return "removed by the task"
    if task is not None and t.name == task.spec.entity_table and col.name in task.hidden_columns \
            and kind != "graph":
        return "not known at the cutoff"
    if col.dtype == "primary_key":
        return {"single_table": "key", "dfs": "key (joins)",
                "graph": f"key (a row is {'an edge' if t.name in edges else 'a node'})"}[kind]
    if col.dtype == "foreign_key":
        return {"single_table": "key", "dfs": f"key (joins {col.link_table})",
                "graph": "key (edge ends)" if t.name in edges else f"key (edges to {col.link_table})"}[kind]
    if kind == "single_table" and t.name not in seeds:
        return "not the seed table"
    if kind == "dfs" and t.name not in reached:
        return f"over {depth} hops from {', '.join(seeds)}"
    if kind == "dfs" and col.dtype not in OWN_DTYPES:
        return f"DFS reads {', '.join(OWN_DTYPES)} (and time) columns"
    if col.dtype == "text":
        return "too little text for TF-IDF + SVD"
    return "no input made"  # nothing else leaves a feature column out (a test checks the built-in databases)


def report_frame(uses: list[ColumnUse]) -> pd.DataFrame:
    """One row per column (in schema order), one cell per model kind: how it is encoded, or "dropped: why"."""
    rows: dict[tuple, dict] = {}
    for u in uses:
        row = rows.setdefault((u.table, u.column), {"table": u.table, "column": u.column, "dtype": u.dtype})
        row[u.kind] = u.how if u.inputs else f"dropped: {u.how}"
    return pd.DataFrame(list(rows.values()))


def log_lines(uses: list[ColumnUse]) -> list[str]:
    """Per table and kind: the columns used and the columns dropped, with why (a run's log)."""
    lines = []
    for (table, kind), group in pd.DataFrame([u.__dict__ for u in uses]).groupby(["table", "kind"], sort=False):
        used = [f"{c} (rows counted by it)" if d == "foreign_key" else c
                for c, d, i in zip(group["column"], group["dtype"], group["inputs"]) if i]
        dropped = [f"{c}: {h}" for c, i, h in zip(group["column"], group["inputs"], group["how"]) if not i]
        lines.append(f"columns of {table} ({kind}): used {', '.join(used) or 'none'}; "
                     f"dropped {'; '.join(dropped) or 'none'}")
    return lines
