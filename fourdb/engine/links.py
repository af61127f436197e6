"""Data sources for GNNs on recommendation tasks, through the same sampler and input gathering as every
other GNN: each side of a (source, destination) pair is a seed of its own table, seen as of the pair's
cutoff.

``LinkSource`` (two towers): a training batch is B seeds, each with one of its true destinations and
``negatives`` random destinations that exist at its cutoff; the source and the distinct (destination,
cutoff) pairs are sampled as seeds of their tables, and the labels mark which candidates are true.
Evaluation embeds, per distinct cutoff, the seeds and every destination that exists then, and ranks all
destinations by the dot product: one matrix product and a top-k per chunk of seeds.
"""
from __future__ import annotations

import numpy as np
import torch

from fourdb.engine.pipeline import prefetch
from fourdb.engine.source import GraphSource
from fourdb.engine.timing import to_device
from fourdb.features.interactions import CHUNK, RecData

EVAL_SEED = 12345


class LinkSource(GraphSource):
    def __init__(self, rec: RecData, batch_size: int, negatives: int = 16):
        super().__init__(rec.graph, batch_size)
        self.rec, self.negatives, self.destination = rec, int(negatives), rec.destination

    def labels(self, split: str) -> np.ndarray:
        return self.rec.labels[split]

    def embed_inputs(self, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray, rng: np.random.Generator):
        """Blocks and input features for ``nodes`` of ``ntype`` as seeds, each at its cutoff (distinct pairs)."""
        sources = ntype == self.data.seed_type  # only the task's own seed rows are masked
        batch = self.sampler.sample(ntype, nodes, cutoffs, rng, self.data.hidden_etypes if sources else frozenset())
        return batch.blocks, self.gather(batch, task_seeds=sources)

    def train_batch(self, idx: np.ndarray, seed: int):
        rng = np.random.default_rng(seed)
        d, inter = self.data, self.rec.interactions
        src, cut = d.seeds["train"][idx], d.cutoffs["train"][idx]
        truth = self.rec.labels["train"][idx]
        sizes = np.array([len(t) for t in truth])
        flat = np.concatenate(list(truth))
        positive = flat[np.cumsum(sizes) - sizes + (rng.random(len(idx)) * sizes).astype(np.int64)]
        negative = rng.integers(0, inter.n_dst, (len(idx), self.negatives))
        for _ in range(8):  # redraw destinations that do not exist yet at their seed's cutoff
            unborn = (inter.dst_born[negative] != np.iinfo(np.int64).min) & (inter.dst_born[negative] > cut[:, None])
            if not unborn.any():
                break
            negative[unborn] = rng.integers(0, inter.n_dst, int(unborn.sum()))
        candidates = np.concatenate([positive[:, None], negative], 1)
        labels = np.stack([np.isin(candidates[i], truth[i]) for i in range(len(idx))]).astype(np.float32)
        pairs = np.stack([candidates.reshape(-1), np.repeat(cut, candidates.shape[1])], 1)
        distinct, where = np.unique(pairs, axis=0, return_inverse=True)
        src_blocks, src_feats = self.embed_inputs(d.seed_type, src, cut, rng)
        dst_blocks, dst_feats = self.embed_inputs(self.destination, distinct[:, 0], distinct[:, 1], rng)
        inputs = (src_blocks, src_feats, dst_blocks, dst_feats, torch.from_numpy(where.reshape(candidates.shape)))
        return inputs, torch.from_numpy(labels)

    def train_batches(self, rng: np.random.Generator):
        plan = self.epoch_plan(rng)
        batches = prefetch(((lambda i=idx, s=s: self.train_batch(i, s)) for idx, s in plan), self.workers,
                           self.engine.prefetch)
        yield from self._timed(batches)

    def report(self) -> dict:
        return {**super().report(), "mode": "online", "negatives": self.negatives}

    @torch.no_grad()
    def infer(self, module, split: str, device) -> torch.Tensor:
        """[n, k] destination rows per seed of ``split``, ranked by the towers' dot product."""
        module.eval()
        d, inter, k = self.data, self.rec.interactions, self.rec.k
        seeds, cutoffs = d.seeds[split], d.cutoffs[split]
        out = torch.full((len(seeds), k), -1, dtype=torch.int64)
        for t in np.unique(cutoffs):
            at = np.flatnonzero(cutoffs == t)
            present = np.flatnonzero(inter.exists(int(t)))
            dst = self._embed(module, self.destination, present, int(t), device)
            src = self._embed(module, d.seed_type, seeds[at], int(t), device)
            for start in range(0, len(at), CHUNK):
                scores = src[start:start + CHUNK] @ dst.T
                top = torch.topk(scores, min(k, len(present)), dim=1).indices.cpu().numpy()
                out[at[start:start + CHUNK], :top.shape[1]] = torch.from_numpy(present[top])
        return out

    def _embed(self, module, ntype: str, nodes: np.ndarray, cutoff: int, device) -> torch.Tensor:
        parts = []
        for start in range(0, len(nodes), self.batch_size):
            rows = nodes[start:start + self.batch_size]
            blocks, feats = self.embed_inputs(ntype, rows, np.full(len(rows), cutoff, np.int64),
                                              np.random.default_rng(EVAL_SEED + start))
            parts.append(module.embed(to_device(blocks, device), to_device(feats, device), ntype))
        return torch.cat(parts) if parts else torch.zeros((0, module.dim), device=device)
