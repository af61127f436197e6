"""A recommendation task through any tabular model: rank each seed's candidates by a binary model of
(seed, candidate) pairs (``fourdb.features.pairs``), and recommend the top ``k``. ``create_model`` wraps a
tabular model (gbdt, lightgbm, mlp, deepfm, fttransformer) in it when the task is a recommendation task."""
from __future__ import annotations

import inspect

import numpy as np

from fourdb.contracts import Report
from fourdb.tasks.interactions import RecData
from fourdb.models.base import MODELS, Model, TaskInfo, register_model
from fourdb.tasks.types import TaskType


@register_model("pair_ranker")
class PairRanker(Model):
    input_kind = "pairs"
    task_types = (TaskType.RECOMMENDATION,)

    def __init__(self, info: TaskInfo, seed: int = 0, *, inner: str, **params):
        super().__init__(info, seed, **params)
        self.inner = MODELS.get(inner)(TaskInfo(TaskType.BINARY, 2, "auroc"), seed=seed, **params)

    @classmethod
    def wraps(cls, params: dict) -> str | None:
        return params.get("inner")

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        """``inner`` and the parameters of the tabular model it names, which ``**params`` go to."""
        inner = MODELS.get(params["inner"]).parameters(params) if "inner" in params else {}
        return {**super().parameters(params), **inner}

    def fit(self, data: RecData, trainer_cfg=None) -> "PairRanker":
        self.inner.fit(data.pairs, trainer_cfg)
        return self

    def predict(self, data: RecData, split: str) -> np.ndarray:
        cand = data.candidates[split]
        scores = np.full(cand.shape, -np.inf)
        scores[cand >= 0] = np.asarray(self.inner.predict(data.pairs, split), dtype=float).reshape(-1)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :data.width(split)]
        out = np.take_along_axis(cand, order, 1)
        out[~np.isfinite(np.take_along_axis(scores, order, 1))] = -1
        return out

    def report(self) -> Report:
        return self.inner.report()
