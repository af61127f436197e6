"""``trainer.nproc=auto``: the engine's cost model (APT's idea) extended to the number of ranks.

Given the machine (cores, GPUs) and a short profile of the model on this run's data, predict the
training epoch time for every candidate number of data-parallel ranks ``p`` and pick the fastest (a
larger ``p`` must win by ``MIN_GAIN``, since more ranks cost memory and start-up). Then each rank's
sampler threads follow as in ``engine=auto``.

The profile times, on this process, a few training batches of the global batch ``B`` and of ``B/2``:
``sample`` (sampling and feature gathering, for graph models; 0 for tabular ones) and ``model``
(forward, backward and the optimizer's step), the model on one thread and on the threads training gives
it (the cores its sampler thread leaves; all of them for a model without one). Two batch sizes give a
fixed per-batch cost plus a per-seed cost, ``t(b) = a + c * b``; the two thread counts give the share
of the model's work that parallelizes over threads (Amdahl). For ``p`` ranks (each with ``B/p`` seeds
and ``W`` sampler threads, as ``engine=auto`` picks) a step is ``fourdb.engine.planning.cost.rank_step_seconds``
(the model on the threads its rank's sampler leaves it, overlapped with sampling, never faster than
the rank's CPU work over its share of the cores) plus, with ``p > 1``, ``comm_seconds`` (DDP's own
work per step and the ring all-reduce of the gradients). The same formulas price ``engine=auto``'s
strategies and ``fourdb plan``.

An epoch is ``batches * step``. The run record and the log state the prediction for every ``p`` and,
after training, the measured epoch times beside it.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import asdict, dataclass, field

import torch

from fourdb.engine.planning.cost import MAX_CPU_RANKS, Line, comm_seconds, rank_step_seconds

log = logging.getLogger("fourdb")
MIN_GAIN = 0.05


@dataclass
class Profile:
    batch_size: int
    sample_s: Line  # seconds per batch against its seeds (a (fixed, per seed) pair is taken as one)
    model_s: Line  # on ``threads`` threads (or the GPU)
    model_1t_s: Line  # on one thread (CPU)
    grad_bytes: int
    batches: int  # training batches per epoch
    threads: int = 0  # the threads ``model_s`` ran on (0: all cores)

    def __post_init__(self):
        self.sample_s, self.model_s, self.model_1t_s = (x if isinstance(x, Line) else Line(*x)
                                                        for x in (self.sample_s, self.model_s, self.model_1t_s))


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


def predict(prof: Profile, p: int, cores: int, gpus: int) -> tuple[float, int, int]:
    """(predicted epoch seconds, sampler threads per rank, compute threads per rank) for ``p`` ranks."""
    on_gpu = gpus > 0
    b = prof.batch_size / p
    model_1t, model_t, sample = prof.model_1t_s.at(b), prof.model_s.at(b), prof.sample_s.at(b)
    spare = max(1, (cores // p) - (0 if on_gpu else 1))
    workers = int(min(spare, 4, max(1, math.ceil(sample / max(model_t, 1e-6))))) if sample > 0 else 0
    step = rank_step_seconds(model_1t, model_t, prof.threads or cores, sample, workers, p, cores, on_gpu)
    step += comm_seconds(p, prof.grad_bytes, on_gpu)
    return prof.batches * step, max(workers, 1), max(1, cores // p)


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
