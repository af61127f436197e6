"""Temporal neighbour sampling as vectorized tensor operations (no per-seed Python loop).

Per edge type the in-edges of every node are stored CSC-style, sorted by edge time. For a frontier of
(node, cutoff) pairs one ``searchsorted`` finds, for all pairs at once, how many in-edges are known at
the pair's cutoff; the fanout is then drawn from that prefix (uniformly without replacement by a
random keys or rejection of duplicate draws, see ``_uniform``; or the most recent ones; a negative fanout takes them all). A sampled
neighbour inherits its seed's cutoff, and a block node is a (node, cutoff) pair, so two seeds with
different cutoffs never share a neighbourhood computed for the other's cutoff.

All array work is torch, so the same code runs on the CPU or, with ``device="cuda"``, on the GPU (the
index lives on that device and the blocks are built there). Random numbers always come from the
caller's ``numpy.random.Generator`` (drawn on the host, one array per edge type and hop), so a seed
fixes the sample on every device alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import dgl
import numpy as np
import torch

from fourdb.graph.build import ALWAYS, RelGraph

STRATEGIES = ("uniform", "recent")
WIDE = 8  # uniform draws over prefixes up to WIDE * fanout long sort random keys; longer ones use rejection


@dataclass
class EdgeIndex:
    """In-edges of one edge type, grouped by destination and sorted by (destination, time)."""

    indptr: torch.Tensor  # [num_dst + 1]
    src: torch.Tensor  # source node of each sorted edge
    eid: torch.Tensor  # original edge id (for edge features)
    key: torch.Tensor  # dst * span + time rank: globally sorted, one searchsorted answers all pairs

    def to(self, device) -> "EdgeIndex":
        return EdgeIndex(*(t.to(device) for t in (self.indptr, self.src, self.eid, self.key)))


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
        index[et] = EdgeIndex(*(torch.from_numpy(np.ascontiguousarray(a)) for a in
                                (indptr, src[order].astype(np.int64), order.astype(np.int64), key[order])))
    return index, coder


@dataclass
class SampledBatch:
    blocks: list  # DGL blocks, input layer first
    input_nodes: dict[str, torch.Tensor]  # node ids per type of the first block's sources
    input_cutoffs: dict[str, torch.Tensor]  # cutoff (int64 s) per source pair, for relative time
    seed_type: str
    num_seeds: int


def _as_tensor(x, device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.int64)
    return torch.as_tensor(np.asarray(x, dtype=np.int64), device=device)


class TemporalSampler:
    """``fanouts`` one per layer, seed layer last; a negative fanout takes every known neighbour."""

    def __init__(self, graph: RelGraph, fanouts: list[int], strategy: str = "uniform", device="cpu",
                 _index=None):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown sampling strategy '{strategy}' (choose from {STRATEGIES})")
        self.graph = graph
        self.fanouts = [int(f) for f in fanouts]
        self.strategy = strategy
        self.device = torch.device(device)
        if _index is None:
            _index = build_edge_index(graph)
        index, self.coder = _index
        self.index = {et: ix.to(self.device) for et, ix in index.items()}
        self.by_dst: dict[str, list] = {}
        for et in graph.canonical_etypes:
            self.by_dst.setdefault(et[2], []).append(et)

    def config(self) -> dict:
        return {"fanouts": self.fanouts, "strategy": self.strategy}

    def with_fanouts(self, fanouts: list[int]) -> "TemporalSampler":
        """The same index with other fanouts (e.g. full neighbourhoods for evaluation)."""
        return TemporalSampler(self.graph, fanouts, self.strategy, self.device, (self.index, self.coder))

    def to(self, device) -> "TemporalSampler":
        return TemporalSampler(self.graph, self.fanouts, self.strategy, device, (self.index, self.coder))

    def _draw(self, counts: torch.Tensor, fanout: int, rng: np.random.Generator):
        """Offsets into each pair's known prefix: all when few (or fanout < 0), else ``fanout`` of them."""
        dev = counts.device
        take = counts if fanout < 0 else torch.clamp(counts, max=fanout)
        n = len(counts)
        rows = torch.repeat_interleave(torch.arange(n, device=dev), take)
        starts = torch.cumsum(take, 0) - take
        offsets = torch.arange(len(rows), device=dev) - starts[rows]
        if fanout < 0:
            return rows, offsets
        big = torch.nonzero(counts > fanout).view(-1)
        nb = len(big)
        if nb:
            c = counts[big]
            steps = torch.arange(fanout, device=dev)
            if self.strategy == "recent":
                chosen = c[:, None] - fanout + steps[None, :]
            else:
                chosen = self._uniform(c, fanout, rng)
            is_big = torch.zeros(n, dtype=torch.bool, device=dev)
            is_big[big] = True
            offsets[is_big[rows]] = chosen.reshape(-1)
        return rows, offsets

    @staticmethod
    def _uniform(c: torch.Tensor, fanout: int, rng: np.random.Generator) -> torch.Tensor:
        """``fanout`` distinct offsets in [0, c) per row, uniformly, sorted; every c > fanout.

        Rows with a short prefix (c <= WIDE * fanout) sort random keys over the prefix; longer ones
        draw ``fanout`` offsets and redraw the rows that hold a duplicate (rare when c >> fanout), so
        every accepted row is a uniform subset. A handful of array operations per edge type and hop.
        """
        dev = c.device
        out = torch.empty((len(c), fanout), dtype=torch.int64, device=dev)
        short = c <= WIDE * fanout
        if short.any():
            cs = c[short]
            width = int(cs.max())
            keys = torch.from_numpy(rng.random((len(cs), width))).to(dev)
            keys[torch.arange(width, device=dev)[None, :] >= cs[:, None]] = 2.0
            out[short] = torch.topk(keys, fanout, dim=1, largest=False).indices
        rest = torch.nonzero(~short).view(-1)
        while len(rest):
            cl = c[rest]
            draw = (torch.from_numpy(rng.random((len(rest), fanout))).to(dev) * cl[:, None]).to(torch.int64)
            srt = torch.sort(draw, 1).values
            dup = (srt[:, 1:] == srt[:, :-1]).any(1)
            out[rest[~dup]] = srt[~dup]
            rest = rest[dup]
        return torch.sort(out, 1).values

    def sample(self, seed_type: str, seeds, cutoffs, rng: np.random.Generator,
               hidden_etypes: frozenset = frozenset()) -> SampledBatch:
        """Blocks for ``seeds`` of ``seed_type``, each seen as of its cutoff (int64 seconds).

        ``hidden_etypes`` are edge types into the seed rows themselves that must not be used: the
        foreign keys a row-column task hides.
        """
        dev = self.device
        seeds = _as_tensor(seeds, dev)
        cut_np = cutoffs.cpu().numpy() if isinstance(cutoffs, torch.Tensor) else np.asarray(cutoffs, np.int64)
        cut_values_np, cut_rank_np = np.unique(cut_np, return_inverse=True)
        n_cut = len(cut_values_np)
        cut_values = torch.from_numpy(cut_values_np).to(dev)
        cut_codes = torch.from_numpy(self.coder.code(cut_values_np)).to(dev)
        span = self.coder.span
        # frontier per type: pair keys (node * n_cut + cutoff rank), dst nodes first
        frontier = {seed_type: seeds * n_cut + torch.from_numpy(cut_rank_np.reshape(-1)).to(dev)}
        if len(torch.unique(frontier[seed_type])) != len(seeds):
            raise ValueError("seeds must be distinct (node, cutoff) pairs")
        empty = torch.zeros(0, dtype=torch.int64, device=dev)
        blocks = []
        for fanout in reversed(self.fanouts):
            src_keys = {t: [k] for t, k in frontier.items()}
            edges = {}
            for dst_type, dst_keys in frontier.items():
                nodes, ranks = dst_keys // n_cut, dst_keys % n_cut
                for et in self.by_dst.get(dst_type, []):
                    ix = self.index[et]
                    lo = ix.indptr[nodes]
                    hi = torch.searchsorted(ix.key, nodes * span + cut_codes[ranks], right=True)
                    counts = torch.clamp(hi - lo, min=0)
                    if (et in hidden_etypes or et[1] in hidden_etypes) and dst_type == seed_type:
                        counts[: len(seeds)] = 0
                    rows, offsets = self._draw(counts, fanout, rng)
                    nbr = ix.src[lo[rows] + offsets]
                    edges[et] = (nbr * n_cut + ranks[rows], rows)
                    src_keys.setdefault(et[0], []).append(edges[et][0])
            src_unique = {}
            for t, parts in src_keys.items():
                dst_part = frontier.get(t, empty)
                rest = parts[1:] if t in frontier else parts
                rest = torch.unique(torch.cat(rest)) if rest else empty
                if len(dst_part):
                    rest = rest[~torch.isin(rest, dst_part)]
                src_unique[t] = torch.cat([dst_part, rest])
            lookup = {t: torch.sort(k, stable=True) for t, k in src_unique.items()}
            block_edges = {}
            for et, (nbr_keys, dst_rows) in edges.items():
                sorted_keys, order = lookup[et[0]]
                block_edges[et] = (order[torch.searchsorted(sorted_keys, nbr_keys)], dst_rows)
            num_src = {t: len(src_unique.get(t, ())) for t in self.graph.ntypes}
            num_dst = {t: len(frontier.get(t, ())) for t in self.graph.ntypes}
            for et in self.graph.canonical_etypes:
                block_edges.setdefault(et, (empty, empty))
            blocks.insert(0, dgl.create_block(block_edges, num_src_nodes=num_src, num_dst_nodes=num_dst,
                                              device=dev))
            frontier = src_unique
        input_nodes = {t: k // n_cut for t, k in frontier.items()}
        input_cutoffs = {t: cut_values[k % n_cut] for t, k in frontier.items()}
        return SampledBatch(blocks, input_nodes, input_cutoffs, seed_type, len(seeds))
