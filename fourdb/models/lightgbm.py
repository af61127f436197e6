"""LightGBM, RelBench's tabular baseline, on the seed row's features: each category column is split by sets of
its values (LightGBM's own categorical splits, which order the values by their gradient statistics), neither
one-hot columns nor ordinal codes, and boosting stops on the validation split by the task's metric where
LightGBM has it."""
from __future__ import annotations

import lightgbm as lgb  # the library: absolute imports never resolve to this module
import numpy as np
import torch

from fourdb.contracts import Report
from fourdb.models.base import Model, TaskInfo, register_model
from fourdb.models.gbdt import predict_in_blocks, tree_matrix
from fourdb.tasks.types import TaskType, regression_objective

# the task's metric as LightGBM computes it (it knows each one's direction)
_SAME_METRIC = {"auroc": "auc", "roc_auc": "auc", "average_precision": "average_precision"}


def objective_and_metric(task_type: TaskType, metric: str, objective: str | None = None) -> tuple[str, str]:
    """LightGBM's objective and the validation metric early stopping follows: the task's metric where LightGBM
    has it (unset, an MAE task also trains on L1, as RelBench's LightGBM baseline does; the run's
    ``objective`` says otherwise), else the objective's loss."""
    if task_type.is_regression:
        l1 = regression_objective(objective or "metric", metric) == "l1"
        return ("regression_l1", "l1") if l1 else ("regression", "l2")  # l2 ranks as r2, rmse
    family = "multi" if task_type.per_class else "binary"
    named = {**_SAME_METRIC, "accuracy": f"{family}_error"}
    return ("multiclass" if task_type.per_class else "binary"), named.get(metric, f"{family}_logloss")


def lgb_matrix(x: np.ndarray) -> np.ndarray:
    """``tree_matrix``'s fresh matrix with NaN and infinities as 0, in place, as every model reads them."""
    return np.nan_to_num(x, copy=False, nan=0.0, posinf=0.0, neginf=0.0)


@register_model("lightgbm")
class LightGBM(Model):
    input_kind = "table"
    ranking = ("pair_ranker", "inner")  # a recommendation task: it scores (source, candidate) pairs

    def __init__(self, info: TaskInfo, seed: int = 0, *, n_estimators: int, learning_rate: float, num_leaves: int,
                 min_data_in_leaf: int, feature_fraction: float, bagging_fraction: float, lambda_l2: float,
                 patience: int):
        """LightGBM's settings (their defaults: conf/model/lightgbm.yaml); ``n_estimators`` is the most boosting
        rounds, ``patience`` the rounds without a better validation metric before boosting stops."""
        super().__init__(info, seed, n_estimators=n_estimators, learning_rate=learning_rate, num_leaves=num_leaves,
                         min_data_in_leaf=min_data_in_leaf, feature_fraction=feature_fraction,
                         bagging_fraction=bagging_fraction, lambda_l2=lambda_l2, patience=patience)

    def fit(self, data, trainer_cfg=None) -> "LightGBM":
        p, train = self.params, data.features["train"]
        objective, self.metric = objective_and_metric(self.info.task_type, self.info.metric,
                                                      trainer_cfg.objective if trainer_cfg is not None else None)
        settings = {
            "objective": objective, "metric": self.metric, "learning_rate": p["learning_rate"],
            "num_leaves": p["num_leaves"], "min_data_in_leaf": p["min_data_in_leaf"],
            "feature_fraction": p["feature_fraction"], "bagging_fraction": p["bagging_fraction"],
            "bagging_freq": 1 if p["bagging_fraction"] < 1 else 0, "lambda_l2": p["lambda_l2"],
            # the same trees for the same seed, whatever the thread count; col-wise histograms: the Dataset is
            # not doubled, which matters for a wide pair table
            "seed": self.seed, "deterministic": True, "force_col_wise": True,
            "num_threads": torch.get_num_threads(),  # the process's budget: OMP_NUM_THREADS under the launcher
            "verbosity": -1,
            **({"num_class": self.info.num_classes} if self.info.task_type.per_class else {}),
        }
        n_num = train.numeric.shape[1]
        categorical = list(range(n_num, n_num + train.categorical.shape[1]))
        fit_set = lgb.Dataset(lgb_matrix(tree_matrix(train)), data.labels["train"], categorical_feature=categorical)
        val_set = fit_set.create_valid(lgb_matrix(tree_matrix(data.features["val"])), data.labels["val"])
        self.curve: dict = {}  # the validation metric per round
        self.booster = lgb.train(settings, fit_set, num_boost_round=p["n_estimators"], valid_sets=[val_set],
                                 valid_names=["val"], callbacks=[lgb.early_stopping(p["patience"], verbose=False),
                                                                 lgb.record_evaluation(self.curve)])
        return self

    def predict(self, data, split: str) -> np.ndarray:
        # LightGBM predicts with the best round's trees once early stopping has run
        return predict_in_blocks(data.features[split], lambda x: self.booster.predict(lgb_matrix(x)))

    def report(self) -> Report:
        return Report(engine={"rounds": len(self.curve["val"][self.metric]), "best_round": self.booster.best_iteration,
                              "early_stopping_metric": self.metric})
