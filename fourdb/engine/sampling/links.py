"""Data sources for GNNs on recommendation tasks, through the same sampler and input gathering as every
other GNN.

``LinkSource``, ``IdentitySource`` and ``ContextSource`` below; in each, every row is seen as of its seed's cutoff.

``LinkSource`` (two towers): a training batch is B seeds, each with one of its true destinations and
``negatives`` random destinations that exist at its cutoff; the source and the distinct (destination,
cutoff) pairs are sampled as seeds of their tables, and the labels mark which candidates are true.
Evaluation embeds, per distinct cutoff, the seeds and every destination that exists then, and ranks all
destinations by the dot product: one matrix product and a top-k per chunk of seeds.

``IdentitySource`` (identity-aware GNN): each seed's neighbourhood is sampled as a tree of its own, and
the tree's edges, in both directions, form one graph over all of the batch's nodes, so that messages
flow out from the marked seed to the destination rows it reaches; those rows are its candidates.
Evaluation ranks them by the model's scores, then every other existing destination by popularity as of
the cutoff: one dense [seeds, destinations] score matrix and a top-k per chunk of seeds.

``ContextSource`` (ContextGNN): the identity-aware trees, and beside them what scores every other
destination as of the seed's cutoff: whether it exists, its popularity (recent and all-time), and which
learned embedding is its own; the model scores all existing destinations, so a batch is [seeds,
destinations] and ranking is a top-k of it.

A model that learns a vector per destination row finds it by key (``key_vocabularies``, ``key_rows``):
the two towers and the identity-aware GNN with ``id_embeddings``, whose sources then hand every
destination node of a batch the rows of its vectors (``feats[destination]["id_rows"]``), and ContextGNN.
"""
from __future__ import annotations

import dgl
import numpy as np
import pandas as pd
import torch

from fourdb.engine.sampling.blocks import make_block
from fourdb.engine.feeding.pipeline import prefetch
from fourdb.engine.sampling.source import GraphSource
from fourdb.engine.planning.timing import to_device
from fourdb.tasks.interactions import CHUNK, RecData, only
from fourdb.utils import positions_in_runs

EVAL_SEED = 12345


def key_vocabularies(dst_ids: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per id column of the destination table (``Interactions.dst_ids``: its primary key, then one per
    foreign key), the distinct keys of the database a model is fitted on: the rows it learns a vector for."""
    return {col: pd.unique(values[pd.notna(values)]) for col, values in dst_ids.items()}


def key_sizes(vocabularies: dict[str, np.ndarray]) -> list[int]:
    """Rows of each id column's block of the embedding table: its keys, and a last row for every unseen one."""
    return [len(v) + 1 for v in vocabularies.values()]


def key_rows(dst_ids: dict[str, np.ndarray], vocabularies: dict[str, np.ndarray]) -> torch.Tensor:
    """[id columns, destinations]: the row of one embedding table (the columns' blocks one after another,
    ``key_sizes``) that holds the vector of each destination's key, and of its parent row's per foreign
    key. Found by key, so a rebuilt database with other row numbers reaches the same rows; a key the
    vocabulary lacks gets its block's shared last row."""
    rows, start = [], 0
    for (col, vocab), size in zip(vocabularies.items(), key_sizes(vocabularies)):
        found = pd.Index(vocab).get_indexer(dst_ids[col])
        rows.append(start + np.where(found < 0, len(vocab), found))
        start += size
    return torch.from_numpy(np.stack(rows).astype(np.int64))


class RecSource(GraphSource):
    """What the recommendation sources share: the task's destination lists as labels, and training
    batches sampled online every epoch (the offline store holds batches of seed rows, not these).

    With ``vocabularies`` (``id_embeddings``), every destination node of a batch carries the rows of its
    learned vectors as ``feats[destination]["id_rows"]`` [id columns, nodes], made on the sampler threads
    with the rest of the batch."""

    stores_batches = False  # its batches are made online every epoch, whatever the engine says

    def __init__(self, rec: RecData, batch_size: int, vocabularies: dict[str, np.ndarray] | None = None):
        super().__init__(rec.graph, batch_size)
        self.rec, self.destination = rec, rec.destination
        self.id_rows = None if vocabularies is None else key_rows(rec.interactions.dst_ids, vocabularies)

    def with_ids(self, batch, feats: dict) -> dict:
        """``feats`` with the rows of the destination nodes' learned vectors, when the model learns them."""
        if self.id_rows is not None and self.destination in feats:
            feats[self.destination]["id_rows"] = self.id_rows[:, batch.input_nodes[self.destination].cpu()]
        return feats

    def labels(self, split: str) -> np.ndarray:
        return self.rec.labels[split]

    def profile_batch(self, idx: np.ndarray, seed: int):
        """No stored batch; the model's inputs, as training makes them (towers, trees, context)."""
        return None, self.train_batch(idx, seed)[0]

    def train_batches(self, rng: np.random.Generator):
        plan = self.epoch_plan(rng)
        batches = prefetch(((lambda i=idx, s=s: self.train_batch(i, s)) for idx, s in plan), self.workers,
                           self.engine.prefetch)
        yield from self._timed(batches)

    def report(self) -> dict:
        return {**super().report(), "mode": "online"}


class LinkSource(RecSource):
    def __init__(self, rec: RecData, batch_size: int, negatives: int = 16,
                 vocabularies: dict[str, np.ndarray] | None = None):
        super().__init__(rec, batch_size, vocabularies)
        self.negatives = int(negatives)

    def embed_inputs(self, ntype: str, nodes: np.ndarray, cutoffs: np.ndarray, rng: np.random.Generator):
        """Blocks and input features for ``nodes`` of ``ntype`` as seeds, each at its cutoff (distinct pairs)."""
        sources = ntype == self.data.seed_type  # only the task's own seed rows are masked
        batch = self.sampler.sample(ntype, nodes, cutoffs, rng, self.data.hidden_etypes if sources else frozenset())
        return batch.blocks, self.with_ids(batch, self.gather(batch, task_seeds=sources))

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

    def report(self) -> dict:
        return {**super().report(), "negatives": self.negatives}

    @torch.no_grad()
    def infer(self, module, split: str, device) -> torch.Tensor:
        """[n, k] destination rows per seed of ``split``, ranked by the towers' dot product."""
        module.eval()
        d, inter, k = self.data, self.rec.interactions, self.rec.width(split)
        seeds, cutoffs = d.seeds[split], d.cutoffs[split]
        allowed = self.rec.allowed.get(split)
        out = torch.full((len(seeds), k), -1, dtype=torch.int64)
        for t in np.unique(cutoffs):
            at = np.flatnonzero(cutoffs == t)
            present = np.flatnonzero(inter.exists(int(t)))
            dst = self._embed(module, self.destination, present, int(t), device)
            src = self._embed(module, d.seed_type, seeds[at], int(t), device)
            for start in range(0, len(at), CHUNK):
                scores = src[start:start + CHUNK] @ dst.T
                if allowed is not None:
                    rows = at[start:start + CHUNK]
                    scores = scores.masked_fill(~only(allowed[rows], inter.n_dst)[:, present].to(scores.device), -np.inf)
                top = torch.topk(scores, min(k, len(present)), dim=1)
                ids = torch.from_numpy(present[top.indices.cpu().numpy()])
                out[at[start:start + CHUNK], :ids.shape[1]] = ids.masked_fill(~torch.isfinite(top.values.cpu()), -1)
        return out

    def _embed(self, module, ntype: str, nodes: np.ndarray, cutoff: int, device) -> torch.Tensor:
        parts = []
        for start in range(0, len(nodes), self.batch_size):
            rows = nodes[start:start + self.batch_size]
            blocks, feats = self.embed_inputs(ntype, rows, np.full(len(rows), cutoff, np.int64),
                                              np.random.default_rng(EVAL_SEED + start))
            parts.append(module.embed(to_device(blocks, device), to_device(feats, device), ntype))
        return torch.cat(parts) if parts else torch.zeros((0, module.dim), device=device)


def both_ways(blocks: list, reverse: dict, ntypes: list[str]):
    """One block over every node of a sampled batch (its sources and destinations alike), holding each
    sampled edge once and its reverse once: a node's local id is the same in every block of a batch (each
    block's nodes are a prefix of the first block's sources), so the blocks' edges join as they are."""
    first = blocks[0]
    num = {t: first.num_src_nodes(t) if t in first.srctypes else 0 for t in ntypes}
    parts: dict[tuple, list] = {}
    for block in blocks:
        for et in block.canonical_etypes:
            src, dst = block.edges(etype=et)
            if not len(src):
                continue
            data = block.edges[et].data
            eid = data[dgl.EID] if dgl.EID in data else None
            parts.setdefault(et, []).append((src, dst, eid))
            parts.setdefault(reverse[et], []).append((dst, src, eid))
    edges, eids, empty = {}, {}, torch.zeros(0, dtype=torch.int64, device=first.device)
    for et in first.canonical_etypes:
        if et not in parts:
            edges[et] = (empty, empty)
            if dgl.EID in first.edges[et].data:
                eids[et] = empty
            continue
        src, dst = (torch.cat([p[i] for p in parts[et]]) for i in (0, 1))
        ids = [p[2] for p in parts[et]]
        has_ids = all(i is not None for i in ids)
        # an edge sampled at two hops (a seed's neighbour reaching back to the seed) is one edge
        key = torch.stack([src, dst, torch.cat(ids) if has_ids else torch.zeros_like(src)], 1)
        key = torch.unique(key, dim=0)
        edges[et] = (key[:, 0], key[:, 1])
        if has_ids:
            eids[et] = key[:, 2]
    return make_block(edges, num, num, first.device, eids)


class IdentitySource(RecSource):
    def __init__(self, rec: RecData, batch_size: int, vocabularies: dict[str, np.ndarray] | None = None):
        super().__init__(rec, batch_size, vocabularies)
        self._popular: dict[int, torch.Tensor] = {}

    def tree_batch(self, split: str, idx: np.ndarray, rng: np.random.Generator):
        """Model inputs ``(block, feats, index, seeds, width)`` for seeds ``idx`` of ``split``, and per
        destination node of the batch ``(group, rows)``: the seed that reached it and its destination row
        (``index`` holds its seed and slot in the [seeds, width] score matrix)."""
        d = self.data
        batch = self.sampler.sample(d.seed_type, d.seeds[split][idx], d.cutoffs[split][idx], rng,
                                    d.hidden_etypes, isolate=True)
        block = both_ways(batch.blocks, d.graph.reverse, d.graph.ntypes)
        feats = self.with_ids(batch, self.gather(batch, blocks=[block]))
        group = batch.input_groups[self.destination].cpu().numpy()
        rows = batch.input_nodes[self.destination].cpu().numpy()
        count = np.bincount(group, minlength=len(idx))
        order = np.argsort(group, kind="stable")
        slot = np.empty(len(group), np.int64)
        slot[order] = positions_in_runs(count)  # the seeds' rows in seed order, each run one seed's
        index = torch.from_numpy(np.stack([group, slot]))
        return (block, feats, index, len(idx), int(count.max(initial=0))), (group, rows)

    def train_batch(self, idx: np.ndarray, seed: int):
        inputs, (group, rows) = self.tree_batch("train", idx, np.random.default_rng(seed))
        truth = self.rec.labels["train"][idx]
        n_dst = self.rec.interactions.n_dst
        true_keys = np.concatenate([np.asarray(t, np.int64) + i * n_dst for i, t in enumerate(truth)] + [[]])
        labels = torch.zeros((inputs[3], inputs[4]))
        labels[inputs[2][0], inputs[2][1]] = torch.from_numpy(np.isin(group * n_dst + rows, true_keys)).float()
        return inputs, labels

    @torch.no_grad()
    def infer(self, module, split: str, device) -> torch.Tensor:
        """[n, k] destination rows per seed of ``split``: the reached rows by score, then the popular ones."""
        module.eval()
        cutoffs = self.data.cutoffs[split]
        parts = []
        for b, start in enumerate(range(0, len(cutoffs), self.batch_size)):
            idx = np.arange(start, min(len(cutoffs), start + self.batch_size))
            inputs, (group, rows) = self.tree_batch(split, idx, np.random.default_rng(EVAL_SEED + b))
            scores = module(*to_device(inputs, device)).cpu()
            allowed = self.rec.allowed[split][idx] if split in self.rec.allowed else None
            parts.append(self.ranked(scores, inputs[2], group, rows, cutoffs[idx], self.rec.width(split), allowed))
        return torch.cat(parts) if parts else torch.full((0, self.rec.width(split)), -1, dtype=torch.int64)

    def ranked(self, scores: torch.Tensor, index: torch.Tensor, group: np.ndarray, rows: np.ndarray,
               cutoffs: np.ndarray, k: int, allowed=None) -> torch.Tensor:
        """[seeds, k]: each seed's reached rows by ``scores`` ([seeds, width]), then every other
        destination that exists at its cutoff by popularity then; only ``allowed`` rows where given."""
        inter = self.rec.interactions
        place = torch.argsort(torch.argsort(scores, 1, descending=True), 1)[index[0], index[1]]
        value = (2.0 + scores.shape[1] - place).double()  # above every popularity score (< 1)
        out = torch.full((len(cutoffs), k), -1, dtype=torch.int64)
        step = max(1, 2 ** 24 // max(inter.n_dst, 1))  # seeds per dense [seeds, destinations] matrix
        for lo in range(0, len(cutoffs), step):
            matrix = torch.stack([self.popular(int(t)) for t in cutoffs[lo:lo + step]])
            if allowed is not None:
                matrix = matrix.masked_fill(~only(allowed[lo:lo + step], inter.n_dst), -np.inf)
            mine = (group >= lo) & (group < lo + step)
            r, c, v = group[mine] - lo, rows[mine], value[torch.from_numpy(mine)]
            born = torch.isfinite(matrix[r, c]).numpy()  # a row not born by the cutoff is never recommended
            matrix[r[born], c[born]] = v[born]
            top = torch.topk(matrix, min(k, inter.n_dst), dim=1)
            out[lo:lo + step, :top.indices.shape[1]] = top.indices.masked_fill(~torch.isfinite(top.values), -1)
        return out

    def popular(self, cutoff: int) -> torch.Tensor:
        """Per destination: its popularity at ``cutoff`` scaled into [0, 1), -inf if it does not exist yet."""
        if cutoff not in self._popular:
            inter = self.rec.interactions
            pop = inter.popularity_score(cutoff)
            self._popular[cutoff] = torch.from_numpy(np.where(inter.exists(cutoff), pop / (pop.max() + 1), -np.inf))
        return self._popular[cutoff]


class ContextSource(IdentitySource):
    """ContextGNN's inputs: a seed's own tree as for the identity-aware GNN, and for every destination, the
    seed's context outside it: whether it exists at the seed's cutoff, its popularity then (links in the
    last window and ever, as log1p counts), and the rows of its learned embeddings: its own and one per
    foreign key (the parent row it belongs to), found by key, so that a rebuilt database with other row
    numbers reaches the same ones (``key_rows``). The model scores every existing destination: [seeds,
    destinations]."""

    def __init__(self, rec: RecData, batch_size: int, vocabularies: dict[str, np.ndarray]):
        super().__init__(rec, batch_size)  # the tree's nodes carry none: the model reads every destination's below
        self.embedding_rows = key_rows(rec.interactions.dst_ids, vocabularies)
        self._prior: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def context_batch(self, split: str, idx: np.ndarray, rng: np.random.Generator):
        """Model inputs ``(block, feats, reached, seeds, at, prior, alive, embedding_rows)`` (the last [id
        columns, destinations]): ``reached``
        (seed, destination row) per destination node of the tree; per distinct cutoff of the batch, the
        destinations' ``prior`` [U, destinations, 2] and ``alive`` [U, destinations]; ``at`` the cutoff of
        each seed (an index into those)."""
        (block, feats, _, num_seeds, _), (group, rows) = self.tree_batch(split, idx, rng)
        distinct, at = np.unique(self.data.cutoffs[split][idx], return_inverse=True)
        prior, alive = zip(*(self.prior(int(t)) for t in distinct))
        reached = torch.from_numpy(np.stack([group, rows]).astype(np.int64))
        return (block, feats, reached, num_seeds, torch.from_numpy(at.astype(np.int64)), torch.stack(prior),
                torch.stack(alive), self.embedding_rows)

    def train_batch(self, idx: np.ndarray, seed: int):
        inputs = self.context_batch("train", idx, np.random.default_rng(seed))
        labels = torch.zeros((len(idx), self.rec.interactions.n_dst))
        truth = self.rec.labels["train"][idx]
        sizes = [len(t) for t in truth]
        if sum(sizes):
            labels[np.repeat(np.arange(len(idx)), sizes), np.concatenate([np.asarray(t, np.int64) for t in truth])] = 1
        alive = inputs[6][inputs[4]]
        return inputs, labels * alive  # a destination born after the cutoff cannot be a training target

    @torch.no_grad()
    def infer(self, module, split: str, device) -> torch.Tensor:
        """[n, k] destination rows per seed of ``split``, by the model's score over every existing one."""
        module.eval()
        cutoffs, k, n_dst = self.data.cutoffs[split], self.rec.width(split), self.rec.interactions.n_dst
        out = torch.full((len(cutoffs), k), -1, dtype=torch.int64)
        for b, start in enumerate(range(0, len(cutoffs), self.batch_size)):
            idx = np.arange(start, min(len(cutoffs), start + self.batch_size))
            inputs = self.context_batch(split, idx, np.random.default_rng(EVAL_SEED + b))
            scores = module(*to_device(inputs, device)).cpu()
            if split in self.rec.allowed:
                scores = scores.masked_fill(~only(self.rec.allowed[split][idx], n_dst), -np.inf)
            top = torch.topk(scores, min(k, n_dst), dim=1)
            out[idx, :top.indices.shape[1]] = top.indices.masked_fill(~torch.isfinite(top.values), -1)
        return out

    def prior(self, cutoff: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per destination, log1p of (recent, all-time) links known by ``cutoff``, and whether it exists then."""
        if cutoff not in self._prior:
            inter = self.rec.interactions
            recent, total = inter.popularity(cutoff)
            self._prior[cutoff] = (torch.from_numpy(np.log1p(np.stack([recent, total], 1)).astype(np.float32)),
                                   torch.from_numpy(inter.exists(cutoff)))
        return self._prior[cutoff]
