"""Which differences on a board are real: a 95% interval of each row's test mean, ties with the board's leader,
and an interval of each method's average rank.

A row's interval is a two-level bootstrap. Each seed's record carries its test metric on the test set's
resamples (``test_bootstrap``: the same resamples for every model on that test set, ``fourdb.metrics``); replicate
b of the row draws the row's seeds with replacement and averages each drawn seed's replicate b, so it varies
with the seeds and the test rows alike. The interval is the 2.5th to 97.5th percentile of those means. A row with
a seed that carries no replicates (the committed boards' records, a record whose replicates fourdb did not
recompute) resamples its seeds only (``SEEDS_ONLY``); a row of one seed without replicates has no interval.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from fourdb.metrics import BOOTSTRAP_REPLICATES, higher_is_better

LEVEL = 95  # percent
DRAW_SEED = 0  # the draws of seeds: fixed, so a board renders the same every time
ROWS_AND_SEEDS, SEEDS_ONLY = "seeds and test rows", "seeds only"
SEEDS_ONLY_MARK = "†"
LEADER, TIED = "leader", "tied"


@dataclass
class Interval:
    """A row's test mean resampled: the draws (one per replicate, NaN where undefined), their 95% interval and
    how they were drawn (``ROWS_AND_SEEDS`` or ``SEEDS_ONLY``)."""

    draws: np.ndarray
    low: float
    high: float
    kind: str


def _replicates(bootstraps: list, metric: str) -> np.ndarray | None:
    """The seeds' replicates as a [seeds, B] matrix (NaN: undefined), where every seed carries them for
    ``metric`` on the same resamples (one seed, one count); else None."""
    if not bootstraps or any(not isinstance(b, dict) or b.get("metric") != metric for b in bootstraps):
        return None
    if len({b.get("seed") for b in bootstraps}) != 1 or len({len(b.get("replicates") or []) for b in bootstraps}) != 1:
        return None
    matrix = np.array([[np.nan if v is None else v for v in b["replicates"]] for b in bootstraps], dtype=float)
    return matrix if matrix.shape[1] else None


def _nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():  # a replicate undefined on every drawn seed stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def row_interval(values: list, bootstraps: list, metric: str) -> Interval | None:
    """The 95% interval of a row's test mean from its seeds' test metrics ``values`` and their ``bootstraps``
    (each a record's ``test_bootstrap``, None where it has none): over seeds and test rows where every seed has
    replicates, else over seeds only; None for one seed without replicates (or nothing defined)."""
    rng = np.random.default_rng(DRAW_SEED)
    matrix = _replicates(bootstraps, metric)
    if matrix is not None:
        seeds, replicates = matrix.shape
        drawn = rng.integers(0, seeds, (replicates, seeds))
        draws, kind = _nanmean(matrix[drawn, np.arange(replicates)[:, None]], axis=1), ROWS_AND_SEEDS
    else:
        finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
        if len(finite) < 2:
            return None
        draws = finite[rng.integers(0, len(finite), (BOOTSTRAP_REPLICATES, len(finite)))].mean(axis=1)
        kind = SEEDS_ONLY
    if np.isnan(draws).all():
        return None
    low, high = np.nanpercentile(draws, [(100 - LEVEL) / 2, (100 + LEVEL) / 2])
    return Interval(draws, float(low), float(high), kind)


def interval_text(interval: Interval | None, digits: int = 4) -> str:
    """`` [low, high]`` after a row's mean ± std, ``†`` where it resamples seeds only; '' without one."""
    if interval is None:
        return ""
    mark = SEEDS_ONLY_MARK if interval.kind == SEEDS_ONLY else ""
    return f" [{interval.low:.{digits}f}, {interval.high:.{digits}f}]{mark}"


def overlaps(a: Interval, b: Interval) -> bool:
    return a.low <= b.high and b.low <= a.high


def tie_cells(intervals: list[Interval | None], leader: int | None) -> list[str]:
    """Per row: ``LEADER`` (the row ranked first by validation), ``TIED`` where its test interval overlaps the
    leader's, '' where it does not, '-' where it cannot be told (the row or the leader has no interval, or no
    row is ranked)."""
    lead = intervals[leader] if leader is not None else None
    cells = []
    for i, interval in enumerate(intervals):
        if i == leader:
            cells.append(LEADER)
        elif lead is None or interval is None:
            cells.append("-")
        else:
            cells.append(TIED if overlaps(interval, lead) else "")
    return cells


def _ranks(draws: np.ndarray, higher: bool) -> np.ndarray:
    """Ranks down axis 0 of [methods, B] draws, 1 best, ties sharing the better rank (NaN: last)."""
    from scipy.stats import rankdata

    signed = np.where(np.isnan(draws), -np.inf if higher else np.inf, draws)
    return rankdata(-signed if higher else signed, method="min", axis=0)


def rank_intervals(tasks: list[tuple[str, dict[str, tuple[float, Interval | None]]]]) -> dict[str, tuple]:
    """Per method: (its average rank on test means, and the 95% interval of that average rank) over ``tasks``,
    each (metric, method -> (its chosen row's test mean, that row's interval)). Each replicate ranks, per task,
    each method by a draw of its row's test mean (its interval's draws; a row without an interval is its mean on
    every draw) and averages over the tasks."""
    if not tasks:
        return {}
    methods = sorted(tasks[0][1])
    width = min([len(iv.draws) for _, rows in tasks for _, iv in rows.values() if iv is not None]
                or [BOOTSTRAP_REPLICATES])
    point, drawn = [], []
    for metric, rows in tasks:
        higher = higher_is_better(metric)
        means = np.array([rows[m][0] for m in methods], dtype=float)
        draws = np.stack([rows[m][1].draws[:width] if rows[m][1] is not None else np.full(width, rows[m][0])
                          for m in methods])
        draws = np.where(np.isnan(draws), means[:, None], draws)  # a replicate undefined there: its mean
        point.append(_ranks(means[:, None], higher)[:, 0])
        drawn.append(_ranks(draws, higher))
    average, spread = np.mean(point, axis=0), np.mean(drawn, axis=0)
    low, high = np.percentile(spread, [(100 - LEVEL) / 2, (100 + LEVEL) / 2], axis=1)
    return {m: (float(average[i]), float(low[i]), float(high[i])) for i, m in enumerate(methods)}


def rank_interval_text(value: tuple | None) -> str:
    return "-" if value is None else f"{value[0]:.2f} [{value[1]:.2f}, {value[2]:.2f}]"
