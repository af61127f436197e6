"""The graph inputs of a task and how a sampled batch's input features are gathered from them.

Features of a block's input nodes come from the graph's encoded tables; the seed rows themselves take
the task's masked encoding (a row-column task hides the columns not known at the cutoff). What depends
on the cutoff is computed per (row, cutoff): each datetime column's age and the row's own age. Edges of
a featured edge type (an r2ne link table) get theirs the same way, by the edge ids the sampled blocks
carry: the link row's encoded columns and ages, set on the block's edges (``edata["num"]``,
``edata["cat"]``). ``node_inputs`` is the one function that gathers a block's inputs, for online
sampling, the offline store and layer-wise inference alike.

Each input node also says which (row, cutoff) pair it is (``row_key``, ``cutoff``), for a model that
keeps state across batches (fourdb/models/musegnn.py): never features, only names.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import dgl
import numpy as np
import torch

from fourdb.columns import EncodedTable, datetime_age
from fourdb.contracts import Sampler
from fourdb.engine.config import EngineConfig
from fourdb.graph.build import ALWAYS, RelGraph
from fourdb.utils import NS_PER_DAY

RELATIVE_TIME_DIMS = 2  # [log age in days, is static] of every row's (and edge's) own time


@dataclass
class GraphData:
    graph: RelGraph
    sampler: Sampler
    seed_type: str
    seeds: dict[str, np.ndarray]  # split -> node ids
    cutoffs: dict[str, np.ndarray]  # split -> int64 nanoseconds
    labels: dict[str, np.ndarray]  # train and val only
    seed_features: EncodedTable  # the seed table encoded with hidden columns masked
    hidden_etypes: frozenset = field(default_factory=frozenset)
    engine: EngineConfig = field(default_factory=EngineConfig)  # how a GraphSource over this data runs
    # values derived from the data once and reused (layer-wise edge arrays, the content fingerprint)
    derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # not carried by replace()

    def fingerprint(self) -> str:
        """Content hash of everything a training batch is made of (computed once)."""
        if "fingerprint" not in self.derived:
            h = hashlib.blake2b(digest_size=16)

            def add(*arrays):
                for a in arrays:
                    a = np.ascontiguousarray(a)
                    h.update(str((a.dtype.str, a.shape)).encode())
                    h.update(a.view(np.uint8).reshape(-1).data)

            g = self.graph
            for t in sorted(g.ntypes):
                f = g.features[t]
                h.update(t.encode())
                add(g.node_time(t), f.numeric, f.categorical, f.datetimes)
            for et in sorted(g.canonical_etypes):
                h.update(repr(et).encode())
                add(*g.edges(et))
            h.update(repr((self.seed_type, sorted(map(str, self.hidden_etypes)))).encode())
            add(self.seed_features.numeric, self.seed_features.categorical, self.seed_features.datetimes,
                self.seeds["train"], self.cutoffs["train"], self.labels["train"])
            self.derived["fingerprint"] = h.hexdigest()
        return self.derived["fingerprint"]


def input_width(feats: EncodedTable) -> int:
    """Width of the numbers a model gets per row: encoded columns, datetime ages, own age."""
    return feats.numeric.shape[1] + feats.datetimes.shape[1] + RELATIVE_TIME_DIMS


def _source(data: GraphData, ntype: str, rows: np.ndarray) -> tuple[EncodedTable, np.ndarray, np.ndarray]:
    """(table, rows, is masked): for the seed type a row ``n + i`` (n rows) is row i masked."""
    feats = data.graph.features[ntype]
    n = len(feats.numeric)
    masked = rows >= n if ntype == data.seed_type else np.zeros(len(rows), bool)
    return feats, rows % max(n, 1), masked


def row_features(data: GraphData, ntype: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encoded columns of ``rows`` that do not depend on the cutoff (see ``input_rows`` for masking)."""
    feats, local, masked = _source(data, ntype, rows)
    num, cat = feats.numeric[local], feats.categorical[local]
    if masked.any():
        m = local[masked]
        num[masked], cat[masked] = data.seed_features.numeric[m], data.seed_features.categorical[m]
    return num, cat


def age(times: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """[log(1 + age in days at the cutoff), is static] per row, float32."""
    static = times == ALWAYS
    days = np.where(static, 0.0, (cutoffs - np.where(static, 0, times)) / NS_PER_DAY)
    return np.stack([np.log1p(np.clip(days, 0, None)), static.astype(np.float64)], 1).astype(np.float32)


def relative_time(data: GraphData, ntype: str, rows: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """What a row's numbers hold that depends on its cutoff: each datetime column's age, then the row's
    own age (``age``). ``rows`` as ``input_rows`` gives them (masked seed rows hide their datetimes)."""
    feats, local, masked = _source(data, ntype, rows)
    dts = feats.datetimes[local]
    if masked.any():
        dts[masked] = data.seed_features.datetimes[local[masked]]
    return np.concatenate([datetime_age(dts, cutoffs), age(data.graph.node_time(ntype)[local], cutoffs)], 1)


def node_inputs(data: GraphData, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray,
                num_seeds: int = 0) -> dict[str, torch.Tensor]:
    """A block's input features for ``nodes`` of one type at their cutoffs: ``num`` (encoded columns,
    then ``relative_time``) and ``cat``; the first ``num_seeds`` of the seed type are the masked seeds.
    Then which pair each node is: ``row_key`` (``row_keys``) and ``cutoff``."""
    rows = input_rows(data, ntype, nodes, num_seeds)
    num, cat = row_features(data, ntype, rows)
    rel = relative_time(data, ntype, rows, cutoffs)
    return {"num": torch.from_numpy(np.concatenate([num, rel], 1)), "cat": torch.from_numpy(cat),
            **node_names(data, ntype, nodes, cutoffs)}


def node_names(data: GraphData, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray) -> dict[str, torch.Tensor]:
    """``row_key`` and ``cutoff`` (int64 ns) of input nodes: what a model keys state kept across batches by."""
    cutoffs = np.asarray(cutoffs, np.int64)
    keys = torch.from_numpy(row_keys(data, ntype, nodes, cutoffs))
    return {"row_key": keys, "cutoff": torch.from_numpy(cutoffs.copy())}  # a copy: the store's are a read-only map


def row_keys(data: GraphData, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """A name for each node's row that every build of the database as of its cutoff, or later, gives it
    alike: the row's rank in its table ordered by (time, row number). Row numbers are no such name:
    deleting the rows newer than a cutoff (``fourdb certify``) renumbers the rest. The rows known at a
    cutoff keep their order and come before every newer row, so their ranks stay. -1 for a row newer
    than its cutoff (a row-column task's seed row): its rank is not fixed by what is known then."""
    ranks = data.derived.get("row_ranks")
    if ranks is None:  # a dict per graph, filled a table at a time; the sampler threads may race to fill it alike
        ranks = data.derived["row_ranks"] = {}
    if ntype not in ranks:
        order = np.argsort(data.graph.node_time(ntype), kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        ranks[ntype] = rank
    nodes = np.asarray(nodes, np.int64)
    return np.where(data.graph.node_time(ntype)[nodes] <= cutoffs, ranks[ntype][nodes], -1)


def add_edge_features(data: GraphData, blocks: list, cutoffs: dict[str, np.ndarray]) -> None:
    """Set each featured edge type's inputs on ``blocks``: ``edata["num"]`` (the link row's numeric
    columns, its datetime ages, then the edge's ``age`` at its destination's cutoff) and ``edata["cat"]``,
    read by the edge ids the blocks carry. ``cutoffs``: per type, the cutoff of each local node id (every
    block's nodes of a type are a prefix of the first block's sources)."""
    g = data.graph
    none = np.zeros(0, np.int64)
    for block in blocks:
        for et, table in g.edge_features.items():
            eid = block.edges[et].data[dgl.EID].cpu().numpy()
            dst = block.edges(etype=et)[1].cpu().numpy()
            cut = cutoffs.get(et[2], none)[dst]
            num = np.concatenate([table.numeric[eid], datetime_age(table.datetimes[eid], cut),
                                  age(g.edge_time(et)[eid], cut)], 1)
            block.edges[et].data["num"] = torch.from_numpy(num).to(block.device)
            block.edges[et].data["cat"] = torch.from_numpy(table.categorical[eid]).to(block.device)


def input_rows(data: GraphData, ntype: str, nodes: np.ndarray, num_seeds: int) -> np.ndarray:
    """Feature rows of a block's input nodes: the first ``num_seeds`` of the seed type are masked."""
    rows = nodes.astype(np.int64, copy=True)
    if ntype == data.seed_type and num_seeds:
        rows[:num_seeds] += data.graph.features[ntype].numeric.shape[0]
    return rows
