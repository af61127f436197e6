"""The inputs of a run, prepared once for training, the parallel planner and certification alike:
the seed subsample, then table features (tabular models) or the graph with its sampler (GNNs)."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from fourdb.engine.config import EngineConfig
from fourdb.engine.data import GraphData
from fourdb.engine.sampler import TemporalSampler
from fourdb.features import TableData, build_table_features
from fourdb.features.interactions import RecData, rec_data
from fourdb.features.labels import label_data
from fourdb.features.pairs import pair_data
from fourdb.graph import build_graph, built_graph
from fourdb.graph.build import fk_relations
from fourdb.tasks import Task
from fourdb.tasks.checks import refuse_nothing_to_learn
from fourdb.utils import cache_root, stable_hash, to_epoch_ns

log = logging.getLogger("fourdb")
SPLITS = ("train", "val", "test")


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
    refuse_nothing_to_learn(task, out["train"])
    return out


def graph_inputs(cfg: DictConfig, db, task: Task, splits: dict) -> GraphData:
    graph = build_graph(db, cfg.graph.name, fit_until=task.fit_until)
    seed_type = task.spec.entity_table
    hidden = set(task.hidden_columns)
    fks = {c.name for c in db.schema.table(seed_type).foreign_keys}
    hidden_etypes = frozenset(et[1] for et in graph.canonical_etypes
                              if et[2] == seed_type and any(et[1] == fk_relations(seed_type, c)[1] for c in hidden & fks))
    sampler = TemporalSampler(graph, list(cfg.sampler.fanouts), cfg.sampler.name)
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


def rec_inputs(cfg: DictConfig, db, task: Task, splits: dict, kind: str) -> RecData:
    """A recommendation run's inputs: the link history and seeds; for a ranking model (``pairs``) also its
    candidates' pair features from the run's feature set; for a GNN the graph."""
    data = rec_data(db, task, splits)
    if kind == "pairs":
        params = {k: v for k, v in OmegaConf.to_container(cfg.features, resolve=True).items() if k != "name"}
        data = pair_data(data, db, task, splits, cfg.features.name, **params)
    elif kind == "graph":
        data.graph = graph_inputs(cfg, db, task, splits)
    return data


def run_inputs(cfg: DictConfig, db, task: Task, splits: dict, kind: str):
    """The inputs a model of ``kind`` (its ``input_kind``) reads, and how the run record names them."""
    if task.spec.task_type.is_ranking:
        data = rec_inputs(cfg, db, task, splits, kind)
        label = {"features": cfg.features.name} if kind == "pairs" else {"features": "history"} \
            if kind == "interactions" else graph_label(cfg, db)
        return data, label
    if kind == "graph":
        return graph_inputs(cfg, db, task, splits), graph_label(cfg, db)
    if kind == "labels":
        return label_data(task, splits), {"features": "labels"}
    return table_inputs(cfg, db, task, splits), {"features": cfg.features.name}


def log_columns(cfg: DictConfig, db, task: Task, kind: str, encoders: dict | None = None) -> None:
    """Say in the run's log which columns of each table the model reads and which it drops, and why
    (``encoders``: the graph's, already fitted)."""
    from fourdb.describe import KINDS, column_report, log_lines

    name = "graph" if kind == "graph" else cfg.features.name if kind in ("table", "pairs") else None
    if name is None:
        log.info("columns: the model reads no column, only the task's %s",
                 "training labels" if kind == "labels" else "link history")
        return
    if name not in KINDS:
        log.info("columns: no column report for feature set '%s'", name)
        return
    features = OmegaConf.to_container(cfg.features, resolve=True)
    params = {k: v for k, v in features.items() if k in ("depth", "primitives", "where")} if name == "dfs" \
        else {}
    for line in log_lines(column_report(db, task, (name,), cfg.graph.name, encoders=encoders, **params)):
        log.info("%s", line)


def graph_label(cfg: DictConfig, db) -> dict:
    """How the run record names a graph run's inputs: the graph as built on ``db`` (see ``built_graph``)."""
    return {"graph": built_graph(cfg.graph.name, db), "sampler": dict(cfg.sampler), "engine": dict(cfg.engine) if cfg.get("engine") else None}
