"""RelGT's tokens (fourdb/models/relgt.py): each seed's tokens are the rows of its own sampled subgraph,
known at its cutoff, at most ``max_tokens`` of them, the nearest hops first. The model zoo
(tests/test_models.py) runs it as every GNN: planted signal, edge features, batch independence."""
import numpy as np
import pytest
import torch
from conftest import config

from fourdb.models import TaskInfo, create_model


@pytest.fixture(scope="module")
def data():
    """The synthetic shop under r2ne (link rows are featured edges), its validation seeds those of the
    first three training cutoffs, so that most of the database is newer than a seed."""
    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    db = load_dataset("synthetic", size=150)
    task = load_task(db, "synthetic", "taste")
    splits = subsample(task, 200, 60, 0)
    early = splits["train"]["cutoff"] <= np.sort(splits["train"]["cutoff"].unique())[2]
    splits["val"] = splits["train"][early].head(40).reset_index(drop=True)
    return graph_inputs(config("dataset=synthetic", "task=taste", "graph=r2ne", "sampler.fanouts=[-1,-1]"),
                        db, task, splits)


def tokens(data, max_tokens: int):
    """One batch of every validation seed, every neighbour sampled: the batch and each seed's tokens."""
    from fourdb.engine.sampling.source import GraphSource

    source = GraphSource(data, 64)
    idx = np.arange(len(data.seeds["val"]))
    batch = source.sample("val", idx, np.random.default_rng(0))
    feats = source.gather(batch)
    module = create_model("relgt", TaskInfo("binary", 2, "auroc"), max_tokens=max_tokens).build(data)
    return batch, module, module.tokenize(batch.blocks, feats)


def test_each_seed_keeps_at_most_max_tokens_its_nearest_hops_first(data):
    _, module, every = tokens(data, 10_000)
    _, _, capped = tokens(data, 6)
    num_seeds = len(data.seeds["val"])
    per_seed = torch.bincount(every.seed, minlength=num_seeds)
    assert (per_seed > 6).sum() >= num_seeds // 2  # the cap bites for most seeds
    assert torch.equal(torch.bincount(capped.seed, minlength=num_seeds), per_seed.clamp(max=6))
    seed_kind = module.tables.index(data.seed_type)
    first = capped.slot == 0  # slot 0 is the seed row itself
    assert torch.equal(capped.seed[first], torch.arange(num_seeds)) and (capped.hop[first] == 0).all()
    assert (capped.kind[first] == seed_kind).all() and torch.equal(capped.index[first], torch.arange(num_seeds))
    for s in range(num_seeds):
        kept = capped.hop[capped.seed == s]
        hops = torch.sort(every.hop[every.seed == s]).values
        assert torch.equal(torch.sort(kept).values, hops[:len(kept)])  # no kept token is farther than a dropped one
    # a link row reached both ways is one token; every token is one (seed, row)
    rows = torch.stack([every.seed, every.kind, torch.where(every.eid >= 0, every.eid, every.index)], 1)
    assert len(torch.unique(rows, dim=0)) == len(rows)
    assert (every.eid >= 0).any() and (every.hop == 2).any()  # link rows and two hops are in the test


def test_no_row_newer_than_the_seeds_cutoff_becomes_a_token(data):
    """Node rows and link rows are mapped back to the database and their times checked, for seeds at
    the earliest cutoff (the rest of the shop is later); the graph does hold later rows next to them."""
    from fourdb.graph.build import ALWAYS

    batch, module, tok = tokens(data, 10_000)
    g = data.graph
    cutoff = torch.as_tensor(data.cutoffs["val"])[tok.seed]
    links = sorted(set(module.links.values()))
    newest = torch.full_like(cutoff, ALWAYS)
    for k, name in enumerate(module.tables + links):
        at = tok.kind == k
        if k < len(module.tables):
            rows = batch.input_nodes[name][tok.index[at]]
            times = torch.as_tensor(g.node_time(name))[rows]
        else:  # a link row: an edge's time (either way) is no earlier than the link row's own
            et = next(et for et in g.edge_features if module.links[et[1]] == name)
            times = torch.minimum(*(torch.as_tensor(g.edge_time(e))[tok.eid[at]] for e in (et, g.reverse[et])))
        newest[at] = times
    assert (newest <= cutoff).all()
    # not vacuous: the seeds have link rows and neighbours after their cutoff in the graph
    _, dst, t = g.edges(next(et for et in g.edge_features if et[2] == data.seed_type))
    assert (np.isin(dst, data.seeds["val"]) & (t > data.cutoffs["val"].max())).sum() > 10
