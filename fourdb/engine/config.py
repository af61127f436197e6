"""How the engine feeds a GNN: the Hydra group ``engine`` (conf/engine/{online,offline,auto}.yaml)."""
from __future__ import annotations

from dataclasses import dataclass, fields

from fourdb.defaults import defaults_from
from fourdb.errors import SettingError, did_you_mean, refuse_unknown

MODES = ("online", "offline", "auto")
INFERENCE = ("sampled", "layerwise")
OBJECTIVES = ("time", "memory")


@dataclass
# conf/engine/online.yaml states these defaults, and what each setting does; conf/engine/auto.yaml those
# only engine=auto reads (objective, memory_limit_gb)
@defaults_from("engine", only="auto")
class EngineConfig:
    mode: str
    workers: int
    prefetch: int
    store_epochs: int
    cache_mb: float
    inference: str
    device: str
    profile_batches: int
    objective: str
    memory_limit_gb: float | None

    def __post_init__(self):
        for setting, value, choices in (("mode", self.mode, MODES), ("inference", self.inference, INFERENCE),
                                        ("objective", self.objective, OBJECTIVES)):
            if value not in choices:
                raise SettingError(f"unknown engine {setting} '{value}'{did_you_mean(value, choices)} "
                                   f"(choose from {', '.join(choices)})")

    @classmethod
    def from_dict(cls, d: dict | None) -> "EngineConfig":
        d = dict(d or {})
        d.pop("name", None)  # which conf/engine YAML it came from
        refuse_unknown("engine", d, {f.name for f in fields(cls)})
        return cls(**d)

    def sampler_device(self) -> str:
        from fourdb.utils import resolve_device

        return resolve_device(self.device)
