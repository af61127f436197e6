"""Metrics by name; ``HIGHER_IS_BETTER`` tells early stopping and leaderboards which way to rank."""
from __future__ import annotations

import numpy as np
from sklearn import metrics as skm

HIGHER_IS_BETTER = {"auroc": True, "accuracy": True, "macro_f1": True, "average_precision": True,
                    "mae": False, "rmse": False, "r2": True}


def compute(name: str, y_true: np.ndarray, y_score: np.ndarray) -> float:
    """``y_score``: P(class 1) for binary, class probabilities [n, C] for multiclass, values for regression."""
    y_true = np.asarray(y_true)
    if name == "auroc":
        return float(skm.roc_auc_score(y_true, y_score)) if len(np.unique(y_true)) > 1 else float("nan")
    if name == "average_precision":
        return float(skm.average_precision_score(y_true, y_score))
    if name == "accuracy":
        pred = (y_score >= 0.5).astype(int) if y_score.ndim == 1 else y_score.argmax(1)
        return float(skm.accuracy_score(y_true, pred))
    if name == "macro_f1":
        return float(skm.f1_score(y_true, y_score.argmax(1), average="macro"))
    if name == "mae":
        return float(skm.mean_absolute_error(y_true, y_score))
    if name == "rmse":
        return float(np.sqrt(skm.mean_squared_error(y_true, y_score)))
    if name == "r2":
        return float(skm.r2_score(y_true, y_score))
    raise ValueError(f"unknown metric '{name}' (known: {', '.join(HIGHER_IS_BETTER)})")


def evaluate(names: list[str], y_true, y_score) -> dict[str, float]:
    return {n: compute(n, y_true, y_score) for n in names}
