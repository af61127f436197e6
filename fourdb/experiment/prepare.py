"""Everything a run needs, built one way from its config: ``fourdb run``, every DDP rank, the profile that
picks ``trainer.nproc=auto`` and ``fourdb export`` all start from ``prepare_run``, so none of them can read
a different task, database, split or model than the run it stands for."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fourdb.datasets import load_dataset
from fourdb.defaults import without_search
from fourdb.engine.distribution import ddp
from fourdb.errors import FourdbError
from fourdb.experiment.inputs import InputKind, kind_of, subsample
from fourdb.models import Model, TaskInfo, create_model
from fourdb.rdb import Database
from fourdb.tasks import Task, TaskSpec, find_task, materialize
from fourdb.train.trainer import TrainerConfig
from fourdb.utils import atomic_write_text, stable_hash

# trainer settings that do not change what a run computes (a checkpoint of one setting resumes the other)
RESUMABLE_ACROSS = ("progress", "nproc", "backend", "max_restarts", "checkpoint_every", "embedding_sync",
                    "embedding_hot_rows")
LAUNCH_FILE = "launch.json"  # written by the launcher in the run folder: how many ranks it started, and why


@dataclass
class PreparedRun:
    cfg: DictConfig
    spec: TaskSpec
    db: Database  # the whole database (fingerprinted; certification cuts it)
    task: Task | None = None
    seen: Database | None = None  # what a model may read: the task's removed columns are gone
    splits: dict | None = None  # the seeds each split trains or is scored on (subsampled)
    model: Model | None = None  # untrained

    @property
    def kind(self) -> InputKind:
        """What the model reads: its input kind, which builds its inputs."""
        return kind_of(self.model)

    def inputs(self, out_dir=None, ctx: ddp.Context | None = None, share: bool = False):
        """The model's inputs, how the run record names them, and the shared-inputs note (or None).

        The graph of a classification or regression run is built once per machine into a shared folder
        and mapped by every rank; ``share`` builds it there even in one process (the launcher's profile,
        so the ranks it starts map what it built)."""
        return self.kind.prepare(self.cfg, self.seen, self.task, self.splits, out_dir, ctx, share)

    def trainer_config(self, out_dir=None, **changes) -> TrainerConfig:
        return trainer_config(self.cfg, out_dir, **changes)


def literal_text(text: str) -> str:
    """``text`` as an OmegaConf string that reads back as exactly ``text``: ``${`` in it is text, never an
    interpolation (a folder's name or a record's value is data: ``${oc.env:VAR}`` in one must not read VAR).
    OmegaConf reads ``\\${`` as the text ``${``, and halves the backslashes before it."""
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)


def hydra_text(text: str) -> str:
    """``text`` as a quoted value of a Hydra override that reads back as exactly ``text``: a quote is ``\\'``
    and the backslashes before a quote (or the closing one) are doubled, as Hydra's grammar asks; ``${`` is
    escaped for OmegaConf (``literal_text``), so it is never resolved."""
    text = literal_text(text)
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, text)
    return f"'{text}'"


def literal_config(value):
    """A run record's config (plain data from a file) with every string kept as it is by OmegaConf."""
    if isinstance(value, dict):
        return {k: literal_config(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal_config(v) for v in value]
    return literal_text(value) if isinstance(value, str) else value


def run_source(cfg) -> str:
    """The database a run reads: a folder given by path, or a built-in name."""
    return cfg["dataset"].get("path") or cfg["dataset"]["name"]


def prepare_run(cfg, until: str = "model") -> PreparedRun:
    """The run of ``cfg`` (a composed config, or a run record's ``config``) up to ``until``: ``"database"``
    (the task's spec and the database: what ``fourdb export`` checks against a record) or ``"model"``
    (also the materialized task, the seeds of each split and the untrained model)."""
    if until not in ("database", "model"):
        raise ValueError(f"until must be 'database' or 'model', got {until!r}")
    cfg = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(literal_config(cfg))
    source = run_source(cfg)
    spec = find_task(source, cfg.task)  # a bad task file fails before the database is loaded or built
    if cfg.get("objective") and not spec.task_type.is_regression:
        raise FourdbError(f"objective={cfg.objective.name} sets the loss of regression tasks; task '{spec.name}' is "
                          f"{spec.task_type}: leave objective unset")
    db = load_dataset(source, bool(cfg.dataset.get("allow_outside_paths")), **(cfg.dataset.get("params") or {}))
    run = PreparedRun(cfg, spec, db)
    if until == "database":
        return run
    run.task = materialize(spec, db)
    run.seen = run.task.input_database(db)
    run.splits = subsample(run.task, cfg.get("max_train_seeds"), cfg.get("max_val_seeds"))
    info = TaskInfo(spec.task_type, run.task.num_classes, spec.metric)
    run.model = create_model(cfg.model.name, info, seed=cfg.seed, **(cfg.model.get("params") or {}))
    return run


def trainer_config(cfg: DictConfig, out_dir=None, **changes) -> TrainerConfig:
    """The run's trainer settings (what the trainer group leaves out takes TrainerConfig's one-process
    default); with ``out_dir`` it checkpoints there under the run's config hash."""
    objective = cfg.objective.name if cfg.get("objective") else None
    return TrainerConfig(**{**OmegaConf.to_container(cfg.trainer, resolve=True), **changes}, objective=objective,
                         checkpoint_dir=str(out_dir) if out_dir is not None else None,
                         checkpoint_key=checkpoint_key(cfg) if out_dir is not None else None)


def checkpoint_key(cfg: DictConfig) -> str:
    conf = without_search(OmegaConf.to_container(cfg, resolve=True))  # a model's search space trains nothing
    for k in RESUMABLE_ACROSS:
        (conf.get("trainer") or {}).pop(k, None)
    return stable_hash(conf)


def write_launch(out_dir, nproc: int, plan: dict | None) -> None:
    """The launcher's note to the ranks it starts (and to a run it keeps in its own process): they were
    launched (the launcher prints the record), and ``trainer.nproc=auto``'s plan for the run record."""
    atomic_write_text(Path(out_dir) / LAUNCH_FILE, json.dumps({"nproc": nproc, "plan": plan}))


def read_launch(out_dir) -> dict | None:
    """The launcher's note in ``out_dir``, or None for a run no fourdb launcher started."""
    path = Path(out_dir) / LAUNCH_FILE if out_dir is not None else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def clear_launch(out_dir) -> None:
    """A run started without the launcher: a note left in its folder by an earlier run is not its own."""
    if out_dir is not None:
        (Path(out_dir) / LAUNCH_FILE).unlink(missing_ok=True)
