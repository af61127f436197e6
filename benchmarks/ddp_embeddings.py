"""Learned row vectors under data-parallel training: a dense all-reduce of the table, the sparse exchange
of the rows a step read, and the tiered one (FEC: hot rows all-reduced, the rest sparse).

browsing next-views, idgnn with ``id_embeddings`` (a vector per product and per shelf), 2 processes on the
CPU (gloo). Each rank builds the run's inputs once, as ``fourdb run`` does (``prepare_run``), then trains
the same model from the same seed under ``trainer.embedding_sync=dense``, ``sparse`` and ``tiered`` through
the one trainer (DDP, each rank its shard of every global batch). Measured per training step on rank 0:
the bytes the sync sends (ring counts, ``fourdb.engine.distribution.embedding_sync``), the step time (training loop of
the epochs after the first, over its steps). Equal work: the three runs take the same steps, so their final
parameters are compared (``max_param_diff``, expected 0: with 2 ranks the sums are bit for bit the same)
and their validation MAP after the same epochs is on the line. ``w8_*``: the bytes 8 ranks would send
with the same per-rank batch, from the rows' read shares measured here (tiered's profile).

    BENCH name=ddp_embeddings dataset=browsing-<size>/next-views ... ratio=<dense bytes / tiered bytes>
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from _common import bench, load_average

SIZE = int(os.environ.get("FOURDB_BENCH_EMB_SIZE", 20000))  # users; a shelf per 40, 20 products per shelf
MODEL = os.environ.get("FOURDB_BENCH_EMB_MODEL", "idgnn")
OVERRIDES = ["dataset=browsing", f"dataset.params.size={SIZE}", "task=next-views", f"model={MODEL}",
             "+model.params.id_embeddings=true", "graph=r2ne", "sampler=recent", "sampler.fanouts=[5,5]",
             "trainer=ddp", "trainer.epochs=3", "trainer.patience=3", "trainer.batch_size=512",
             "trainer.progress=false", "max_train_seeds=6000", "max_val_seeds=1000", "seed=0"]
MODES = ("dense", "sparse", "tiered")


def worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), DGLBACKEND="pytorch")
    import torch
    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR
    from fourdb.engine.distribution import ddp
    from fourdb.engine.distribution.embedding_sync import all_reduce_bytes, embedding_tables, expected_bytes
    from fourdb.models import create_model
    from fourdb.experiment.prepare import prepare_run

    ctx = ddp.init("gloo")
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=OVERRIDES)
    run = prepare_run(cfg)
    data = run.inputs(ctx=ctx)[0]
    params = dict(cfg.model.params)
    results, states = {}, {}
    for mode in MODES:
        torch.manual_seed(cfg.seed)  # the same first weights in every mode
        model = create_model(cfg.model.name, run.model.info, seed=cfg.seed, **params)
        model.fit(data, run.trainer_config(embedding_sync=mode))
        sync, seconds = model.trainer.sync, model.source.report()["epoch_seconds"]
        steps_per_epoch = sync.steps // len(seconds)
        states[mode] = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
        table = embedding_tables(model.module)[0].weight
        rest = sum(p.numel() * p.element_size() for p in model.module.parameters() if p is not table)
        results[mode] = {**sync.report(), "step_ms": 1e3 * sum(seconds[1:]) / (steps_per_epoch * (len(seconds) - 1)),
                         "val_map": model.trainer.history[-1]["val_map"], "rest_bytes": all_reduce_bytes(rest, world),
                         "products": int(data.interactions.n_dst)}
        if sync.tables[0].share is not None:  # the read shares tiered's profile measured: what 8 ranks would send
            t = sync.tables[0]
            results["w8"] = expected_bytes(t.share, t.row_bytes, 8)
    if ctx.main:
        results["max_param_diff"] = max(float((states[m][k] - states["dense"][k]).abs().max())
                                        for m in MODES for k in states["dense"])
        Path(out).write_text(json.dumps(results))
    ddp.barrier()
    ddp.shutdown()


def main() -> None:
    import torch.multiprocessing as mp

    from fourdb.engine.distribution.ddp import free_port

    out = Path(tempfile.mkdtemp(prefix="fourdb-emb-bench-")) / "results.json"
    mp.spawn(worker, args=(2, free_port(), str(out)), nprocs=2, join=True)
    r = json.loads(out.read_text())
    d, s, t, w8 = r["dense"], r["sparse"], r["tiered"], r["w8"]
    bench("ddp_embeddings", f"browsing-{SIZE}/next-views/{MODEL}", d["bytes_per_step"] / t["bytes_per_step"], goal=2,
          procs=2, backend="gloo", rows=d["rows"], hot_rows=t["hot_rows"], rows_read_per_step=d["rows_read_per_step"],
          dense_bytes=d["bytes_per_step"], sparse_bytes=s["bytes_per_step"], tiered_bytes=t["bytes_per_step"],
          rest_of_model_bytes=d["rest_bytes"], sparse_ratio=d["bytes_per_step"] / s["bytes_per_step"],
          dense_step_ms=d["step_ms"], sparse_step_ms=s["step_ms"], tiered_step_ms=t["step_ms"],
          val_map_dense=d["val_map"], val_map_sparse=s["val_map"], val_map_tiered=t["val_map"],
          max_param_diff=r["max_param_diff"], steps=d["steps"],
          w8_dense_bytes=w8["dense"], w8_sparse_bytes=w8["sparse"], w8_tiered_bytes=w8["tiered"], load=load_average())


if __name__ == "__main__":
    sys.exit(main())
