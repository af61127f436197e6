"""Every model, tabular or graph, behind one interface and one registry.

``fit(data, trainer_cfg)`` then ``predict(data, split)``; ``input_kind`` says whether the runner
hands the model table features or a sampled graph. Adding a model is one file that registers it and
one YAML in conf/model/.
"""
from __future__ import annotations

from dataclasses import dataclass

from fourdb.errors import FourdbError

MODELS: dict[str, type] = {}


@dataclass
class TaskInfo:
    task_type: str
    num_classes: int
    metric: str

    @property
    def out_dim(self) -> int:
        return self.num_classes if self.task_type == "multiclass" else 1


class Model:
    input_kind = "table"

    def __init__(self, info: TaskInfo, seed: int = 0, **params):
        self.info, self.seed, self.params = info, seed, params

    def fit(self, data, trainer_cfg) -> "Model":
        raise NotImplementedError

    def predict(self, data, split: str):
        raise NotImplementedError


def register_model(name: str):
    def wrap(cls):
        cls.name = name
        MODELS[name] = cls
        return cls

    return wrap


def create_model(name: str, info: TaskInfo, seed: int = 0, **params) -> Model:
    if name not in MODELS:
        raise FourdbError(f"unknown model '{name}' (choose from {', '.join(sorted(MODELS))})")
    return MODELS[name](info, seed=seed, **params)


from fourdb.models import gbdt, sage, gat, hgt, pna, rgcn  # noqa: E402,F401  (registration)
