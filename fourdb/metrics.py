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


def source_metric(name: str):
    """Register a recommendation metric by its value per source, ``per_source(hits, count, k)`` (``_hits`` of the
    sources with a true destination; k: the predictions' width): the metric is its mean over those sources, as
    RelBench leaves out sources with no true destination. ``bootstrap`` resamples the per-source values."""
    def wrap(per_source):
        def fn(y, s):
            hits, count = _hits(y, s)
            values = per_source(hits[count > 0], count[count > 0], s.shape[1])
            return float(values.mean()) if len(values) else float("nan")

        fn.per_source = per_source
        METRICS.register(name, Metric(name, fn, True, ("recommendation",)))
        return per_source

    return wrap


@source_metric("map")
def average_precision_at_k(hits, count, k):
    """MAP@k, as RelBench defines it: a source's average precision divided by min(true destinations, k)."""
    precision = np.cumsum(hits, 1) / (np.arange(k) + 1)
    return (precision * hits).sum(1) / count.clip(max=k)


@source_metric("precision")
def precision_at_k(hits, count, k):
    return hits.mean(1)


@source_metric("recall")
def recall_at_k(hits, count, k):
    return hits.sum(1) / count


@source_metric("mrr")
def reciprocal_rank(hits, count, k):
    """1 / the rank of the first true destination among the k (0 if none)."""
    return 1.0 / np.where(hits.any(1), hits.argmax(1) + 1, np.inf)


@source_metric("hit_rate")
def hit(hits, count, k):
    """Whether a true destination is among the predicted ones (at the prediction's width: ``eval_k``, or every
    shipped candidate, where it is 1 for every source with one: 4DBInfer's HR)."""
    return hits.any(1).astype(float)


@source_metric("ndcg")
def ndcg(hits, count, k):
    """Binary-relevance NDCG over the predicted list: DCG (1 / log2(rank + 1) per true destination) over the
    DCG of the ideal list (min(true destinations, width) hits first)."""
    gain = 1.0 / np.log2(np.arange(k) + 2)
    ideal = np.cumsum(gain)[np.minimum(count, k) - 1]
    return (hits * gain).sum(1) / ideal


def metrics_for(task_type: str) -> list[str]:
    return [name for name, m in METRICS.items() if task_type in m.task_types]


def higher_is_better(name: str) -> bool:
    return METRICS.get(name).higher_is_better


def compute(name: str, y_true, y_score, y_train=None) -> float:
    return float(METRICS.get(name)(y_true, y_score, y_train))  # plain, as records and checkpoints hold it


def evaluate(names: list[str], y_true, y_score, y_train=None) -> dict[str, float]:
    return {n: compute(n, y_true, y_score, y_train) for n in names}


# ------------------------------------------------------------------------------- bootstrap of the test set
# A metric's spread over test rows resampled with replacement. The resamples depend only on the test set (its
# task's spec hash and row count make the seed), so every model scored on one test set is scored on the same
# resamples: a paired bootstrap, in which two models' replicates differ by the models, not by the draw.

BOOTSTRAP_REPLICATES = 200
MAX_BOOTSTRAP_REPLICATES = 1000  # what a record may carry


def bootstrap_seed(task_spec_hash: str, test_rows: int) -> int:
    """The resampling seed of one test set: its task's spec hash and its number of rows."""
    import hashlib

    return int(hashlib.sha256(f"{task_spec_hash}:{int(test_rows)}".encode()).hexdigest()[:15], 16)


def resample_indices(n: int, seed: int, replicates: int = BOOTSTRAP_REPLICATES):
    """Per replicate, the n test rows drawn with replacement (row positions), from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    for _ in range(replicates):
        yield rng.integers(0, n, n)


def bootstrap(name: str, y_true, y_score, seed: int, y_train=None,
              replicates: int = BOOTSTRAP_REPLICATES) -> list[float | None]:
    """Metric ``name`` on each of ``replicates`` resamples of the test rows (``resample_indices``); None where
    it is undefined on a resample (AUROC of a resample holding one class). The metrics fourdb knows are computed
    from what each row contributes, found once; any other is computed on the resampled rows."""
    y_true, y_score = _array(y_true), _array(y_score)
    at = _resampled(name, y_true, y_score, y_train)
    out = []
    for idx in resample_indices(len(y_true), seed, replicates):
        if at is not None:
            value = at(idx)
        else:
            try:
                value = compute(name, y_true[idx], y_score[idx], y_train)
            except ValueError:  # the metric cannot be computed on this resample
                value = float("nan")
        out.append(float(value) if np.isfinite(value) else None)
    return out


def bootstrap_record(name: str, y_true, y_score, task_spec_hash: str, y_train=None) -> dict:
    """A run record's ``test_bootstrap``: the board's metric on the test set's resamples, and their seed."""
    seed = bootstrap_seed(task_spec_hash, len(y_true))
    return {"metric": name, "seed": seed, "replicates": bootstrap(name, y_true, y_score, seed, y_train)}


def _mean_of(values, keep: np.ndarray | None = None) -> Callable:
    """Resampled rows -> the mean of per-row ``values`` over those of the rows ``keep`` (all: None)."""
    values = np.asarray(values, dtype=float)
    if keep is None:
        return lambda idx: float(values[idx].mean()) if len(idx) else float("nan")

    def at(idx):
        kept = keep[idx]
        return float(values[idx][kept].mean()) if kept.any() else float("nan")

    return at


def _resampled(name: str, y, s, y_train) -> Callable | None:
    """Resampled rows (positions) -> metric ``name`` on them, from per-row parts found once; None: no such form."""
    m = METRICS.get(name)
    if hasattr(m.fn, "per_source"):
        hits, count = _hits(y, s)
        keep = count > 0
        values = np.zeros(len(y))
        values[keep] = m.fn.per_source(hits[keep], count[keep], s.shape[1])
        return _mean_of(values, keep)
    if name == "accuracy":
        return _mean_of(y == ((s >= 0.5).astype(int) if s.ndim == 1 else s.argmax(1)))
    if name in ("mae", "nmae"):
        scale = float(np.std(np.asarray(y_train, dtype=float), ddof=1)) if name == "nmae" else 1.0
        return _mean_of(np.abs(y - s) / scale)
    if name == "rmse":
        mean = _mean_of((y - s) ** 2)
        return lambda idx: float(np.sqrt(mean(idx)))
    if name == "r2":
        return _resampled_r2(np.asarray(y, dtype=float), np.asarray(s, dtype=float))
    if name in ("auroc", "roc_auc", "average_precision"):
        return _resampled_ranking(name, y, s)
    if name == "macro_f1":
        return _resampled_macro_f1(y, s.argmax(1))
    return None


def _resampled_r2(y, s) -> Callable:
    def at(idx):
        yy = y[idx]
        residual = ((yy - s[idx]) ** 2).sum()
        spread = ((yy - yy.mean()) ** 2).sum()
        if spread == 0:  # constant labels: as scikit-learn scores them
            return 1.0 if residual == 0 else 0.0
        return float(1 - residual / spread)

    return at


def _resampled_ranking(name: str, y, s) -> Callable:
    """AUROC (the Mann-Whitney statistic, ties counted half) or average precision (precision at each distinct
    score, weighed by the positives it adds) from each row's group of equal scores, sorted once."""
    classes = np.unique(y)
    if name in ("auroc", "roc_auc") and len(classes) != 2:
        return lambda idx: float("nan")  # one class in the whole test set: undefined on every resample
    positive = (y == classes[-1]) if len(classes) == 2 else (y == 1)
    descending = name == "average_precision"
    distinct, group = np.unique(-s if descending else s, return_inverse=True)  # group: rank of the row's score
    groups = len(distinct)

    def at(idx):
        g = group[idx]
        drawn = np.bincount(g, minlength=groups).astype(float)
        pos = np.bincount(g, weights=positive[idx], minlength=groups)
        neg = drawn - pos
        p, n = pos.sum(), neg.sum()
        if p == 0 or (n == 0 and not descending):
            return float("nan")
        if descending:
            seen = np.cumsum(drawn)
            precision = np.divide(np.cumsum(pos), seen, out=np.zeros_like(seen), where=seen > 0)
            return float(pos @ precision / p)
        return float(pos @ (np.cumsum(neg) - 0.5 * neg) / (p * n))

    return at


def _resampled_macro_f1(y, predicted) -> Callable:
    """Macro F1 over the classes a resample holds (true or predicted), as scikit-learn counts them."""
    labels, codes = np.unique(np.concatenate([y, predicted]), return_inverse=True)
    true, pred = codes[:len(y)], codes[len(y):]
    k = len(labels)

    def at(idx):
        t, p = true[idx], pred[idx]
        tp = np.bincount(t[t == p], minlength=k)
        support, called = np.bincount(t, minlength=k), np.bincount(p, minlength=k)
        present = support + called > 0
        f1 = 2 * tp[present] / (support[present] + called[present])
        return float(f1.mean()) if present.any() else float("nan")

    return at
