"""conf/ is the one place where a setting's default is stated, with the reason for it.

``fourdb run`` composes conf/ with Hydra. Code that runs without Hydra (``create_model``, a ``TrainerConfig``
or ``EngineConfig`` made in a test, a notebook or a benchmark) reads the same files here, so a default is
never written twice and the two can never disagree.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import field
from pathlib import Path

from omegaconf import OmegaConf

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


@functools.cache
def _load(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / f"{name}.yaml"))


def group_default(group: str) -> str:
    """The option that conf/config.yaml's defaults list picks for ``group`` (trainer: default)."""
    for entry in _load("config")["defaults"]:
        if isinstance(entry, dict) and group in entry:
            return entry[group]
    raise KeyError(f"conf/config.yaml picks no default for the group '{group}'")


def option(group: str, name: str | None = None) -> dict:
    """The settings of conf/<group>/<name>.yaml (the group's default option when ``name`` is None) over
    those of the options it extends (its own ``defaults`` list: conf/trainer/ddp.yaml extends default).
    These groups are flat, so the merge is too."""
    raw = _load(f"{group}/{name or group_default(group)}")
    out = {}
    for base in raw.get("defaults", []):
        if base != "_self_":
            out.update(option(group, base))
    out.update({k: v for k, v in raw.items() if k != "defaults"})
    return copy.deepcopy(out)


def model_params(name: str) -> dict:
    """The ``params`` of conf/model/<name>.yaml; {} for a model that has no YAML (``pair_ranker``)."""
    if not (Path(CONF_DIR) / "model" / f"{name}.yaml").exists():
        return {}
    return option("model", name).get("params") or {}


# conf/model/<name>.yaml's search space: setting -> Optuna sweeper syntax, what `hparams_search=optuna` and
# `leaderboards/produce.py --tune` try. It says what a sweep may try, not how a run trains.
SEARCH = "search"


def search_space(name: str) -> dict[str, str]:
    """The search space conf/model/<name>.yaml declares ({} where there is nothing to tune, or no YAML)."""
    if not (Path(CONF_DIR) / "model" / f"{name}.yaml").exists():
        return {}
    return option("model", name).get(SEARCH) or {}


def without_search(config: dict) -> dict:
    """A composed config (a plain dict) as a run's setting, the model's search space dropped (in place), so that
    declaring or changing a space changes no recorded config, config hash or checkpoint key."""
    if isinstance(config.get("model"), dict):
        config["model"].pop(SEARCH, None)
    return config


def defaults_from(group: str, only: str | None = None):
    """Class decorator, under ``@dataclass``: each field that the group's default option states (with
    the reason for its value) takes that value as its default; a field with a default of its own too
    is refused. So ``TrainerConfig(epochs=4)`` trains as ``fourdb run trainer.epochs=4`` does.

    ``only`` names an option whose own settings only it reads (``engine.objective``, read by
    ``engine=auto`` alone): they are stated there, so the default option, and with it every other
    option's composed config (and a committed run's config hash), does not carry them."""
    def apply(cls):
        stated = option(group)
        if only is not None:
            stated = {**option(group, only), **stated}
        for name in cls.__annotations__:
            if name not in stated:
                continue
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} has a default in code and in conf/{group}: keep one")
            value = stated[name]
            setattr(cls, name, field(default_factory=functools.partial(copy.deepcopy, value))
                    if isinstance(value, (list, dict)) else value)
        return cls

    return apply


def group_settings(group: str) -> set[str]:
    """Every key that some option of conf/<group>/ states (sampler: name, fanouts)."""
    return {key for path in (Path(CONF_DIR) / group).glob("*.yaml") for key in option(group, path.stem)}


def _global_group(group: str) -> bool:
    """An optional group whose options write into the others (``# @package _global_``), not a key of its own."""
    return any("@package _global_" in p.read_text() for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def run_settings() -> dict:
    """The top-level keys of a composed run config, with conf/config.yaml's values: its own settings, and
    the groups it picks an option of (an optional group, ``experiment: null``, adds its keys to the others)."""
    raw = _load("config")
    groups = [g for entry in raw["defaults"] if isinstance(entry, dict) for g, pick in entry.items()
              if not g.startswith("override ") and (pick is not None or not _global_group(g))]
    return {**{k: v for k, v in raw.items() if k not in ("defaults", "hydra")}, **{g: {} for g in groups}}
