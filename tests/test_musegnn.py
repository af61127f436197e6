"""MuseGNN's cross-subgraph store is time-correct: an iterate computed at cutoff t reaches a node only if
the node's cutoff is >= t, in training and evaluation alike; training writes only what its batches
computed; a fitted model's predictions are independent of the batch (node-wise batches of any size,
layer-wise, the full graph); and ``certify`` passes, and fails once rows are named by row number.

(tests/test_models.py runs musegnn through every GNN's checks; this file is about the store.)
"""
import functools

import numpy as np
import pytest
import torch
from conftest import config

from fourdb.engine.feeding.layerwise import layerwise_inference
from fourdb.engine.sampling.source import GraphSource
from fourdb.models import TaskInfo, create_model
from fourdb.models.musegnn import NEVER
from fourdb.train.trainer import TrainerConfig

BINARY = TaskInfo("binary", 2, "auroc")


@functools.cache
def small():
    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    db = load_dataset("synthetic", size=150)
    task = load_task(db, "synthetic", "taste")
    return graph_inputs(config("dataset=synthetic", "task=taste", "graph=r2ne", "sampler.fanouts=[4,3]"), db, task,
                        subsample(task, 300, 80, 0))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fresh(data):
    """An untrained network without dropout, so train and eval mode compute alike (but for the store)."""
    torch.manual_seed(0)
    return create_model("musegnn", BINARY, dropout=0.0).build(data)


def plant(module, at: int) -> None:
    """Every row of every store: a large random iterate, computed at cutoff ``at``."""
    for i, tables in enumerate(module.stored):
        for t in tables:
            mu, when = module.store(i, t)
            mu.copy_(10 * torch.randn_like(mu))
            when.fill_(at)


def sampled(module, data, split: str, batch_size: int, fanouts=None) -> torch.Tensor:
    source = GraphSource(data, batch_size)
    if fanouts:
        source.sampler = data.sampler.with_fanouts(fanouts)
    return torch.cat([module(*inputs).detach() for inputs in source.batches(split)])


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_an_iterate_reaches_only_nodes_at_its_cutoff_or_later(mode):
    """Planted at the middle validation cutoff t: every seed at a cutoff before t predicts as with an empty
    store (its subgraph's nodes are all at its cutoff < t), every seed at t or later reads it. In training
    too, whose batches write (at their own cutoffs) while they read."""
    data = small()
    cutoffs = data.cutoffs["val"]
    t = np.unique(cutoffs)[len(np.unique(cutoffs)) // 2]
    before = cutoffs < t
    assert before.any() and (~before).any()
    module = fresh(data).eval()
    with torch.no_grad():
        empty = sampled(module, data, "val", 40)
        plant(module, int(t))
        module.train(mode == "train")
        read = sampled(module, data, "val", 40)
    assert torch.allclose(read[before], empty[before], atol=1e-6)
    assert ((read[~before] - empty[~before]).abs() > 1e-3).all()
    if mode == "train":  # the batches at cutoffs before t wrote nothing over the later entries
        assert all((module.store(i, tb)[1] >= t).all() for i, tables in enumerate(module.stored) for tb in tables)


def test_a_row_keeps_its_latest_iterate_and_averages_its_own_cutoff_in():
    """A later cutoff replaces a row's entry; an earlier one is dropped; the same one is averaged in with
    forgetting factor rho; a row seen at two cutoffs of one batch keeps the later; unnamed rows (-1) neither."""
    module = fresh(small())
    i, t = len(module.stored) - 1, small().seed_type
    mu, at = module.store(i, t)
    rho = module.rho

    def write(keys, cuts, values):
        module.remember(i, t, torch.tensor(keys), torch.tensor(cuts), torch.tensor(values, dtype=torch.float32)[:, None]
                        .expand(-1, mu.shape[1]))

    write([0, 1, -1], [5, 5, 9], [1.0, 2.0, 3.0])
    assert at[:2].tolist() == [5, 5] and mu[0, 0] == 1 and mu[1, 0] == 2 and (at[2:] == NEVER).all()
    write([0], [3], [7.0])  # earlier: dropped
    assert at[0] == 5 and mu[0, 0] == 1
    write([0], [5], [3.0])  # the same (row, cutoff) again: online mean
    assert at[0] == 5 and torch.isclose(mu[0, 0], torch.tensor(rho * 1 + (1 - rho) * 3.0))
    write([1, 1], [8, 6], [4.0, 6.0])  # later, with an earlier copy in the same batch: the later wins
    assert at[1] == 8 and mu[1, 0] == 4
    mu_k, g = module.recall(i, t, torch.tensor([0, 0, 1, -1]), torch.tensor([4, 5, 7, 9]), mu[:4])
    assert (g > 0).tolist() == [False, True, False, False]  # at 5 <= 5 only
    assert (mu_k[0] == 0).all() and (mu_k[1] == mu[0]).all()


@pytest.fixture(scope="module")
def fitted():
    data = small()
    torch.manual_seed(0)
    return data, create_model("musegnn", BINARY).fit(data, TrainerConfig(epochs=2, batch_size=64, progress=False))


def test_training_writes_only_iterates_its_batches_computed(fitted):
    data, model = fitted
    train_cutoffs = set(np.unique(data.cutoffs["train"]).tolist())
    written = 0
    for i, tables in enumerate(model.module.stored):
        for t in tables:
            at = model.module.store(i, t)[1]
            done = at[at != NEVER]
            assert set(done.tolist()) <= train_cutoffs, (i, t)
            written += len(done)
    assert written > 0


def test_a_fitted_model_predicts_each_row_alike_in_any_batch(fitted):
    """With the store filled: layer-wise inference equals the full-graph forward and node-wise batches of
    7 and 40 seeds with every neighbour sampled."""
    from reference import full_graph_forward

    data, model = fitted
    module = model.module.eval()
    lw = layerwise_inference(module, data, "val")
    assert torch.allclose(lw, full_graph_forward(module, data, "val"), atol=1e-4)
    with torch.no_grad():
        for size in (7, 40):
            assert torch.allclose(lw, sampled(module, data, "val", size, [-1, -1]), atol=1e-4), size
    empty = fresh(data)
    empty.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith(("mu", "at"))},
                          strict=False)
    assert not torch.allclose(lw, layerwise_inference(empty, data, "val"), atol=1e-4)  # the store is read


def certify(*overrides):
    from fourdb.experiment.run import run_experiment

    return run_experiment(config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=musegnn",
                                 "sampler=recent", "sampler.fanouts=[5,5]", "trainer.progress=false",
                                 "trainer.epochs=2", "max_train_seeds=500", "max_val_seeds=200",
                                 "certify.enabled=true", "certify.groups=2", "certify.max_seeds=50",
                                 *overrides))["certify"]


@pytest.mark.parametrize("inference", ["sampled", "layerwise"])
def test_certify_passes(inference):
    verdict = certify(f"engine.inference={inference}")
    assert verdict["passed"], verdict.get("first_failure")
    assert len(verdict["checks"]) == 4 and all(c["seeds"] > 0 for c in verdict["checks"])


def test_certify_fails_when_rows_are_named_by_row_number(monkeypatch):
    """Deleting the rows after a cutoff renumbers the users (their table is not in signup order), so a store
    keyed by row number hands a seed another user's iterate: certify sees it through the store alone."""
    import fourdb.engine.sampling.data as engine_data

    monkeypatch.setattr(engine_data, "row_keys", lambda data, ntype, nodes, cutoffs: np.asarray(nodes, np.int64))
    verdict = certify()
    assert not verdict["passed"]
    assert verdict["first_failure"]["mode"] == "delete"


def test_a_table_with_no_column_read_takes_no_part_in_a_step():
    """lahman's franchises hold a key and a text name only, so no state: their edges (to teams) pull nothing,
    as a GNN's convolution skips them, instead of stopping the run."""
    from fourdb.experiment.run import run_experiment

    record = run_experiment(config("dataset=lahman", "dataset.params.min_year=1995", "task=salary", "model=musegnn",
                                   "graph=r2n", "sampler.fanouts=[5,5]", "trainer.epochs=1", "trainer.progress=false",
                                   "max_train_seeds=300", "max_val_seeds=200"))
    assert np.isfinite(record["metrics"]["test"]["mae"])
