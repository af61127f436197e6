"""The shared engine: offline store == online sampling (edge ids and r2ne edge features included),
corrupt or stale stores rebuilt, layer-wise == full-graph forward, prefetching keeps batches and order,
engine=auto decides and logs. No timing here."""
import json
import logging
import threading

import dgl
import numpy as np
import pytest
import torch

from conftest import config
from fourdb.engine.config import EngineConfig
from fourdb.engine.feeding.layerwise import layerwise_inference
from reference import full_graph_forward
from fourdb.engine.sampling.source import GraphSource
from fourdb.engine.feeding.pipeline import prefetch
from fourdb.engine.feeding.store import BatchStore, StoreError, store_key, hot_budget_rows
from fourdb.models import TaskInfo, create_model


@pytest.fixture(scope="module")
def data(synthetic_db):
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    task = load_task(synthetic_db, "synthetic", "taste")
    splits = subsample(task, 300, 120, 0)
    return graph_inputs(config("dataset=synthetic", "task=taste", "model=sage", "sampler.fanouts=[4,3]"),
                        synthetic_db, task, splits)


def epochs_of(source, seed=7, epochs=2):
    rng = np.random.default_rng(seed)
    return [list(source.train_batches(rng)) for _ in range(epochs)]


def assert_same_batches(a, b, featured):
    assert len(a) == len(b)
    for (inp_a, y_a), (inp_b, y_b) in zip(a, b):
        assert torch.equal(y_a, y_b)
        for blk_a, blk_b in zip(inp_a[0], inp_b[0]):
            for t in blk_a.ntypes:
                assert blk_a.num_src_nodes(t) == blk_b.num_src_nodes(t)
                assert blk_a.num_dst_nodes(t) == blk_b.num_dst_nodes(t)
            for et in blk_a.canonical_etypes:
                for x, y in zip(blk_a.edges(etype=et), blk_b.edges(etype=et)):
                    assert torch.equal(x, y), et
                # edge ids and edge features on the featured (r2ne link) edge types, nothing on the others
                ea, eb = blk_a.edges[et].data, blk_b.edges[et].data
                assert sorted(ea.keys()) == sorted(eb.keys()), et
                assert sorted(ea.keys()) == (sorted([dgl.EID, "cat", "num"]) if et in featured else []), et
                for k in ea.keys():
                    assert torch.equal(ea[k], eb[k]), (et, k)
        assert inp_a[1].keys() == inp_b[1].keys()
        for t in inp_a[1]:  # features, and which (row, cutoff) each node is
            assert sorted(inp_a[1][t]) == sorted(inp_b[1][t]) == ["cat", "cutoff", "num", "row_key"], t
            for k in inp_a[1][t]:
                assert torch.equal(inp_a[1][t][k], inp_b[1][t][k]), (t, k)


def test_store_keeps_every_edge_id_of_an_all_edge_ids_sampler(data, tmp_path, monkeypatch):
    """The store packs the edge ids its sampler carries, and keeps such batches apart from the default's."""
    from fourdb.engine.sampling.sampler import TemporalSampler

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    s = data.sampler

    def with_all_ids(source):
        source.sampler = TemporalSampler(s.graph, s.fanouts, s.strategy, s.device, (s.index, s.coder), True)
        return source

    online = epochs_of(with_all_ids(GraphSource(data, 64)), epochs=1)[0]
    default = GraphSource(data, 64, engine={"mode": "offline", "store_epochs": 1})
    epochs_of(default, epochs=1)
    offline = with_all_ids(GraphSource(data, 64, engine={"mode": "offline", "store_epochs": 1}))
    stored = epochs_of(offline, epochs=1)[0]
    assert offline.store.folder != default.store.folder
    assert len(online) == len(stored)
    for (inp_a, _), (inp_b, _) in zip(online, stored):
        for blk_a, blk_b in zip(inp_a[0], inp_b[0]):
            for et in blk_a.canonical_etypes:
                assert torch.equal(blk_a.edges[et].data[dgl.EID], blk_b.edges[et].data[dgl.EID]), et


@pytest.mark.parametrize("cache_mb", [0.0, 0.02, 64.0])  # all cold, hot and cold mixed, all hot
def test_store_replays_online_batches(data, cache_mb, tmp_path, monkeypatch):
    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    online = epochs_of(GraphSource(data, 64))
    offline = GraphSource(data, 64, engine={"mode": "offline", "store_epochs": 2, "cache_mb": cache_mb})
    stored = epochs_of(offline)
    for a, b in zip(online, stored):
        assert_same_batches(a, b, data.graph.edge_features)
    # the graph is r2ne: the replayed batches carry link-row edge features, not just edge ids
    featured = data.graph.edge_features
    assert featured and any(len(blk.edges[et].data["num"])
                            for (inp, _) in stored[0] for blk in inp[0] for et in featured)
    assert len(list(tmp_path.glob("store/*/manifest.json"))) == 1
    # a second source (another model of a sweep) reuses the store rather than sampling again
    again = GraphSource(data, 64, engine={"mode": "offline", "store_epochs": 2, "cache_mb": cache_mb})
    assert_same_batches(online[1], epochs_of(again)[1], data.graph.edge_features)
    assert again.store.folder == offline.store.folder


def _store(data, tmp_path, rng_seed=7):
    source = GraphSource(data, 64, engine={"mode": "offline", "store_epochs": 1, "cache_mb": 0.02})
    rng = np.random.default_rng(rng_seed)
    store = BatchStore.open_or_build(source, rng, 1, 0.02, root=tmp_path)
    key = store_key(source, rng, 1, hot_budget_rows(source, 0.02))
    return source, rng, store, key


def test_corrupt_store_file_is_detected_and_rebuilt(data, tmp_path, caplog):
    source, rng, store, key = _store(data, tmp_path)
    folder = store.folder
    victim = folder / "e0.cold0.num.npy"
    if victim.stat().st_size <= 200:
        victim = folder / "e0.edges.npy"
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(StoreError, match="checksum"):
        BatchStore.open(folder, key)
    with caplog.at_level(logging.WARNING, logger="fourdb"):
        rebuilt = BatchStore.open_or_build(source, rng, 1, 0.02, root=tmp_path)
    assert "unusable" in caplog.text and "checksum" in caplog.text
    BatchStore.open(folder, key)  # whole again
    online = epochs_of(GraphSource(data, 64), epochs=1)[0]
    rebuilt_batches = list(rebuilt.epoch_batches(source, np.random.default_rng(7), 0, 1))
    assert_same_batches(online, rebuilt_batches, data.graph.edge_features)


def test_stale_or_half_written_store_is_rebuilt(data, tmp_path, caplog):
    source, rng, store, key = _store(data, tmp_path)
    manifest = store.folder / "manifest.json"
    m = json.loads(manifest.read_text())
    m["version"] = -1
    manifest.write_text(json.dumps(m))
    with pytest.raises(StoreError, match="stale"):
        BatchStore.open(store.folder, key)
    with caplog.at_level(logging.WARNING, logger="fourdb"):
        BatchStore.open_or_build(source, rng, 1, 0.02, root=tmp_path)
    assert "stale" in caplog.text
    manifest.unlink()  # a build that died before its manifest was written
    with pytest.raises(StoreError, match="no manifest"):
        BatchStore.open(store.folder, key)
    BatchStore.open_or_build(source, rng, 1, 0.02, root=tmp_path)
    BatchStore.open(store.folder, key)
    # another seed is another store
    other = store_key(source, np.random.default_rng(8), 1, hot_budget_rows(source, 0.02))
    assert other != key


def test_prefetch_keeps_batches_and_order(data):
    base = epochs_of(GraphSource(data, 64, engine={"workers": 0}))
    for workers in (1, 3):
        got = epochs_of(GraphSource(data, 64, engine={"workers": workers, "prefetch": 2}))
        for a, b in zip(base, got):
            assert_same_batches(a, b, data.graph.edge_features)
    ev0 = list(GraphSource(data, 64, engine={"workers": 0}).batches("val"))
    ev2 = list(GraphSource(data, 64, engine={"workers": 2}).batches("val"))
    for (b0, f0), (b2, f2) in zip(ev0, ev2):
        assert all(torch.equal(f0[t]["num"], f2[t]["num"]) for t in f0)


def test_prefetch_is_bounded_propagates_errors_and_stops_early():
    made, lock = [], threading.Lock()

    def job(i):
        def run():
            with lock:
                made.append(i)
            if i == 7:
                raise RuntimeError("batch 7 failed")
            return i
        return run

    it = prefetch((job(i) for i in range(100)), workers=1, depth=2)
    assert next(it) == 0
    assert len(made) <= 4  # the queue holds at most 2 ahead (+1 in the producer's hands)
    it.close()
    with pytest.raises(RuntimeError, match="batch 7"):
        list(prefetch((job(i) for i in range(10)), workers=2, depth=3))
    assert list(prefetch((job(i) for i in range(7)), workers=3, depth=2)) == list(range(7))


def _module(data):
    model = create_model("sage", TaskInfo("binary", 2, "auroc"), seed=0, hidden=16)
    torch.manual_seed(0)
    module = model.build(data)
    # perturb the parameters so no layer is near-identity at initialisation
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module.eval()


def test_layerwise_equals_full_graph_forward_and_full_fanout(data):
    module = _module(data)
    lw = layerwise_inference(module, data, "val")
    full = full_graph_forward(module, data, "val")
    assert lw.shape == (len(data.seeds["val"]), 1)
    assert torch.allclose(lw, full, atol=1e-5), (lw - full).abs().max()
    # the same as sampling every neighbour, node by node
    src = GraphSource(data, 50)
    src.sampler = data.sampler.with_fanouts([-1, -1])
    with torch.no_grad():
        nodewise = torch.cat([module(*inputs) for inputs in src.batches("val")])
    assert torch.allclose(lw, nodewise, atol=1e-5), (lw - nodewise).abs().max()
    # and not trivially: sampled neighbourhoods give other outputs
    with torch.no_grad():
        sampled = torch.cat([module(*inputs) for inputs in GraphSource(data, 50).batches("val")])
    assert not torch.allclose(lw, sampled, atol=1e-5)


def test_layerwise_respects_hidden_edge_types(data):
    import dataclasses

    hidden = frozenset(et[1] for et in data.graph.canonical_etypes if et[2] == data.seed_type)
    masked = dataclasses.replace(data, hidden_etypes=hidden)
    module = _module(masked)
    lw = layerwise_inference(module, masked, "val")
    assert torch.allclose(lw, full_graph_forward(module, masked, "val"), atol=1e-5)
    # every edge type into the seeds is hidden, so sampled blocks hold tables with no rows at a layer:
    # the node-wise forward must still give each seed what the full graph gives it
    src = GraphSource(masked, 40)
    src.sampler = masked.sampler.with_fanouts([-1, -1])
    with torch.no_grad():
        nodewise = torch.cat([module(*inputs) for inputs in src.batches("val")])
    assert torch.allclose(lw, nodewise, atol=1e-5), (lw - nodewise).abs().max()
    assert not torch.allclose(lw, layerwise_inference(module, data, "val"), atol=1e-5)


def test_engine_auto_picks_and_logs_predicted_and_measured(tmp_path, monkeypatch, caplog):
    from fourdb.experiment.run import run_experiment

    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    cfg = config("dataset=synthetic", "dataset.params.size=150", "task=taste", "model=sage", "engine=auto",
                 "engine.profile_batches=3", "trainer.epochs=2", "trainer.patience=2", "trainer.progress=false",
                 "trainer.batch_size=64", "max_train_seeds=400")
    with caplog.at_level(logging.INFO, logger="fourdb"):
        record = run_experiment(cfg)
    eng = record["engine"]
    assert eng["mode"] in ("online", "offline") and eng["workers"] >= 1
    assert eng["predicted_epoch_seconds"] > 0 and len(eng["epoch_seconds"]) == 2
    assert "engine auto:" in caplog.text and "predicted" in caplog.text
    assert caplog.text.count("(predicted") == 4  # each epoch: measured time and peak memory beside predicted
    assert eng["predicted_peak_mb"] > 0 and eng["measured_peak_mb"] > 0


def test_engine_config_rejects_unknown_settings():
    with pytest.raises(ValueError, match="no setting"):
        EngineConfig.from_dict({"mode": "online", "turbo": True})
    with pytest.raises(ValueError, match="unknown engine mode"):
        EngineConfig.from_dict({"mode": "fast"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_sampler_on_cuda_matches_cpu(data):
    seeds, cut = data.seeds["train"][:64], data.cutoffs["train"][:64]
    a = data.sampler.sample(data.seed_type, seeds, cut, np.random.default_rng(1))
    b = data.sampler.to("cuda").sample(data.seed_type, seeds, cut, np.random.default_rng(1))
    for x, y in zip(a.blocks, b.blocks):
        for et in x.canonical_etypes:
            assert all(torch.equal(p, q.cpu()) for p, q in zip(x.edges(etype=et), y.edges(etype=et)))
