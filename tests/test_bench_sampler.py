"""The sampler benchmark compares equal work: ours, GraphBolt's temporal sampler and DGL's NeighborSampler,
as benchmarks/bench_sampler.py drives them, sample exactly what a brute-force recount allows (no timing)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_sampler as bench  # noqa: E402
from fourdb.engine.sampling.sampler import TemporalSampler  # noqa: E402
from fourdb.graph import build_graph  # noqa: E402

FANOUTS = [3, 3]


@pytest.fixture(scope="module")
def graphs(synthetic_db):
    return {kind: build_graph(synthetic_db, kind) for kind in ("r2n", "r2ne")}


def seeds_on_edge_times(graph, n=60):
    """Users seen exactly at the time of an edge into them (the tie GraphBolt's strict rule would drop),
    and a nanosecond before it."""
    _, dst, tm = graph.edges(("audits", "audits__user_id", "users"))
    pick = np.random.default_rng(0).choice(len(dst), n, replace=False)
    pairs = sorted(set(zip(dst[pick], tm[pick])) | set(zip(dst[pick[: n // 2]], tm[pick[: n // 2]] - 1)))
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


@pytest.mark.parametrize("kind", ["r2n", "r2ne"])
def test_ours_and_graphbolt_sample_what_the_recount_allows(graphs, kind):
    graph = graphs[kind]
    seeds, cutoffs = seeds_on_edge_times(graph)
    ours = TemporalSampler(graph, FANOUTS, all_edge_ids=True).sample("users", seeds, cutoffs, np.random.default_rng(0))
    theirs = bench.GraphBoltTemporal(graph, FANOUTS, graph.canonical_etypes).sample("users", seeds, cutoffs)
    counted = {}
    for name, batch in (("ours", ours), ("graphbolt", theirs)):
        counted[name] = bench.recount(graph, bench.hops_of_batch(batch), FANOUTS)
    # the seed hop is determined by the seeds alone: min(fanout, known) per (pair, edge type) on both sides
    assert ours.blocks[-1].num_edges() == theirs.blocks[-1].num_edges() > 0
    assert min(counted.values()) > 0


@pytest.mark.parametrize("kind", ["r2n", "r2ne"])
def test_ours_at_one_late_cutoff_and_dgl_sample_what_the_recount_allows(graphs, kind):
    import dgl
    import torch

    graph = graphs[kind]
    after = max(int(graph.edges(et)[2].max()) for et in graph.canonical_etypes if graph.g.num_edges(et))
    nodes = np.arange(0, graph.g.num_nodes("users"), 3)
    ours = TemporalSampler(graph, FANOUTS, all_edge_ids=True).sample(
        "users", nodes, np.full(len(nodes), after), np.random.default_rng(0))
    blocks = dgl.dataloading.NeighborSampler(FANOUTS).sample_blocks(graph.g.long(), {"users": torch.from_numpy(nodes)})[2]
    bench.recount(graph, bench.hops_of_batch(ours), FANOUTS)
    bench.recount(graph, bench.hops_of_dgl(blocks, after), FANOUTS)
    assert ours.blocks[-1].num_edges() == blocks[-1].num_edges() > 0


def test_recount_catches_graphbolt_with_its_stock_edge_time_order(graphs):
    """gb.from_dglgraph leaves edge attributes in edge-id order, not CSC order: the reason for the reorder."""
    import torch

    graph = graphs["r2ne"]
    seeds, cutoffs = seeds_on_edge_times(graph)
    sampler = bench.GraphBoltTemporal(graph, FANOUTS, graph.canonical_etypes)
    stock = torch.cat([torch.from_numpy(graph.edges(et)[2]) for et in graph.canonical_etypes])
    sampler.gb.edge_attributes = dict(sampler.gb.edge_attributes, time=stock)
    with pytest.raises(AssertionError):
        bench.recount(graph, bench.hops_of_batch(sampler.sample("users", seeds, cutoffs)), FANOUTS)
