"""Trivial baselines, as RelBench reports them: the floor a trained model must clear (no training, no
features). Global ones predict one value for every seed from the run's training labels: ``zero``,
``mean``, ``median`` (regression) and ``prior`` (classification: the training class frequencies).
Entity ones predict from the seed's entity's own training labels known by its cutoff
(``fourdb.tasks.past_labels``): ``entity_mean`` (for classification, its past class frequencies) and
``entity_median``; an entity with no past label gets the global prediction. Every run computes them
beside its model and warns when the model does not beat the best (``fourdb.experiment.run``)."""
from __future__ import annotations

import numpy as np

from fourdb.tasks.past_labels import LabelData
from fourdb.models.base import Model, register_model
from fourdb.tasks.types import TaskType

CLASSIFICATION = (TaskType.BINARY, TaskType.MULTICLASS)


class Trivial(Model):
    input_kind = "labels"
    task_types = (TaskType.REGRESSION,)

    def fit(self, data: LabelData, trainer_cfg=None) -> "Trivial":
        self.fallback = self.overall(np.asarray(data.labels["train"]))
        return self

    def overall(self, labels: np.ndarray):
        """The one prediction for every seed (and for an entity with no past labels)."""
        if self.info.task_type.is_regression:
            return float(np.mean(labels)) if len(labels) else 0.0
        counts = np.bincount(labels.astype(np.int64), minlength=self.info.num_classes).astype(np.float64)
        return counts / max(counts.sum(), 1.0)

    def per_entity(self, past: np.ndarray):
        return self.fallback

    def predict(self, data: LabelData, split: str) -> np.ndarray:
        if type(self).per_entity is Trivial.per_entity:  # a global baseline: no entity's history to read
            out = np.array([self.fallback] * len(data.cutoffs[split]), dtype=np.float64)
        else:
            out = np.array([self.per_entity(p) if len(p) else self.fallback for p in data.past(split)], dtype=np.float64)
        out = out.reshape(len(data.cutoffs[split]), -1)
        if self.info.task_type.is_regression or not self.info.task_type.per_class:
            out = out[:, -1]  # a value, or P(class 1)
        return out


@register_model("zero")
class Zero(Trivial):
    def overall(self, labels):
        return 0.0


@register_model("mean")
class Mean(Trivial):
    pass


@register_model("median")
class Median(Trivial):
    def overall(self, labels):
        return float(np.median(labels)) if len(labels) else 0.0


@register_model("prior")
class Prior(Trivial):
    task_types = CLASSIFICATION


@register_model("entity_mean")
class EntityMean(Trivial):
    task_types = (TaskType.REGRESSION, *CLASSIFICATION)

    def per_entity(self, past):
        return self.overall(past)


@register_model("entity_median")
class EntityMedian(Median):
    def per_entity(self, past):
        return self.overall(past)


TRIVIAL = ("zero", "mean", "median", "prior", "entity_mean", "entity_median")
