"""Strategies as points (epoch seconds, peak memory), their Pareto frontier, and a pick under a constraint.

Pure functions over a cost table, so ``engine=auto`` and ``fourdb plan`` choose the same way and the
rules can be checked on a made-up table.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from fourdb.errors import SettingError


@dataclass(frozen=True)
class Strategy:
    mode: str  # online or offline
    workers: int  # sampler (or replay) threads
    prefetch: int  # batches prepared ahead at most
    epoch_s: float  # predicted seconds per epoch: training (offline: the store's build spread over the epochs)
    # and one validation pass
    peak_mb: float  # predicted peak resident memory while training, summed over the processes
    nproc: int = 1  # data-parallel processes
    batch_size: int = 0  # seeds per (global) batch; 0: the run's
    cache_mb: float = 0.0  # offline: the hot tier's size
    inference: str = "sampled"  # evaluation: sampled or layerwise
    eval_s: float = 0.0  # of ``epoch_s``, the validation pass

    @property
    def name(self) -> str:
        parts = [self.mode, f"workers={self.workers}", f"prefetch={self.prefetch}"]
        if self.cache_mb:
            parts.append(f"hot={self.cache_mb:.0f}MB")
        if self.batch_size:
            parts.append(f"batch={self.batch_size}")
        if self.inference != "sampled":
            parts.append(f"eval={self.inference}")
        if self.nproc > 1:
            parts.append(f"nproc={self.nproc}")
        return " ".join(parts)

    def to_dict(self) -> dict:
        return {**asdict(self), "epoch_s": round(self.epoch_s, 4), "peak_mb": round(self.peak_mb, 1),
                "eval_s": round(self.eval_s, 4)}  # cache_mb exact: it keys the store


def dominates(a: Strategy, b: Strategy) -> bool:
    return a.epoch_s <= b.epoch_s and a.peak_mb <= b.peak_mb and (a.epoch_s < b.epoch_s or a.peak_mb < b.peak_mb)


def pareto(strategies: list[Strategy]) -> list[Strategy]:
    """The strategies no other is at least as fast and as small as (and better in one), fastest first;
    of exact ties, the first listed."""
    front = [s for s in strategies if not any(dominates(o, s) for o in strategies)]
    unique = list({(s.epoch_s, s.peak_mb): s for s in reversed(front)}.values())
    return sorted(unique, key=lambda s: (s.epoch_s, s.peak_mb))


def pick(strategies: list[Strategy], objective: str = "time", memory_limit_gb: float | None = None) -> Strategy:
    """The fastest (``time``) or the smallest (``memory``) frontier strategy under ``memory_limit_gb``;
    a limit none meets is a one-line error naming the smallest strategy and its memory."""
    if not strategies:
        raise SettingError("engine=auto: no strategy to choose from for this run's settings")
    front = pareto(strategies)
    fits = [s for s in front if memory_limit_gb is None or s.peak_mb <= 1024 * memory_limit_gb]
    if not fits:
        least = min(front, key=lambda s: s.peak_mb)
        raise SettingError(f"engine.memory_limit_gb={memory_limit_gb:g}: no strategy fits; the one with least "
                           f"memory, {least.name}, is predicted to peak at {least.peak_mb / 1024:.2f} GB")
    if objective == "memory":
        return min(fits, key=lambda s: (s.peak_mb, s.epoch_s))
    return min(fits, key=lambda s: (s.epoch_s, s.peak_mb))
