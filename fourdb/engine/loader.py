"""Batches of sampled subgraphs with their input features, for the trainer.

Features of a block's input nodes are gathered from the graph's encoded tables; the seed rows
themselves take the task's masked encoding (a row-column task hides the columns not known at the
cutoff). Each input node also gets its age at its cutoff, so a model can weigh recent rows. Edges of
a featured edge type (an r2ne link table) get theirs the same way, by the edge ids the sampled blocks
carry: the link row's encoded columns and the edge's age at its destination's cutoff, set on the
block's edges (``edata["num"]``, ``edata["cat"]``).

``GraphSource`` is what the trainer pulls from. How it makes training batches is the engine's choice
(``EngineConfig``): sampled online every epoch, or replayed from an offline store sampled once (the
same batches, bit for bit), prefetched on sampler threads while the model computes; ``auto`` profiles
a few batches and picks. Each epoch's plan (order and one random seed per batch) is drawn from the
trainer's generator up front, so a batch never depends on how many threads made it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import dgl
import numpy as np
import torch

from fourdb.engine.config import EngineConfig
from fourdb.engine.pipeline import prefetch
from fourdb.engine.sampler import TemporalSampler
from fourdb.features.columns import EncodedTable, datetime_age
from fourdb.graph.build import ALWAYS, RelGraph
from fourdb.utils import NS_PER_DAY

RELATIVE_TIME_DIMS = 2  # [log age in days, is static] of every row's (and edge's) own time
log = logging.getLogger("fourdb")


@dataclass
class GraphData:
    graph: RelGraph
    sampler: TemporalSampler
    seed_type: str
    seeds: dict[str, np.ndarray]  # split -> node ids
    cutoffs: dict[str, np.ndarray]  # split -> int64 nanoseconds
    labels: dict[str, np.ndarray]  # train and val only
    seed_features: EncodedTable  # the seed table encoded with hidden columns masked
    hidden_etypes: frozenset = field(default_factory=frozenset)
    engine: EngineConfig = field(default_factory=EngineConfig)  # how a GraphSource over this data runs


def input_width(feats: EncodedTable) -> int:
    """Width of the numbers a model gets per row: encoded columns, datetime ages, own age."""
    return feats.numeric.shape[1] + feats.datetimes.shape[1] + RELATIVE_TIME_DIMS


def _source(data: GraphData, ntype: str, rows: np.ndarray) -> tuple[EncodedTable, np.ndarray, np.ndarray]:
    """(table, rows, is masked): for the seed type a row ``n + i`` (n rows) is row i masked."""
    feats = data.graph.features[ntype]
    n = len(feats.numeric)
    masked = rows >= n if ntype == data.seed_type else np.zeros(len(rows), bool)
    return feats, rows % max(n, 1), masked


def row_features(data: GraphData, ntype: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encoded columns of ``rows`` that do not depend on the cutoff (see ``input_rows`` for masking)."""
    feats, local, masked = _source(data, ntype, rows)
    num, cat = feats.numeric[local], feats.categorical[local]
    if masked.any():
        m = local[masked]
        num[masked], cat[masked] = data.seed_features.numeric[m], data.seed_features.categorical[m]
    return num, cat


def age(times: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """[log(1 + age in days at the cutoff), is static] per row, float32."""
    static = times == ALWAYS
    days = np.where(static, 0.0, (cutoffs - np.where(static, 0, times)) / NS_PER_DAY)
    return np.stack([np.log1p(np.clip(days, 0, None)), static.astype(np.float64)], 1).astype(np.float32)


def relative_time(data: GraphData, ntype: str, rows: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """What a row's numbers hold that depends on its cutoff: each datetime column's age, then the row's
    own age (``age``). ``rows`` as ``input_rows`` gives them (masked seed rows hide their datetimes)."""
    feats, local, masked = _source(data, ntype, rows)
    dts = feats.datetimes[local]
    if masked.any():
        dts[masked] = data.seed_features.datetimes[local[masked]]
    return np.concatenate([datetime_age(dts, cutoffs), age(data.graph.node_time(ntype)[local], cutoffs)], 1)


def node_inputs(data: GraphData, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray,
                num_seeds: int = 0) -> dict[str, torch.Tensor]:
    """A block's input features for ``nodes`` of one type at their cutoffs: ``num`` (encoded columns,
    then ``relative_time``) and ``cat``; the first ``num_seeds`` of the seed type are the masked seeds."""
    rows = input_rows(data, ntype, nodes, num_seeds)
    num, cat = row_features(data, ntype, rows)
    rel = relative_time(data, ntype, rows, cutoffs)
    return {"num": torch.from_numpy(np.concatenate([num, rel], 1)), "cat": torch.from_numpy(cat)}


def add_edge_features(data: GraphData, blocks: list, cutoffs: dict[str, np.ndarray]) -> None:
    """Set each featured edge type's inputs on ``blocks``: ``edata["num"]`` (the link row's numeric
    columns, its datetime ages, then the edge's ``age`` at its destination's cutoff) and ``edata["cat"]``,
    read by the edge ids the blocks carry. ``cutoffs``: per type, the cutoff of each local node id (every
    block's nodes of a type are a prefix of the first block's sources)."""
    g = data.graph
    none = np.zeros(0, np.int64)
    for block in blocks:
        for et, table in g.edge_features.items():
            eid = block.edges[et].data[dgl.EID].cpu().numpy()
            dst = block.edges(etype=et)[1].cpu().numpy()
            cut = cutoffs.get(et[2], none)[dst]
            num = np.concatenate([table.numeric[eid], datetime_age(table.datetimes[eid], cut),
                                  age(g.edge_time(et)[eid], cut)], 1)
            block.edges[et].data["num"] = torch.from_numpy(num).to(block.device)
            block.edges[et].data["cat"] = torch.from_numpy(table.categorical[eid]).to(block.device)


def input_rows(data: GraphData, ntype: str, nodes: np.ndarray, num_seeds: int) -> np.ndarray:
    """Feature rows of a block's input nodes: the first ``num_seeds`` of the seed type are masked."""
    rows = nodes.astype(np.int64, copy=True)
    if ntype == data.seed_type and num_seeds:
        rows[:num_seeds] += data.graph.features[ntype].numeric.shape[0]
    return rows


class GraphSource:
    """The data source the trainer pulls from: sampled blocks plus gathered features."""

    def __init__(self, data: GraphData, batch_size: int, eval_seed: int = 12345,
                 engine: EngineConfig | dict | None = None):
        self.data, self.batch_size, self.eval_seed = data, batch_size, eval_seed
        if engine is None:
            engine = getattr(data, "engine", None)
        self.engine = engine if isinstance(engine, EngineConfig) else EngineConfig.from_dict(engine)
        dev = self.engine.sampler_device()
        self.sampler = data.sampler if str(data.sampler.device) == dev else data.sampler.to(dev)
        self.mode = None if self.engine.mode == "auto" else self.engine.mode
        self.workers = self.engine.workers
        self.cache_mb = self.engine.cache_mb
        self.plan = None  # the auto decision, with its predicted epoch time
        self.epoch_seconds: list[float] = []
        self._store = None
        self._module, self._device = None, None
        self.planned_epochs = None
        self.rank, self.world = 0, 1  # data-parallel shard (fourdb/engine/ddp.py)

    # ------------------------------------------------------------------ data access
    def labels(self, split: str) -> np.ndarray:
        return self.data.labels[split]

    def num_train_batches(self) -> int:
        return -(-len(self.data.seeds["train"]) // self.batch_size)

    def shard(self, rank: int, world: int) -> None:
        """Make only rank ``rank``'s share of each batch, of ``world`` ranks (data-parallel training)."""
        self.rank, self.world = rank, world

    def epoch_plan(self, rng: np.random.Generator) -> list[tuple[np.ndarray, int]]:
        """Batches of one epoch: seed positions and a random seed each, drawn from ``rng`` up front.

        A shard keeps its contiguous part of every global batch (one with fewer seeds than ranks is
        left out on all of them) and samples it from a seed of its own.
        """
        from fourdb.engine.ddp import rank_seed, shard

        order = rng.permutation(len(self.data.seeds["train"]))
        chunks = [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        seeds = rng.integers(0, np.iinfo(np.int64).max, size=len(chunks))
        if self.world > 1:
            return [(shard(c, self.rank, self.world), rank_seed(int(s), self.rank))
                    for c, s in zip(chunks, seeds) if len(c) >= self.world]
        return list(zip(chunks, (int(s) for s in seeds)))

    def sample(self, split: str, idx: np.ndarray, rng: np.random.Generator):
        d = self.data
        return self.sampler.sample(d.seed_type, d.seeds[split][idx], d.cutoffs[split][idx], rng, d.hidden_etypes)

    def _batch(self, split: str, idx: np.ndarray, rng: np.random.Generator):
        batch = self.sample(split, idx, rng)
        return (batch.blocks, self.gather(batch)), batch

    def gather(self, batch) -> dict[str, dict[str, torch.Tensor]]:
        """Input node features per type; featured edges get theirs on the batch's blocks."""
        d, out = self.data, {}
        cutoffs = {t: c.cpu().numpy() for t, c in batch.input_cutoffs.items()}
        for ntype, nodes in batch.input_nodes.items():
            out[ntype] = node_inputs(d, ntype, nodes.cpu().numpy(), cutoffs[ntype],
                                     batch.num_seeds if ntype == d.seed_type else 0)
        add_edge_features(d, batch.blocks, cutoffs)
        return out

    def train_batch(self, idx: np.ndarray, seed: int):
        inputs, _ = self._batch("train", idx, np.random.default_rng(seed))
        return inputs, torch.as_tensor(self.data.labels["train"][idx])

    # ------------------------------------------------------------------ training batches
    def prepare(self, module: torch.nn.Module, device, epochs: int | None = None) -> None:
        """Called by the trainer before training: lets ``auto`` time the model on a few batches."""
        self._module, self._device, self.planned_epochs = module, device, epochs

    def train_batches(self, rng: np.random.Generator):
        if self.mode is None:
            from fourdb.engine.auto import choose

            self.plan = choose(self, rng)
            self.mode, self.workers, self.cache_mb = self.plan.mode, self.plan.workers, self.plan.cache_mb
        if self.mode == "offline":
            if self._store is None:
                from fourdb.engine.store import BatchStore

                self._store = BatchStore.open_or_build(self, rng, self.engine.store_epochs, self.cache_mb)
            batches = self._store.epoch_batches(self, rng, self.workers, self.engine.prefetch)
        else:
            plan = self.epoch_plan(rng)
            batches = prefetch(((lambda i=idx, s=seed: self.train_batch(i, s)) for idx, seed in plan),
                               self.workers, self.engine.prefetch)
        yield from self._timed(batches)

    def _timed(self, batches):
        start, done = time.perf_counter(), False
        try:
            for item in batches:
                yield item
            done = True
        finally:
            seconds = time.perf_counter() - start
            self.epoch_seconds.append(seconds)
            if self.plan is not None:
                log.info("engine %s: epoch %d took %.2f s (predicted %.2f s)%s", self.mode, len(self.epoch_seconds),
                         seconds, self.plan.predicted_epoch_s, "" if done else ", stopped early")

    def report(self) -> dict:
        """What the engine did, for the run record: mode, threads, cache, predicted and measured epochs."""
        out = {"mode": self.mode, "workers": self.workers, "cache_mb": self.cache_mb,
               "inference": self.engine.inference, "sampler_device": str(self.sampler.device),
               "epoch_seconds": [round(s, 3) for s in self.epoch_seconds]}
        if self.plan is not None:
            out.update(predicted_epoch_seconds=round(self.plan.predicted_epoch_s, 3), auto_reason=self.plan.reason,
                       profile_ms={"sample": round(1e3 * self.plan.sample_s, 2), "replay": round(1e3 * self.plan.replay_s, 2),
                                   "model": round(1e3 * self.plan.model_s, 2)})
        if self._store is not None:
            out["store"] = str(self._store.folder)
        return out

    # ------------------------------------------------------------------ evaluation
    def batches(self, split: str):
        n = len(self.data.seeds[split])
        starts = range(0, n, self.batch_size)
        # evaluation samples the same neighbourhoods every time: one fixed seed per batch
        seeds = np.random.default_rng(self.eval_seed).integers(0, np.iinfo(np.int64).max, size=len(starts))
        jobs = ((lambda a=a, s=int(s): self._batch(split, np.arange(a, min(n, a + self.batch_size)),
                                                   np.random.default_rng(s))[0])
                for k, (a, s) in enumerate(zip(starts, seeds)) if k % self.world == self.rank)  # a shard: its batches
        yield from prefetch(jobs, self.workers, self.engine.prefetch)

    def infer(self, module: torch.nn.Module, split: str, device) -> torch.Tensor | None:
        """Raw model outputs for a split by exact layer-wise inference, or None to use ``batches``."""
        if self.engine.inference != "layerwise":
            return None
        from fourdb.engine.layerwise import layerwise_inference

        return layerwise_inference(module, self.data, split, device)
