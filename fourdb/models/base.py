"""Every model, tabular or graph, behind one interface and one registry.

``fit(data, trainer_cfg)`` then ``predict(data, split)``; ``input_kind`` names the input kind the runner
builds for it (table features, a sampled graph, ...: one module each in ``fourdb/experiment/inputs/``);
``report()`` tells the run record what fitting did.
A neural model only builds its ``torch.nn.Module`` and its data source: the one trainer, made by the
trainer config it is handed (``trainer_cfg.trainer(info, seed)``), fits every one of them alike.

Adding a model is one file in this package that registers it (``@register_model("name")``) and one
YAML in conf/model/; the registry finds the file itself (docs/add-a-model.md says how, step by step).
The YAML's ``params`` are the model's defaults, stated nowhere else: ``create_model`` fills in what it is
not given from there, and refuses, in one line, a parameter the model does not take (``Model.parameters``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from fourdb.contracts import SUPERVISED, Report
from fourdb.defaults import model_params
from fourdb.errors import FourdbError, refuse_unknown
from fourdb.registry import Registry
from fourdb.tasks.types import TaskType

MODELS: Registry[type] = Registry("model", package="fourdb.models")


@dataclass
class TaskInfo:
    task_type: TaskType
    num_classes: int
    metric: str

    def __post_init__(self):
        self.task_type = TaskType(self.task_type)

    @property
    def out_dim(self) -> int:
        return self.task_type.out_dim(self.num_classes)


class Model:
    input_kind = "table"  # the registered input kind it reads (fourdb.experiment.inputs.INPUT_KINDS)
    ranking: tuple[str, str] | None = None  # ``ranked_by``: set by the model families that do recommendation
    name = "model"
    task_types = (TaskType.BINARY, TaskType.MULTICLASS, TaskType.REGRESSION)  # ranking: create_model's wrappers
    # SUPERVISED or IN_CONTEXT (fourdb.contracts): an in-context model's fit runs under a guard that refuses any
    # optimizer step (fourdb.train.regime), so its record's regime is checked, not claimed
    regime = SUPERVISED

    def __init__(self, info: TaskInfo, seed: int = 0, **params):
        self.info, self.seed, self.params = info, seed, params

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        """The parameters the model takes, by name: its constructor's, or, where the constructor passes
        ``**params`` on, those of what takes them (a network's constructor, a convolution, a wrapped model:
        ``params``, with the defaults filled in, say which)."""
        return keywords(cls.__init__, skip=("self", "info", "seed"))

    @classmethod
    def wraps(cls, params: dict) -> str | None:
        """The registered model this one runs inside it, whose parameters it takes too (None: none)."""
        return None

    @classmethod
    def ranked_by(cls) -> tuple[str, str] | None:
        """The model that runs this one on a recommendation task and its parameter naming this one: a
        tabular model scores (source, candidate) pairs, a GNN's convolution encodes both towers (None: a
        model with neither, which does not do recommendation tasks)."""
        return cls.ranking

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
        engine = self.source.report()
        if self.trainer.sync is not None:  # a data-parallel run's exchange of learned row vectors
            engine = {**(engine or {}), "embedding_sync": self.trainer.sync.report()}
        return Report(self.trainer.history, engine)


def keywords(fn, skip: tuple[str, ...] = ()) -> dict[str, inspect.Parameter]:
    """``fn``'s parameters that a keyword can set, but those in ``skip`` (filled in by the code that calls it)."""
    return {name: p for name, p in inspect.signature(fn).parameters.items()
            if name not in skip and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def check_params(name: str, params: dict) -> dict:
    """``params`` over model ``name``'s defaults (its conf/model YAML's ``params``, and under them those of
    the model it wraps), or a one-line error for a parameter the model does not take. Needs no data: a
    run checks its model's parameters before it reads any."""
    cls = MODELS.get(name)
    params = {**model_params(name), **params}
    inner = cls.wraps(params)
    if inner is not None:
        params = {**model_params(inner), **params}
    refuse_unknown(f"model '{name}'", params, cls.parameters(params), noun="parameter")
    return params


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
    params = check_params(name, params)
    if info.task_type.is_ranking and info.task_type not in cls.task_types:
        wrapper = cls.ranked_by()
        if wrapper:
            return create_model(wrapper[0], info, seed=seed, **{wrapper[1]: name}, **params)
    if info.task_type not in cls.task_types:
        raise FourdbError(f"model '{name}' does not do {info.task_type} tasks (it does {', '.join(cls.task_types)})")
    return cls(info, seed=seed, **params)
