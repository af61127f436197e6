"""The DFS feature plan: which features a seed table gets, as a tree, and their names.

A ``Node`` is one table reached from the seed: its own columns, the parents it looks up (``Lookup``)
and the children it aggregates (``Agg``), each with its own subtree. ``build_plan`` grows that tree to a
depth and names every feature as featuretools does; ``check_config`` validates a depth and a list of
primitives.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fourdb.errors import FourdbError
from fourdb.defaults import option
from fourdb.rdb.schema import Schema, Table

NUMERIC_PRIMITIVES = ("sum", "mean", "min", "max", "std", "last")
CATEGORY_PRIMITIVES = ("mode", "num_unique", "last")
PRIMITIVES = ("count", "sum", "mean", "min", "max", "std", "mode", "num_unique", "last",
              "time_since_last", "time_since_first")
MAX_DEPTH = 3
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


def _agg_source(primitive: str, child: Table, fk: str, feature: Feature | None) -> tuple[str, str]:
    if primitive == "count":
        return child.name, fk
    if primitive.startswith("time_since"):
        return child.name, child.time_column
    return feature.source


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
    own = [] if is_seed else [c.name for c in t.columns if c.dtype in OWN_DTYPES]
    features = [Feature(c, t.column(c).dtype, (table, c)) for c in own]
    lookups, aggs = [], []
    if depth >= 1:
        for fk in t.foreign_keys:
            if fk.name == back_fk or (is_seed and fk.name in seed_hidden):
                continue
            parent = fk.link_table
            label = _label(parent, fk.name, sum(c.link_table == parent for c in t.foreign_keys))
            sub = build_plan(schema, parent, depth - 1, primitives)
            lookups.append(Lookup(fk.name, label, sub))
            features += [Feature(f"{label}.{f.name}", f.dtype, f.source) for f in sub.features]
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
                                         _agg_dtype(p, None if i is None else sub.features[i].dtype),
                                         _agg_source(p, child, fk.name, None if i is None else sub.features[i]))
                                 for p, i in agg.outputs]
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


def _tables_of(node: Node, out: set[str]) -> set[str]:
    out.add(node.table)
    for lk in node.lookups:
        _tables_of(lk.node, out)
    for ag in node.aggs:
        _tables_of(ag.node, out)
    return out


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        out.append(n if k == 0 else f"{n}#{k}")
        seen[n] = k + 1
    return out
