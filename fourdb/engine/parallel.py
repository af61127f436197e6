"""``trainer.nproc=auto``: the engine's cost model (APT's idea) extended to the number of ranks.

Given the machine (cores, GPUs) and a short profile of the model on this run's data, predict the
training epoch time for every candidate number of data-parallel ranks ``p`` and pick the fastest (a
larger ``p`` must win by ``MIN_GAIN``, since more ranks cost memory and start-up). Then each rank's
sampler threads follow as in ``engine=auto``.

The profile times, on this process, a few training batches of the global batch ``B`` and of ``B/2``:
``sample`` (sampling and feature gathering, for graph models; 0 for tabular ones) and ``model``
(forward, backward and the optimizer's step), the model both on all cores and on one thread. Two batch sizes give a fixed
per-batch cost plus a per-seed cost, ``t(b) = a + c * b``; the two thread counts give the share of the
model's work that parallelizes over threads (Amdahl). For ``p`` ranks (each with ``B/p`` seeds):

* ``model_p``: on the GPU ``t_model(B/p)`` (one GPU per rank); on the CPU, one-thread time
  ``t_model1(B/p)`` times ``serial + (1 - serial) / threads`` (``thread_factor``), with ``threads =
  cores // p`` per rank;
* ``sample_p = t_sample(B/p) / W``, with ``W`` sampler threads per rank (as ``engine.auto`` picks);
* a step is ``step_seconds(model_p, sample_p)`` (fourdb/engine/auto.py: the pipeline's overlap), but on
  the CPU never less than the whole batch's work spread over all cores, ``(t_model1(B) + t_sample(B))
  / cores``, since the ranks share the cores;
* plus, with ``p > 1``, DDP's own work per step (``DDP_STEP_S``, an estimate: its hooks and the search
  for unused parameters) and the gradient all-reduce, ``latency + 2 * gradient bytes / bandwidth``
  (ring all-reduce; gloo over loopback or nccl, constants below), and the loss-weight all-reduce.

An epoch is ``batches * step``. The run record and the log state the prediction for every ``p`` and,
after training, the measured epoch times beside it.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from fourdb.engine.auto import step_seconds

log = logging.getLogger("fourdb")
MIN_GAIN = 0.05
MAX_CPU_RANKS = 8
# all-reduce: (latency s, bandwidth bytes/s); gloo over loopback TCP, nccl within one machine
COMM = {"gloo": (3e-4, 1.0e9), "nccl": (5e-5, 5.0e10)}
DDP_STEP_S = {"gloo": 3e-3, "nccl": 1e-3}
PLAN_ENV = "FOURDB_PARALLEL_PLAN"


@dataclass
class Profile:
    batch_size: int
    sample_s: tuple[float, float]  # (fixed s per batch, s per seed)
    model_s: tuple[float, float]  # on all cores (or the GPU)
    model_1t_s: tuple[float, float]  # on one thread (CPU)
    grad_bytes: int
    batches: int  # training batches per epoch

    @staticmethod
    def line(fixed_per: tuple[float, float], b: float) -> float:
        return max(0.0, fixed_per[0] + fixed_per[1] * b)


@dataclass
class ParallelPlan:
    nproc: int
    workers: int
    threads_per_rank: int
    cores: int
    gpus: int
    predicted_epoch_s: dict = field(default_factory=dict)  # candidate nproc -> seconds
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def machine() -> tuple[int, int]:
    """(cores this process may use, GPUs)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 1
    return cores, torch.cuda.device_count() if torch.cuda.is_available() else 0


def _fit_line(small: float, big: float, b_small: int, b_big: int) -> tuple[float, float]:
    if b_big == b_small:
        return big, 0.0
    per = max(0.0, (big - small) / (b_big - b_small))
    return max(0.0, big - per * b_big), per


def thread_factor(ratio: float, threads: int, cores: int) -> float:
    """Model time on ``threads`` threads over its time on one, given ``ratio`` measured on ``cores``.

    Amdahl's law when more threads helped (``ratio < 1``); when they hurt (small models on a busy
    machine), linear between one thread and all cores.
    """
    if cores <= 1 or threads <= 1:
        return 1.0
    if ratio < 1:
        serial = min(1.0, max(0.0, (ratio - 1 / cores) / (1 - 1 / cores)))
        return serial + (1 - serial) / threads
    return 1 + (ratio - 1) * (min(threads, cores) - 1) / (cores - 1)


def predict(prof: Profile, p: int, cores: int, gpus: int) -> tuple[float, int, int]:
    """(predicted epoch seconds, sampler threads per rank, compute threads per rank) for ``p`` ranks."""
    on_gpu = gpus > 0
    b = prof.batch_size / p
    threads = max(1, cores // p)
    if on_gpu:
        model_p = Profile.line(prof.model_s, b)
    else:
        full, one = Profile.line(prof.model_s, prof.batch_size), Profile.line(prof.model_1t_s, prof.batch_size)
        model_p = Profile.line(prof.model_1t_s, b) * thread_factor(full / one if one > 0 else 1.0, threads, cores)
    sample = Profile.line(prof.sample_s, b)
    spare = max(1, (cores // p) - (0 if on_gpu else 1))
    workers = int(min(spare, 4, max(1, math.ceil(sample / max(model_p, 1e-6))))) if sample > 0 else 0
    step = step_seconds(model_p, sample / max(workers, 1), on_gpu)
    if not on_gpu:
        work = Profile.line(prof.model_1t_s, prof.batch_size) + Profile.line(prof.sample_s, prof.batch_size)
        step = max(step, work / max(cores, 1))
    if p > 1:
        backend = "nccl" if on_gpu else "gloo"
        latency, bandwidth = COMM[backend]
        step += DDP_STEP_S[backend] + 2 * latency + 2 * prof.grad_bytes * (p - 1) / p / bandwidth
    return prof.batches * step, max(workers, 1), threads


def choose_nproc(prof: Profile, cores: int, gpus: int, max_ranks: int | None = None) -> ParallelPlan:
    top = gpus if gpus > 0 else min(cores, MAX_CPU_RANKS)
    if max_ranks is not None:
        top = max(1, min(top, max_ranks))
    top = max(1, min(top, prof.batch_size))
    preds = {p: predict(prof, p, cores, gpus) for p in range(1, top + 1)}
    best = 1
    for p in range(2, top + 1):
        if preds[p][0] < (1 - MIN_GAIN) * preds[best][0]:
            best = p
    secs, workers, threads = preds[best]
    where = f"{gpus} GPU(s)" if gpus else f"{cores} core(s), no GPU"
    reason = (f"{where}; predicted epoch " + ", ".join(f"{p} rank(s) {preds[p][0]:.2f} s" for p in preds)
              + f" -> {best} rank(s), {workers} sampler thread(s) each")
    return ParallelPlan(best, workers, threads, cores, gpus, {p: round(v[0], 3) for p, v in preds.items()}, reason)


# ------------------------------------------------------------------------------------------- profile
def _median(ts: list[float]) -> float:
    return float(np.median(ts[1:] if len(ts) > 1 else ts))


def profile(model, data, trainer_cfg, batches: int = 4, seed: int = 0) -> Profile:
    """Time ``batches`` training steps of size B and B/2 on this process, on a model of its own.

    ``model`` (and ``model_1t``) is the whole step after the batch is made: forward, loss, backward and
    the optimizer's step, each timed on batches fresh from the sampler (DGL builds a block's sparse
    formats on first use, as in training).
    """
    device = trainer_cfg.torch_device()
    module = model.build(data).to(device)
    opt = torch.optim.AdamW(module.parameters(), lr=trainer_cfg.lr)
    B = trainer_cfg.batch_size
    half = max(1, B // 2)
    samples, models, models_1t = {}, {}, {}
    for b in (B, half):
        source = model.make_source(data, type(trainer_cfg)(**{**trainer_cfg.__dict__, "batch_size": b}))

        def make(k):
            rng = np.random.default_rng(seed + k)
            made, times = [], []
            if hasattr(source, "epoch_plan"):  # a graph source: time sampling + gathering alone
                for idx, s in source.epoch_plan(rng)[: batches + 1]:
                    t = time.perf_counter()
                    made.append(source.train_batch(idx, s)[0])
                    times.append(time.perf_counter() - t)
            else:
                for i, (inputs, _) in enumerate(source.train_batches(rng)):
                    if i > batches:
                        break
                    made.append(inputs)
            return made, (_median(times) if times else 0.0)

        made, samples[b] = make(0)
        models[b] = _time_steps(module, opt, device, made)
        if device.type == "cpu":
            made, _ = make(1)
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                models_1t[b] = _time_steps(module, opt, device, made)
            finally:
                torch.set_num_threads(threads)
        else:
            models_1t[b] = models[b]
    full = model.make_source(data, trainer_cfg)
    nb = full.num_train_batches()
    if trainer_cfg.max_steps_per_epoch:
        nb = min(nb, trainer_cfg.max_steps_per_epoch)
    grad_bytes = int(sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad))
    return Profile(B, _fit_line(samples[half], samples[B], half, B), _fit_line(models[half], models[B], half, B),
                   _fit_line(models_1t[half], models_1t[B], half, B), grad_bytes, nb)


def _time_steps(module, opt, device, inputs: list) -> float:
    from fourdb.train.trainer import _to

    module.train()
    times = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for x in inputs:
            t = time.perf_counter()
            opt.zero_grad()
            out = module(*_to(x, device))
            out.float().pow(2).mean().backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    return _median(times)


def recommend(cfg, out_dir) -> ParallelPlan:
    """Profile this run's model on its data and pick the number of ranks (the graph inputs are built
    into the run's shared folder on the way, so the ranks map them instead of building them)."""
    from omegaconf import OmegaConf

    from fourdb.datasets import load_dataset
    from fourdb.engine import ddp
    from fourdb.models import TaskInfo, create_model
    from fourdb.inputs import graph_inputs, inputs_key, shared_folder, subsample, table_inputs
    from fourdb.tasks import load_task
    from fourdb.train.trainer import TrainerConfig

    source = cfg.dataset.get("path") or cfg.dataset.name
    db = load_dataset(source, **(cfg.dataset.get("params") or {}))
    task = load_task(db, source, cfg.task)
    splits = subsample(task, cfg.get("max_train_seeds"), cfg.get("max_val_seeds"))
    info = TaskInfo(task.spec.task_type, task.num_classes, task.spec.metric)
    model = create_model(cfg.model.name, info, seed=cfg.seed, **(cfg.model.get("params") or {}))
    if model.input_kind == "graph":
        data, _ = ddp.shared_inputs(lambda: graph_inputs(cfg, db, task, splits), shared_folder(cfg, out_dir), ddp.Context(),
                                    inputs_key(cfg))
    else:
        data = table_inputs(cfg, db, task, splits)
    tc = OmegaConf.to_container(cfg.trainer, resolve=True)
    tc["nproc"] = 1
    prof = profile(model, data, TrainerConfig(**tc), seed=cfg.seed)
    cores, gpus = machine()
    plan = choose_nproc(prof, cores, gpus, _memory_bound())
    log.info("parallel auto: per batch of %d: sample %.1f ms, model %.1f ms (%.1f ms on one thread), "
             "gradients %.1f MB; %s", prof.batch_size, 1e3 * Profile.line(prof.sample_s, prof.batch_size),
             1e3 * Profile.line(prof.model_s, prof.batch_size), 1e3 * Profile.line(prof.model_1t_s, prof.batch_size),
             prof.grad_bytes / 2 ** 20, plan.reason)
    return plan


def _memory_bound() -> int | None:
    """Ranks that fit in memory, each taking what this process holds now (the graph is shared)."""
    try:
        import psutil

        rss = psutil.Process().memory_info().rss
        return max(1, int(0.8 * psutil.virtual_memory().available // max(rss, 1)))
    except ImportError:  # pragma: no cover
        return None
