"""What a task predicts, as one object per task type: its labels, loss, outputs, metrics and prediction files.

Code outside ``fourdb.tasks`` asks a task's type (``task.spec.task_type.loss(...)``, ``.is_ranking``) instead of
comparing its name. A ``TaskType`` is also its name (a ``str``): records, task files and configs hold the text.
"""
from __future__ import annotations

from enum import Enum

import numpy as np
import pandas as pd

from fourdb.errors import TaskError
from fourdb.untrusted import first_line, safe_text


class TaskType(str, Enum):
    BINARY = "binary"
    MULTICLASS = "multiclass"
    REGRESSION = "regression"
    RECOMMENDATION = "recommendation"

    __str__ = str.__str__
    __format__ = str.__format__

    # ---- what it is ---------------------------------------------------------------------------------
    @property
    def family(self) -> str:
        """The field's three families, one board each: classification, regression, recommendation."""
        return "classification" if self.is_classification else self.value

    @property
    def is_classification(self) -> bool:
        return self in (TaskType.BINARY, TaskType.MULTICLASS)

    @property
    def is_regression(self) -> bool:
        return self is TaskType.REGRESSION

    @property
    def is_ranking(self) -> bool:
        """A source ranks destinations (a list of rows per seed), rather than one value per seed."""
        return self is TaskType.RECOMMENDATION

    @property
    def per_class(self) -> bool:
        """Outputs one probability per class (a column each), not one number."""
        return self is TaskType.MULTICLASS

    @property
    def default_metrics(self) -> list[str]:
        return list(_DEFAULT_METRICS[self])

    def metrics(self) -> list[str]:
        """Every metric a task of this type can be scored by."""
        from fourdb.metrics import metrics_for

        return metrics_for(self.value)

    @property
    def relbench_name(self) -> str:
        """RelBench 3's name of the type."""
        return _RELBENCH[self]

    @property
    def relbench_evaluates(self) -> bool:
        """Whether RelBench 3 has an evaluator for tasks of this type (it has none for multiclass)."""
        return self is not TaskType.MULTICLASS

    @classmethod
    def from_relbench(cls, name: str) -> "TaskType | None":
        """The type of a RelBench 3 task_type (None: fourdb has none, e.g. multilabel classification)."""
        return next((t for t, n in _RELBENCH.items() if n == name), None)

    # ---- labels -------------------------------------------------------------------------------------
    def coerce(self, labels: pd.Series, task: str) -> tuple[pd.Series, int]:
        """Labels as models read them (0/1, class numbers, floats; a ranking task's lists as they are) and the
        number of classes (2 where there are no classes). A label that is not one value of the type's kind (a
        list, a struct, text for a regression) is refused in one line naming the task."""
        if self is TaskType.RECOMMENDATION:
            return labels, 2
        try:
            return self._coerce(labels, task)
        except (TypeError, ValueError, OverflowError) as e:
            raise TaskError(f"task '{task}': {self} labels must be {_LABEL_KINDS[self]}; {label_problem(labels, e)}") \
                from None

    def _coerce(self, labels: pd.Series, task: str) -> tuple[pd.Series, int]:
        if self is TaskType.BINARY:
            values = set(pd.unique(labels.to_numpy()))
            if not values <= {0, 1}:
                try:
                    values = sorted(values)
                except TypeError:  # values of kinds that do not compare (a number and a text)
                    values = list(values)
                shown = ", ".join(safe_text(repr(v), 40) for v in values[:5])
                raise TaskError(f"task '{task}': binary labels must be 0/1, got [{shown}]")
            return labels.astype("int64"), 2
        if self is TaskType.MULTICLASS:
            codes, classes = pd.factorize(labels, sort=True)
            return pd.Series(codes, index=labels.index), len(classes)
        return labels.astype("float64"), 2

    def out_dim(self, num_classes: int) -> int:
        """A network's outputs per seed."""
        return num_classes if self is TaskType.MULTICLASS else 1

    # ---- training -----------------------------------------------------------------------------------
    def label_scale(self, y: np.ndarray) -> tuple[float, float]:
        """(mean, std) a network's regression outputs are scaled by; (0, 1) for every other type."""
        if self is not TaskType.REGRESSION:
            return 0.0, 1.0
        y = np.asarray(y, float)
        return float(y.mean()), float(y.std() or 1.0)

    def loss(self, out, y, scale: tuple[float, float] = (0.0, 1.0), objective: str = "mse"):
        """The training loss of a batch's outputs against its labels (``objective``: regression's, ``mse`` or
        ``l1``, from ``regression_objective``)."""
        import torch
        import torch.nn.functional as F

        if self is TaskType.RECOMMENDATION:
            # listwise: a row's true candidates against all of its candidates (softmax). Independent
            # per-candidate BCE must also learn the base rate through the dot product, and got stuck there
            true = y.bool()
            keep = true.any(1)
            if not keep.any():  # no true candidate in the batch (an identity-aware tree reached none): no signal
                return (out[torch.isfinite(out)] * 0).sum()
            out, true = out[keep], true[keep]
            return (torch.logsumexp(out, 1) - torch.logsumexp(out.masked_fill(~true, float("-inf")), 1)).mean()
        if self is TaskType.BINARY:
            return F.binary_cross_entropy_with_logits(out.view(-1), y.float())
        if self is TaskType.MULTICLASS:
            return F.cross_entropy(out, y.long())
        mean, std = scale
        fn = F.l1_loss if objective == "l1" else F.mse_loss
        return fn(out.view(-1), (y.float() - mean) / std)

    def scores(self, out, scale: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
        """A network's outputs as predictions: P(1), class probabilities, values, or ranked destination rows."""
        import torch

        if self is TaskType.RECOMMENDATION:  # the source ranked already: destination rows, best first
            return out.cpu().numpy().astype(np.int64)
        if self is TaskType.BINARY:
            return torch.sigmoid(out.view(-1)).cpu().numpy()
        if self is TaskType.MULTICLASS:
            return torch.softmax(out, -1).cpu().numpy()
        mean, std = scale
        return (out.view(-1) * std + mean).cpu().numpy()

    # ---- prediction files ---------------------------------------------------------------------------
    def prediction_columns(self, num_classes: int) -> list[str]:
        """The columns of a prediction file's template (an external submission)."""
        return [f"class_{i}" for i in range(num_classes)] if self is TaskType.MULTICLASS else ["prediction"]

    def prediction_cells(self, scores, destination_keys: np.ndarray | None = None) -> list:
        """A run's test predictions as its predictions file holds them, one cell a seed: P(label=1), the value,
        the class probabilities, or the destination keys in the order predicted."""
        if self is TaskType.RECOMMENDATION:
            rows = [np.asarray(r, np.int64) for r in scores]
            return [destination_keys[r[r >= 0]].tolist() for r in rows]  # -1: fewer destinations than k existed
        if self is TaskType.MULTICLASS:
            return [np.asarray(row, float).tolist() for row in scores]
        return scores


_LABEL_KINDS = {TaskType.BINARY: "0 or 1", TaskType.MULTICLASS: "one class each (a number or a text)",
                TaskType.REGRESSION: "numbers"}


def label_problem(labels: pd.Series, error: BaseException) -> str:
    """What is wrong with a task's labels, for its one-line error: the first that is a list or a struct, else
    their type and the library's own words."""
    nested = labels.map(lambda v: isinstance(v, (list, tuple, dict, set, np.ndarray))) if labels.dtype == object \
        else pd.Series(False, index=labels.index)
    if nested.any():
        first = labels[nested].iloc[0]
        what = "a struct" if isinstance(first, dict) else "a list"
        return f"a label is {what} ({safe_text(repr(first), 60)}); the SQL must yield one value per seed"
    return f"got {labels.dtype} labels ({first_line(error)})"


_DEFAULT_METRICS = {TaskType.BINARY: ("auroc", "accuracy"), TaskType.MULTICLASS: ("accuracy", "macro_f1"),
                    TaskType.REGRESSION: ("mae", "rmse"), TaskType.RECOMMENDATION: ("map", "precision", "recall", "mrr")}
_RELBENCH = {TaskType.BINARY: "binary_classification", TaskType.MULTICLASS: "multiclass_classification",
             TaskType.REGRESSION: "regression", TaskType.RECOMMENDATION: "recommendation"}
TASK_TYPES = tuple(t.value for t in TaskType)


def task_type(name, where: str) -> TaskType:
    """The type a task file names, or a one-line error listing the types."""
    try:
        return TaskType(name)
    except ValueError:
        raise TaskError(f"{where}: task_type must be one of {TASK_TYPES}, got '{name}'") from None


OBJECTIVES = ("mse", "l1", "metric")  # conf/objective/
L1_METRICS = ("mae", "nmae")  # scored by absolute error: the median minimizes them


def regression_objective(objective: str | None, metric: str) -> str:
    """The loss a regression model trains on: ``mse`` (unset), ``l1``, or ``metric``: the one ``metric`` scores."""
    if objective in (None, "mse"):
        return "mse"
    if objective == "metric":
        return "l1" if metric in L1_METRICS else "mse"
    return "l1"
