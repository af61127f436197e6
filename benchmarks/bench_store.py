"""Offline batch store vs online sampling, and the prefetch pipeline's overlap.

offline_store_epoch: time to produce one epoch of training batches (blocks + input features, what the
trainer consumes) by sampling online vs by replaying the offline store; epochs 2 and 3 (the store is
built during the first). Both use the default engine settings (one sampler thread, queue of 4).

pipeline_overlap: for the same batches, the data stage alone (sample + gather), the model stage alone
(SAGE forward + backward + AdamW step on batches made beforehand) and the two pipelined (the same
prefetching thread, queue of 4), each stage on the same intra-op threads alone as pipelined (the
producer one, the model cores - 1; checked in every job and step); the ratio is max(stage) / pipelined
time, 1.0 meaning the shorter stage is hidden entirely.
"""
from __future__ import annotations

import sys
import tempfile
import time

import numpy as np
import torch

from _common import GRAPHS, bench, load, load_average

BATCH, MAX_TRAIN, PIPE_BATCHES = 512, 30000, 24


def epoch_seconds(source, rng) -> float:
    t = time.perf_counter()
    for _ in source.train_batches(rng):
        pass
    return time.perf_counter() - t


def store_bench(label, data):
    import os

    from fourdb.engine.sampling.source import GraphSource

    os.environ["FOURDB_CACHE"] = tempfile.mkdtemp(prefix="fourdb-bench-")
    online = GraphSource(data, BATCH, engine={"mode": "online"})
    offline = GraphSource(data, BATCH, engine={"mode": "offline", "store_epochs": 3})
    r_on, r_off = np.random.default_rng(0), np.random.default_rng(0)
    on, off = [], []
    for epoch in range(3):  # interleaved, so both see the same machine load
        on.append(epoch_seconds(online, r_on))
        t = time.perf_counter()
        off.append(epoch_seconds(offline, r_off))
        if epoch == 0:
            build = time.perf_counter() - t
    t_on, t_off = float(np.median(on[1:])), float(np.median(off[1:]))
    bench("offline_store_epoch", label, t_on / t_off, 3, batches=online.num_train_batches(), online_epoch_s=t_on,
          store_epoch_s=t_off, store_build_s=build, load=load_average())


def pipeline_bench(label, data):
    """The stages alone and pipelined, each stage on the threads it has in the pipeline: the producer
    on one (``prefetch`` sets it), the model on what is left (cores - 1). The counts in effect are
    recorded in every job and step and must match between the lone stages and the pipelined run."""
    import os

    from fourdb.engine.feeding.pipeline import prefetch
    from fourdb.engine.sampling.source import GraphSource
    from fourdb.models import TaskInfo, create_model

    source = GraphSource(data, BATCH, engine={"mode": "online", "workers": 1, "prefetch": 4})
    plan = source.epoch_plan(np.random.default_rng(1))[:PIPE_BATCHES]
    model = create_model("sage", TaskInfo("binary", 2, "auroc"), seed=0)
    module = model.build(data)
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)
    seen = {"data": set(), "model": set(), "pipelined data": set(), "pipelined model": set()}

    def step(inputs, y, stage):
        seen[stage].add(torch.get_num_threads())
        opt.zero_grad()
        out = module(*inputs)
        torch.nn.functional.binary_cross_entropy_with_logits(out.view(-1), y.float()).backward()
        opt.step()

    def jobs(stage):
        def job(i, s):
            seen[stage].add(torch.get_num_threads())
            return source.train_batch(i, s)
        return [(lambda i=i, s=s: job(i, s)) for i, s in plan]

    threads = torch.get_num_threads()
    model_threads = max(1, min(threads, (os.cpu_count() or 1) - 1))  # what prefetch leaves the consumer
    torch.set_num_threads(model_threads)
    try:
        step(*source.train_batch(*plan[0]), "model")  # warm up both stages
        seen["model"].clear()
        t = time.perf_counter()  # the data stage alone: the same producer thread, nothing consuming
        made = list(prefetch(jobs("data"), 1, len(plan)))
        t_data = time.perf_counter() - t
        t = time.perf_counter()
        for inputs, y in made:
            step(inputs, y, "model")
        t_model = time.perf_counter() - t
        del made
        t = time.perf_counter()
        for inputs, y in prefetch(jobs("pipelined data"), 1, 4):
            step(inputs, y, "pipelined model")
        t_pipe = time.perf_counter() - t
    finally:
        torch.set_num_threads(threads)
    if seen["data"] != seen["pipelined data"] or seen["model"] != seen["pipelined model"]:
        raise AssertionError(f"the stages ran on other thread counts than the pipelined run: {seen}")
    bench("pipeline_overlap", label, max(t_data, t_model) / t_pipe, 0.83, batches=len(plan), data_s=t_data,
          model_s=t_model, pipelined_s=t_pipe, sequential_s=t_data + t_model,
          data_threads="/".join(map(str, sorted(seen["data"]))),
          model_threads="/".join(map(str, sorted(seen["model"]))), load=load_average())


def main(labels):
    for label in labels:
        data = load(label, max_train=MAX_TRAIN, max_val=10)
        store_bench(label, data)
        pipeline_bench(label, data)


if __name__ == "__main__":
    main(sys.argv[1:] or list(GRAPHS))
