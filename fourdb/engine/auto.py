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
packed per batch read fastest) unless the store would not fit in a quarter of the free RAM.

Memory: the dry run also measures the process's resident memory now, the peak a model step adds
(polled while it runs) and the bytes of a made batch. A strategy's predicted peak is that, plus the
optimizer's state, plus the batches its pipeline keeps alive (``held_batches``), plus, offline, the
stored epochs it reads (memory-mapped pages count as resident once read) and the RAM hot tier. Every
strategy (online with 1..4 sampler threads, offline; each with prefetch depth 1 or ``engine.prefetch``)
becomes a point (epoch seconds, peak MB); ``fourdb.engine.frontier.pick`` takes the fastest
(``engine.objective=time``) or the smallest (``memory``) on the Pareto frontier under
``engine.memory_limit_gb``. The run log states the prediction, and each epoch's measured time and
peak memory beside it.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fourdb.engine.frontier import Strategy, pareto, pick
from fourdb.engine.pipeline import prefetch
from fourdb.engine.store import hot_budget_rows, replay_seconds, store_key
from fourdb.engine.timing import PeakRSS, batch_mb, measure_steps, median_seconds, row_bytes, rss_mb
from fourdb.utils import cache_root

log = logging.getLogger("fourdb")
CPU_OVERLAP = 0.5  # share of the shorter stage hidden behind the longer when both run on the same cores
BUILD_COST = 3.0  # building a stored batch (sample, pack, write, checksum) over sampling it; measured here


@dataclass
class Plan:
    mode: str
    workers: int
    prefetch: int
    cache_mb: float
    predicted_epoch_s: float
    predicted_peak_mb: float
    sample_s: float
    replay_s: float
    model_s: float
    reason: str
    strategies: list = field(default_factory=list)  # every Strategy the cost model priced


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


def held_batches(workers: int, depth: int) -> int:
    """Batches alive at once in ``prefetch(jobs, workers, depth)``: the queue, those in production and the
    one the model is on (fourdb/engine/pipeline.py: one thread queues ``depth``, a pool ``max(depth, workers)``)."""
    return depth + 2 if workers <= 1 else max(depth, workers) + 1


def choose(source, rng: np.random.Generator) -> Plan:
    eng = source.engine
    base_mb = rss_mb()  # the graph, its features and the model, before anything the engine adds
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
    model_s, step_mb, state_mb = 0.0, 0.0, 0.0
    if source.module is not None:
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, min(threads, (os.cpu_count() or 1) - 1)))
        try:
            with PeakRSS() as peak:  # activations and gradients, freed when a step is over
                model_s = measure_steps(source.module, device, [m[1] for m in made])
            step_mb = 0.0 if on_gpu else peak.growth_mb
        finally:
            torch.set_num_threads(threads)
        # AdamW's two moments per parameter, allocated at the first step (not taken by the profile)
        params = sum(p.numel() * p.element_size() for p in source.module.parameters())
        state_mb = 0.0 if on_gpu else 2 * params / 2 ** 20

    cores = os.cpu_count() or 1
    spare = cores if on_gpu else max(1, cores - 1)
    nb = source.num_train_batches()
    epochs = max(1, source.planned_epochs or eng.store_epochs)

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

    # memory (this process's RSS; on a GPU the model's own memory is left out): what is there now, a
    # training step's peak and the optimizer's state, plus the batches alive in the pipeline; offline,
    # the stored epochs read so far (memory-mapped pages count as resident once read) and the RAM hot tier
    one_batch = float(np.mean([batch_mb(m[1]) for m in made]))
    fixed = base_mb + step_mb + state_mb
    stored = min(epochs, eng.store_epochs) / eng.store_epochs * store_mb + (0.0 if on_gpu else cache_mb)
    depths = sorted({1, eng.prefetch})
    strategies = [Strategy("online", w, d, nb * step_seconds(model_s, sample_s / w, on_gpu),
                           fixed + held_batches(w, d) * one_batch)
                  for w in range(1, int(min(spare, 4)) + 1) for d in depths]
    strategies += [Strategy("offline", 1, d, build_s / epochs + nb * step_seconds(model_s, replay_s, on_gpu),
                            fixed + stored + held_batches(1, d) * one_batch) for d in depths]
    best = pick(strategies, eng.objective, eng.memory_limit_gb)
    limit = "" if eng.memory_limit_gb is None else f" under {eng.memory_limit_gb:g} GB"
    reason = (f"{epochs} epochs x {nb} batches, store {'already built' if built else f'build {build_s:.1f} s'}; "
              f"{len(pareto(strategies))} of {len(strategies)} strategies on the time/memory frontier; "
              f"objective {eng.objective}{limit}")
    chosen = Plan(best.mode, best.workers, best.prefetch, cache_mb,
                  best.epoch_s, best.peak_mb, sample_s, replay_s, model_s, reason, strategies)
    log.info("engine auto: per batch sample %.1f ms, replay %.1f ms, model %.1f ms, %.1f MB (step %.1f MB); %s "
             "-> %s, feature cache %.0f MB; predicted epoch %.2f s, peak %.0f MB", 1e3 * sample_s, 1e3 * replay_s,
             1e3 * model_s, one_batch, step_mb, reason, best.name, chosen.cache_mb, best.epoch_s, best.peak_mb)
    return chosen
