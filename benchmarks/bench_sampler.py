"""Our temporal sampler against DGL's: GraphBolt's TemporalNeighborSampler (temporal, same fanouts,
same graph, same seeds and cutoffs) and dgl.dataloading.NeighborSampler (not temporal).

Ours is timed end to end, DGL blocks included; GraphBolt's ``sample_subgraphs`` is called directly
(no datapipe, no conversion to DGL blocks), so its time is a lower bound for using it in training.
The three run interleaved over the same batches, several rounds; each ratio compares medians.
Also printed: sampled edges per second and this machine's random-read rate (8-byte gathers from a
1 GiB array, measured here).
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from _common import GRAPHS, batches_of, bench, load, load_average, num_edges

BATCH, COUNT, ROUNDS, FANOUTS = 512, 30, 3, [10, 10]
THREADS = 1  # one intra-op thread for every sampler: the machine is shared, and per-core rate is the point


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


def graphbolt_sampler(data):
    import dgl
    import dgl.graphbolt as gb
    from torchdata.datapipes.iter import IterableWrapper

    g = data.graph.g
    bare = dgl.heterograph({et: g.edges(etype=et) for et in g.canonical_etypes},
                           num_nodes_dict={t: g.num_nodes(t) for t in g.ntypes})
    for et in g.canonical_etypes:
        bare.edges[et].data["time"] = g.edges[et].data["time"]
    graph = gb.from_dglgraph(bare)
    n_et = len(g.canonical_etypes)
    fanouts = [torch.full((n_et,), f, dtype=torch.int64) for f in FANOUTS]
    sampler = gb.TemporalNeighborSampler(IterableWrapper([]), graph, fanouts,
                                         edge_timestamp_attr_name="time")
    return sampler


def main(labels):
    import dgl

    torch.set_num_threads(THREADS)
    reads = random_read_rate()
    for label in labels:
        data = load(label, fanouts=FANOUTS)
        st = data.seed_type
        batches = batches_of(data, BATCH, COUNT)
        gb_sampler = graphbolt_sampler(data)
        dgl_sampler = dgl.dataloading.NeighborSampler(FANOUTS)
        g = data.graph.g

        def ours(idx):
            b = data.sampler.sample(st, data.seeds["train"][idx], data.cutoffs["train"][idx],
                                    np.random.default_rng(int(idx[0])), data.hidden_etypes)
            return sum(blk.num_edges() for blk in b.blocks)

        def graphbolt(idx):
            seeds = {st: torch.from_numpy(data.seeds["train"][idx])}
            # GraphBolt keeps edges strictly older than the seed's time; ours keeps time <= cutoff
            ts = {st: torch.from_numpy(data.cutoffs["train"][idx] + 1)}
            _, subgraphs = gb_sampler.sample_subgraphs(seeds, ts)
            return sum(sum(len(v.indices) for v in sg.sampled_csc.values()) for sg in subgraphs)

        def dgl_plain(idx):
            _, _, blocks = dgl_sampler.sample_blocks(g, {st: torch.from_numpy(data.seeds["train"][idx])})
            return sum(blk.num_edges() for blk in blocks)

        runs = {"ours": ours, "graphbolt": graphbolt, "dgl": dgl_plain}
        for fn in runs.values():  # warm up
            fn(batches[0])
        times = {k: [] for k in runs}
        edges = {k: 0 for k in runs}
        for _ in range(ROUNDS):
            for k, fn in runs.items():
                t = time.perf_counter()
                e = sum(fn(idx) for idx in batches)
                times[k].append(time.perf_counter() - t)
                edges[k] = e
        seeds = BATCH * COUNT
        rate = {k: seeds / np.median(v) for k, v in times.items()}
        common = dict(graph_edges=num_edges(data), fanouts="x".join(map(str, FANOUTS)), batch=BATCH, threads=THREADS,
                      load=load_average())
        bench("sampler_vs_graphbolt_temporal", label, rate["ours"] / rate["graphbolt"], 2,
              ours_seeds_per_s=rate["ours"], graphbolt_seeds_per_s=rate["graphbolt"], **common)
        bench("sampler_vs_dgl", label, rate["ours"] / rate["dgl"], 0.5,
              ours_seeds_per_s=rate["ours"], dgl_seeds_per_s=rate["dgl"],
              ours_edges_per_s=edges["ours"] / np.median(times["ours"]),
              dgl_edges_per_s=edges["dgl"] / np.median(times["dgl"]), random_reads_per_s=reads, **common)


if __name__ == "__main__":
    main(sys.argv[1:] or list(GRAPHS))
