"""A run's settings, checked as soon as Hydra has composed them and before any data is read.

A setting that nothing reads (a typo: ``+trainer.epoch=1``, ``+model.params.max_iterr=5``) or a value of
the wrong type is refused in one line that names it and the closest setting there is, instead of a run
with the default or a crash after the database is loaded. What each group may hold is read from the code
that takes it: a dataclass's fields (trainer, engine), a model's or a feature set's parameters, a
registry's names; a group that maps to no code (graph, sampler, dataset) may hold what its YAMLs state.
"""
from __future__ import annotations

import typing
from dataclasses import fields

from omegaconf import DictConfig, OmegaConf

from fourdb.datasets import DATASETS
from fourdb.defaults import group_settings, run_settings
from fourdb.engine.config import EngineConfig
from fourdb.engine.sampling.sampler import STRATEGIES
from fourdb.errors import SettingError, refuse_unknown
from fourdb.experiment.record import of_type
from fourdb.features.base import check_feature_params
from fourdb.graph import GRAPHS
from fourdb.models import check_params
from fourdb.train.trainer import TrainerConfig


def check_settings(cfg: DictConfig) -> None:
    """Raise a one-line ``SettingError`` (a ``FourdbError``) for the first setting of ``cfg`` that is unknown
    or of the wrong type; a group the config does not hold is not checked."""
    conf = OmegaConf.to_container(cfg, resolve=True)
    top = run_settings()
    refuse_unknown("the run config", conf, top)
    refuse_unknown("certify", conf.get("certify") or {}, top["certify"])
    group = {name: conf[name] for name in top if isinstance(conf.get(name), dict) and name != "certify"}
    for name in ("dataset", "graph", "sampler", "model"):  # the keys their YAMLs state (model: name, params)
        if name in group:
            refuse_unknown(name, group[name], group_settings(name))
    if "dataset" in group:
        dataset = group["dataset"]
        if dataset["name"] in DATASETS and not dataset.get("path"):
            refuse_unknown(f"dataset '{dataset['name']}'", dataset.get("params") or {},
                           DATASETS.get(dataset["name"]).defaults, noun="parameter")
    if "graph" in group:
        GRAPHS.get(group["graph"]["name"])
    if "sampler" in group:
        STRATEGIES.get(group["sampler"]["name"])
        fanouts = group["sampler"].get("fanouts")
        if not isinstance(fanouts, list) or not fanouts or not all(of_type(f, int) for f in fanouts):
            raise SettingError(f"sampler.fanouts must be a list of integers, one per GNN layer, not {fanouts!r}")
    if "model" in group:
        check_params(group["model"]["name"], group["model"].get("params") or {})
    if "features" in group:
        params = {k: v for k, v in group["features"].items() if k != "name"}
        check_feature_params(group["features"]["name"], params)
        if group["features"]["name"] == "dfs":  # a bad conditional-aggregate setting, before any data is read
            from fourdb.features.dfs import check_config, check_where

            check_config(params.get("depth"), params.get("primitives"))
            check_where(params.get("where"))
    if "trainer" in group:
        check_fields("trainer", TrainerConfig, group["trainer"], skip=TrainerConfig.SET_BY_RUNNER)
    if "engine" in group:
        check_fields("engine", EngineConfig, {k: v for k, v in group["engine"].items() if k != "name"})
        EngineConfig.from_dict(group["engine"])  # its values: a mode and an inference it knows


def check_fields(where: str, cls, values: dict, skip: tuple[str, ...] = ()) -> None:
    """Every key of ``values`` is a field of the dataclass ``cls`` (but ``skip``), of the field's type."""
    refuse_unknown(where, values, [f.name for f in fields(cls) if f.name not in skip])
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        types = typing.get_args(hints[key]) or (hints[key],)  # int | None: int, NoneType
        if not any(of_type(value, t) for t in types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise SettingError(f"{where}.{key} must be {names}, not {value!r}")

