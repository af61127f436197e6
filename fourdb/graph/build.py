"""Graph constructions of a database.

* ``r2n``: every row is a node; each foreign key gives an edge type child -> parent and its reverse.
* ``r2ne``: as r2n, but a pure link table (exactly two foreign keys, referenced by no other table)
  becomes edges between the two tables it links, in both directions, carrying its columns as edge
  features (``edge_features[etype]``; edge id i of either direction is the link table's i-th kept row).
  Every GNN reads them (fourdb/models/gnn.py).

Every node and edge carries a time in int64 nanoseconds (the data's own resolution); ``ALWAYS`` marks rows with no time column
(static rows, visible at any cutoff). An edge's time is when its source row can be reached through
it: a child row's time for child -> parent, the parent's for parent -> child (the child at the
destination is already admitted, so its keys are known), and the latest of the link row and source
for r2ne edges. A sampler that checks edge times therefore never reaches a row from after the cutoff.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import dgl
import numpy as np
import pandas as pd
import torch

from fourdb.columns import EncodedTable, TableEncoder
from fourdb.rdb import Database
from fourdb.rdb.database import RowLookup
from fourdb.registry import Registry
from fourdb.utils import progress, to_epoch_ns

ALWAYS = np.iinfo(np.int64).min


@dataclass
class RelGraph:
    g: dgl.DGLHeteroGraph
    kind: str
    features: dict[str, EncodedTable]  # per node type
    encoders: dict[str, TableEncoder]
    edge_features: dict[tuple, EncodedTable] = field(default_factory=dict)
    reverse: dict[tuple, tuple] = field(default_factory=dict)  # each edge type's reverse edge type

    @property
    def ntypes(self) -> list[str]:
        return list(self.g.ntypes)

    @property
    def canonical_etypes(self) -> list[tuple[str, str, str]]:
        return list(self.g.canonical_etypes)

    def node_time(self, ntype: str) -> np.ndarray:
        return self.g.nodes[ntype].data["time"].numpy()

    def edge_time(self, etype: tuple[str, str, str]) -> np.ndarray:
        return self.g.edges[etype].data["time"].numpy()

    def edges(self, etype: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sources and destinations (int64, whatever ids the graph stores) and times of an edge type."""
        src, dst = self.g.edges(etype=etype)
        return (src.numpy().astype(np.int64, copy=False), dst.numpy().astype(np.int64, copy=False),
                self.g.edges[etype].data["time"].numpy())


def relation(*parts: str) -> str:
    """An edge type's name from table and column names: torch module names (one per edge type in
    every GNN) cannot hold '.', so it is escaped, reversibly, as are '%' signs."""
    return "__".join(p.replace("%", "%25").replace(".", "%2E") for p in parts)


def fk_relations(table: str, fk: str) -> tuple[str, str]:
    """(child -> parent, parent -> child) edge type names of a foreign key."""
    return relation(table, fk), relation(table, fk, "rev")


# a graph construction: fn(db) -> the tables whose rows become edges (every other row is a node)
GRAPHS: Registry = Registry("graph construction")


@GRAPHS.register("r2n")
def every_row_a_node(db: Database) -> set[str]:
    return set()


@GRAPHS.register("r2ne")
def link_tables(db: Database) -> set[str]:
    referenced = {fk.link_table for t in db.schema.tables for fk in t.foreign_keys}
    return {t.name for t in db.schema.tables if len(t.foreign_keys) == 2 and t.name not in referenced}


def same_graphs(kind: str, db: Database) -> list[str]:
    """The constructions (by name) that build on ``db`` the graph ``kind`` builds: those turning the same
    tables into edges. On a database without link tables r2n and r2ne build one graph."""
    edges = GRAPHS.get(kind)(db)
    return [name for name, make in GRAPHS.items() if make(db) == edges]


def built_graph(kind: str, db: Database) -> str:
    """The name of the graph ``kind`` builds on ``db``: the first of ``same_graphs``. r2ne on a database
    without link tables is named r2n, so identical work is one setting on a leaderboard."""
    return same_graphs(kind, db)[0]


def build_graph(db: Database, kind: str = "r2ne", fit_until=None) -> RelGraph:
    """The graph of ``db``; every column encoder is fitted on the rows known by ``fit_until`` (a task's
    validation start: no scale or vocabulary comes from later rows; None fits on every row)."""
    as_edges = GRAPHS.get(kind)(db)
    times, key_index = {}, {}
    for t in db.schema.tables:
        df = db.tables[t.name]
        times[t.name] = time_ns(df[t.time_column]) if t.time_column else np.full(len(df), ALWAYS)
        if t.primary_key:
            key_index[t.name] = RowLookup(df[t.primary_key])

    # int32 ids where every table's rows fit: half the memory of a 100M-row graph's edge lists
    ids = np.int32 if max([len(df) for df in db.tables.values()] + [0]) < np.iinfo(np.int32).max else np.int64

    def rows_of(table: str, values: pd.Series) -> np.ndarray:
        return key_index[table](values).astype(ids)

    edges, edge_time, edge_feats, encoders, features, reverse = {}, {}, {}, {}, {}, {}
    for t in progress(db.schema.tables, desc="graph: edges", unit="table", leave=False):
        df = db.tables[t.name]
        fks = t.foreign_keys
        if t.name in as_edges:
            a, b = fks
            sa, sb = rows_of(a.link_table, df[a.name]), rows_of(b.link_table, df[b.name])
            ok = (sa >= 0) & (sb >= 0)
            kept = ok.all()  # then no row is dropped, and no array is copied to drop it
            enc = TableEncoder(t).fit(df, fit_until)
            encoders[t.name] = enc
            row_t = times[t.name] if kept else times[t.name][ok]
            feats = _share_times(enc.transform(df if kept else df[ok].reset_index(drop=True)), row_t)
            sa, sb = (sa, sb) if kept else (sa[ok], sb[ok])
            pair = []
            for (src_t, src, dst_t, dst, name) in ((a.link_table, sa, b.link_table, sb, relation(t.name)),
                                                   (b.link_table, sb, a.link_table, sa, relation(t.name, "rev"))):
                et = (src_t, name, dst_t)
                edges[et] = (src, dst)
                edge_time[et] = _same_or(np.maximum(row_t, times[src_t][src]), row_t)
                edge_feats[et] = feats
                pair.append(et)
            reverse.update({pair[0]: pair[1], pair[1]: pair[0]})
            continue
        for fk in fks:
            parent_rows = rows_of(fk.link_table, df[fk.name])
            ok = parent_rows >= 0
            kept = ok.all()
            c = np.arange(len(df), dtype=ids) if kept else np.flatnonzero(ok).astype(ids)
            p = parent_rows if kept else parent_rows[ok]
            up, down = fk_relations(t.name, fk.name)
            fwd, rev = (t.name, up, fk.link_table), (fk.link_table, down, t.name)
            edges[fwd], edge_time[fwd] = (c, p), times[t.name] if kept else times[t.name][c]
            # the child (destination) is already admitted at the cutoff, so its own key is known then
            edges[rev], edge_time[rev] = (p, c), times[fk.link_table][p]
            reverse.update({fwd: rev, rev: fwd})
    node_tables = [t for t in db.schema.tables if t.name not in as_edges]
    num_nodes = {t.name: len(db.tables[t.name]) for t in node_tables}
    g = dgl.heterograph({et: (torch.from_numpy(s), torch.from_numpy(d)) for et, (s, d) in edges.items()},
                        num_nodes_dict=num_nodes, idtype=torch.int32 if ids == np.int32 else torch.int64)
    del edges
    for t in progress(node_tables, desc="graph: node features", unit="table", leave=False):
        enc = TableEncoder(t).fit(db.tables[t.name], fit_until)
        encoders[t.name] = enc
        features[t.name] = _share_times(enc.transform(db.tables[t.name]), times[t.name])
        g.nodes[t.name].data["time"] = shared_tensor(times[t.name])
        g.nodes[t.name].data["num"] = torch.from_numpy(features[t.name].numeric)
        g.nodes[t.name].data["cat"] = torch.from_numpy(features[t.name].categorical)
    for et in edge_time:
        g.edges[et].data["time"] = shared_tensor(np.asarray(edge_time[et], dtype=np.int64))
        if et in edge_feats:
            g.edges[et].data["num"] = torch.from_numpy(edge_feats[et].numeric)
            g.edges[et].data["cat"] = torch.from_numpy(edge_feats[et].categorical)
    return RelGraph(g, kind, features, encoders, edge_feats, reverse)


def time_ns(values: pd.Series) -> np.ndarray:
    """A time column as int64 nanoseconds, sharing the database's memory where it can (a naive
    datetime64[ns] column, whose missing value NaT is already ``ALWAYS``): the graph reads, never writes,
    them, and at 100M rows a copy of every time column is gigabytes."""
    if values.dtype == np.dtype("datetime64[ns]"):
        return values.to_numpy().view(np.int64)
    return to_epoch_ns(values)


def shared_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor over ``a``'s memory, also where ``a`` is a read-only view of the database (torch then
    warns that it cannot guard writes: nothing writes a graph's times)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


def _share_times(feats: EncodedTable, times: np.ndarray) -> EncodedTable:
    """``feats`` whose one datetime column, when it is the row time itself, is that array's memory."""
    if feats.datetimes.shape[1] == 1 and times.dtype == np.int64:
        feats.datetimes = _same_or(feats.datetimes[:, 0], times).reshape(-1, 1)
    return feats


def _same_or(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """``old`` where it holds the same values as ``new``: one array in memory where edge times equal row times."""
    return old if new.shape == old.shape and np.array_equal(new, old) else new
