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


class NeuralModel(Model):
    """A torch module fitted by the one trainer on batches from a data source (tabular or graph)."""

    def build(self, data):
        """The untrained ``torch.nn.Module``."""
        raise NotImplementedError

    def make_source(self, data, trainer_cfg):
        """The data source the trainer pulls batches from (see fourdb/train/trainer.py)."""
        raise NotImplementedError

    def fit(self, data, trainer_cfg) -> "NeuralModel":
        from fourdb.train.trainer import Trainer

        self.trainer = Trainer(trainer_cfg, self.info.task_type, self.info.metric, self.seed)
        self.source, self.fitted_on = self.make_source(data, trainer_cfg), data
        self.module = self.trainer.fit(self.build(data), self.source)
        return self

    def predict(self, data, split: str):
        """Outputs for ``split`` of ``data``: the data it was fitted on, or other inputs built the same way
        (certification rebuilds them from a database cut at a cutoff)."""
        source = self.source if data is self.fitted_on else self.make_source(data, self.trainer.cfg)
        return self.trainer.predict(self.module, source, split)


def check_params(model: str, fn, params: dict, fixed: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> None:
    """A clear error for a YAML parameter that ``fn`` (a model's builder) does not take."""
    import inspect

    accepted = set(inspect.signature(fn).parameters) - set(fixed) | set(also)
    unknown = set(params) - accepted
    if unknown:
        raise FourdbError(f"model '{model}' has no parameter {', '.join(sorted(unknown))} "
                          f"(it takes {', '.join(sorted(accepted))})")


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


from fourdb.models import gbdt, mlp, deepfm, fttransformer  # noqa: E402,F401  (registration)
from fourdb.models import sage, gat, hgt, pna, rgcn  # noqa: E402,F401
