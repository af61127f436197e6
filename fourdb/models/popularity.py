"""Recommendation baselines read off the link history as of each cutoff (no training):
``popularity`` recommends the destinations most linked in the last window (ever, to break ties);
``repeat`` recommends a source's own past destinations, most frequent first, then the popular ones.
They are a recommendation task's floor (``HISTORY``): every recommendation run scores them on its own seeds
and records them beside its model, as classification and regression runs do the trivial baselines."""
from __future__ import annotations

import numpy as np

from fourdb.tasks.interactions import RecData, repeat_score
from fourdb.models.base import Model, register_model
from fourdb.tasks.types import TaskType


@register_model("popularity")
class Popularity(Model):
    input_kind = "interactions"
    task_types = (TaskType.RECOMMENDATION,)

    def score(self, data: RecData):
        pop = data.interactions.popularity_score
        return lambda sources, cutoff: np.broadcast_to(pop(cutoff), (len(sources), data.interactions.n_dst))

    def fit(self, data: RecData, trainer_cfg=None) -> "Popularity":
        return self

    def predict(self, data: RecData, split: str) -> np.ndarray:
        return data.interactions.rank(data.seeds[split], data.cutoffs[split], data.width(split), self.score(data),
                                      data.allowed.get(split))


@register_model("repeat")
class Repeat(Popularity):
    def score(self, data: RecData):
        return repeat_score(data.interactions)


HISTORY = ("popularity", "repeat")  # the history baselines: the floor of a recommendation board
