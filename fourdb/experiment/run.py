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

from fourdb.defaults import without_search
from fourdb.engine.distribution import ddp
from fourdb.experiment.prepare import PreparedRun, prepare_run, read_launch
from fourdb.experiment.record import RECORD_VERSION, RunRecord, environment
from fourdb.experiment.settings import check_settings
from fourdb.metrics import bootstrap_record, evaluate, higher_is_better
from fourdb.models import MODELS
from fourdb.rdb.fingerprint import database_fingerprint
from fourdb.tasks.splits import SPLITS
from fourdb.train.regime import regime_guard
from fourdb.utils import atomic_output, atomic_write_bytes, atomic_write_text, code_patch

log = logging.getLogger("fourdb")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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


CODE_PATCH = "code.patch"  # a dirty run's code as a patch against its git_commit, beside its record


def save_code_patch(path: Path) -> str | None:
    """Write the code's difference from HEAD (``fourdb.utils.code_patch``) to ``path``; its sha256, None (and
    no file) where git cannot say."""
    import hashlib

    patch = code_patch(Path(__file__).parent)
    if not patch:
        log.warning("the code differs from its commit but no patch of it could be made; %s not written", path.name)
        return None
    atomic_write_bytes(path, patch)
    return hashlib.sha256(patch).hexdigest()


def certify_run(run: PreparedRun, options) -> dict:
    """``certify.enabled=true``: the trained model's test predictions must not change when the future does
    (the model's input kind rebuilds its inputs from each cut database)."""
    from fourdb.experiment.certify import certify

    def build(db_, splits_):
        return run.kind.build(run.cfg, db_, run.task, splits_)

    start = time.perf_counter()
    out = certify(build, run.model, run.seen, run.task, run.splits, int(options.groups), int(options.max_seeds),
                  int(run.cfg.seed))
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def trivial_baselines(task, splits: dict, info, y_train, inputs=None) -> dict:
    """Each trivial baseline that does the task's type (``fourdb.models.trivial``), scored on the run's
    validation and test seeds: no training, so every run can say where the floor is. A recommendation run's
    floor is the history baselines (``history_baselines``), read off the link history its ``inputs`` hold."""
    from fourdb.tasks.past_labels import label_data
    from fourdb.models import create_model
    from fourdb.models.trivial import TRIVIAL

    if info.task_type.is_ranking:
        return history_baselines(task, splits, info, y_train, inputs)
    data, out = None, {}
    for name in TRIVIAL:
        baseline = create_model(name, info) if info.task_type in MODELS.get(name).task_types else None
        if baseline is None:
            continue
        data = data or label_data(task, splits)
        baseline.fit(data)
        out[name] = {s: evaluate(task.spec.metrics, splits[s]["label"].to_numpy(), baseline.predict(data, s), y_train)
                     for s in ("val", "test")}
    return out


def history_baselines(task, splits: dict, info, y_train, inputs) -> dict:
    """``popularity`` and ``repeat`` (``fourdb.models.popularity.HISTORY``) scored on the run's validation and
    test seeds, from the link history already in its inputs (every recommendation input kind holds one): a
    ranking per distinct cutoff, no training. Nothing (``{}``) without a link history to read."""
    from fourdb.models import create_model
    from fourdb.models.popularity import HISTORY
    from fourdb.tasks.interactions import RecData

    if not isinstance(inputs, RecData):
        return {}
    out = {}
    for name in HISTORY:
        baseline = create_model(name, info).fit(inputs)
        out[name] = {s: evaluate(task.spec.metrics, splits[s]["label"].to_numpy(), baseline.predict(inputs, s),
                                 y_train) for s in ("val", "test")}
    return out


def best_trivial(metric: str, trivial: dict, split: str = "test") -> tuple[str, float] | None:
    """The trivial baseline with the best ``metric`` on ``split`` and its value (None: there are none)."""
    scored = [(name, m[split][metric]) for name, m in trivial.items() if np.isfinite(m[split].get(metric, np.nan))]
    if not scored:
        return None
    return (max if higher_is_better(metric) else min)(scored, key=lambda x: x[1])


def warn_if_trivial_wins(model: str, metric: str, metrics: dict, trivial: dict) -> None:
    best = best_trivial(metric, trivial)
    if best is None:
        return
    score = metrics["test"][metric]
    beaten = score > best[1] if higher_is_better(metric) else score < best[1]
    if not beaten:
        log.warning("model '%s' does not beat the trivial baseline '%s': test %s %.4f against %.4f; it has "
                    "learned nothing a constant, the entity's own past labels or (recommendation) the popular and "
                    "repeated destinations do not give", model, best[0], metric, score, best[1])


def recorded_config(cfg: DictConfig) -> dict:
    """The resolved config, a database folder and a task file as absolute paths: the record finds what it
    ran on wherever it is later read from (``fourdb leaderboard submit`` in any folder). The model's search
    space is left out: it says what a sweep may try, not how this run trained."""
    config = without_search(OmegaConf.to_container(cfg, resolve=True))  # a sweep's space is not the run's setting
    if config["dataset"].get("path"):
        config["dataset"]["path"] = str(Path(config["dataset"]["path"]).resolve())
    if str(config.get("task")).endswith((".yaml", ".yml")) and Path(config["task"]).is_file():
        config["task"] = str(Path(config["task"]).resolve())
    return config


def run_experiment(cfg: DictConfig, out_dir: str | Path | None = None) -> dict | None:
    """The run record (written to ``out_dir/record.json``), its settings checked first: a mistyped setting is
    one line, before any data is read (``fourdb run`` checks them itself and calls ``run_checked``)."""
    check_settings(cfg)
    return run_checked(cfg, out_dir)


def run_checked(cfg: DictConfig, out_dir: str | Path | None = None) -> dict | None:
    """``run_experiment`` of settings already checked. Inside a torchrun worker every rank trains and
    evaluates its share; rank 0 writes the record and the other ranks return None."""
    start = time.perf_counter()
    ctx = ddp.init(cfg.trainer.get("backend"))  # the trainer's settings are made once out_dir is agreed
    if ctx.distributed:  # every rank works in rank 0's folder
        out_dir = ddp.broadcast(str(out_dir) if out_dir is not None else None)
    seed_everything(cfg.seed)
    run = prepare_run(cfg)
    data, inputs, shared = run.inputs(out_dir, ctx)
    run.kind.log_columns(cfg, run.db, run.task, data, out_dir if ctx.main else None)
    fit_start = time.perf_counter()
    with regime_guard(cfg.model.name, run.model.regime):
        run.model.fit(data, run.trainer_config(out_dir))
    fit_seconds = time.perf_counter() - fit_start
    predictions = {s: run.model.predict(data, s) for s in SPLITS}  # every rank takes part (outputs are gathered)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = ddp.all_gather(peak_mb)
    ddp.barrier()  # all ranks are done with the shared graph
    if ctx.main and shared is not None:
        shutil.rmtree(shared["folder"], ignore_errors=True)
    if ctx.distributed and not ctx.main:
        return None
    record = make_record(run, inputs, predictions, ctx.world, peak_mb, data)
    record.fit_seconds, record.wall_seconds = fit_seconds, time.perf_counter() - start
    if cfg.certify.enabled and not ctx.distributed:
        record.certify = certify_run(run, cfg.certify)
    if ctx.distributed:
        record.distributed = {"world_size": ctx.world, "backend": ctx.backend, "peak_memory_mb_per_rank": peaks,
                              "shared_graph": shared, "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))}
    plan = (read_launch(out_dir) or {}).get("plan")
    if plan:  # trainer.nproc=auto: the cost model's prediction beside the measured epochs
        record.parallel_auto = parallel_auto(plan, record, ctx.world)
    if out_dir is not None:
        save_predictions(Path(out_dir) / PREDICTIONS, run.db, run.task, run.splits["test"], predictions["test"])
        record.predictions = PREDICTIONS
        if record.git_dirty:  # the code differed from git_commit: the patch beside the record rebuilds it
            digest = save_code_patch(Path(out_dir) / CODE_PATCH)
            if digest is not None:
                record.code_patch_sha256 = digest
        atomic_write_text(Path(out_dir) / "record.json", json.dumps(record.to_dict(), indent=2, default=str))
    return record.to_dict()


def make_record(run: PreparedRun, inputs: dict, predictions: dict, nproc: int, peak_mb: float,
                data=None) -> RunRecord:
    """The record of a trained run: its metrics on every split (and the trivial baselines' beside them, unless
    its model is one; a recommendation's read off ``data``, the model's inputs), its test metric's bootstrap
    replicates, what it ran on and where."""
    cfg, task, splits = run.cfg, run.task, run.splits
    y_train = task.split("train")["label"].to_numpy()  # a metric scaled by the training labels takes them all
    metrics = {s: evaluate(task.spec.metrics, splits[s]["label"].to_numpy(), predictions[s], y_train) for s in SPLITS}
    trivial = trivial_baselines(task, splits, run.model.info, y_train, data) if run.kind.scored_beside_trivial \
        else {}
    warn_if_trivial_wins(cfg.model.name, task.spec.metric, metrics, trivial)
    return RunRecord(
        record_version=RECORD_VERSION,
        dataset=cfg.dataset.name, task=task.spec.name, task_spec_hash=task.spec.spec_hash,
        database_fingerprint=database_fingerprint(run.db),
        task_type=task.spec.task_type, metric=task.spec.metric,
        model=cfg.model.name, inputs=inputs, seed=int(cfg.seed),
        metrics=metrics,
        # the same resamples of the test rows for every model on this test set: a paired bootstrap
        test_bootstrap=bootstrap_record(task.spec.metric, splits["test"]["label"].to_numpy(), predictions["test"],
                                        task.spec.spec_hash, y_train),
        trivial=trivial,  # the floor: each trivial baseline's metrics on the same seeds
        regime=run.model.regime,  # checked while it fitted (fourdb.train.regime)
        num_seeds={s: int(len(splits[s])) for s in SPLITS},
        num_seeds_available={s: int((task.frame["split"] == s).sum()) for s in SPLITS},
        fit_seconds=None, wall_seconds=None,  # the caller times the whole run
        peak_memory_mb=peak_mb,
        nproc=nproc,
        **run.model.report(),  # history, engine
        config=recorded_config(cfg),
        **environment(),
    )


def parallel_auto(plan: dict, record: RunRecord, world: int) -> dict:
    """``trainer.nproc=auto``'s plan beside the epochs measured (logged as a comparison)."""
    measured = (record.engine or {}).get("epoch_seconds") or [h["seconds"] for h in record.history]
    log.info("parallel auto: %d rank(s), predicted epoch %.2f s; measured %s", world,
             plan["predicted_epoch_s"].get(str(world), float("nan")), ", ".join(f"{s:.2f} s" for s in measured))
    return {**plan, "measured_epoch_s": measured}


def format_records(records: list[dict], overrides: list[dict] | None = None) -> str:
    """One row per run; ``overrides``: per run, the settings that vary across them (shown after the model).
    Where runs hold several settings, a last line names the best by validation: test is printed beside
    every run, never used to choose."""
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
    return "\n".join([pd.DataFrame(rows).to_string(index=False), *best_lines(records, overrides)])


def best_lines(records: list[dict], overrides: list[dict] | None = None) -> list[str]:
    """Per (dataset, task) with more than one setting (model and varying overrides), the setting of best mean
    validation metric over its seeds, its test mean beside it; none where no run has a validation metric."""
    settings: dict[tuple, dict[tuple, list[dict]]] = {}
    for i, r in enumerate(records):
        setting = (("model", r["model"]), *sorted((overrides[i] if overrides else {}).items()))
        settings.setdefault((r["dataset"], r["task"]), {}).setdefault(setting, []).append(r)
    lines = []
    for (dataset, task), by_setting in settings.items():
        metric = next(iter(by_setting.values()))[0]["metric"]
        val = {k: _mean_metric(rs, "val", metric) for k, rs in by_setting.items()}
        val = {k: v for k, v in val.items() if np.isfinite(v)}
        if len(by_setting) < 2 or not val:
            continue
        best = (max if higher_is_better(metric) else min)(val, key=val.get)
        arrow = "higher" if higher_is_better(metric) else "lower"
        lines.append(f"best on {dataset}/{task} by mean validation {metric} ({arrow} is better): "
                     f"{', '.join(f'{k}={v}' for k, v in best)}: val {val[best]:.4f}, test "
                     f"{_mean_metric(by_setting[best], 'test', metric):.4f} (test reports, never chooses)")
    return lines


def _mean_metric(records: list[dict], split: str, metric: str) -> float:
    values = [(r["metrics"].get(split) or {}).get(metric) for r in records]
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")
