"""Gradient-boosted trees (scikit-learn HistGradientBoosting) on the seed row's own columns."""
from __future__ import annotations

from typing import Callable

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from fourdb.models.base import Model, TaskInfo, register_model
from fourdb.tasks.types import regression_objective

_BLOCK_ROWS = 1 << 16  # rows predicted at once


def tree_matrix(feats, rows=slice(None)) -> np.ndarray:
    """Numeric features, then category codes, as the one matrix a tree library reads, filled in place. It is
    float32 where the codes fit one exactly: a library makes its own float64 copy in any case (scikit-learn) or
    reads float32 as it is (LightGBM), so a float64 matrix of a wide split (a recommendation task's pairs of DFS
    rows: gigabytes) would be a second one, of the same values."""
    numeric, categorical = feats.numeric[rows], feats.categorical[rows]
    exact = numeric.dtype == np.float32 and categorical.max(initial=0) < 2 ** 24 and categorical.min(initial=0) >= 0
    x = np.empty((len(numeric), numeric.shape[1] + categorical.shape[1]), np.float32 if exact else np.float64)
    x[:, :numeric.shape[1]], x[:, numeric.shape[1]:] = numeric, categorical
    return x


def predict_in_blocks(feats, predict: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``predict`` over ``tree_matrix`` of ``feats`` a block of rows at a time: the matrix (and any copy the
    library makes of it) of a wide split (a recommendation task's pairs) stays small."""
    starts = range(0, len(feats.numeric), _BLOCK_ROWS) or range(1)
    return np.concatenate([predict(tree_matrix(feats, slice(lo, lo + _BLOCK_ROWS))) for lo in starts])


@register_model("gbdt")
class GBDT(Model):
    input_kind = "table"
    ranking = ("pair_ranker", "inner")  # a recommendation task: it scores (source, candidate) pairs

    def __init__(self, info: TaskInfo, seed: int = 0, *, max_iter: int, learning_rate: float, max_leaf_nodes: int,
                 patience: int, max_features: float):
        """HistGradientBoosting's settings (their defaults: conf/model/gbdt.yaml); ``patience`` is its
        ``n_iter_no_change``: rounds without a better validation loss before boosting stops."""
        super().__init__(info, seed, max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
                         patience=patience, max_features=max_features)

    def fit(self, data, trainer_cfg=None):
        p = self.params
        x_train, x_val = tree_matrix(data.features["train"]), tree_matrix(data.features["val"])
        n_num = data.features["train"].numeric.shape[1]
        cards = data.features["train"].cardinalities
        # high-cardinality codes exceed the 255-bin categorical limit; treat those as ordinal
        categorical = [False] * n_num + [c <= 255 for c in cards]
        common = dict(max_iter=p["max_iter"], learning_rate=p["learning_rate"], max_leaf_nodes=p["max_leaf_nodes"],
                      max_features=p["max_features"], early_stopping=True, n_iter_no_change=p["patience"],
                      random_state=self.seed,
                      categorical_features=np.array(categorical, dtype=bool) if categorical else None)
        if self.info.task_type.is_regression:
            objective = regression_objective(trainer_cfg.objective if trainer_cfg is not None else None, self.info.metric)
            common["loss"] = "absolute_error" if objective == "l1" else "squared_error"
        cls = HistGradientBoostingRegressor if self.info.task_type.is_regression else HistGradientBoostingClassifier
        self.model = cls(**common).fit(x_train, data.labels["train"], X_val=x_val, y_val=data.labels["val"])
        return self

    def predict(self, data, split):
        return predict_in_blocks(data.features[split], self._predict)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        if self.info.task_type.is_regression:
            return self.model.predict(x)
        proba = self.model.predict_proba(x)
        return proba if self.info.task_type.per_class else proba[:, 1]
