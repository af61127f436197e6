"""The graph input kind: the database as a heterograph with its temporal sampler (GNNs); on a recommendation
task, the link history beside it. A classification or regression run's graph is built once per machine
and mapped by every rank."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fourdb.engine.config import EngineConfig
from fourdb.experiment.inputs import INPUT_KINDS, InputKind, train_val_labels
from fourdb.tasks import Task
from fourdb.utils import cache_root, stable_hash, to_epoch_ns


class GraphKind(InputKind):
    name = "graph"
    trains_on_graph = True

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        if task.spec.task_type.is_ranking:
            from fourdb.tasks.interactions import rec_data

            data = rec_data(db, task, splits)
            data.graph = graph_inputs(cfg, db, task, splits)
            return data
        return graph_inputs(cfg, db, task, splits)

    def label(self, cfg: DictConfig, db) -> dict:
        return graph_label(cfg, db)

    def prepare(self, cfg: DictConfig, db, task: Task, splits: dict, out_dir=None, ctx=None, share: bool = False):
        """``share`` builds the graph into the shared folder even in one process (the launcher's profile, so
        the ranks it starts map what it built)."""
        from fourdb.engine.distribution import ddp

        if task.spec.task_type.is_ranking:  # the link history is built beside the graph, in each process
            return super().prepare(cfg, db, task, splits)
        ctx = ctx or ddp.Context()
        folder, key = shared_folder(cfg, out_dir), inputs_key(cfg)
        if not (share or ctx.distributed or ddp.shared_manifest(folder, key)):
            return super().prepare(cfg, db, task, splits)
        data, shared = ddp.shared_inputs(lambda: graph_inputs(cfg, db, task, splits), folder, ctx, key)
        data.engine = graph_engine(cfg)
        return data, graph_label(cfg, db), shared

    def column_view(self, cfg: DictConfig) -> str:
        return "graph"

    def encoders(self, data) -> dict | None:
        from fourdb.engine.sampling.data import GraphData

        return data.graph.encoders if isinstance(data, GraphData) else None  # a recommendation's: refitted

    def board_name(self, inputs: dict) -> str | None:
        return None if "features" in inputs else f"graph {inputs.get('graph', '?')}"


INPUT_KINDS.register("graph", GraphKind())


def graph_inputs(cfg: DictConfig, db, task: Task, splits: dict):
    """The graph (``GraphData``) of ``db`` for the seeds of ``splits``: built, with its sampler."""
    from fourdb.engine.sampling.data import GraphData
    from fourdb.engine.sampling.sampler import TemporalSampler
    from fourdb.graph import build_graph
    from fourdb.graph.build import fk_relations

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
        labels=train_val_labels(splits),
        seed_features=seed_features, hidden_etypes=hidden_etypes,
        engine=graph_engine(cfg),
    )


def graph_label(cfg: DictConfig, db) -> dict:
    """How the run record names a graph run's inputs: the graph as built on ``db`` (see ``built_graph``)."""
    from fourdb.graph import built_graph

    return {"graph": built_graph(cfg.graph.name, db), "sampler": dict(cfg.sampler),
            "engine": dict(cfg.engine) if cfg.get("engine") else None}


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
