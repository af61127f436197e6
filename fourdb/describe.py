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
from fourdb.rdb.identifiers import features_only
from fourdb.rdb.schema import Column, Table
from fourdb.tasks import Task
from fourdb.utils import plural, progress

NOT_A_FEATURE = "not a feature (schema.yaml: feature: false)"


@dataclass
class ColumnUse:
    table: str
    column: str
    dtype: str
    kind: str  # the view: one of KINDS
    inputs: list[str]  # the model inputs made from the column; empty: left out
    how: str  # how it is encoded, or why it is left out


def seed_tables(db: Database, task: Task | None) -> list[str]:
    """Tables whose rows are seeds: the task's entity table (and a recommendation's destination table,
    whose rows are ranked); without a task, every table, each read as if it were the entity table."""
    if task is None:
        return db.schema.table_names
    return [t for t in (task.spec.entity_table, task.spec.destination_table) if t]


def column_report(db: Database, task: Task | None = None, kinds=None, graph: str = "r2ne", depth: int | None = None,
                  primitives=None, encoders: dict[str, TableEncoder] | None = None, where=None) -> list[ColumnUse]:
    """A ``ColumnUse`` per column of ``db`` and model kind (``kinds``: names of ``VIEWS``, default all). With a
    task, as a run of it reads them (its removed and hidden columns, its entity table, encoders fitted before
    validation); ``encoders``: the graph's, already fitted."""
    scope = Scope(db, task, dict(encoders or {}))
    settings = {"graph": graph, "depth": depth, "primitives": primitives, "where": where}
    views = [VIEWS[name](scope, **{k: settings[k] for k in VIEWS[name].settings}) for name in (kinds or KINDS)]
    used = {view.name: view.uses() for view in views}
    out = []
    for t in db.schema.tables:
        for col in t.columns:
            for view in views:
                names, how = used[view.name].get((t.name, col.name), ([], ""))
                if not names:
                    how = scope.left_out(t, col, view.hides_seed_columns) or view.left_out(t, col)
                out.append(ColumnUse(t.name, col.name, col.dtype, view.name, names, how))
    return out


class Scope:
    """What every view of one report shares: the database as a model sees it, the seed tables, the task's
    hidden columns and each table's encoded columns (each table fitted once)."""

    def __init__(self, db: Database, task: Task | None, fitted: dict):
        self.task, self.fitted = task, fitted
        self.seen = task.input_database(db) if task is not None else features_only(db)
        self.fit_until = task.fit_until if task is not None else None
        self.hidden = frozenset(task.hidden_columns) if task is not None else frozenset()
        self.entity = task.spec.entity_table if task is not None else None
        self.seeds = seed_tables(db, task)
        self.done: dict[tuple, dict] = {}

    def own(self, name: str, exclude=frozenset()) -> dict[str, tuple[list[str], str]]:
        """The table's columns as ``TableEncoder`` encodes them."""
        if (name, exclude) not in self.done:
            t = self.seen.schema.table(name)
            enc = self.fitted.get(name) if not exclude else None
            enc = enc or TableEncoder(t, exclude=tuple(exclude)).fit(self.seen.tables[name], self.fit_until)
            self.done[(name, exclude)] = encoded(t, enc, self.seen.tables[name])
        return self.done[(name, exclude)]

    def hide(self, table: str) -> frozenset:  # only the seed row of a row-column task hides columns
        return self.hidden if table == self.entity else frozenset()

    def left_out(self, t: Table, col: Column, hides_seed_columns: bool) -> str | None:
        """Why no view makes an input of a column (None: it is the view's own reason)."""
        if col.derived:
            return "inherited time (says which rows are visible)"
        if not col.feature:
            return NOT_A_FEATURE
        if col.name not in self.seen.schema.table(t.name).column_names:
            return "removed by the task"
        if hides_seed_columns and t.name == self.entity and col.name in self.hidden:
            return "not known at the cutoff"
        return None


class View:
    """What one kind of model makes of the columns: their inputs (``uses``) and why it leaves one out."""

    name = "view"
    settings: tuple[str, ...] = ()  # the report's settings it takes (a feature set's own parameters)
    hides_seed_columns = True  # a seed row's hidden columns are left out (the graph masks them instead)

    def __init__(self, scope: Scope):
        self.scope = scope

    def uses(self) -> dict[tuple[str, str], tuple[list[str], str]]:
        raise NotImplementedError

    def left_out(self, t: Table, col: Column) -> str:
        if col.dtype == "primary_key":
            return self.key_text(t)
        if col.dtype == "foreign_key":
            return self.foreign_key_text(t, col)
        return self.own_reason(t, col) or common_reason(col)

    def key_text(self, t: Table) -> str:
        return "key"

    def foreign_key_text(self, t: Table, col: Column) -> str:
        return "key"

    def own_reason(self, t: Table, col: Column) -> str | None:
        return None


class SingleTableView(View):
    name = "single_table"

    def uses(self):
        s = self.scope
        seeds = progress(s.seeds, desc="columns: single_table", unit="table", leave=False)
        return {(t, c): v for t in seeds for c, v in s.own(t, s.hide(t)).items()}

    def own_reason(self, t, col):
        return "not the seed table" if t.name not in self.scope.seeds else None


class DfsView(View):
    name = "dfs"
    settings = ("depth", "primitives", "where")

    def __init__(self, scope: Scope, depth=None, primitives=None, where=None):
        super().__init__(scope)
        self.depth, self.primitives = check_config(depth, primitives)
        self.where, self.reached = check_where(where), set()

    def uses(self):
        s = self.scope
        used, self.reached = dfs_uses(s.seen, s.seeds, s.hide, self.depth, self.primitives, s.own, self.where,
                                      s.fit_until)
        return used

    def key_text(self, t):
        return "key (joins)"

    def foreign_key_text(self, t, col):
        return f"key (joins {col.link_table})"

    def own_reason(self, t, col):
        if t.name not in self.reached:
            return f"over {self.depth} {plural('hop', self.depth)} from {', '.join(self.scope.seeds)}"
        if col.dtype not in OWN_DTYPES:
            return f"DFS reads {', '.join(OWN_DTYPES)} (and time) columns"
        return None


class GraphView(View):
    name = "graph"
    settings = ("graph",)
    hides_seed_columns = False

    def __init__(self, scope: Scope, graph: str = "r2ne"):
        super().__init__(scope)
        self.graph, self.edges = graph, set()

    def uses(self):
        s = self.scope
        self.edges = GRAPHS.get(self.graph)(s.seen)
        used = {}
        for t in progress(s.seen.schema.tables, desc="columns: graph", unit="table", leave=False):
            for c, (names, how) in s.own(t.name).items():
                how += ", on edges" if t.name in self.edges else ""
                how += ", masked at the seed row" if c in s.hide(t.name) else ""
                used[(t.name, c)] = (names, how)
        return used

    def key_text(self, t):
        return f"key (a row is {'an edge' if t.name in self.edges else 'a node'})"

    def foreign_key_text(self, t, col):
        return "key (edge ends)" if t.name in self.edges else f"key (edges to {col.link_table})"


VIEWS = {view.name: view for view in (SingleTableView, DfsView, GraphView)}  # by name: a kind of input's columns
KINDS = tuple(VIEWS)  # every view, in the order a report shows them


def dfs_uses(seen: Database, seeds: list[str], hide, depth: int, primitives, own, where=None,
             fit_until=None) -> tuple[dict, set[str]]:
    """The DFS features made from each column (by the plan compute_dfs runs, named as it names them), with
    the seed rows' own columns as single_table encodes them; and the tables DFS reaches."""
    made: dict[tuple[str, str], list[str]] = {}
    reached: set[str] = set()
    for s in progress(seeds, desc="columns: dfs plans", unit="table", leave=False):
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


def common_reason(col: Column) -> str:
    """Why a column of a table a view reads makes no input, whatever the view."""
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


NAMED_USES = 8  # a table's used columns are named in the log up to this many


def log_lines(uses: list[ColumnUse], full_list: str | None = None) -> list[str]:
    """The column report in brief, for a run's log (``full_list``: where every column's line is written).

    Per kind: a line per table with a used column (how many are used, named when few, and how many are
    dropped, by reason); one line for the tables none of whose columns is used (on a wide schema most are,
    for one reason: DFS does not reach them); the columns the schema marks ``feature: false``, with how to use
    them."""
    lines = []
    frame = pd.DataFrame([u.__dict__ for u in uses])
    for kind, part in frame.groupby("kind", sort=False):
        unused: list[str] = []
        reasons: dict[str, int] = {}
        for table, group in part.groupby("table", sort=False):
            used = [c for c, i in zip(group["column"], group["inputs"]) if i]
            dropped = group["how"][[not i for i in group["inputs"]]].value_counts(sort=True)
            if not used:
                unused.append(f"{table} ({len(group)})")
                for how, n in dropped.items():
                    reasons[how] = reasons.get(how, 0) + int(n)
                continue
            names = f" ({', '.join(used)})" if len(used) <= NAMED_USES else ""
            lines.append(f"columns of {table} ({kind}): {len(used)} used{names}; {_counted(dropped.to_dict())}")
        if unused:
            lines.append(f"columns of {len(unused)} more table{'s' if len(unused) > 1 else ''} ({kind}): none used; "
                         f"{_counted(reasons)}: {', '.join(unused)}")
    marked = sorted({f"{u.table}.{u.column}" for u in uses if u.how == NOT_A_FEATURE})
    if marked:
        lines.append(f"left out, as schema.yaml marks them feature: false (an import does so for columns that "
                     f"identify a row or a person): {', '.join(marked)}; to use one as a feature, set its "
                     f"feature: true there")
    if full_list:
        lines.append(f"columns: every column, and what each kind of model makes of it, in {full_list}")
    return lines


def _counted(reasons: dict[str, int]) -> str:
    """``12 dropped (9 keys, 3 over 2 hops from users)``: keys counted together, whatever they join."""
    if not reasons:
        return "none dropped"
    merged: dict[str, int] = {}
    for how, n in reasons.items():
        how = "key" if how.startswith("key") else how
        merged[how] = merged.get(how, 0) + n
    order = sorted(merged.items(), key=lambda kv: -kv[1])
    parts = [f"{n} {plural(how, n) if how == 'key' else how}" for how, n in order]
    return f"{sum(reasons.values())} dropped ({', '.join(parts)})"
