"""``engine=auto`` (the APT idea): a short dry run, then a cost model picks how to feed training.

The dry run takes the first ``profile_batches`` batches of the first epoch's plan (from a copy of the
trainer's generator, so training sees exactly the batches it would anyway) and measures, per batch:

* ``sample``: online sampling plus feature gathering, on one sampler thread;
* ``replay``: rebuilding the same batch from packed arrays, as the offline store does;
* ``model``: the model's forward and backward pass on it (when the trainer has handed over the model;
  the random state is restored and the gradients cleared afterwards, so training is unchanged), on one
  thread and on the threads training gives it beside one sampler thread (never more: on a busy machine
  oversubscribed threads wait on each other at every operation, and training never runs that way);
* an evaluation forward pass; the process's resident memory (RSS) now and its peak so far, what a
  training step and a forward pass add (polled while they run), and the bytes of a made batch.

``fourdb plan`` (``explore``) also measures half batches, so the costs become lines in the batch's seeds
and price other batch sizes and data-parallel ranks, and one cutoff of exact layer-wise evaluation.
``fourdb.engine.planning.cost`` turns the measurements into every strategy's epoch time and peak memory;
``fourdb.engine.planning.frontier.pick`` takes the fastest (``engine.objective=time``) or the smallest
(``memory``) on the Pareto frontier under ``engine.memory_limit_gb``, among the strategies that train
and evaluate what the run asks (its batch size, evaluation and number of processes: auto only chooses
how batches are fed). The run log and record state the prediction, and each epoch's measured time and
peak memory beside it; the last run's figures are kept (``calibration``) for ``fourdb plan`` to show.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from fourdb.contracts import LayerwiseModule
from fourdb.engine.planning.cost import MAX_CPU_RANKS, Costs, Line, Space, price
from fourdb.engine.planning.frontier import Strategy, pareto, pick
from fourdb.engine.feeding.layerwise import cutoff_inference
from fourdb.engine.planning.parallel import machine
from fourdb.engine.feeding.pipeline import prefetch
from fourdb.engine.feeding.store import hot_budget_rows, replay_seconds, store_key, stored_mb
from fourdb.engine.planning.timing import (PeakRSS, batch_mb, forward_times, maxrss_mb, median_seconds, rss_mb, step_times,
                                  with_threads)
from fourdb.utils import atomic_write_text, cache_root

log = logging.getLogger("fourdb")
MAX_SAMPLER_THREADS = 4


@dataclass
class Plan:
    strategy: Strategy  # the pick
    costs: Costs
    reason: str
    strategies: list = field(default_factory=list)  # every Strategy the cost model priced

    @property
    def train_s(self) -> float:
        """Predicted seconds of an epoch's training loop (the epoch less its validation pass)."""
        return self.strategy.epoch_s - self.strategy.eval_s


def _free_memory_mb(device) -> float:
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free / 2 ** 20
    try:
        import psutil

        return psutil.virtual_memory().available / 2 ** 20
    except ImportError:  # pragma: no cover
        return 4096.0


def _measure(source, plan, sizes: tuple, device, threads: int) -> dict[int, dict]:
    """Costs of batches of each of ``sizes`` seeds (the first ones of each planned batch). The sizes take
    turns batch by batch, so other work on the machine weighs on each alike: a line fitted through
    sizes timed one after the other took a change of load for a cost of the batch's size."""
    jobs = [(idx[:s], seed) for idx, seed in plan for s in sizes]
    size = [s for _ in plan for s in sizes]

    def job(idx, seed):
        t = time.perf_counter()
        batch, inputs = source.profile_batch(idx, seed)
        return batch, inputs, time.perf_counter() - t

    def made():  # on a sampler thread, as training makes them
        return list(prefetch([(lambda i=i, s=s: job(i, s)) for i, s in jobs], workers=1, depth=1))

    def per_size(values: list) -> dict[int, list]:
        return {s: [v for v, k in zip(values, size) if k == s] for s in sizes}

    batches = made()
    made_of = per_size(batches)
    out = {s: {"sample": median_seconds([b[2] for b in made_of[s]]),
               "batch_mb": float(np.mean([batch_mb(b[1]) for b in made_of[s]])),
               "replay": 0.0, "store_index_mb": 0.0, "store_features_mb": 0.0,  # a store's, where one can feed it
               "model_t": 0.0, "model_1t": 0.0, "forward": 0.0, "step_mb": 0.0, "forward_mb": 0.0} for s in sizes}
    if source.stores_batches:
        for s in sizes:
            stored = [b[0] for b in made_of[s]]
            # timed as training runs it: replay on a producer thread
            out[s]["replay"] = next(prefetch([lambda: replay_seconds(source, stored)], 1, 1))
            out[s]["store_index_mb"] = float(np.mean([stored_mb(source, b)[0] for b in stored]))
            out[s]["store_features_mb"] = float(np.mean([stored_mb(source, b)[1] for b in stored]))
    if source.module is None:
        return out
    on_gpu = torch.device(device).type == "cuda"
    inputs = [b[1] for b in batches]
    with PeakRSS() as peak:  # activations and gradients, freed when a step is over; fresh batches, as in training
        model_t = per_size(with_threads(threads, lambda: step_times(source.module, device, inputs)))
    step_mb = 0.0 if on_gpu else peak.growth_mb  # the largest batches' (the first size)
    # one thread, on batches of their own (DGL builds a block's formats on first use, as in training)
    model_1t = model_t if threads == 1 or on_gpu else \
        per_size(with_threads(1, lambda: step_times(source.module, device, [b[1] for b in made()])))
    with PeakRSS() as peak:
        forward = per_size(with_threads(threads, lambda: forward_times(source.module, device, inputs)))
    for s in sizes:
        out[s].update(model_t=median_seconds(model_t[s]), model_1t=median_seconds(model_1t[s]),
                      forward=median_seconds(forward[s]), step_mb=step_mb, forward_mb=0.0 if on_gpu else peak.growth_mb)
    return out


def _layerwise(source, device) -> tuple[float | None, float]:
    """Seconds of exact layer-wise evaluation of the validation split, and the memory it adds; None where
    the model cannot. Memory: the cutoff with the most seeds of the validation and test splits (the run
    evaluates both; the rows reached grow with the seeds), timed first, on a heap that has not yet
    reused what it freed. Time: the validation cutoff with the most seeds, times the validation cutoffs."""
    data, module = source.data, source.module

    def groups(split: str) -> list[tuple[int, str, int]]:
        cutoffs, counts = np.unique(np.asarray(data.cutoffs.get(split, ()), np.int64), return_counts=True)
        return [(int(n), split, int(c)) for c, n in zip(cutoffs, counts)]

    val = groups("val")
    if not isinstance(module, LayerwiseModule) or not val:
        return None, 0.0
    largest, timed = max(val + groups("test")), max(val)
    was_training = module.training
    try:
        with PeakRSS() as peak:
            start = time.perf_counter()
            cutoff_inference(module, data, largest[1], largest[2], device)
            seconds = time.perf_counter() - start
        if timed != largest:
            start = time.perf_counter()
            cutoff_inference(module, data, timed[1], timed[2], device)
            seconds = time.perf_counter() - start
    finally:
        module.train(was_training)
    return seconds * len(val), peak.growth_mb


def measure(source, rng: np.random.Generator, explore: bool = False) -> Costs:
    """The dry run (see the module's docstring): ``Costs`` of this run in this process."""
    eng = source.engine
    base_mb, peak_so_far = rss_mb(), maxrss_mb()  # the graph, its features and the model, before the engine
    plan = source.epoch_plan(copy.deepcopy(rng))[: max(2, eng.profile_batches)]
    full = max(len(idx) for idx, _ in plan)
    device = source.device if source.device is not None else torch.device("cpu")
    on_gpu = torch.device(device).type == "cuda"
    cores = os.cpu_count() or 1
    threads = torch.get_num_threads() if on_gpu else max(1, min(torch.get_num_threads(), cores - 1))
    sizes = (full, max(1, full // 2)) if explore else (full,)
    measured = _measure(source, plan, sizes, device, threads)

    def line(key: str) -> Line:
        return Line.fit({s: m[key] for s, m in measured.items()})

    def scaled(key: str) -> Line:
        """What a step or a forward pass adds to the RSS, from the first batches timed (the allocator then
        grows the heap as training's first steps do; later ones reuse what it freed), in proportion to
        the bytes a batch holds (its nodes and edges)."""
        ratio = measured[full][key] / max(measured[full]["batch_mb"], 1e-9)
        return Line(ratio * batch.fixed, ratio * batch.per)

    batch = line("batch_mb")
    params = sum(p.numel() * p.element_size() for p in source.module.parameters()) if source.module is not None else 0
    feats = source.data.graph.features
    features_mb = sum(f.numeric.nbytes + f.categorical.nbytes for f in feats.values()) / 2 ** 20
    # hot tiers: on a GPU every feature row that fits in a quarter of its free memory stays there (only
    # cold rows travel); in RAM, none (rows packed per batch read sequentially) or every row
    gpu_cache = float(min(max(features_mb, 1.0), 0.25 * _free_memory_mb(device))) if on_gpu else 0.0
    hot = (gpu_cache,) if on_gpu else (0.0, float(max(features_mb, 1.0)))
    built = frozenset(h for h in hot if source.stores_batches and (cache_root() / "store" / store_key(
        source, rng, eng.store_epochs, hot_budget_rows(source, h)) / "manifest.json").exists())
    lw_s, lw_mb = (_layerwise(source, device) if source.module is not None and
                   (explore or eng.inference == "layerwise") else (None, 0.0))
    return Costs(
        batch_size=source.batch_size, train_seeds=len(source.data.seeds["train"]),
        val_seeds=len(source.data.seeds["val"]), cores=cores, on_gpu=on_gpu,
        # a rank's made batch holds its share of the global one: lines are per rank-batch seeds, and a
        # rank of ``world`` prices itself at ``batch_size / world`` seeds
        sample=line("sample"), replay=line("replay"), model_1t=line("model_1t"), model_t=line("model_t"),
        threads=threads, forward=line("forward"), batch_mb=batch, step_mb=scaled("step_mb"),
        forward_mb=scaled("forward_mb"), store_index_mb=line("store_index_mb"),
        store_features_mb=line("store_features_mb"), base_mb=base_mb, maxrss_mb=peak_so_far,
        state_mb=0.0 if on_gpu else 2 * params / 2 ** 20, grad_mb=0.0 if on_gpu else params / 2 ** 20,
        features_mb=features_mb, store_epochs=eng.store_epochs, offline=source.stores_batches,
        epochs=max(1, source.planned_epochs or eng.store_epochs), built=built, gpu_cache_mb=gpu_cache,
        layerwise_s=lw_s, layerwise_mb=lw_mb)


def space(costs: Costs, eng, explore: bool = False, nproc: int = 1) -> Space:
    """The strategies to price: sampler threads up to the cores a rank's model leaves, prefetch depth 1
    or ``engine.prefetch``, the store without or with a whole RAM hot tier; ``explore`` also half and
    twice the batch, both evaluations and 1, 2, 4, ... ranks (one per GPU at most)."""
    spare = costs.cores if costs.on_gpu else max(1, costs.cores // nproc - 1)
    workers = tuple(range(1, int(min(spare, MAX_SAMPLER_THREADS)) + 1))
    hot = (costs.gpu_cache_mb,) if costs.on_gpu else (0.0, float(max(costs.features_mb, 1.0)))
    common = dict(workers=workers, prefetch=tuple(sorted({1, eng.prefetch})), eval_prefetch=eng.prefetch, hot_mb=hot,
                  offline=costs.offline)
    if not explore:
        return Space(nprocs=(nproc,), inferences=(eng.inference,), **common)
    top = machine()[1] or min(costs.cores, MAX_CPU_RANKS)
    nprocs = tuple(p for p in (1, 2, 4, 8, 16) if p <= top)
    b = costs.batch_size
    return Space(nprocs=nprocs, batch_sizes=tuple(sorted({max(1, b // 2), b, 2 * b})),
                 inferences=("sampled", "layerwise"), **common)


def runnable(strategies: list[Strategy], costs: Costs, eng, nproc: int = 1) -> list[Strategy]:
    """The strategies ``engine=auto`` may pick for a run: its batch size, evaluation and process count."""
    return [s for s in strategies if s.batch_size == costs.batch_size and s.inference == eng.inference
            and s.nproc == nproc]


def choose(source, rng: np.random.Generator) -> Plan:
    eng = source.engine
    costs = measure(source, rng)
    strategies = price(costs, space(costs, eng, nproc=source.world))
    best = pick(runnable(strategies, costs, eng, source.world), eng.objective, eng.memory_limit_gb)
    limit = "" if eng.memory_limit_gb is None else f" under {eng.memory_limit_gb:g} GB"
    build = "built" if best.cache_mb in costs.built else "to build"
    reason = (f"{costs.epochs} epochs x {-(-costs.train_seeds // costs.batch_size)} batches, store {build}; "
              f"{len(pareto(strategies))} of {len(strategies)} strategies on the time/memory frontier; "
              f"objective {eng.objective}{limit}")
    chosen = Plan(best, costs, reason, strategies)
    s = costs.batch_size // source.world
    log.info("engine auto: per batch sample %.1f ms, replay %.1f ms, model %.1f ms (%.1f ms on one thread), "
             "%.1f MB (step %.1f MB); %s -> %s; predicted epoch %.2f s (training %.2f s), peak %.0f MB",
             1e3 * costs.sample.at(s), 1e3 * costs.replay.at(s), 1e3 * costs.model_t.at(s),
             1e3 * costs.model_1t.at(s), costs.batch_mb.at(s), costs.step_mb.at(s), reason, best.name,
             best.epoch_s, chosen.train_s, best.peak_mb)
    return chosen


# ------------------------------------------------------------------ calibration
CALIBRATION = "plan/calibration.json"  # under the cache: the last engine=auto run's prediction and measurement


def save_calibration(plan: Plan, epoch_seconds: list[float], peak_mb: float) -> None:
    """Keep the last ``engine=auto`` run's predicted and measured training epoch and peak, for ``fourdb plan``."""
    path = cache_root() / CALIBRATION
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "strategy": plan.strategy.name,
        "predicted_epoch_s": round(plan.train_s, 4), "measured_epoch_s": [round(s, 4) for s in epoch_seconds],
        "predicted_peak_mb": round(plan.strategy.peak_mb, 1), "measured_peak_mb": round(peak_mb, 1)}))


def last_calibration() -> str | None:
    """One line: how far the last ``engine=auto`` run's prediction was from what it measured (None: no run yet)."""
    path = cache_root() / CALIBRATION
    if not path.is_file():
        return None
    c = json.loads(path.read_text())
    measured = float(np.median(c["measured_epoch_s"])) if c["measured_epoch_s"] else float("nan")

    def off(pred: float, meas: float) -> str:
        return f"{100 * (pred - meas) / meas:+.0f}%" if meas > 0 else "n/a"

    return (f"last calibration ({c['when']}, engine=auto, {c['strategy']}): training epoch predicted "
            f"{c['predicted_epoch_s']:.2f} s, measured {measured:.2f} s (median of {len(c['measured_epoch_s'])}; "
            f"off by {off(c['predicted_epoch_s'], measured)}); peak predicted {c['predicted_peak_mb']:.0f} MB, "
            f"measured {c['measured_peak_mb']:.0f} MB (off by {off(c['predicted_peak_mb'], c['measured_peak_mb'])})")
