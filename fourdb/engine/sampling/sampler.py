"""Temporal neighbour sampling as vectorized tensor operations (no per-seed Python loop).

Per edge type the in-edges of every node are stored CSC-style, sorted by edge time. For a frontier of
(node, cutoff) pairs one ``searchsorted`` finds, for all pairs at once, how many in-edges are known at
the pair's cutoff; the fanout is then drawn from that prefix (uniformly without replacement by sorting
random keys or rejection of duplicate draws, see ``uniform``; or the most recent ones; a negative fanout
takes them all). A sampled neighbour inherits its seed's cutoff, and a block node is a (node, cutoff)
pair, so two seeds with different cutoffs never share a neighbourhood computed for the other's cutoff.

All array work is torch, so the same code runs on the CPU or, with ``device="cuda"``, on the GPU (the
index lives on that device and the blocks are built there). Random numbers always come from the
caller's ``numpy.random.Generator`` (drawn on the host, one array per edge type and hop), so a seed
fixes the sample on every device alike.

The block edges of every edge type with features (the link rows of r2ne) carry their original id within
their edge type (``block.edges[et].data[dgl.EID]``), so the loader can read the edge's own features and
its time; ``all_edge_ids=True`` gives every edge type its ids (skipped by default: the gather and the
frames cost about a tenth of a batch and nothing reads them).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fourdb.engine.sampling.blocks import make_block
from fourdb.graph.build import ALWAYS, RelGraph
from fourdb.registry import Registry

# how ``fanout`` of a pair's ``c > fanout`` known in-edges (sorted by time) are chosen: fn(c, fanout, rng)
# -> offsets [len(c), fanout] into each prefix, sorted per row
STRATEGIES: Registry = Registry("sampling strategy")
WIDE = 8  # uniform draws over prefixes up to WIDE * fanout long sort random keys; longer ones use rejection


@STRATEGIES.register("uniform")
def uniform(c: torch.Tensor, fanout: int, rng: np.random.Generator) -> torch.Tensor:
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


@STRATEGIES.register("recent")
def recent(c: torch.Tensor, fanout: int, rng: np.random.Generator) -> torch.Tensor:
    """The last ``fanout`` offsets of each prefix: the most recent known neighbours (time order)."""
    return c[:, None] - fanout + torch.arange(fanout, device=c.device)[None, :]


@dataclass
class TypeIndex:
    """In-edges of one node type over all its edge types, in one array: grouped by (edge type slot,
    destination) and sorted by time within a group, so one searchsorted answers every edge type."""

    etypes: list  # canonical edge types into this type; slot j covers keys [j * num, (j + 1) * num)
    num: int  # nodes of this type
    indptr: torch.Tensor  # [k * num + 1]
    src: torch.Tensor  # source node of each sorted edge (int32 where every id fits)
    eid: torch.Tensor  # original edge id within its edge type (for edge features; as ``src``)
    key: torch.Tensor  # (slot * num + dst) * span + time code: globally sorted
    unit: list = None  # per slot: no destination has more than one in-edge (one comparison, no search)

    def to(self, device) -> "TypeIndex":
        return TypeIndex(self.etypes, self.num, *(t.to(device) for t in (self.indptr, self.src, self.eid, self.key)),
                         self.unit)

    def known(self, q: torch.Tensor, qkey: torch.Tensor, n: int) -> torch.Tensor:
        """End of each query's known prefix: edges of group ``q`` with key <= ``qkey`` (slot-major, n per slot)."""
        lo, end = self.indptr[q], self.indptr[q + 1]
        if all(self.unit):
            last = torch.clamp(lo, max=max(len(self.key) - 1, 0))
            return lo + ((end > lo) & (self.key[last] <= qkey)) if len(self.key) else lo
        hi = torch.empty_like(lo)
        for j, unit in enumerate(self.unit):
            sl = slice(j * n, (j + 1) * n)
            if unit:
                last = torch.clamp(lo[sl], max=max(len(self.key) - 1, 0))
                hi[sl] = lo[sl] + ((end[sl] > lo[sl]) & (self.key[last] <= qkey[sl])) if len(self.key) else lo[sl]
            else:
                hi[sl] = torch.searchsorted(self.key, qkey[sl], right=True)
        return hi


class TimeCoder:
    """Maps int64 nanosecond times to their rank among the graph's distinct edge times, so (node, time)
    packs into one int64 key at full resolution, however long the time span.

    ``code(t)`` is how many distinct edge times are <= t (static rows: 0), for edge times and cutoffs
    alike, so an edge time t is known at cutoff c exactly when code(t) <= code(c)."""

    def __init__(self, times: list[np.ndarray]):
        distinct = {(t.ctypes.data, t.shape): t for t in times}.values()  # edge types often share one time array
        parts = [np.unique(t[t != ALWAYS]) for t in distinct]  # each sorted alone: less working memory
        self.times = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        self.span = len(self.times) + 1

    def code(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        code = np.searchsorted(self.times, t, side="right").astype(np.int64, copy=False)
        code[t == ALWAYS] = 0
        return code


def build_edge_index(graph: RelGraph) -> tuple[dict, TimeCoder]:
    """Every node type's ``TypeIndex``. Slots are the sort's leading key, so each edge type is sorted
    on its own and placed in its slot's range: the working memory is one edge type's, not the node
    type's. Sources and edge ids are int32 where they fit (a 100M-row graph's index is half as big)."""
    etypes = graph.canonical_etypes
    coder = TimeCoder([graph.edge_time(et) for et in etypes])
    by_dst: dict[str, list] = {}
    for et in etypes:
        by_dst.setdefault(et[2], []).append(et)
    index = {}
    for ntype, ets in by_dst.items():
        num = graph.g.num_nodes(ntype)
        if max(1, len(ets) * num) * coder.span >= np.iinfo(np.int64).max // 2:
            raise OverflowError(f"time span too long to pack for the edges into {ntype}")
        sizes = [graph.g.num_edges(et) for et in ets]
        largest = max([*sizes, *(graph.g.num_nodes(et[0]) for et in ets), 1])
        ids = np.int32 if largest < np.iinfo(np.int32).max else np.int64
        total = sum(sizes)
        key, src, eid = np.empty(total, np.int64), np.empty(total, ids), np.empty(total, ids)
        indptr = np.zeros(len(ets) * num + 1, dtype=np.int64)
        at = 0
        for j, (et, size) in enumerate(zip(ets, sizes)):
            s, d = (x.numpy() for x in graph.g.edges(etype=et))  # the ids as stored (int32 mostly): no copy
            t = graph.edge_time(et)
            part = d.astype(np.int64)  # the key (j * num + d) * span + code, built in place
            part += j * num
            part *= coder.span
            part += coder.code(t)
            order = np.argsort(part, kind="stable")
            np.take(part, order, out=key[at:at + size])
            del part
            src[at:at + size] = s[order]
            eid[at:at + size] = order
            indptr[1 + j * num: 1 + (j + 1) * num] = np.bincount(d, minlength=num)
            at += size
            del order
        np.cumsum(indptr, out=indptr)
        degree = np.diff(indptr).reshape(len(ets), num) if num else np.zeros((len(ets), 0), np.int64)
        unit = [bool(num == 0 or degree[j].max() <= 1) for j in range(len(ets))]
        index[ntype] = TypeIndex(ets, num, *(torch.from_numpy(x) for x in (indptr, src, eid, key)), unit)
    return index, coder


@dataclass
class SampledBatch:
    blocks: list  # DGL blocks, input layer first
    input_nodes: dict[str, torch.Tensor]  # node ids per type of the first block's sources
    input_cutoffs: dict[str, torch.Tensor]  # cutoff (int64 ns) per source pair, for relative time
    seed_type: str
    num_seeds: int
    input_groups: dict[str, torch.Tensor] | None = None  # per source pair: its seed (``isolate`` only)


def _as_tensor(x, device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.int64)
    return torch.as_tensor(np.asarray(x, dtype=np.int64), device=device)


class TemporalSampler:
    """``fanouts`` one per layer, seed layer last; a negative fanout takes every known neighbour."""

    def __init__(self, graph: RelGraph, fanouts: list[int], strategy: str = "uniform", device="cpu",
                 _index=None, all_edge_ids: bool = False):
        self.choose = STRATEGIES.get(strategy)
        self.graph = graph
        self.fanouts = [int(f) for f in fanouts]
        self.strategy = strategy
        self.device = torch.device(device)
        self.all_edge_ids = all_edge_ids
        self.id_etypes = frozenset(graph.canonical_etypes if all_edge_ids else graph.edge_features)
        if _index is None:
            _index = build_edge_index(graph)
        index, self.coder = _index
        self.index = {t: ix.to(self.device) for t, ix in index.items()}

    def config(self) -> dict:
        # all_edge_ids only when set: it changes what a stored batch holds, and default configs keep their hashes
        extra = {"all_edge_ids": True} if self.all_edge_ids else {}
        return {"fanouts": self.fanouts, "strategy": self.strategy, **extra}

    def with_fanouts(self, fanouts: list[int]) -> "TemporalSampler":
        """The same index with other fanouts (e.g. full neighbourhoods for evaluation)."""
        return TemporalSampler(self.graph, fanouts, self.strategy, self.device, (self.index, self.coder),
                               self.all_edge_ids)

    def to(self, device) -> "TemporalSampler":
        return TemporalSampler(self.graph, self.fanouts, self.strategy, device, (self.index, self.coder),
                               self.all_edge_ids)

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
            chosen = self.choose(c, fanout, rng)
            is_big = torch.zeros(n, dtype=torch.bool, device=dev)
            is_big[big] = True
            offsets[is_big[rows]] = chosen.reshape(-1)
        return rows, offsets

    def sample(self, seed_type: str, seeds, cutoffs, rng: np.random.Generator,
               hidden_etypes: frozenset = frozenset(), isolate: bool = False) -> SampledBatch:
        """Blocks for ``seeds`` of ``seed_type``, each seen as of its cutoff (int64 nanoseconds).

        ``hidden_etypes`` are edge types into the seed rows themselves that must not be used: the
        foreign keys a row-column task hides. With ``isolate`` every seed gets a tree of its own (a
        node is a (row, seed) pair, never shared with another seed's), and ``input_groups`` says
        which seed reached each input node: what an identity-aware model reads its scores from.
        """
        seeds = _as_tensor(seeds, self.device)
        cut = self._cutoffs(cutoffs, isolate)
        # frontier per type: pair keys (node * n_cut + cutoff rank), dst nodes first
        frontier = {seed_type: seeds * cut.n + cut.ranks}
        if len(torch.unique(frontier[seed_type])) != len(seeds):
            raise ValueError("seeds must be distinct (node, cutoff) pairs")
        hidden = _Hidden(seed_type, len(seeds), hidden_etypes)
        blocks = []
        for fanout in reversed(self.fanouts):
            src_types, by_src = self._neighbours(frontier, fanout, rng, cut, hidden)
            frontier, block = self._block(frontier, src_types, by_src)
            blocks.insert(0, block)
        input_nodes = {t: k // cut.n for t, k in frontier.items()}
        input_cutoffs = {t: cut.values[k % cut.n] for t, k in frontier.items()}
        groups = {t: k % cut.n for t, k in frontier.items()} if isolate else None
        return SampledBatch(blocks, input_nodes, input_cutoffs, seed_type, len(seeds), groups)

    def _cutoffs(self, cutoffs, isolate: bool) -> "_Cutoffs":
        """The seeds' distinct cutoffs and each seed's rank among them; with ``isolate`` a rank per seed, so
        pairs of different seeds never merge, even at one cutoff."""
        cut_np = cutoffs.cpu().numpy() if isinstance(cutoffs, torch.Tensor) else np.asarray(cutoffs, np.int64)
        if isolate:
            values, ranks = cut_np.reshape(-1), np.arange(cut_np.size)
        else:
            values, ranks = np.unique(cut_np, return_inverse=True)
        dev = self.device
        return _Cutoffs(len(values), torch.from_numpy(values).to(dev),
                        torch.from_numpy(self.coder.code(values)).to(dev),
                        torch.from_numpy(ranks.reshape(-1)).to(dev))

    def _neighbours(self, frontier: dict, fanout: int, rng: np.random.Generator, cut: "_Cutoffs",
                    hidden: "_Hidden") -> tuple[dict, dict]:
        """One hop: the source types of the block (the frontier's first, in the order the next hop visits
        them) and, per source type, ``(etype, neighbour pair keys, dst rows, edge ids or None)`` per edge
        type, drawn in the frontier's order (the order fixes which random numbers each edge type gets)."""
        dev = self.device
        empty = torch.zeros(0, dtype=torch.int64, device=dev)
        src_types = {t: None for t in frontier}  # a dict as an ordered set
        by_src: dict[str, list] = {}
        for dst_type, dst_keys in frontier.items():
            ix = self.index.get(dst_type)
            if ix is None:
                continue
            n, k = len(dst_keys), len(ix.etypes)
            for et in ix.etypes:
                src_types.setdefault(et[0], None)
            if n == 0:
                for et in ix.etypes:
                    by_src.setdefault(et[0], []).append((et, empty, empty, None))  # ids: set below where carried
                continue
            nodes, ranks = dst_keys // cut.n, dst_keys % cut.n
            # every (edge type, pair) at once: slot j of pair i is query j * n + i
            q = (torch.arange(k, device=dev)[:, None] * ix.num + nodes[None, :]).reshape(-1)
            lo = ix.indptr[q]
            counts = torch.clamp(ix.known(q, q * self.coder.span + cut.codes[ranks].repeat(k), n) - lo, min=0)
            if dst_type == hidden.seed_type and hidden.etypes:
                for j, et in enumerate(ix.etypes):
                    if et in hidden.etypes or et[1] in hidden.etypes:
                        counts[j * n: j * n + hidden.num_seeds] = 0
            rows, offsets = self._draw(counts, fanout, rng)
            at = lo[rows] + offsets
            dst_rows = rows % n
            pairs = ix.src[at].long() * cut.n + ranks[dst_rows]
            sizes = torch.bincount(rows // n, minlength=k).tolist()  # rows ascend: grouped by slot
            for et, a, p, d in zip(ix.etypes, *(torch.split(x, sizes) for x in (at, pairs, dst_rows))):
                by_src.setdefault(et[0], []).append((et, p, d, ix.eid[a].long() if et in self.id_etypes else None))
        return src_types, by_src

    def _block(self, frontier: dict, src_types: dict, by_src: dict):
        """The block of one hop and the next frontier. Per source type: its destination pairs first, then
        the new neighbour pairs (sorted); one unique with inverse gives both the new pairs and every edge's
        local source id."""
        dev = self.device
        empty = torch.zeros(0, dtype=torch.int64, device=dev)
        src_unique, block_edges, block_eids = {}, {}, {}
        for t in src_types:
            dst_part = frontier.get(t, empty)
            items = by_src.get(t, [])
            block_eids.update((et, e) for et, _, _, e in items if e is not None)
            nbrs = torch.cat([p for _, p, _, _ in items]) if items else empty
            if not len(nbrs):
                src_unique[t] = dst_part
                for et, _, d, _ in items:
                    block_edges[et] = (empty, d)
                continue
            uniq, inv = torch.unique(torch.cat([dst_part, nbrs]), return_inverse=True)
            pos = torch.full((len(uniq),), -1, dtype=torch.int64, device=dev)
            nd = len(dst_part)
            pos[inv[:nd]] = torch.arange(nd, device=dev)
            new = pos < 0
            pos[new] = nd + torch.arange(int(new.sum()), device=dev)
            src_unique[t] = torch.cat([dst_part, uniq[new]])
            local = pos[inv[nd:]]
            for (et, _, d, _), loc in zip(items, torch.split(local, [len(p) for _, p, _, _ in items])):
                block_edges[et] = (loc, d)
        num_src = {t: len(src_unique.get(t, ())) for t in self.graph.ntypes}
        num_dst = {t: len(frontier.get(t, ())) for t in self.graph.ntypes}
        for et in self.graph.canonical_etypes:
            block_edges.setdefault(et, (empty, empty))
        for et in self.id_etypes:
            block_eids.setdefault(et, empty)
        return src_unique, make_block(block_edges, num_src, num_dst, dev, block_eids)


@dataclass
class _Cutoffs:
    """The distinct cutoffs of one ``sample`` call: a pair key is ``node * n + rank``."""
    n: int
    values: torch.Tensor  # int64 ns per rank
    codes: torch.Tensor  # per rank, its time in the index's key code (``coder.code``)
    ranks: torch.Tensor  # per seed, the rank of its cutoff


@dataclass
class _Hidden:
    """Edge types into the seed rows that must not be sampled (the first ``num_seeds`` pairs of the seed
    type are the seeds themselves)."""
    seed_type: str
    num_seeds: int
    etypes: frozenset
