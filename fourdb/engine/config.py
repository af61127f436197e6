"""How the engine feeds a GNN: the Hydra group ``engine`` (conf/engine/{online,offline,auto}.yaml)."""
from __future__ import annotations

from dataclasses import dataclass, fields

MODES = ("online", "offline", "auto")
INFERENCE = ("sampled", "layerwise")


@dataclass
class EngineConfig:
    mode: str = "online"  # online: sample every epoch; offline: replay a stored sample; auto: profile, then pick
    workers: int = 1  # sampler threads producing batches ahead of the model (0: sample in the training loop)
    prefetch: int = 4  # bound of the producer-consumer queue, in batches
    store_epochs: int = 2  # offline: epochs sampled once and stored; training cycles through them
    cache_mb: float = 0.0  # offline: most-read feature rows kept whole in a fast tier (the GPU when training
    # there, else RAM) instead of packed per batch; 0 packs every row (fastest on the CPU while the store fits in RAM)
    inference: str = "sampled"  # evaluation: sampled neighbourhoods, or exact layer-wise full neighbourhoods
    device: str = "cpu"  # where sampling runs: cpu, cuda, or auto (cuda when present)
    profile_batches: int = 6  # auto: batches timed in the dry run

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown engine mode '{self.mode}' (choose from {', '.join(MODES)})")
        if self.inference not in INFERENCE:
            raise ValueError(f"unknown inference '{self.inference}' (choose from {', '.join(INFERENCE)})")

    @classmethod
    def from_dict(cls, d: dict | None) -> "EngineConfig":
        d = dict(d or {})
        d.pop("name", None)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"engine has no setting(s) {sorted(unknown)}; it takes {sorted(known)}")
        return cls(**d)

    def sampler_device(self) -> str:
        from fourdb.utils import resolve_device

        return resolve_device(self.device)
