"""``engine=auto`` (the APT idea): a short dry run, then a cost model picks how to feed training.

The dry run takes the first ``profile_batches`` batches of the first epoch's plan (from a copy of the
trainer's generator, so training sees exactly the batches it would anyway) and measures, per batch:

* ``sample``: online sampling plus feature gathering, on one sampler thread;
* ``replay``: rebuilding the same batch from packed arrays, as the offline store does;
* ``model``: the model's forward and backward pass on it (when the trainer has handed over the model;
  the random state is restored and the gradients cleared afterwards, so training is unchanged).

The cost model: with ``W`` sampler threads the data of a batch is ready every ``sample / W`` seconds
(threads beyond the cores left over by the model do not help), and a pipelined step takes the longer
of the model and the data; on the CPU, where the model uses the same cores, the shorter of the two
overlaps only partly (``CPU_OVERLAP``). Online epochs cost ``batches * step(sample / W)``; the store
costs building ``store_epochs`` epochs once (nothing when a sweep has built it already) and then
``batches * step(replay)`` per epoch. The cheaper total over the planned epochs wins. The feature
cache: on a GPU, all feature rows that fit in a quarter of its free memory; on the CPU none (rows
packed per batch read fastest) unless the store would not fit in a quarter of the free RAM. The
run log states the prediction, and each epoch's measured time beside it.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from fourdb.engine.pipeline import prefetch
from fourdb.engine.store import hot_budget_rows, replay_seconds, store_key
from fourdb.engine.timing import measure_steps, median_seconds, row_bytes
from fourdb.utils import cache_root

log = logging.getLogger("fourdb")
CPU_OVERLAP = 0.5  # share of the shorter stage hidden behind the longer when both run on the same cores
BUILD_COST = 3.0  # building a stored batch (sample, pack, write, checksum) over sampling it; measured here


@dataclass
class Plan:
    mode: str
    workers: int
    cache_mb: float
    predicted_epoch_s: float
    predicted_online_epoch_s: float
    predicted_offline_epoch_s: float
    sample_s: float
    replay_s: float
    model_s: float
    reason: str


def step_seconds(model_s: float, data_s: float, on_gpu: bool) -> float:
    longer, shorter = max(model_s, data_s), min(model_s, data_s)
    return longer + (0.0 if on_gpu else (1 - CPU_OVERLAP) * shorter)


def _free_memory_mb(device) -> float:
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free / 2 ** 20
    try:
        import psutil

        return psutil.virtual_memory().available / 2 ** 20
    except ImportError:  # pragma: no cover
        return 4096.0


def choose(source, rng: np.random.Generator) -> Plan:
    eng = source.engine
    plan = source.epoch_plan(copy.deepcopy(rng))[: max(2, eng.profile_batches)]

    def job(idx, seed):
        t = time.perf_counter()
        batch = source.sample("train", idx, np.random.default_rng(seed))
        inputs = (batch.blocks, source.gather(batch))
        return batch, inputs, time.perf_counter() - t

    made = list(prefetch([(lambda i=i, s=s: job(i, s)) for i, s in plan], workers=1, depth=1))
    sample_s = median_seconds([m[2] for m in made])
    # timed as training runs them: replay on a producer thread, the model with the cores it leaves
    replay_s = next(prefetch([lambda: replay_seconds(source, [m[0] for m in made])], workers=1, depth=1))
    device = source.device if source.device is not None else torch.device("cpu")
    on_gpu = torch.device(device).type == "cuda"
    model_s = 0.0
    if source.module is not None:
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, min(threads, (os.cpu_count() or 1) - 1)))
        try:
            model_s = measure_steps(source.module, device, [m[1] for m in made])
        finally:
            torch.set_num_threads(threads)

    cores = os.cpu_count() or 1
    spare = cores if on_gpu else max(1, cores - 1)
    workers = int(min(spare, 4, max(1, math.ceil(sample_s / max(model_s, 1e-6)))))
    nb = source.num_train_batches()
    epochs = max(1, source.planned_epochs or eng.store_epochs)
    online_epoch = nb * step_seconds(model_s, sample_s / workers, on_gpu)
    offline_epoch = nb * step_seconds(model_s, replay_s, on_gpu)

    # feature tiers: on a GPU, every feature row that fits in a quarter of its free memory stays there
    # (only cold rows travel); on the CPU, rows packed per batch read sequentially beat gathering hot
    # rows, so the hot tier is only there to shrink a store that would not fit in a quarter of free RAM
    feats = source.data.graph.features
    total_mb = sum(f.numeric.nbytes + f.categorical.nbytes for f in feats.values()) / 2 ** 20
    rows = np.mean([sum(len(v) for v in m[0].input_nodes.values()) for m in made])
    store_mb = eng.store_epochs * nb * rows * row_bytes(feats) / 2 ** 20
    if on_gpu:
        cache_mb = float(min(max(total_mb, 1.0), 0.25 * _free_memory_mb(device)))
    elif store_mb < 0.25 * _free_memory_mb("cpu"):
        cache_mb = 0.0
    else:
        cache_mb = float(min(max(total_mb, 1.0), 0.25 * _free_memory_mb("cpu")))
    key = store_key(source, rng, eng.store_epochs, hot_budget_rows(source, cache_mb))
    built = (cache_root() / "store" / key / "manifest.json").exists()
    build_s = 0.0 if built else eng.store_epochs * nb * sample_s * BUILD_COST
    online_total = epochs * online_epoch
    offline_total = build_s + epochs * offline_epoch
    mode = "offline" if offline_total < online_total else "online"
    reason = (f"{epochs} epochs x {nb} batches: online {online_total:.1f} s vs store "
              f"{'(already built) ' if built else f'(build {build_s:.1f} s) '}{offline_total:.1f} s")
    chosen = Plan(mode, workers, cache_mb, offline_epoch if mode == "offline" else online_epoch, online_epoch,
                  offline_epoch, sample_s, replay_s, model_s, reason)
    log.info("engine auto: per batch sample %.1f ms, replay %.1f ms, model %.1f ms; %s -> %s, %d sampler "
             "thread(s), feature cache %.0f MB; predicted epoch %.2f s", 1e3 * sample_s, 1e3 * replay_s,
             1e3 * model_s, reason, mode, workers, cache_mb, chosen.predicted_epoch_s)
    return chosen
