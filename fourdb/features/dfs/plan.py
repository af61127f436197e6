"""The DFS feature plan: which features a seed table gets, as a tree, and their names.

A ``Node`` is one table reached from the seed: its own columns, the parents it looks up (``Lookup``)
and the children it aggregates (``Agg``), each with its own subtree. ``build_plan`` grows that tree to a
depth and names every feature as featuretools does; ``check_config`` validates a depth and a list of
primitives, ``check_where`` the settings of conditional aggregates.

A conditional aggregate (featuretools' "where" feature) is an ``Agg`` restricted to the child rows
holding one interesting value of one column: ``MEAN(labs.value WHERE test = HDL)``. The values are data
(``interesting_values``: the most frequent ones among the rows known before validation starts), so a plan
with them depends on the database, not only on its schema.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.columns import known_rows
from fourdb.errors import FourdbError
from fourdb.defaults import option
from fourdb.rdb import Database
from fourdb.rdb.schema import Schema, Table

NUMERIC_PRIMITIVES = ("sum", "mean", "min", "max", "std", "last")
CATEGORY_PRIMITIVES = ("mode", "num_unique", "last")
PRIMITIVES = ("count", "sum", "mean", "min", "max", "std", "mode", "num_unique", "last",
              "time_since_last", "time_since_first")
MAX_DEPTH = 3
# A condition keeps the rows of one value, so an input of another type says nothing new about it: count,
# and the numeric primitives of the child's own numbers (featuretools' where_primitives default is count)
WHERE_PRIMITIVES = ("count", "sum", "mean", "min", "max", "std", "last")
WHERE_KEYS = ("values", "min_share", "lookup_rows", "primitives", "max_features")
NAME_COLUMNS = ("name", "title", "label")  # a lookup row shown by this column's value (or one ending in _name)
OWN_DTYPES = ("numeric", "category")  # the columns a reached table contributes (besides its time, to TIME_SINCE_*)


@dataclass
class Feature:
    name: str
    dtype: str  # numeric | category
    source: tuple[str, str]  # (table, column) it is computed from; COUNT's: the foreign key it counts rows by


@dataclass
class Lookup:
    fk: str  # foreign-key column of the current table
    label: str  # parent name as it appears in feature names: "planes" or "airports[origin]"
    node: "Node"


@dataclass(frozen=True)
class Condition:
    """Child rows whose ``column`` holds ``value``: a category value, or the key of a lookup row."""

    column: str
    value: object  # as the table holds it (compared in pandas, never written into SQL)
    shown: str  # in feature names: the value, or the lookup row's name


@dataclass(frozen=True)
class WhereConfig:
    values: int  # interesting values per column, the most frequent first
    min_share: float  # of the known rows a value must hold
    lookup_rows: int  # a foreign key into a table of at most this many rows is a condition column
    primitives: tuple[str, ...]
    max_features: int  # conditional aggregates per plan


@dataclass
class Where:
    """What ``build_plan`` needs to add conditional aggregates: the settings, each table's conditions and
    how many more features the cap allows (one budget for the whole plan)."""

    config: WhereConfig
    conditions: dict[str, list[Condition]]
    left: int = field(init=False)

    def __post_init__(self):
        self.left = self.config.max_features


@dataclass
class Agg:
    child: str
    fk: str  # the child's foreign key pointing to the current table
    label: str  # "purchases" or "flights[origin]"
    node: "Node"  # the child's own feature tree
    outputs: list[tuple[str, int | None]] = field(default_factory=list)  # (primitive, input feature index)
    where: Condition | None = None  # only the child rows that meet it


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


def agg_dtype(primitive: str, input_dtype: str | None) -> str:
    return "category" if primitive == "mode" or (primitive == "last" and input_dtype == "category") else "numeric"


def _agg_source(primitive: str, child: Table, fk: str, feature: Feature | None,
                where: Condition | None = None) -> tuple[str, str]:
    if primitive == "count":
        return child.name, fk if where is None else where.column
    if primitive.startswith("time_since"):
        return child.name, child.time_column
    return feature.source


def _agg_name(primitive: str, label: str, child: Table, feature: Feature | None, where: Condition | None = None) -> str:
    if primitive == "count":
        name = f"COUNT({label})"
    elif primitive.startswith("time_since"):
        name = f"{primitive.upper()}({label}.{child.time_column})"
    else:
        name = f"{primitive.upper()}({label}.{feature.name})"
    return name if where is None else f"{name[:-1]} WHERE {where.column} = {where.shown})"


def _add_agg(agg: Agg, child: Table, features: list[Feature], aggs: list[Agg]) -> None:
    if agg.outputs:
        aggs.append(agg)
        sub = agg.node.features
        features += [Feature(_agg_name(p, agg.label, child, None if i is None else sub[i], agg.where),
                             agg_dtype(p, None if i is None else sub[i].dtype),
                             _agg_source(p, child, agg.fk, None if i is None else sub[i], agg.where))
                     for p, i in agg.outputs]


def _where_aggs(schema: Schema, edges: list[tuple[Table, str, str]], where: Where) -> list[Agg]:
    """The conditional aggregates of a node's child edges (child, fk, label): over each child's own columns
    only (a node of depth 0), however deep the plan, so that they never multiply along a path; no condition
    on the key an edge aggregates by (it holds one value per parent). What the cap leaves is dealt out in
    turns, an output per (edge, condition) a turn, counts first: a short budget still covers every value."""
    prims = where.config.primitives
    pairs = []
    for child, fk, label in edges:
        node = build_plan(schema, child.name, 0)
        outputs = [("count", None)] if "count" in prims else []
        outputs += [(p, i) for i, f in enumerate(node.features) if f.dtype == "numeric"
                    for p in NUMERIC_PRIMITIVES if p in prims]
        pairs += [(Agg(child.name, fk, label, node, where=cond), outputs)
                  for cond in where.conditions.get(child.name, ()) if cond.column != fk]
    for turn in range(max((len(o) for _, o in pairs), default=0)):
        for agg, outputs in pairs:
            if turn < len(outputs) and where.left > 0:
                agg.outputs.append(outputs[turn])
                where.left -= 1
    return [agg for agg, _ in pairs]


def build_plan(schema: Schema, table: str, depth: int, primitives=PRIMITIVES, back_fk: str | None = None,
               seed_hidden: frozenset | None = None, where: Where | None = None) -> Node:
    """The feature tree of ``table`` with ``depth`` hops left.

    ``back_fk`` is the foreign key of ``table`` that led here from its parent (an aggregate): looking
    it up again would only repeat the parent. ``seed_hidden`` marks the seed node (its own columns
    come from the single-table encoder; hidden foreign keys are not followed). ``where``: conditional
    aggregates for the seed and the parents it looks up, not below an aggregate (an aggregate of
    conditional aggregates would multiply them by the values of every level); a node's own take the cap
    before its parents' do, so the nearest come first.
    """
    t = schema.table(table)
    is_seed = seed_hidden is not None
    own = [] if is_seed else [c.name for c in t.columns if c.dtype in OWN_DTYPES]
    features = [Feature(c, t.column(c).dtype, (table, c)) for c in own]
    lookups, aggs, agg_features, edges = [], [], [], []
    if depth >= 1:
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
                _add_agg(agg, child, agg_features, aggs)
                edges.append((child, fk.name, label))
        for conditional in _where_aggs(schema, edges, where) if where else ():
            _add_agg(conditional, schema.table(conditional.child), agg_features, aggs)
        for fk in t.foreign_keys:
            if fk.name == back_fk or (is_seed and fk.name in seed_hidden):
                continue
            parent = fk.link_table
            label = _label(parent, fk.name, sum(c.link_table == parent for c in t.foreign_keys))
            sub = build_plan(schema, parent, depth - 1, primitives, where=where)
            lookups.append(Lookup(fk.name, label, sub))
            features += [Feature(f"{label}.{f.name}", f.dtype, f.source) for f in sub.features]
    features += agg_features
    hidden_key = "" if not is_seed else "seed:" + ",".join(sorted(seed_hidden))
    key = f"{table}|{depth}|{back_fk}|{hidden_key}"
    return Node(table, key, own, lookups, aggs, features)


def check_config(depth, primitives) -> tuple[int, tuple[str, ...]]:
    """``depth`` and ``primitives`` checked; None takes conf/features/dfs.yaml's, the one place they are stated."""
    if depth is None or primitives is None:
        stated = option("features", "dfs")
        depth = stated["depth"] if depth is None else depth
        primitives = stated["primitives"] if primitives is None else primitives
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


def check_where(where) -> WhereConfig | None:
    """The conditional aggregates' settings checked (None: conf/features/dfs.yaml's); None where they are off
    (``where: null`` in the YAML, ``false``, or ``values: 0``)."""
    if where is None:
        where = option("features", "dfs").get("where")
    if where is None or where is False:
        return None
    if not isinstance(where, dict):
        raise FourdbError(f"features=dfs: where must be a mapping of {', '.join(WHERE_KEYS)} (or null), got {where!r}")
    unknown = [k for k in where if k not in WHERE_KEYS]
    if unknown:
        raise FourdbError(f"features=dfs: where has no setting '{unknown[0]}' (choose from {', '.join(WHERE_KEYS)})")
    missing = [k for k in WHERE_KEYS if k not in where]
    if missing and where.get("values") != 0:
        raise FourdbError(f"features=dfs: where.{missing[0]} is not given")

    def number(key, kind, low, high=None):
        value = where[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or value == int(value))
        if not ok or value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise FourdbError(f"features=dfs: where.{key} must be {'a number' if kind is float else 'an integer'} "
                              f"{bound}, got {value!r}")
        return kind(value)

    if number("values", int, 0) == 0:
        return None
    prims = where["primitives"]
    prims = [prims] if isinstance(prims, str) else list(prims or ())
    prims = [str(p).lower() for p in prims]
    wrong = [p for p in prims if p not in WHERE_PRIMITIVES]
    if wrong or not prims:
        got = f"'{wrong[0]}'" if wrong else "none"
        raise FourdbError(f"features=dfs: where.primitives takes {', '.join(WHERE_PRIMITIVES)}; got {got}")
    return WhereConfig(number("values", int, 1), number("min_share", float, 0, 1), number("lookup_rows", int, 1),
                       tuple(p for p in WHERE_PRIMITIVES if p in prims), number("max_features", int, 1))


def interesting_values(db: Database, config: WhereConfig, fit_until, hidden: dict[str, frozenset] | None = None
                       ) -> dict[str, list[Condition]]:
    """Each table's conditions: per category column, and per foreign key into a lookup table (one without a
    time column, of at most ``lookup_rows`` rows), its ``values`` most frequent values holding at least ``min_share`` of the rows
    known by ``fit_until`` (None: every row), as the encoders choose their vocabularies: a later row never
    picks a value. A column with one value, or ``hidden`` (a seed row's unknown columns), has none."""
    hidden = hidden or {}
    # every count is of known rows, so deleting later rows (``fourdb certify``) changes no condition nor name
    known = {t.name: known_rows(t, db.tables[t.name], fit_until) for t in db.schema.tables}
    out = {}
    for t in db.schema.tables:
        df = db.tables[t.name]
        conds = []
        for c in t.columns:
            # a lookup is a small dimension table (no time of its own): a key into a table of events (an
            # invoice, a season) names one past event, which no later cutoff's label is about
            lookup = (c.dtype == "foreign_key" and db.schema.table(c.link_table).time_column is None
                      and known[c.link_table].sum() <= config.lookup_rows)
            if c.name in hidden.get(t.name, ()) or not (c.dtype == "category" or lookup) or not known[t.name].any():
                continue
            counts = df[c.name][known[t.name]].value_counts(dropna=True, sort=False)
            counts = counts[counts > 0]  # a pandas categorical lists its unused categories too
            if len(counts) < 2:
                continue
            counts = counts[counts >= config.min_share * known[t.name].sum()]
            order = sorted(range(len(counts)), key=lambda j: (-counts.iloc[j], str(counts.index[j])))
            values = [_plain(counts.index[j]) for j in order[:config.values]]
            names = _row_names(db, c.link_table, values, known[c.link_table]) if lookup else {}
            conds += [Condition(c.name, v, _shown(names.get(v, v))) for v in values]
        if conds:
            out[t.name] = conds
    return out


def seed_plan(db: Database, table: str, depth: int, primitives, where: WhereConfig | None, fit_until,
              hidden=frozenset()) -> Node:
    """``build_plan`` of a seed table, with the conditional aggregates ``where`` asks for, their values
    chosen from the rows known by ``fit_until``."""
    cond = Where(where, interesting_values(db, where, fit_until, {table: frozenset(hidden)})) if where else None
    return build_plan(db.schema, table, depth, primitives, seed_hidden=frozenset(hidden), where=cond)


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _shown(value) -> str:
    """A value as a feature name shows it: as it is, or escaped where it would break a line."""
    text = str(value)
    return text if text.isprintable() else json.dumps(text)


def _row_names(db: Database, table: str, keys: list, known: np.ndarray) -> dict:
    """The lookup rows' names by key, where the table has an obvious name column with a distinct name per
    ``known`` row; else none (the key is shown)."""
    t = db.schema.table(table)
    df = db.tables[table][known]
    for c in t.columns:
        named = c.name.lower() in NAME_COLUMNS or c.name.lower().endswith("_name")
        if named and c.dtype in ("category", "text") and df[c.name].notna().all() and df[c.name].is_unique:
            by_key = pd.Series(df[c.name].to_numpy(), index=df[t.primary_key].to_numpy())
            return {k: by_key[k] for k in keys if k in by_key.index}
    return {}


def tables_of(node: Node, out: set[str]) -> set[str]:
    """Every table the feature tree under ``node`` reads, added to ``out``."""
    out.add(node.table)
    for lk in node.lookups:
        tables_of(lk.node, out)
    for ag in node.aggs:
        tables_of(ag.node, out)
    return out


def unique_names(names: list[str]) -> list[str]:
    """The feature names as columns: a repeated name gets ``#1``, ``#2``.. after its first."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        out.append(n if k == 0 else f"{n}#{k}")
        seen[n] = k + 1
    return out
