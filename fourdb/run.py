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
from fourdb.launch import PLAN_ENV
from fourdb.engine.data import GraphData
from fourdb.inputs import (SPLITS, graph_engine, graph_inputs, graph_label, inputs_key, log_columns,  # noqa: F401
                           run_inputs, shared_folder, subsample)
from fourdb.models import TaskInfo, create_model
from fourdb.rdb.fingerprint import database_fingerprint
from fourdb.settings import check_settings
from fourdb.tasks import find_task, materialize
from fourdb.metrics import evaluate
from fourdb.train.trainer import TrainerConfig
from fourdb.utils import environment as utils_environment, atomic_output, atomic_write_text, stable_hash

log = logging.getLogger("fourdb")
RECORD_VERSION = 1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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


PREDICTIONS = "predictions.parquet"  # a run's test predictions, beside its record


def save_predictions(path: Path, db, task, test: pd.DataFrame, scores) -> None:
    """The test split's keys (``entity``, ``cutoff``) and ``prediction``: P(label=1) for binary, the value
    for regression, class probabilities for multiclass, and for recommendation the destination keys in
    the order predicted. What ``fourdb export`` turns into another benchmark's prediction table."""
    keys = None
    if task.spec.destination_table:
        dst = db.schema.table(task.spec.destination_table)
        keys = db.tables[dst.name][dst.primary_key].to_numpy()
    out = pd.DataFrame({"entity": test["entity"].to_numpy(), "cutoff": test["cutoff"].to_numpy(),
                        "prediction": task.spec.task_type.prediction_cells(scores, keys)})
    with atomic_output(path) as tmp:
        out.to_parquet(tmp, index=False)


def certify_run(cfg: DictConfig, model, db, task, splits: dict, options) -> dict:
    """``certify.enabled=true``: the trained model's test predictions must not change when the future does."""
    from fourdb.certify import certify

    def build(db_, splits_):
        return run_inputs(cfg, db_, task, splits_, model.input_kind)[0]

    start = time.perf_counter()
    out = certify(build, model, db, task, splits, int(options.get("groups", 3)), int(options.get("max_seeds", 200)),
                  int(cfg.seed))
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def run_experiment(cfg: DictConfig, out_dir: str | Path | None = None) -> dict | None:
    """The run record (written to ``out_dir/record.json``). Inside a torchrun worker every rank trains
    and evaluates its share; rank 0 writes the record and the other ranks return None."""
    check_settings(cfg)  # a mistyped setting is one line, before any data is read
    start = time.perf_counter()
    ctx = ddp.init(cfg.trainer.get("backend", "auto"))
    if ctx.distributed:  # every rank works in rank 0's folder
        out_dir = ddp.broadcast(str(out_dir) if out_dir is not None else None)
    seed_everything(cfg.seed)
    dataset = cfg.dataset.name
    source = cfg.dataset.get("path") or dataset  # a database folder given by path, or a built-in name
    spec = find_task(source, cfg.task)  # a bad task file fails before the database is loaded or built
    db = load_dataset(source, bool(cfg.dataset.get("allow_outside_paths")), **(cfg.dataset.get("params") or {}))
    task = materialize(spec, db)
    seen = task.input_database(db)  # what models may read: the task's removed columns are gone
    splits = subsample(task, cfg.get("max_train_seeds"), cfg.get("max_val_seeds"))
    info = TaskInfo(task.spec.task_type, task.num_classes, task.spec.metric)
    model = create_model(cfg.model.name, info, seed=cfg.seed, **(cfg.model.get("params") or {}))
    shared = None
    if model.input_kind == "graph" and not task.spec.task_type.is_ranking:
        inputs = graph_label(cfg)
        key = inputs_key(cfg)
        if ctx.distributed or ddp.shared_manifest(shared_folder(cfg, out_dir), key):  # one copy per machine, mapped
            data, shared = ddp.shared_inputs(lambda: graph_inputs(cfg, seen, task, splits), shared_folder(cfg, out_dir),
                                             ctx, key)
            data.engine = graph_engine(cfg)
        else:
            data = graph_inputs(cfg, seen, task, splits)
    else:
        data, inputs = run_inputs(cfg, seen, task, splits, model.input_kind)
    log_columns(cfg, db, task, model.input_kind, data.graph.encoders if isinstance(data, GraphData) else None)
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
    y_train = task.split("train")["label"].to_numpy()  # a metric scaled by the training labels takes them all
    metrics = {s: evaluate(task.spec.metrics, splits[s]["label"].to_numpy(), predictions[s], y_train) for s in SPLITS}
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
        **model.report(),  # history, engine
        "config": OmegaConf.to_container(cfg, resolve=True),
        **environment(),
    }
    certify_cfg = cfg.get("certify") or {}
    if certify_cfg.get("enabled") and not ctx.distributed:
        record["certify"] = certify_run(cfg, model, seen, task, splits, certify_cfg)
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
        save_predictions(Path(out_dir) / PREDICTIONS, db, task, splits["test"], predictions["test"])
        record["predictions"] = PREDICTIONS
    if out_dir is not None:
        atomic_write_text(Path(out_dir) / "record.json", json.dumps(record, indent=2, default=str))
    return record


def format_records(records: list[dict], overrides: list[dict] | None = None) -> str:
    """One row per run; ``overrides``: per run, the settings that vary across them (shown after the model)."""
    rows = []
    for i, r in enumerate(records):
        row = {"dataset": r["dataset"], "task": r["task"], "model": r["model"], **(overrides[i] if overrides else {}),
               "seed": r["seed"]}
        for split in ("val", "test"):
            for name, value in r["metrics"][split].items():
                row[f"{split}_{name}"] = round(value, 4)
        row["train_seeds"] = f"{r['num_seeds']['train']}/{r['num_seeds_available']['train']}"
        row["wall_s"] = round(r["wall_seconds"], 1)
        rows.append(row)
    return pd.DataFrame(rows).to_string(index=False)
