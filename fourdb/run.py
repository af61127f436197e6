"""One experiment, start to finish: database -> task -> inputs -> model -> metrics -> run record."""
from __future__ import annotations

import json
import logging
import os
import random
import resource
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from fourdb.datasets import load_dataset
from fourdb.engine import ddp
from fourdb.engine.config import EngineConfig
from fourdb.engine.loader import GraphData
from fourdb.engine.parallel import PLAN_ENV
from fourdb.engine.sampler import TemporalSampler
from fourdb.features import TableData, build_table_features
from fourdb.graph import build_graph
from fourdb.graph.build import fk_relations
from fourdb.models import TaskInfo, create_model
from fourdb.rdb.fingerprint import database_fingerprint
from fourdb.tasks import Task, load_task
from fourdb.train.metrics import evaluate
from fourdb.train.trainer import TrainerConfig
from fourdb.utils import environment as utils_environment, atomic_write_text, cache_root, stable_hash, to_epoch_ns

log = logging.getLogger("fourdb")
RECORD_VERSION = 1
SPLITS = ("train", "val", "test")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def subsample(task: Task, max_train: int | None, max_val: int | None, sample_seed: int = 0) -> dict[str, pd.DataFrame]:
    """Per-split seed frames, training and validation capped where the config asks; says so in the log.

    The subsample does not depend on the run's seed, so every seed and every model of a board trains
    and stops on the same rows (and a DFS cache made for one serves all). The test split is never
    capped: every result, including an external submission, is scored on all of it.
    """
    out = {}
    for split in SPLITS:
        frame = task.split(split)
        cap = {"train": max_train, "val": max_val}.get(split)
        if cap and len(frame) > cap:
            log.info("subsampling %s seeds: %d of %d (config max_%s_seeds)", split, cap, len(frame), split)
            frame = frame.sample(n=cap, random_state=sample_seed).sort_values(["cutoff", "node"]).reset_index(drop=True)
        out[split] = frame
    return out


def graph_inputs(cfg: DictConfig, db, task: Task, splits: dict) -> GraphData:
    graph = build_graph(db, cfg.graph.kind, fit_until=task.fit_until)
    seed_type = task.spec.entity_table
    hidden = set(task.hidden_columns)
    fks = {c.name for c in db.schema.table(seed_type).foreign_keys}
    hidden_etypes = frozenset(et[1] for et in graph.canonical_etypes
                              if et[2] == seed_type and any(et[1] == fk_relations(seed_type, c)[1] for c in hidden & fks))
    sampler = TemporalSampler(graph, list(cfg.sampler.fanouts), cfg.sampler.strategy)
    seed_features = graph.encoders[seed_type].transform(db.tables[seed_type], masked=hidden)
    return GraphData(
        graph=graph, sampler=sampler, seed_type=seed_type,
        seeds={s: f["node"].to_numpy() for s, f in splits.items()},
        cutoffs={s: to_epoch_ns(f["cutoff"]) for s, f in splits.items()},
        labels={s: splits[s]["label"].to_numpy() for s in ("train", "val")},
        seed_features=seed_features, hidden_etypes=hidden_etypes,
        engine=graph_engine(cfg),
    )


def shared_folder(cfg: DictConfig, out_dir) -> Path:
    """Where the ranks of a run share its graph inputs: the run folder (a restarted group reuses them)."""
    if out_dir is not None:
        return Path(out_dir) / ".shared_graph"
    return cache_root() / "shared_graph" / inputs_key(cfg)


def inputs_key(cfg: DictConfig) -> str:
    """Hash of the settings that fix a run's graph inputs (not the engine, which only says how to feed them)."""
    return stable_hash({k: OmegaConf.to_container(cfg, resolve=True).get(k) for k in
                        ("dataset", "task", "graph", "sampler", "seed", "max_train_seeds", "max_val_seeds")})


def graph_engine(cfg: DictConfig) -> EngineConfig:
    return EngineConfig.from_dict(OmegaConf.to_container(cfg.engine, resolve=True) if cfg.get("engine") else None)


def table_inputs(cfg: DictConfig, db, task: Task, splits: dict) -> TableData:
    params = {k: v for k, v in OmegaConf.to_container(cfg.features, resolve=True).items() if k != "name"}
    return TableData(build_table_features(cfg.features.name, db, task, splits, **params),
                     {s: splits[s]["label"].to_numpy() for s in ("train", "val")})


def environment() -> dict:
    return utils_environment(("fourdb", "torch", "dgl", "duckdb", "pandas", "numpy", "scikit-learn"),
                             gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


# trainer settings that do not change what a run computes (a checkpoint of one setting resumes the other)
RESUMABLE_ACROSS = ("progress", "nproc", "backend", "max_restarts", "checkpoint_every")


def checkpoint_key(cfg: DictConfig) -> str:
    conf = OmegaConf.to_container(cfg, resolve=True)
    for k in RESUMABLE_ACROSS:
        (conf.get("trainer") or {}).pop(k, None)
    return stable_hash(conf)


def run_experiment(cfg: DictConfig, out_dir: str | Path | None = None) -> dict | None:
    """The run record (written to ``out_dir/record.json``). Inside a torchrun worker every rank trains
    and evaluates its share; rank 0 writes the record and the other ranks return None."""
    start = time.perf_counter()
    ctx = ddp.init(cfg.trainer.get("backend", "auto"))
    if ctx.distributed:  # every rank works in rank 0's folder
        out_dir = ddp.broadcast(str(out_dir) if out_dir is not None else None)
    seed_everything(cfg.seed)
    dataset = cfg.dataset.name
    source = cfg.dataset.get("path") or dataset  # a database folder given by path, or a built-in name
    db = load_dataset(source, **(cfg.dataset.get("params") or {}))
    task = load_task(db, source, cfg.task)
    splits = subsample(task, cfg.get("max_train_seeds"), cfg.get("max_val_seeds"))
    info = TaskInfo(task.spec.task_type, task.num_classes, task.spec.metric)
    model = create_model(cfg.model.name, info, seed=cfg.seed, **(cfg.model.get("params") or {}))
    shared = None
    if model.input_kind == "graph":
        inputs = {"graph": cfg.graph.kind, "sampler": dict(cfg.sampler), "engine": dict(cfg.engine) if cfg.get("engine") else None}
        key = inputs_key(cfg)
        if ctx.distributed or ddp.shared_manifest(shared_folder(cfg, out_dir), key):  # one copy per machine, mapped
            data, shared = ddp.shared_inputs(lambda: graph_inputs(cfg, db, task, splits), shared_folder(cfg, out_dir),
                                             ctx, key)
            data.engine = graph_engine(cfg)
        else:
            data = graph_inputs(cfg, db, task, splits)
    else:
        data, inputs = table_inputs(cfg, db, task, splits), {"features": cfg.features.name}
    trainer_cfg = TrainerConfig(**OmegaConf.to_container(cfg.trainer, resolve=True),
                                checkpoint_dir=str(out_dir) if out_dir is not None else None,
                                checkpoint_key=checkpoint_key(cfg))
    fit_start = time.perf_counter()
    model.fit(data, trainer_cfg)
    fit_seconds = time.perf_counter() - fit_start
    predictions = {s: model.predict(data, s) for s in SPLITS}  # every rank takes part (outputs are gathered)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = ddp.all_gather(peak_mb)
    ddp.barrier()  # all ranks are done with the shared graph
    if ctx.main and shared is not None:
        shutil.rmtree(shared["folder"], ignore_errors=True)
    if ctx.distributed and not ctx.main:
        return None
    metrics = {s: evaluate(task.spec.metrics, splits[s]["label"].to_numpy(), predictions[s]) for s in SPLITS}
    record = {
        "record_version": RECORD_VERSION,
        "dataset": dataset, "task": task.spec.name, "task_spec_hash": task.spec.spec_hash,
        "database_fingerprint": database_fingerprint(db),
        "task_type": task.spec.task_type, "metric": task.spec.metric,
        "model": cfg.model.name, "inputs": inputs, "seed": int(cfg.seed),
        "metrics": metrics,
        "num_seeds": {s: int(len(splits[s])) for s in SPLITS},
        "num_seeds_available": {s: int((task.frame["split"] == s).sum()) for s in SPLITS},
        "fit_seconds": fit_seconds, "wall_seconds": time.perf_counter() - start,
        "peak_memory_mb": peak_mb,
        "nproc": ctx.world,
        "history": getattr(getattr(model, "trainer", None), "history", []),
        "engine": getattr(getattr(model, "source", None), "report", lambda: None)(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        **environment(),
    }
    if ctx.distributed:
        record["distributed"] = {"world_size": ctx.world, "backend": ctx.backend, "peak_memory_mb_per_rank": peaks,
                                 "shared_graph": shared, "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))}
    if os.environ.get(PLAN_ENV):  # trainer.nproc=auto: the cost model's prediction beside the measured epochs
        plan = json.loads(os.environ[PLAN_ENV])
        measured = (record["engine"] or {}).get("epoch_seconds") or [h["seconds"] for h in record["history"]]
        record["parallel_auto"] = {**plan, "measured_epoch_s": measured}
        log.info("parallel auto: %d rank(s), predicted epoch %.2f s; measured %s", ctx.world,
                 plan["predicted_epoch_s"].get(str(ctx.world), plan["predicted_epoch_s"].get(ctx.world, float("nan"))),
                 ", ".join(f"{s:.2f} s" for s in measured))
    if out_dir is not None:
        atomic_write_text(Path(out_dir) / "record.json", json.dumps(record, indent=2, default=str))
    return record


def format_records(records: list[dict]) -> str:
    rows = []
    for r in records:
        row = {"dataset": r["dataset"], "task": r["task"], "model": r["model"], "seed": r["seed"]}
        for split in ("val", "test"):
            for name, value in r["metrics"][split].items():
                row[f"{split}_{name}"] = round(value, 4)
        row["train_seeds"] = f"{r['num_seeds']['train']}/{r['num_seeds_available']['train']}"
        row["wall_s"] = round(r["wall_seconds"], 1)
        rows.append(row)
    return pd.DataFrame(rows).to_string(index=False)
