"""The engine's cost model: what a strategy costs in epoch time and peak memory, from what a dry run measured.

Pure functions over ``Costs`` (fourdb/engine/planning/auto.py measures them), so ``engine=auto``, ``fourdb plan``
and ``trainer.nproc=auto`` (fourdb/engine/planning/parallel.py) price a step the same way, and the rules can be
checked on made-up numbers.

A strategy is how one run is fed (the store, the hot tier, sampler threads, prefetch depth, the number
of data-parallel ranks) and what its epoch computes (the batch size; sampled or exact layer-wise
evaluation). Per batch of ``s`` seeds the dry run gives straight lines (a fixed cost plus a cost per
seed) for sampling, replay from a store, the model's training step on one thread and on the threads
training gives it, an evaluation forward pass, the bytes a made batch holds and the memory a step adds.

Time, on the CPU: ``p`` ranks share the cores, each with ``cores // p`` intra-op threads, and a rank's
model gets what its ``W`` sampler threads leave (``min(cores // p, cores - W)``, as
``fourdb.engine.feeding.pipeline.prefetch`` sets it; timed at that count, never at an oversubscribed one). A
pipelined step takes the longer of model and data and hides half of the shorter (``CPU_OVERLAP``), but
never less than the rank's CPU work over its cores: on one core the sampler and the model take turns.
Ranks add DDP's own work per step and the gradient all-reduce (ring: ``2 (p-1)/p`` of the gradient bytes
over the link). An epoch is its training batches, the store's build spread over the planned epochs
(offline), and one validation pass: sampled (each rank its share of the batches) or layer-wise (every
rank computes the whole split: on the CPU ``p`` times the one-process time).

Memory, summed over the ranks (each holds its own database, model, optimizer state, batches and store
pages; mapped graph pages count in every rank that reads them, as RSS does): a rank's RSS before
training, plus the optimizer's state (and DDP's gradient buckets), plus the larger of training (a step,
the batches the pipeline keeps alive, offline the store's build or the stored pages read, and the RAM hot
tier) and evaluation (its batches and forward pass, or the layer-wise pass), plus what a run grows
beyond what the dry run sees (``RSS_GROWTH``, measured). Rank 0 peaks at least as high as the process
already has (building the graph can peak above training).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from fourdb.engine.planning.frontier import Strategy

CPU_OVERLAP = 0.5  # share of the shorter stage hidden behind the longer when both run on the same cores
# building a stored batch (sample, pack, write, checksum) over sampling and gathering it; measured here: 2 epochs
# of 40 batches of 512 synthetic seeds built in 6.0 s, 0.075 s a batch, against 0.061 to 0.084 s to sample one
BUILD_COST = 1.0
# all-reduce: (latency s, bandwidth bytes/s); gloo over loopback TCP, nccl within one machine
COMM = {"gloo": (3e-4, 1.0e9), "nccl": (5e-5, 5.0e10)}
# DDP's own work per step beyond the all-reduce's bytes: its hooks, the search for unused parameters, the
# loss-weight all-reduce and waiting on the other ranks; gloo measured here (2 CPU ranks, 1 MB of gradients:
# 10-12 ms a step over the same step without DDP), nccl an estimate
DDP_STEP_S = {"gloo": 1e-2, "nccl": 1e-3}
MAX_CPU_RANKS = 8
# what a run's RSS grows beyond the dry run's view of it (the heap fragmenting over many steps, caches
# filled by later batches): benchmarks/plan_accuracy.py measured the peaks 1 to 9% (median 5%) above the
# prediction without it
RSS_GROWTH = 0.05


@dataclass(frozen=True)
class Line:
    """``fixed + per * seeds``: a batch's cost against its number of seeds."""
    fixed: float
    per: float

    def at(self, seeds: float) -> float:
        return max(0.0, self.fixed + self.per * seeds)

    @classmethod
    def fit(cls, points: dict[int, float]) -> "Line":
        """Through two (seeds, cost) points (the slope at least 0); one point: proportional to the seeds."""
        (b1, y1), *rest = sorted(points.items())
        if not rest:
            return cls(0.0, y1 / max(b1, 1))
        b2, y2 = rest[-1]
        per = max(0.0, (y2 - y1) / (b2 - b1))
        return cls(max(0.0, y2 - per * b2), per)


@dataclass(frozen=True)
class Costs:
    """What the dry run measured in this process; lines are per batch of seeds made by one rank."""
    batch_size: int  # the run's (global) batch
    train_seeds: int
    val_seeds: int
    cores: int
    on_gpu: bool
    sample: Line  # sample and gather a batch, on one sampler thread
    replay: Line  # rebuild it from a store, on one thread
    model_1t: Line  # a training step (forward, backward) on one thread (on a GPU: on the GPU)
    model_t: Line  # the same on ``threads`` intra-op threads
    threads: int  # what training with one sampler thread gives the model
    forward: Line  # an evaluation forward pass on ``threads`` threads
    batch_mb: Line  # what a made batch holds
    step_mb: Line  # what a training step adds to the RSS while it runs
    forward_mb: Line  # what an evaluation forward pass adds
    store_index_mb: Line  # what the store writes for a batch: blocks and per-row index
    store_features_mb: Line  # and its packed feature rows (those a hot tier holds are not packed)
    base_mb: float  # RSS before training: database, graph, model
    maxrss_mb: float  # the process's peak so far (graph building can peak above training)
    state_mb: float  # AdamW's two moments per parameter
    grad_mb: float  # the gradients (DDP keeps a bucket copy; all-reduced every step)
    features_mb: float  # every feature row: the whole hot tier
    store_epochs: int
    epochs: int  # planned training epochs
    built: frozenset = frozenset()  # hot-tier sizes (MB) whose store for this run is already on disk
    gpu_cache_mb: float = 0.0  # on a GPU the hot tier lives there (not in RAM)
    layerwise_s: float | None = None  # exact layer-wise evaluation of the validation split (None: not priced)
    layerwise_mb: float = 0.0  # what it adds to the RSS
    offline: bool = True  # the store can feed the run (a recommendation model's batches are made online)


@dataclass(frozen=True)
class Space:
    """The strategies to price: every combination of these."""
    nprocs: tuple = (1,)
    batch_sizes: tuple = ()  # empty: the run's
    inferences: tuple = ("sampled",)
    workers: tuple = (1,)
    prefetch: tuple = (1,)
    eval_prefetch: int = 4  # evaluation's pipeline depth (engine.prefetch, whatever training picks)
    offline: bool = True
    hot_mb: tuple = field(default=(0.0,))  # RAM hot-tier sizes for the store


def thread_factor(ratio: float, threads: int, measured: int) -> float:
    """Model time on ``threads`` threads over its time on one, given ``ratio`` measured on ``measured`` threads.

    Amdahl's law when more threads helped (``ratio < 1``); when they hurt (small models on a busy
    machine), linear between one thread and the measured count.
    """
    if measured <= 1 or threads <= 1:
        return 1.0
    if ratio < 1:
        serial = min(1.0, max(0.0, (ratio - 1 / measured) / (1 - 1 / measured)))
        return serial + (1 - serial) / threads
    return 1 + (ratio - 1) * (min(threads, measured) - 1) / (measured - 1)


def step_seconds(model_s: float, data_s: float, on_gpu: bool) -> float:
    """A pipelined step: the longer stage, plus on the CPU the part of the shorter it does not hide."""
    longer, shorter = max(model_s, data_s), min(model_s, data_s)
    return longer + (0.0 if on_gpu else (1 - CPU_OVERLAP) * shorter)


def model_threads(nproc: int, workers: int, cores: int) -> int:
    """Intra-op threads of a rank's model: its share of the cores, less its sampler threads
    (fourdb/engine/feeding/pipeline.py caps the consumer at ``cores - workers``)."""
    return max(1, min(max(1, cores // nproc), cores - workers))


def rank_step_seconds(model_1t: float, model_t: float, threads: int, data_s: float, workers: int, nproc: int,
                      cores: int, on_gpu: bool) -> float:
    """One training step of one of ``nproc`` ranks: its model (``model_1t`` on one thread, ``model_t`` on
    ``threads``) beside ``workers`` threads making its data (``data_s`` each batch on one thread)."""
    if on_gpu:
        return step_seconds(model_t, data_s / max(workers, 1), True)
    t = model_threads(nproc, workers, cores)
    model = model_1t * thread_factor(model_t / model_1t if model_1t > 0 else 1.0, t, threads)
    step = step_seconds(model, data_s / max(workers, 1), False)
    # the rank's CPU work over its cores: on one core the sampler and the model take turns
    return max(step, (model_1t + data_s) / max(1, cores // nproc))


def comm_seconds(nproc: int, grad_bytes: float, on_gpu: bool) -> float:
    """DDP's cost per step beyond the computation: its own work and the ring all-reduce of the gradients."""
    if nproc <= 1:
        return 0.0
    backend = "nccl" if on_gpu else "gloo"
    latency, bandwidth = COMM[backend]
    return DDP_STEP_S[backend] + 2 * latency + 2 * grad_bytes * (nproc - 1) / nproc / bandwidth


def held_batches(workers: int, depth: int) -> int:
    """Batches alive at once in ``prefetch(jobs, workers, depth)``: the queue, those in production and the
    one the model is on (fourdb/engine/feeding/pipeline.py: one thread queues ``depth``, a pool ``max(depth, workers)``)."""
    return depth + 2 if workers <= 1 else max(depth, workers) + 1


def price(c: Costs, space: Space) -> list[Strategy]:
    """Every strategy of ``space``, with its predicted epoch time and peak memory."""
    out = []
    for p in space.nprocs:
        for b in space.batch_sizes or (c.batch_size,):
            if b < p:
                continue
            for inference in space.inferences:
                if inference == "layerwise" and c.layerwise_s is None:
                    continue
                feeds = [("online", w, d, 0.0) for w in space.workers for d in space.prefetch]
                if space.offline:
                    feeds += [("offline", 1, d, h) for h in space.hot_mb for d in space.prefetch]
                for mode, w, d, hot in feeds:
                    out.append(_strategy(c, space, mode, w, d, hot, p, b, inference))
    return out


def _strategy(c: Costs, space: Space, mode: str, w: int, d: int, hot: float, p: int, b: int,
              inference: str) -> Strategy:
    s = b / p  # seeds of a rank's share of a batch
    batches = math.ceil(c.train_seeds / b)
    offline = mode == "offline"
    data = (c.replay if offline else c.sample).at(s)
    step = rank_step_seconds(c.model_1t.at(s), c.model_t.at(s), c.threads, data, w, p, c.cores, c.on_gpu)
    train = batches * (step + comm_seconds(p, c.grad_mb * 2 ** 20, c.on_gpu))
    built = hot in c.built and b == c.batch_size
    if offline and not built:  # every rank samples its share of store_epochs epochs once
        train += c.store_epochs * batches * c.sample.at(s) * BUILD_COST / max(1, c.epochs)
    if inference == "layerwise":  # not sharded: every rank evaluates the whole split
        evaluate, eval_mb = c.layerwise_s * (1 if c.on_gpu else p), c.layerwise_mb
    else:  # rank r evaluates batches r, r + p, ... of the full batch size, on the engine's threads
        own = math.ceil(math.ceil(c.val_seeds / b) / p)
        evaluate = own * rank_step_seconds(c.forward.at(b), c.forward.at(b), c.threads, c.sample.at(b), w, p,
                                           c.cores, c.on_gpu)
        eval_mb = c.forward_mb.at(b) + held_batches(w, space.eval_prefetch) * c.batch_mb.at(b)
    # memory of one rank
    train_mb = c.step_mb.at(s) + held_batches(w, d) * c.batch_mb.at(s)
    if offline:
        share = 0.0 if hot <= 0 else min(1.0, hot / max(c.features_mb, 1e-9))  # of the rows the hot tier holds
        store = c.store_epochs * batches * (c.store_index_mb.at(s) + c.store_features_mb.at(s) * (1 - share))
        # building holds every epoch until it writes them, and one epoch twice while it does; once built,
        # the epochs read so far are resident (mapped pages)
        train_mb += (min(c.epochs, c.store_epochs) / c.store_epochs * store if built
                     else store * (1 + 1 / c.store_epochs)) + (0.0 if c.on_gpu else hot)
    rank = (c.base_mb + c.state_mb + (c.grad_mb if p > 1 else 0.0) + max(train_mb, eval_mb)) * (1 + RSS_GROWTH)
    peak = max(c.maxrss_mb, rank) + (p - 1) * rank
    return Strategy(mode, w, d, train + evaluate, peak, nproc=p, batch_size=b, cache_mb=c.gpu_cache_mb if c.on_gpu
                    and offline else hot, inference=inference, eval_s=evaluate)
