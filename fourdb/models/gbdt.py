"""Gradient-boosted trees (scikit-learn HistGradientBoosting) on the seed row's own columns."""
from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from fourdb.models.base import Model, register_model


@register_model("gbdt")
class GBDT(Model):
    input_kind = "table"

    def _matrix(self, feats) -> np.ndarray:
        return np.concatenate([feats.numeric.astype(np.float64), feats.categorical.astype(np.float64)], 1)

    def fit(self, data, trainer_cfg=None):
        p = self.params
        x_train, x_val = self._matrix(data.features["train"]), self._matrix(data.features["val"])
        n_num = data.features["train"].numeric.shape[1]
        cards = data.features["train"].cardinalities
        # high-cardinality codes exceed the 255-bin categorical limit; treat those as ordinal
        categorical = [False] * n_num + [c <= 255 for c in cards]
        common = dict(max_iter=p.get("max_iter", 300), learning_rate=p.get("learning_rate", 0.1),
                      max_leaf_nodes=p.get("max_leaf_nodes", 31), max_features=p.get("max_features", 1.0),
                      early_stopping=True,
                      n_iter_no_change=p.get("patience", 20), random_state=self.seed,
                      categorical_features=np.array(categorical, dtype=bool) if categorical else None)
        cls = HistGradientBoostingRegressor if self.info.task_type == "regression" else HistGradientBoostingClassifier
        self.model = cls(**common).fit(x_train, data.labels["train"], X_val=x_val, y_val=data.labels["val"])
        return self

    def predict(self, data, split):
        x = self._matrix(data.features[split])
        if self.info.task_type == "regression":
            return self.model.predict(x)
        proba = self.model.predict_proba(x)
        return proba[:, 1] if self.info.task_type == "binary" else proba
