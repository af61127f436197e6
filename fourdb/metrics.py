"""Metrics by name, one registry: each a ``Metric`` carrying its function, its direction and the task
types it scores. Tasks check their metric names against it; the trainer's early stopping, the run
record and the leaderboards rank by the same objects."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn import metrics as skm

from fourdb.registry import Registry


@dataclass(frozen=True)
class Metric:
    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]  # (y_true, y_score) -> value
    higher_is_better: bool
    task_types: tuple[str, ...]

    def __call__(self, y_true, y_score) -> float:
        return float(self.fn(np.asarray(y_true), np.asarray(y_score)))


METRICS: Registry[Metric] = Registry("metric")


def metric(name: str, task_types: tuple[str, ...], higher_is_better: bool = True):
    """Register ``fn(y_true, y_score)``. ``y_score``: P(class 1) for binary, class probabilities [n, C]
    for multiclass, values for regression."""
    def wrap(fn):
        METRICS.register(name, Metric(name, fn, higher_is_better, task_types))
        return fn

    return wrap


@metric("auroc", ("binary",))
def auroc(y, s):
    return skm.roc_auc_score(y, s) if len(np.unique(y)) > 1 else float("nan")  # one class: undefined


@metric("average_precision", ("binary",))
def average_precision(y, s):
    return skm.average_precision_score(y, s)


@metric("accuracy", ("binary", "multiclass"))
def accuracy(y, s):
    return skm.accuracy_score(y, (s >= 0.5).astype(int) if s.ndim == 1 else s.argmax(1))


@metric("macro_f1", ("multiclass",))
def macro_f1(y, s):
    return skm.f1_score(y, s.argmax(1), average="macro")


@metric("mae", ("regression",), higher_is_better=False)
def mae(y, s):
    return skm.mean_absolute_error(y, s)


@metric("rmse", ("regression",), higher_is_better=False)
def rmse(y, s):
    return np.sqrt(skm.mean_squared_error(y, s))


@metric("r2", ("regression",))
def r2(y, s):
    return skm.r2_score(y, s)


def metrics_for(task_type: str) -> list[str]:
    return [name for name, m in METRICS.items() if task_type in m.task_types]


def higher_is_better(name: str) -> bool:
    return METRICS.get(name).higher_is_better


def compute(name: str, y_true, y_score) -> float:
    return METRICS.get(name)(y_true, y_score)


def evaluate(names: list[str], y_true, y_score) -> dict[str, float]:
    return {n: compute(n, y_true, y_score) for n in names}
