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
from dataclasses import asdict, dataclass, field

import torch

from fourdb.engine.auto import step_seconds

log = logging.getLogger("fourdb")
MIN_GAIN = 0.05
MAX_CPU_RANKS = 8
# all-reduce: (latency s, bandwidth bytes/s); gloo over loopback TCP, nccl within one machine
COMM = {"gloo": (3e-4, 1.0e9), "nccl": (5e-5, 5.0e10)}
DDP_STEP_S = {"gloo": 3e-3, "nccl": 1e-3}


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
    from fourdb.utils import gpu_unusable

    return cores, 0 if gpu_unusable() else torch.cuda.device_count()


def fit_line(small: float, big: float, b_small: int, b_big: int) -> tuple[float, float]:
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
