"""``GraphSource``: the data source a GNN's training pulls from (``fourdb.contracts.DataSource``).

How it makes training batches is the engine's choice (``EngineConfig``): sampled online every epoch,
or replayed from an offline store sampled once (the same batches, bit for bit), prefetched on sampler
threads while the model computes; ``auto`` profiles a few batches and picks. Each epoch's plan (order
and one random seed per batch) is drawn from the trainer's generator up front, so a batch never
depends on how many threads made it. Evaluation samples with fixed seeds, or runs exact layer-wise
inference (``engine.inference=layerwise``).
"""
from __future__ import annotations

import logging
import time

import numpy as np
import torch

from fourdb.contracts import DataSource
from fourdb.engine.planning.auto import choose, save_calibration
from fourdb.engine.config import EngineConfig
from fourdb.engine.sampling.data import GraphData, add_edge_features, node_inputs
from fourdb.engine.planning.frontier import pareto
from fourdb.engine.feeding.layerwise import layerwise_inference
from fourdb.engine.feeding.pipeline import prefetch
from fourdb.engine.feeding.store import BatchStore
from fourdb.engine.planning.timing import maxrss_mb

log = logging.getLogger("fourdb")


class GraphSource(DataSource):
    """Sampled blocks plus their gathered input features."""

    shardable = True
    stores_batches = True  # the offline store can feed its training (it stores sampled seed-row batches)

    def __init__(self, data: GraphData, batch_size: int, eval_seed: int = 12345,
                 engine: EngineConfig | dict | None = None):
        self.data, self.batch_size, self.eval_seed = data, batch_size, eval_seed
        engine = data.engine if engine is None else engine
        self.engine = engine if isinstance(engine, EngineConfig) else EngineConfig.from_dict(engine)
        dev = self.engine.sampler_device()
        self.sampler = data.sampler if str(data.sampler.device) == dev else data.sampler.to(dev)
        self.mode = None if self.engine.mode == "auto" else self.engine.mode
        self.workers, self.prefetch = self.engine.workers, self.engine.prefetch
        self.cache_mb = self.engine.cache_mb
        self.plan = None  # the auto decision, with its predicted epoch time
        self.epoch_seconds: list[float] = []
        self.peak_mb = 0.0  # under auto: the process's peak resident memory at the end of each epoch
        self.store = None
        self.module, self.device = None, None  # handed over by the trainer (``prepare``), for ``auto``
        self.planned_epochs = None
        self.rank, self.world = 0, 1  # data-parallel shard (fourdb/engine/distribution/ddp.py)

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
        from fourdb.engine.distribution.ddp import rank_seed, shard

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

    def gather(self, batch, task_seeds: bool = True, blocks: list | None = None) -> dict[str, dict[str, torch.Tensor]]:
        """Input node features per type; featured edges get theirs on ``blocks`` (the batch's own, or
        blocks made from them over the same nodes). With ``task_seeds`` the batch's seeds are the task's
        seed rows, whose hidden columns are masked."""
        d, out = self.data, {}
        cutoffs = {t: c.cpu().numpy() for t, c in batch.input_cutoffs.items()}
        for ntype, nodes in batch.input_nodes.items():
            out[ntype] = node_inputs(d, ntype, nodes.cpu().numpy(), cutoffs[ntype],
                                     batch.num_seeds if task_seeds and ntype == d.seed_type else 0)
        add_edge_features(d, batch.blocks if blocks is None else blocks, cutoffs)
        return out

    def timed_batches(self, rng: np.random.Generator, n: int) -> tuple[list, float]:
        """The first ``n`` training batches of an epoch's plan and the median seconds to sample and
        gather one (the first pays one-off warm-up)."""
        made, times = [], []
        for idx, s in self.epoch_plan(rng)[:n]:
            t = time.perf_counter()
            made.append(self.train_batch(idx, s)[0])
            times.append(time.perf_counter() - t)
        return made, float(np.median(times[1:] if len(times) > 1 else times)) if times else 0.0

    def train_batch(self, idx: np.ndarray, seed: int):
        inputs, _ = self._batch("train", idx, np.random.default_rng(seed))
        return inputs, torch.as_tensor(self.data.labels["train"][idx])

    def profile_batch(self, idx: np.ndarray, seed: int):
        """A training batch as ``engine=auto``'s dry run times it: the sampled batch a store would keep (None
        where ``stores_batches`` is false) and the model's inputs made from it."""
        batch = self.sample("train", idx, np.random.default_rng(seed))
        return batch, (batch.blocks, self.gather(batch))

    # ------------------------------------------------------------------ training batches
    def prepare(self, module: torch.nn.Module, device, epochs: int | None = None) -> None:
        """Called by the trainer before training: lets ``auto`` time the model on a few batches."""
        self.module, self.device, self.planned_epochs = module, device, epochs

    def train_batches(self, rng: np.random.Generator):
        if self.mode is None:
            self.plan = choose(self, rng)
            s = self.plan.strategy
            self.mode, self.workers, self.prefetch, self.cache_mb = s.mode, s.workers, s.prefetch, s.cache_mb
        if self.mode == "offline":
            if self.store is None:
                self.store = BatchStore.open_or_build(self, rng, self.engine.store_epochs, self.cache_mb)
            batches = self.store.epoch_batches(self, rng, self.workers, self.prefetch)
        else:
            plan = self.epoch_plan(rng)
            batches = prefetch(((lambda i=idx, s=seed: self.train_batch(i, s)) for idx, seed in plan),
                               self.workers, self.prefetch)
        yield from self._timed(batches)

    def _timed(self, batches):
        start, done = time.perf_counter(), False
        try:
            yield from batches
            done = True
        finally:
            seconds = time.perf_counter() - start
            self.epoch_seconds.append(seconds)
            if self.plan is not None:
                self.peak_mb = maxrss_mb()  # what the plan predicts for this process: its peak so far
                log.info("engine %s: epoch %d took %.2f s (predicted %.2f s), peak memory %.0f MB (predicted "
                         "%.0f MB%s)%s", self.mode, len(self.epoch_seconds), seconds, self.plan.train_s, self.peak_mb,
                         self._predicted_peak(), " per process" if self.world > 1 else "",
                         "" if done else ", stopped early")
                if self.rank == 0:  # the model's own error, for ``fourdb plan`` to show
                    save_calibration(self.plan, self.epoch_seconds, self.peak_mb)

    def _predicted_peak(self) -> float:
        """The plan's peak for this process (a data-parallel strategy's is summed over its ranks)."""
        return self.plan.strategy.peak_mb / self.plan.strategy.nproc

    def report(self) -> dict:
        """What the engine did, for the run record: mode, threads, cache, predicted and measured epochs;
        under auto also the predicted and measured peak memory and the time/memory frontier."""
        out = {"mode": self.mode, "workers": self.workers, "cache_mb": self.cache_mb,
               "inference": self.engine.inference, "sampler_device": str(self.sampler.device),
               "epoch_seconds": [round(s, 3) for s in self.epoch_seconds]}
        if self.plan is not None:
            c, seeds = self.plan.costs, self.batch_size // self.world
            out.update(prefetch=self.prefetch, objective=self.engine.objective,
                       memory_limit_gb=self.engine.memory_limit_gb, strategy=self.plan.strategy.name,
                       frontier=[s.to_dict() for s in pareto(self.plan.strategies)],
                       # the prediction beside the measurement: the training loop (``epoch_seconds``) and
                       # this process's peak RSS so far
                       predicted_epoch_seconds=round(self.plan.train_s, 3),
                       predicted_eval_seconds=round(self.plan.strategy.eval_s, 3),
                       predicted_peak_mb=round(self._predicted_peak(), 1), measured_peak_mb=round(self.peak_mb, 1),
                       auto_reason=self.plan.reason,
                       profile_ms={k: round(1e3 * line.at(seeds), 2) for k, line in (
                           ("sample", c.sample), ("replay", c.replay), ("model", c.model_t), ("model_1thread", c.model_1t))})
        if self.store is not None:
            out["store"] = str(self.store.folder)
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
        return layerwise_inference(module, self.data, split, device)
