"""Every model, tabular or graph, behind one interface and one registry.

``fit(data, trainer_cfg)`` then ``predict(data, split)``; ``input_kind`` says whether the runner
hands the model table features or a sampled graph; ``report()`` tells the run record what fitting did.
A neural model only builds its ``torch.nn.Module`` and its data source: the one trainer, made by the
trainer config it is handed (``trainer_cfg.trainer(info, seed)``), fits every one of them alike.

Adding a model is one file in this package that registers it (``@register_model("name")``) and one
YAML in conf/model/; the registry finds the file itself (docs/add-a-model.md says how, step by step).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from fourdb.contracts import Report
from fourdb.errors import FourdbError
from fourdb.registry import Registry

MODELS: Registry[type] = Registry("model", package="fourdb.models")


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
    name = "model"
    task_types = ("binary", "multiclass", "regression")  # recommendation through create_model's wrappers

    def __init__(self, info: TaskInfo, seed: int = 0, **params):
        self.info, self.seed, self.params = info, seed, params

    def fit(self, data, trainer_cfg) -> "Model":
        raise NotImplementedError

    def predict(self, data, split: str):
        raise NotImplementedError

    def report(self) -> Report:
        return Report()


class NeuralModel(Model):
    """A torch module fitted by the one trainer on batches from a data source (tabular or graph)."""

    def build(self, data):
        """The untrained ``torch.nn.Module``."""
        raise NotImplementedError

    def make_source(self, data, trainer_cfg):
        """The data source (``fourdb.contracts.DataSource``) the trainer pulls batches from."""
        raise NotImplementedError

    def fit(self, data, trainer_cfg) -> "NeuralModel":
        self.trainer = trainer_cfg.trainer(self.info, self.seed)
        self.source, self.fitted_on = self.make_source(data, trainer_cfg), data
        self.module = self.trainer.fit(self.build(data), self.source)
        return self

    def predict(self, data, split: str):
        """Outputs for ``split`` of ``data``: the data it was fitted on, or other inputs built the same way
        (certification rebuilds them from a database cut at a cutoff)."""
        source = self.source if data is self.fitted_on else self.make_source(data, self.trainer.cfg)
        return self.trainer.predict(self.module, source, split)

    def report(self) -> Report:
        return Report(self.trainer.history, self.source.report())


def check_params(model: str, fn, params: dict, fixed: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> None:
    """A clear error for a YAML parameter that ``fn`` (a model's builder) does not take."""
    accepted = set(inspect.signature(fn).parameters) - set(fixed) | set(also)
    unknown = set(params) - accepted
    if unknown:
        raise FourdbError(f"model '{model}' has no parameter {', '.join(sorted(unknown))} "
                          f"(it takes {', '.join(sorted(accepted))})")


def register_model(name: str):
    """``@register_model("sage")``: the class is created by ``create_model("sage", ...)``."""
    def wrap(cls):
        cls.name = name
        return MODELS.register(name)(cls)

    return wrap


def create_model(name: str, info: TaskInfo, seed: int = 0, **params) -> Model:
    """Model ``name`` for a task of ``info``. On a recommendation task a tabular model ranks candidate
    pairs (``pair_ranker`` around it) and a GNN encodes both sides (``two_tower`` with its convolution)."""
    cls = MODELS.get(name)
    if info.task_type == "recommendation" and "recommendation" not in cls.task_types:
        wrapper = {"table": ("pair_ranker", "inner"), "graph": ("two_tower", "gnn")}.get(cls.input_kind)
        if wrapper:
            return MODELS.get(wrapper[0])(info, seed=seed, **{wrapper[1]: name}, **params)
    if info.task_type not in cls.task_types:
        raise FourdbError(f"model '{name}' does not do {info.task_type} tasks (it does {', '.join(cls.task_types)})")
    return cls(info, seed=seed, **params)
