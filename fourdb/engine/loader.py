"""Batches of sampled subgraphs with their input features, for the trainer.

Features of a block's input nodes are gathered from the graph's encoded tables; the seed rows
themselves take the task's masked encoding (a row-column task hides the columns not known at the
cutoff). Each input node also gets its age at its cutoff, so a model can weigh recent rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fourdb.engine.sampler import TemporalSampler
from fourdb.features.columns import EncodedTable
from fourdb.graph.build import ALWAYS, RelGraph

SECONDS_PER_DAY = 86400.0


@dataclass
class GraphData:
    graph: RelGraph
    sampler: TemporalSampler
    seed_type: str
    seeds: dict[str, np.ndarray]  # split -> node ids
    cutoffs: dict[str, np.ndarray]  # split -> int64 seconds
    labels: dict[str, np.ndarray]  # train and val only
    seed_features: EncodedTable  # the seed table encoded with hidden columns masked
    hidden_etypes: frozenset = field(default_factory=frozenset)


class GraphSource:
    """The data source the trainer pulls from: sampled blocks plus gathered features."""

    def __init__(self, data: GraphData, batch_size: int, eval_seed: int = 12345):
        self.data, self.batch_size, self.eval_seed = data, batch_size, eval_seed

    def labels(self, split: str) -> np.ndarray:
        return self.data.labels[split]

    def num_train_batches(self) -> int:
        return -(-len(self.data.seeds["train"]) // self.batch_size)

    def _batch(self, split: str, idx: np.ndarray, rng: np.random.Generator):
        d = self.data
        batch = d.sampler.sample(d.seed_type, d.seeds[split][idx], d.cutoffs[split][idx], rng, d.hidden_etypes)
        return (batch.blocks, self.gather(batch)), batch

    def gather(self, batch) -> dict[str, dict[str, torch.Tensor]]:
        d, out = self.data, {}
        for ntype, nodes in batch.input_nodes.items():
            ids = nodes.numpy()
            feats = d.graph.features[ntype]
            num, cat = feats.numeric[ids], feats.categorical[ids]
            if ntype == d.seed_type:
                k = batch.num_seeds
                num[:k], cat[:k] = d.seed_features.numeric[ids[:k]], d.seed_features.categorical[ids[:k]]
            node_t = d.graph.node_time(ntype)[ids]
            static = node_t == ALWAYS
            age = np.where(static, 0.0, (batch.input_cutoffs[ntype].numpy() - node_t) / SECONDS_PER_DAY)
            rel = np.stack([np.log1p(np.clip(age, 0, None)), static.astype(np.float64)], 1).astype(np.float32)
            out[ntype] = {"num": torch.from_numpy(np.concatenate([num, rel], 1)), "cat": torch.from_numpy(cat)}
        return out

    def train_batches(self, rng: np.random.Generator):
        order = rng.permutation(len(self.data.seeds["train"]))
        for start in range(0, len(order), self.batch_size):
            inputs, _ = self._batch("train", order[start:start + self.batch_size], rng)
            yield inputs, torch.as_tensor(self.data.labels["train"][order[start:start + self.batch_size]])

    def batches(self, split: str):
        rng = np.random.default_rng(self.eval_seed)  # evaluation samples the same neighbourhoods every time
        n = len(self.data.seeds[split])
        for start in range(0, n, self.batch_size):
            inputs, _ = self._batch(split, np.arange(start, min(n, start + self.batch_size)), rng)
            yield inputs
