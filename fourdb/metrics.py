"""Metrics by name, one registry: each a ``Metric`` carrying its function, its direction and the task
types it scores. Tasks check their metric names against it; the trainer's early stopping, the run
record and the leaderboards rank by the same objects.

``y_score`` is P(class 1) for binary, class probabilities [n, C] for multiclass, values for regression,
and for recommendation the [n, k] destination ids predicted per source, best first (``y_true``: the
array of true destination ids of each source). RelBench's metrics are here under RelBench's names and
definitions: ``roc_auc``, ``nmae`` (MAE over the training targets' std, ddof=1) and ``map`` (MAP@k).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from sklearn import metrics as skm

from fourdb.registry import Registry


@dataclass(frozen=True)
class Metric:
    name: str
    fn: Callable  # (y_true, y_score) -> value, or (y_true, y_score, y_train) with ``needs_train``
    higher_is_better: bool
    task_types: tuple[str, ...]
    needs_train: bool = False  # scaled by the training labels (NMAE)

    def __call__(self, y_true, y_score, y_train=None) -> float:
        y_true, y_score = _array(y_true), _array(y_score)
        if self.needs_train:
            if y_train is None:
                raise ValueError(f"metric '{self.name}' needs the training labels")
            return float(self.fn(y_true, y_score, np.asarray(y_train, dtype=float)))
        return float(self.fn(y_true, y_score))


def _array(values) -> np.ndarray:
    """As an array; a list of per-source destination arrays stays a 1-D object array."""
    if isinstance(values, np.ndarray):
        return values
    values = list(values)
    if values and isinstance(values[0], (list, tuple, np.ndarray)) and len({len(v) for v in values}) > 1:
        out = np.empty(len(values), dtype=object)
        out[:] = [np.asarray(v) for v in values]
        return out
    return np.asarray(values)


METRICS: Registry[Metric] = Registry("metric")


def metric(name: str, task_types: tuple[str, ...], higher_is_better: bool = True, needs_train: bool = False):
    """Register ``fn(y_true, y_score)`` (``fn(y_true, y_score, y_train)`` when ``needs_train``)."""
    def wrap(fn):
        METRICS.register(name, Metric(name, fn, higher_is_better, task_types, needs_train))
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


@metric("roc_auc", ("binary",))
def roc_auc(y, s):
    """RelBench's name for AUROC."""
    return skm.roc_auc_score(y, s) if len(np.unique(y)) > 1 else float("nan")


@metric("nmae", ("regression",), higher_is_better=False, needs_train=True)
def nmae(y, s, y_train):
    """RelBench's NMAE: MAE over the standard deviation (ddof=1) of the training split's targets."""
    return skm.mean_absolute_error(y, s) / float(np.std(y_train, ddof=1))


def _hits(y, s) -> tuple[np.ndarray, np.ndarray]:
    """Per source: which of its k predicted destinations are true ([n, k] bool), and how many are true."""
    hits = np.stack([np.isin(pred, true) for true, pred in zip(y, s)]) if len(y) else np.zeros((0, s.shape[1]), bool)
    return hits, np.array([len(t) for t in y], dtype=np.int64)


@metric("map", ("recommendation",))
def mean_average_precision(y, s):
    """MAP@k (k: the predictions' width), as RelBench defines it: sources with no true destination are
    left out; a source's average precision is divided by min(true destinations, k)."""
    hits, count = _hits(y, s)
    hits, count = hits[count > 0], count[count > 0]
    k = s.shape[1]
    precision = np.cumsum(hits, 1) / (np.arange(k) + 1)
    return float(((precision * hits).sum(1) / count.clip(max=k)).mean()) if len(hits) else float("nan")


@metric("precision", ("recommendation",))
def precision_at_k(y, s):
    hits, count = _hits(y, s)
    return float(hits[count > 0].mean(1).mean()) if (count > 0).any() else float("nan")


@metric("recall", ("recommendation",))
def recall_at_k(y, s):
    hits, count = _hits(y, s)
    return float((hits[count > 0].sum(1) / count[count > 0]).mean()) if (count > 0).any() else float("nan")


@metric("mrr", ("recommendation",))
def mean_reciprocal_rank(y, s):
    """The mean over sources of 1 / the rank of the first true destination among the k (0 if none)."""
    hits, count = _hits(y, s)
    hits = hits[count > 0]
    first = np.where(hits.any(1), hits.argmax(1) + 1, np.inf)
    return float((1.0 / first).mean()) if len(hits) else float("nan")


@metric("hit_rate", ("recommendation",))
def hit_rate(y, s):
    """The share of sources with a true destination among the predicted ones (at the prediction's width:
    ``eval_k``, or every shipped candidate, where it is 1 for every source with one: 4DBInfer's HR)."""
    hits, count = _hits(y, s)
    return float(hits[count > 0].any(1).mean()) if (count > 0).any() else float("nan")


@metric("ndcg", ("recommendation",))
def ndcg(y, s):
    """Binary-relevance NDCG over the predicted list: DCG (1 / log2(rank + 1) per true destination) over
    the DCG of the ideal list (min(true destinations, width) hits first)."""
    hits, count = _hits(y, s)
    hits, count = hits[count > 0], count[count > 0]
    if not len(hits):
        return float("nan")
    gain = 1.0 / np.log2(np.arange(hits.shape[1]) + 2)
    ideal = np.cumsum(gain)[np.minimum(count, hits.shape[1]) - 1]
    return float(((hits * gain).sum(1) / ideal).mean())


def metrics_for(task_type: str) -> list[str]:
    return [name for name, m in METRICS.items() if task_type in m.task_types]


def higher_is_better(name: str) -> bool:
    return METRICS.get(name).higher_is_better


def compute(name: str, y_true, y_score, y_train=None) -> float:
    return float(METRICS.get(name)(y_true, y_score, y_train))  # plain, as records and checkpoints hold it


def evaluate(names: list[str], y_true, y_score, y_train=None) -> dict[str, float]:
    return {n: compute(n, y_true, y_score, y_train) for n in names}
