"""Temporal neighbour sampling as vectorized array operations (no per-seed Python loop).

Per edge type the in-edges of every node are stored CSC-style, sorted by edge time. For a frontier of
(node, cutoff) pairs one ``searchsorted`` finds, for all pairs at once, how many in-edges are known at
the pair's cutoff; the fanout is then drawn from that prefix (uniformly without replacement by a
vectorized Floyd's algorithm, or the most recent ones). A sampled neighbour inherits its seed's
cutoff, and a block node is a (node, cutoff) pair, so two seeds with different cutoffs never share
a neighbourhood computed for the other's cutoff.
"""
from __future__ import annotations

from dataclasses import dataclass

import dgl
import numpy as np
import torch

from fourdb.graph.build import ALWAYS, RelGraph

STRATEGIES = ("uniform", "recent")


@dataclass
class EdgeIndex:
    """In-edges of one edge type, grouped by destination and sorted by (destination, time)."""

    indptr: np.ndarray  # [num_dst + 1]
    src: np.ndarray  # source node of each sorted edge
    eid: np.ndarray  # original edge id (for edge features)
    key: np.ndarray  # dst * span + time rank: globally sorted, one searchsorted answers all pairs


class TimeCoder:
    """Maps int64 seconds to small non-negative ranks so (node, time) packs into one int64 key."""

    def __init__(self, times: list[np.ndarray]):
        known = np.concatenate([t[t != ALWAYS] for t in times]) if times else np.zeros(0, np.int64)
        self.t0 = int(known.min()) if len(known) else 0
        self.span = int(known.max() - self.t0 + 2) if len(known) else 2

    def code(self, t: np.ndarray) -> np.ndarray:
        """Static rows -> 0; real times -> 1 + offset; cutoffs clip into [0, span-1]."""
        t = np.asarray(t, dtype=np.int64)
        out = np.clip(t - self.t0 + 1, 0, self.span - 1)
        return np.where(t == ALWAYS, 0, out)


def build_edge_index(graph: RelGraph) -> tuple[dict, TimeCoder]:
    etypes = graph.canonical_etypes
    raw = {et: graph.edges(et) for et in etypes}
    coder = TimeCoder([raw[et][2] for et in etypes])
    index = {}
    for et in etypes:
        src, dst, t = raw[et]
        num_dst = graph.g.num_nodes(et[2])
        if num_dst * coder.span >= np.iinfo(np.int64).max // 2:
            raise OverflowError(f"time span too long to pack for edge type {et}")
        key = dst.astype(np.int64) * coder.span + coder.code(t)
        order = np.argsort(key, kind="stable")
        indptr = np.zeros(num_dst + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_dst), out=indptr[1:])
        index[et] = EdgeIndex(indptr, src[order].astype(np.int64), order.astype(np.int64), key[order])
    return index, coder


@dataclass
class SampledBatch:
    blocks: list  # DGL blocks, input layer first
    input_nodes: dict[str, torch.Tensor]  # node ids per type of the first block's sources
    input_cutoffs: dict[str, torch.Tensor]  # cutoff (int64 s) per source pair, for relative time
    seed_type: str
    num_seeds: int


class TemporalSampler:
    def __init__(self, graph: RelGraph, fanouts: list[int], strategy: str = "uniform"):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown sampling strategy '{strategy}' (choose from {STRATEGIES})")
        self.graph = graph
        self.fanouts = list(fanouts)
        self.strategy = strategy
        self.index, self.coder = build_edge_index(graph)
        self.by_dst: dict[str, list] = {}
        for et in graph.canonical_etypes:
            self.by_dst.setdefault(et[2], []).append(et)

    def _draw(self, counts: np.ndarray, fanout: int, rng: np.random.Generator):
        """Offsets into each pair's known prefix: all when few, else ``fanout`` of them."""
        take = np.minimum(counts, fanout)
        rows = np.repeat(np.arange(len(counts)), take)
        small = counts <= fanout
        # pairs with few neighbours take all of them
        starts = np.cumsum(take) - take
        offsets = np.arange(take.sum()) - np.repeat(starts, take)
        big = np.nonzero(~small)[0]
        if len(big):
            c = counts[big]
            if self.strategy == "recent":
                chosen = c[:, None] - fanout + np.arange(fanout)[None, :]
            else:  # Floyd's algorithm, one column at a time, vectorized over pairs
                chosen = np.empty((len(big), fanout), dtype=np.int64)
                for i in range(fanout):
                    j = c - fanout + i
                    r = (rng.random(len(big)) * (j + 1)).astype(np.int64)
                    dup = (chosen[:, :i] == r[:, None]).any(1) if i else np.zeros(len(big), bool)
                    chosen[:, i] = np.where(dup, j, r)
            pos = np.repeat(np.isin(np.arange(len(counts)), big), take)
            offsets[pos] = chosen.reshape(-1) if self.strategy == "recent" else np.sort(chosen, 1).reshape(-1)
        return rows, offsets

    def sample(self, seed_type: str, seeds: np.ndarray, cutoffs: np.ndarray, rng: np.random.Generator,
               hidden_etypes: frozenset = frozenset()) -> SampledBatch:
        """Blocks for ``seeds`` of ``seed_type``, each seen as of its cutoff (int64 seconds).

        ``hidden_etypes`` are edge types into the seed rows themselves that must not be used: the
        foreign keys a row-column task hides.
        """
        seeds = np.asarray(seeds, dtype=np.int64)
        cut_values, cut_rank = np.unique(np.asarray(cutoffs, dtype=np.int64), return_inverse=True)
        n_cut = len(cut_values)
        cut_codes = self.coder.code(cut_values)
        # frontier per type: pair keys (node * n_cut + cutoff rank), dst nodes first
        frontier = {seed_type: seeds * n_cut + cut_rank}
        if len(np.unique(frontier[seed_type])) != len(seeds):
            raise ValueError("seeds must be distinct (node, cutoff) pairs")
        blocks = []
        for fanout in reversed(self.fanouts):
            src_keys = {t: [k] for t, k in frontier.items()}
            edges = {}
            for dst_type, dst_keys in frontier.items():
                nodes, ranks = dst_keys // n_cut, dst_keys % n_cut
                for et in self.by_dst.get(dst_type, []):
                    ix = self.index[et]
                    lo = ix.indptr[nodes]
                    hi = np.searchsorted(ix.key, nodes * self.coder.span + cut_codes[ranks], side="right")
                    counts = np.maximum(hi - lo, 0)
                    if et in hidden_etypes and dst_type == seed_type:
                        counts[: len(seeds)] = 0
                    rows, offsets = self._draw(counts, fanout, rng)
                    nbr = ix.src[lo[rows] + offsets]
                    edges[et] = (nbr * n_cut + ranks[rows], rows)
                    src_keys.setdefault(et[0], []).append(edges[et][0])
            src_unique = {}
            for t, parts in src_keys.items():
                dst_part = frontier.get(t, np.zeros(0, np.int64))
                rest = parts[1:] if t in frontier else parts
                rest = np.unique(np.concatenate(rest)) if rest else np.zeros(0, np.int64)
                rest = rest[~np.isin(rest, dst_part)]
                src_unique[t] = np.concatenate([dst_part, rest])
            lookup = {t: (np.argsort(k, kind="stable"), np.sort(k)) for t, k in src_unique.items()}
            block_edges = {}
            for et, (nbr_keys, dst_rows) in edges.items():
                order, sorted_keys = lookup[et[0]]
                src_local = order[np.searchsorted(sorted_keys, nbr_keys)]
                block_edges[et] = (torch.from_numpy(src_local), torch.from_numpy(dst_rows))
            num_src = {t: len(src_unique.get(t, ())) for t in self.graph.ntypes}
            num_dst = {t: len(frontier.get(t, ())) for t in self.graph.ntypes}
            for et in self.graph.canonical_etypes:
                block_edges.setdefault(et, (torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)))
            block = dgl.create_block(block_edges, num_src_nodes=num_src, num_dst_nodes=num_dst)
            blocks.insert(0, block)
            frontier = src_unique
        input_nodes = {t: torch.from_numpy(k // n_cut) for t, k in frontier.items()}
        input_cutoffs = {t: torch.from_numpy(cut_values[k % n_cut]) for t, k in frontier.items()}
        return SampledBatch(blocks, input_nodes, input_cutoffs, seed_type, len(seeds))
