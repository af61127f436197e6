"""Our temporal sampler against DGL's, each pair doing the same work on the same batches.

* ``sampler_vs_graphbolt_temporal``: GraphBolt's temporal sampler on the same graph, seeds, cutoffs and
  fanouts (per edge type, as ours), with the same time rule and the same output (DGL blocks over
  distinct (node, cutoff) pairs).
* ``sampler_vs_dgl``: DGL's NeighborSampler (not temporal) against ours given one cutoff after every
  edge, on batches of distinct nodes: both then sample every edge type's full neighbourhood and merge
  a node reached twice.

What was done to make the work equal (dgl 2.1.0, graphbolt/src/fused_csc_sampling_graph.cc):
* Time rule. GraphBolt keeps an edge whose timestamp is strictly before the seed's (``TemporalMask``,
  ``FastTemporalPick``); ours keeps time <= cutoff, in int64 nanoseconds. GraphBolt gets cutoff + 1 ns.
  Only edge timestamps are given: a fourdb edge's time is already when its source row is known.
* Edge times in CSC order. ``gb.from_dglgraph`` copies edge attributes in the heterograph's edge-id
  order, not in the CSC order of the graph it builds, so each edge was checked against another edge's
  time (GraphBolt then returned 0.74x the edges a recount allows). The times are reordered through
  GraphBolt's original edge ids.
* Merging. GraphBolt's SubgraphSampler never merges nodes: every sampled edge makes a new source node,
  sampled again at the next hop. Ours samples each (node, cutoff) pair once. So GraphBolt's
  ``temporal_sample_neighbors`` is driven hop by hop here, its frontier merged to distinct
  (node, cutoff) pairs between hops, and both build their blocks with the same function.
* Checked, not assumed: before timing, one batch per graph from each of the four samplers is recounted
  edge by edge against the graph's edge lists (``recount``): per (destination pair, edge type) exactly
  min(fanout, edges known at the pair's cutoff), each a real edge into it known at the cutoff, none
  twice, every pair once. The timed runs' edge totals are printed side by side.

The samplers run interleaved over the same batches, several rounds, on one thread each (torch's and DGL's
OpenMP threads alike); each ratio compares medians, in seeds per second and in sampled edges per second.
"""
from __future__ import annotations

import os
import sys
import time

THREADS = 1  # one thread for every sampler: the machine is shared, and per-core rate is the point
if __name__ == "__main__":  # DGL's OpenMP runtime is not torch's: only this reaches it, before it loads
    os.environ["OMP_NUM_THREADS"] = str(THREADS)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import GRAPHS, batches_of, bench, load, load_average, num_edges  # noqa: E402

BATCH, COUNT, ROUNDS, FANOUTS = 512, 30, 3, [10, 10]
CHECK_SEEDS = 64  # seeds of the batch recounted edge by edge (the recount is a Python loop per pair)


def expect(ok, what: str) -> None:
    if not ok:
        raise AssertionError(what)


# ---------------------------------------------------------------------------------------------------
# GraphBolt, made to sample what ours samples


def graphbolt_graph(graph):
    """The graph's structure as a FusedCSCSamplingGraph, its edge times in CSC order; and the original
    (per edge type) id of each CSC edge."""
    import dgl
    import dgl.graphbolt as gb

    g = graph.g.long()  # int64 ids, as GraphBolt is fed its seeds
    bare = dgl.heterograph({et: g.edges(etype=et) for et in g.canonical_etypes},
                           num_nodes_dict={t: g.num_nodes(t) for t in g.ntypes})
    gbg = gb.from_dglgraph(bare, include_original_edge_id=True)
    eid = gbg.edge_attributes[gb.ORIGINAL_EDGE_ID]
    # time of edge i of type j sits at start[j] + i; every CSC position names its (type, i)
    times = [torch.from_numpy(graph.edges(et)[2]) for et in bare.canonical_etypes]
    start = torch.tensor([0] + [len(t) for t in times[:-1]]).cumsum(0)
    csc_time = torch.cat(times)[start[gbg.type_per_edge.long()] + eid]
    return gbg, csc_time, eid


class GraphBoltTemporal:
    """``sample`` as TemporalSampler's (same SampledBatch), by GraphBolt's temporal_sample_neighbors."""

    def __init__(self, graph, fanouts, id_etypes=frozenset()):
        import dgl.graphbolt as gb

        self.graph, self.id_etypes = graph, frozenset(id_etypes)
        self.gb, csc_time, eid = graphbolt_graph(graph)
        # the original ids cost an index_select per hop: carried only when some block wants them
        self.gb.edge_attributes = {"time": csc_time, **({gb.ORIGINAL_EDGE_ID: eid} if self.id_etypes else {})}
        self.etype = {key: gb.etype_str_to_tuple(key) for key in self.gb.edge_type_to_id}
        self.fanouts = [torch.full((len(self.etype),), f, dtype=torch.int64) for f in fanouts]

    def sample(self, seed_type, seeds, cutoffs):
        from fourdb.engine.sampling.blocks import make_block
        from fourdb.engine.sampling.sampler import SampledBatch

        cut_values, rank = np.unique(np.asarray(cutoffs, np.int64), return_inverse=True)
        n_cut = len(cut_values)
        # strictly before cutoff + 1 ns is at or before the cutoff
        stamps = torch.from_numpy(cut_values + 1)
        cut_values = torch.from_numpy(cut_values)
        frontier = {seed_type: torch.from_numpy(np.asarray(seeds, np.int64) * n_cut + rank.reshape(-1))}
        empty = torch.zeros(0, dtype=torch.int64)
        blocks = []
        for fanout in reversed(self.fanouts):
            live = {t: k for t, k in frontier.items() if len(k)}
            sub = self.gb.temporal_sample_neighbors({t: k // n_cut for t, k in live.items()},
                                                    {t: stamps[k % n_cut] for t, k in live.items()},
                                                    fanout, edge_timestamp_attr_name="time")
            by_src = {}  # source type -> [(edge type, neighbour pairs, dst positions, edge ids)]
            for key, csc in sub.sampled_csc.items():
                et = self.etype[key]
                dst = live.get(et[2])
                if dst is None:
                    continue
                d = torch.repeat_interleave(torch.arange(len(dst)), csc.indptr.diff())
                ids = sub.original_edge_ids[key] if et in self.id_etypes else None
                by_src.setdefault(et[0], []).append((et, csc.indices * n_cut + dst[d] % n_cut, d, ids))
            frontier, edges, eids = merge(frontier, by_src, empty)
            num_src = {t: len(frontier.get(t, ())) for t in self.graph.ntypes}
            num_dst = {t: len(live.get(t, ())) for t in self.graph.ntypes}
            for et in self.graph.canonical_etypes:
                edges.setdefault(et, (empty, empty))
            for et in self.id_etypes:
                eids.setdefault(et, empty)
            blocks.insert(0, make_block(edges, num_src, num_dst, None, eids))
        return SampledBatch(blocks, {t: k // n_cut for t, k in frontier.items()},
                            {t: cut_values[k % n_cut] for t, k in frontier.items()}, seed_type, len(seeds))


def merge(frontier, by_src, empty):
    """The next frontier (per type: this hop's destination pairs, then the new neighbour pairs, each pair
    once) and each edge type's block edges (local source, destination) and ids: what ours does per hop."""
    nxt, edges, eids = dict(frontier), {}, {}
    for t, items in by_src.items():
        dst_part = frontier.get(t, empty)
        eids.update((et, e) for et, _, _, e in items if e is not None)
        uniq, inv = torch.unique(torch.cat([dst_part] + [p for _, p, _, _ in items]), return_inverse=True)
        pos = torch.full((len(uniq),), -1, dtype=torch.int64)
        nd = len(dst_part)
        pos[inv[:nd]] = torch.arange(nd)
        new = pos < 0
        pos[new] = nd + torch.arange(int(new.sum()))
        nxt[t] = torch.cat([dst_part, uniq[new]])
        local = pos[inv[nd:]]
        for (et, _, d, _), loc in zip(items, torch.split(local, [len(p) for _, p, _, _ in items])):
            edges[et] = (loc, d)
    return nxt, edges, eids


# ---------------------------------------------------------------------------------------------------
# the recount


def hops_of_batch(batch):
    """Per block, input layer first: (src pairs, dst pairs) per type as (nodes, cutoffs), and per edge
    type (local src, local dst, edge id). A SampledBatch's block pairs are prefixes of its inputs."""
    import dgl

    nodes = {t: v.numpy() for t, v in batch.input_nodes.items()}
    cuts = {t: v.numpy() for t, v in batch.input_cutoffs.items()}
    hops = []
    for block in batch.blocks:
        src = {t: (nodes[t][:block.num_src_nodes(t)], cuts[t][:block.num_src_nodes(t)]) for t in nodes}
        dst = {t: (nodes[t][:block.num_dst_nodes(t)], cuts[t][:block.num_dst_nodes(t)]) for t in nodes}
        edges = {et: (*(x.numpy() for x in block.edges(etype=et)), block.edges[et].data[dgl.EID].numpy())
                 for et in block.canonical_etypes}
        hops.append((src, dst, edges))
    return hops


def hops_of_dgl(blocks, cutoff: int):
    """The same view of DGL's blocks, every pair at the one cutoff."""
    import dgl

    hops = []
    for block in blocks:
        src = {t: block.srcnodes[t].data[dgl.NID].numpy() for t in block.srctypes}
        dst = {t: block.dstnodes[t].data[dgl.NID].numpy() for t in block.dsttypes}
        edges = {et: (*(x.numpy() for x in block.edges(etype=et)), block.edges[et].data[dgl.EID].numpy())
                 for et in block.canonical_etypes}
        hops.append(({t: (v, np.full(len(v), cutoff)) for t, v in src.items()},
                     {t: (v, np.full(len(v), cutoff)) for t, v in dst.items()}, edges))
    return hops


def recount(graph, hops, fanouts) -> int:
    """Check every hop against the graph's edge lists; the number of sampled edges."""
    by_dst = {}
    for et in graph.canonical_etypes:
        s, d, tm = graph.edges(et)
        order = np.argsort(d, kind="stable")
        by_dst[et] = (s, d, tm, order, np.searchsorted(d[order], np.arange(graph.g.num_nodes(et[2]) + 1)))
    total = 0
    for (src, dst, edges), fanout in zip(hops, fanouts):
        for pairs in (src, dst):
            for t, (n, c) in pairs.items():
                expect(len(set(zip(n, c))) == len(n), f"{t}: a (node, cutoff) pair twice")
        for et, (ls, ld, eid) in edges.items():
            s, d, tm, order, bounds = by_dst[et]
            nodes, cuts = dst.get(et[2], (np.zeros(0, np.int64),) * 2)
            if len(eid):
                sn, sc = src[et[0]][0][ls], src[et[0]][1][ls]
                expect((s[eid] == sn).all() and (d[eid] == nodes[ld]).all(), f"{et}: not the edge it names")
                expect((sc == cuts[ld]).all(), f"{et}: a neighbour did not inherit its destination's cutoff")
                expect((tm[eid] <= cuts[ld]).all(), f"{et}: an edge from after the cutoff")
                expect(len(set(zip(eid, ld))) == len(eid), f"{et}: an edge sampled twice for one pair")
            got = np.bincount(ld, minlength=len(nodes))
            for i, (node, cut) in enumerate(zip(nodes, cuts)):
                known = int((tm[order[bounds[node]:bounds[node + 1]]] <= cut).sum())
                want = known if fanout < 0 else min(fanout, known)
                expect(got[i] == want, f"{et} into {node} at {cut}: {got[i]} sampled, {want} known")
            total += len(eid)
    return total


# ---------------------------------------------------------------------------------------------------


def samplers(data, batches, ours_all_ids=False):
    """The four samplers, as fn(batch number) -> output. Ours and GraphBolt sample ``batches`` of the
    training seeds; ours at one cutoff (after every edge) and DGL the same number of batches of as many
    distinct nodes. The cutoff is returned too."""
    import dgl

    from fourdb.engine.sampling.sampler import TemporalSampler

    g, st = data.graph.g.long(), data.seed_type  # int64 ids, as the anchors are fed their seeds
    sampler = data.sampler
    if ours_all_ids:
        sampler = TemporalSampler(data.graph, sampler.fanouts, sampler.strategy, _index=(sampler.index, sampler.coder),
                                  all_edge_ids=True)
    gbs = GraphBoltTemporal(data.graph, FANOUTS, data.graph.canonical_etypes if ours_all_ids else data.graph.edge_features)
    after = int(max(data.graph.edges(et)[2].max() for et in data.graph.canonical_etypes if g.num_edges(et)))
    rng = np.random.default_rng(1)
    nodes = [rng.choice(g.num_nodes(st), len(b), replace=False) for b in batches]
    seeds, cutoffs = data.seeds["train"], data.cutoffs["train"]
    dgl_sampler = dgl.dataloading.NeighborSampler(FANOUTS)

    def ours(i):
        idx = batches[i]
        return sampler.sample(st, seeds[idx], cutoffs[idx], np.random.default_rng(i), data.hidden_etypes)

    def ours_one_cutoff(i):
        return sampler.sample(st, nodes[i], np.full(len(nodes[i]), after), np.random.default_rng(i))

    return {"ours": ours, "graphbolt": lambda i: gbs.sample(st, seeds[batches[i]], cutoffs[batches[i]]),
            "ours_one_cutoff": ours_one_cutoff,
            "dgl": lambda i: dgl_sampler.sample_blocks(g, {st: torch.from_numpy(nodes[i])})[2]}, after


def check(data) -> dict:
    """Recount one batch from each sampler; sampled edges per sampler."""
    runs, after = samplers(data, [np.arange(CHECK_SEEDS)], ours_all_ids=True)
    out = {}
    for name, fn in runs.items():
        hops = hops_of_dgl(fn(0), after) if name == "dgl" else hops_of_batch(fn(0))
        out[name] = recount(data.graph, hops, FANOUTS)
    return out


def random_read_rate() -> float:
    """Random 8-byte reads per second from a 1 GiB array (larger than the caches)."""
    arr = np.ones(2 ** 27, dtype=np.int64)
    idx = np.random.default_rng(0).integers(0, len(arr), 2 ** 23)
    arr[idx].sum()
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        arr[idx].sum()
        best = max(best, len(idx) / (time.perf_counter() - t))
    return best


def edges_of(out) -> int:
    blocks = out if isinstance(out, list) else out.blocks
    return sum(b.num_edges() for b in blocks)


def main(labels):
    torch.set_num_threads(THREADS)
    reads = random_read_rate()
    for label in labels:
        data = load(label, fanouts=FANOUTS)
        checked = check(data)
        print(f"{label}: one batch of {CHECK_SEEDS} seeds recounted edge by edge, all equal to the brute force; "
              f"sampled edges {checked}", flush=True)
        runs, _ = samplers(data, batches_of(data, BATCH, COUNT))
        for fn in runs.values():  # warm up
            fn(0)
        times = {k: [] for k in runs}
        edges = {k: 0 for k in runs}
        for _ in range(ROUNDS):
            for k, fn in runs.items():
                t = time.perf_counter()
                edges[k] = sum(edges_of(fn(i)) for i in range(COUNT))
                times[k].append(time.perf_counter() - t)
        seeds = BATCH * COUNT
        sec = {k: float(np.median(v)) for k, v in times.items()}
        common = dict(graph_edges=num_edges(data), fanouts="x".join(map(str, FANOUTS)), batch=BATCH,
                      batches=COUNT, threads=THREADS, load=load_average())
        for name, ours, theirs, goal in (("sampler_vs_graphbolt_temporal", "ours", "graphbolt", 2),
                                         ("sampler_vs_dgl", "ours_one_cutoff", "dgl", 0.5)):
            bench(name, label, sec[theirs] / sec[ours], goal,
                  ours_seeds_per_s=seeds / sec[ours], **{f"{theirs}_seeds_per_s": seeds / sec[theirs]},
                  ours_edges=edges[ours], **{f"{theirs}_edges": edges[theirs]},
                  edge_rate_ratio=(edges[ours] / sec[ours]) / (edges[theirs] / sec[theirs]),
                  **({"random_reads_per_s": reads} if theirs == "dgl" else {}), **common)


if __name__ == "__main__":
    main(sys.argv[1:] or list(GRAPHS))
