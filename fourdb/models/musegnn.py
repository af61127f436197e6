"""MuseGNN (Jiang et al., "MuseGNN: forming scalable, convergent GNN layers that minimize a sampling-based
energy") on the relational heterograph: each layer is one descent step on a graph-regularized energy of
the sampled subgraph, whose cross-subgraph term ties a row's state to its state in earlier batches.

A node is a (row, cutoff) pair. The energy of a sampled subgraph, over its nodes' states Y:

    E(Y) = sum_v  ||Y_v - f(x_v)||^2                          data: f is an MLP of the encoded row
         + lam   * sum_v sum_r ||Y_v - W_r mean_{u in N_r(v)} Y_u||^2   graph: per edge type r into v
         + gamma * sum_v has_v ||Y_v - mu_v||^2                 cross-subgraph: mu_v from other batches

Each layer takes one Jacobi-preconditioned gradient step on every destination's terms, its neighbours
held at the previous iterate (R_v: the edge types with an in-edge at v; g_v = gamma * has_v):

    Y_v <- (1 - alpha) Y_v + alpha (f_v + lam sum_r W_r mean_r Y + g_v mu_v) / (1 + lam R_v + g_v)

Every layer descends the same energy, so f, the maps W_r and the hyperparameters are shared by all; the
layers have no residual, norm or activation of their own. A two-layer head reads the seeds' last iterate.

The cross-subgraph term, made time-correct. Step i keeps a store per table: for each row, the latest
cutoff at which a training batch computed its iterate, and that iterate (detached; computed again at the
same cutoff, it is averaged in with forgetting factor rho, the paper's online mean). A node (row, c) reads
the entry only if it was computed at a cutoff <= c (``recall``): an iterate computed at cutoff t sees the
rows known at t, so a node at c >= t may see it and a node at c < t may not, whose term then drops out
(has_v = 0). Rows are named by ``fourdb.engine.sampling.data.row_keys``, which every build of the database as of c
gives alike, so deleting or scrambling what is newer than c changes no entry a node at c reads
(``fourdb certify``). Only training batches write (``remember``); evaluation reads a frozen store, so a
row's prediction is a function of its own subgraph and the fitted model, whatever else shares its batch.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from fourdb.engine.sampling.data import input_width
from fourdb.models.base import keywords, register_model
from fourdb.models.encoders import RowEncoding, key
from fourdb.models.gnn import GNN, HeteroGNN

NEVER = torch.iinfo(torch.int64).max  # the cutoff of a store row never written: no node's cutoff reaches it


@dataclass
class State:
    """What one descent step hands the next, per table, for the step's nodes (destinations first)."""

    y: dict[str, torch.Tensor]  # the iterate Y
    f: dict[str, torch.Tensor]  # f(x), the data term's target, the same at every step
    row_key: dict[str, torch.Tensor]  # fourdb.engine.sampling.data.row_keys (-1: the row has no name)
    cutoff: dict[str, torch.Tensor]  # int64 ns

    def prefix(self, n: dict[str, int], y: dict[str, torch.Tensor]) -> "State":
        """The state of the first ``n[t]`` nodes per table (the next step's nodes), with iterate ``y``."""
        return State(y, *({t: v[:n[t]] for t, v in part.items()} for part in (self.f, self.row_key, self.cutoff)))


def destinations(etypes: list, seed_type: str, layers: int) -> list[set[str]]:
    """The tables whose rows are destinations of each step: the seeds' at the last, and at each step
    before it those and the tables with an edge type into them (a sampled block's destinations are the
    next block's sources)."""
    out, tables = [], {seed_type}
    for _ in range(layers):
        out.insert(0, set(tables))
        tables |= {s for s, _, d in etypes if d in tables}
    return out


class MuseNet(HeteroGNN):
    """HeteroGNN's column encoders, edge-feature encoders and head around ``layers`` descent steps."""

    def __init__(self, dims: dict, edge_dims: dict, etypes: list, rows: dict[str, int], layers: int, hidden: int,
                 out_dim: int, seed_type: str, dropout: float, row_encoding: RowEncoding | None = None, *, alpha: float,
                 lam: float, gamma: float, rho: float):
        super().__init__(nn.Identity, dims, layers, hidden, out_dim, seed_type, dropout, edge_dims, row_encoding)
        del self.convs, self.norms  # the descent steps below replace them: one energy, one set of weights
        self.alpha, self.lam, self.gamma, self.rho = alpha, lam, gamma, rho
        # f: with the encoder's linear layer, a one-hidden-layer MLP of the row's columns (row_encoder=resnet:
        # one more layer on the table's ResNet)
        self.f = nn.ModuleDict({key(t): nn.Sequential(nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, hidden))
                                for t in dims})
        # no bias: a table reached by no edge of type r gets no pull from r
        self.w = nn.ModuleDict({rel: nn.Linear(hidden, hidden, bias=False) for _, rel, _ in etypes})
        # buffers, so the store is saved with the weights it was computed by (best epoch, checkpoints)
        self.stored = [sorted(t for t in tables if rows[t]) for tables in destinations(etypes, seed_type, layers)]
        for i, tables in enumerate(self.stored):
            for t in tables:
                self.register_buffer(f"mu{i}_{key(t)}", torch.zeros(rows[t], hidden))
                self.register_buffer(f"at{i}_{key(t)}", torch.full((rows[t],), NEVER, dtype=torch.int64))

    def embed(self, blocks, feats, ntype: str) -> torch.Tensor:
        h = self.encode(feats)
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return self.head(h.y[ntype][: blocks[-1].num_dst_nodes(ntype)])

    def encode(self, feats) -> State:
        f = {t: self.f[key(t)](x) for t, x in self.encoder(feats).items()}
        return State(dict(f), f, {t: x["row_key"] for t, x in feats.items()}, {t: x["cutoff"] for t, x in feats.items()})

    def readout(self, h: State, num_seeds: int) -> torch.Tensor:
        return self.head(h.y[self.seed_type][:num_seeds])

    def layer(self, i: int, block, h: State) -> State:
        """Descent step ``i``: the iterate of ``block``'s source nodes -> that of its destinations."""
        n = {t: block.num_dst_nodes(t) for t in h.y}
        conv_block, src = self.edges_as_sources(i, block, h.y)  # r2ne link rows: sources of their own
        pull, count = {}, {}  # per table: sum_r W_r mean_r Y, and R_v
        for et in conv_block.canonical_etypes:
            if et[0] not in src or et[2] not in n:  # a table no column of which is read has no state (as in the GNNs)
                continue
            s, d = conv_block.edges(etype=et)
            x = src[et[0]]
            degree = torch.bincount(d, minlength=n[et[2]]).to(x.dtype)
            total = x.new_zeros(n[et[2]], x.shape[1]).index_add_(0, d, x[s])
            pull[et[2]] = pull.get(et[2], 0) + self.w[et[1]](total / degree.clamp(min=1)[:, None])
            count[et[2]] = count.get(et[2], 0) + (degree > 0).to(x.dtype)
        nxt = h.prefix(n, {})
        for t, y in h.y.items():
            y = y[:n[t]]
            mu, g = self.recall(i, t, nxt.row_key[t], nxt.cutoff[t], y)
            target = nxt.f[t] + self.lam * pull.get(t, 0) + g[:, None] * mu
            y = (1 - self.alpha) * y + self.alpha * target / (1 + self.lam * count.get(t, 0) + g)[:, None]
            if self.training:
                self.remember(i, t, nxt.row_key[t], nxt.cutoff[t], y)
            nxt.y[t] = y
        return nxt

    def store(self, i: int, t: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``i``'s store of table ``t``: iterates [rows, hidden] and the cutoff each was computed at."""
        return getattr(self, f"mu{i}_{key(t)}"), getattr(self, f"at{i}_{key(t)}")

    def recall(self, i: int, t: str, row_key: torch.Tensor, cutoff: torch.Tensor, y: torch.Tensor):
        """(mu, gamma * has) per node: its row's entry where one was computed at a cutoff <= the node's, else (0, 0)."""
        if t not in self.stored[i]:
            return y.new_zeros(()), y.new_zeros(len(y))
        mu, at = self.store(i, t)
        named = (row_key >= 0) & (row_key < len(at))
        k = torch.where(named, row_key, 0)
        has = named & (at[k] <= cutoff)  # the time rule: never an iterate computed after the node's cutoff
        return mu[k] * has[:, None], self.gamma * has.to(y.dtype)

    @torch.no_grad()
    def remember(self, i: int, t: str, row_key: torch.Tensor, cutoff: torch.Tensor, y: torch.Tensor) -> None:
        """Write a training batch's iterates: a later cutoff replaces a row's entry, the same one is averaged
        in (forgetting factor rho), an earlier one is dropped, so each row keeps its latest computation."""
        if t not in self.stored[i]:
            return
        mu, at = self.store(i, t)
        named = (row_key >= 0) & (row_key < len(at))
        row_key, cutoff, y = row_key[named], cutoff[named], y[named].detach()
        if not len(row_key):
            return
        # one node per (row, cutoff), but a row may be a node at several cutoffs of a batch: keep its latest
        rows, where = torch.unique(row_key, return_inverse=True)
        latest = cutoff.new_full((len(rows),), torch.iinfo(torch.int64).min).scatter_reduce(0, where, cutoff, "amax")
        last = cutoff == latest[where]
        row_key, cutoff, y = row_key[last], cutoff[last], y[last]
        before = at[row_key]
        same = cutoff == before
        mu[row_key[same]] = self.rho * mu[row_key[same]] + (1 - self.rho) * y[same]
        new = (before == NEVER) | (cutoff > before)
        mu[row_key[new]], at[row_key[new]] = y[new], cutoff[new]


@register_model("musegnn")
class MuseGNN(GNN):
    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        """Every GNN's (hidden, dropout, layers) and the energy's (alpha, lam, gamma, rho)."""
        energy = {k: p for k, p in keywords(MuseNet.__init__).items() if p.kind is p.KEYWORD_ONLY}
        return {**super().parameters(params), **energy}

    @classmethod
    def ranked_by(cls) -> None:
        return None  # its layers are descent steps on one energy with a store across batches: no convolution to lend

    def network(self, data, out_dim: int) -> MuseNet:
        params, hidden, dropout, row_encoding = self.shared_params(data)
        g = data.graph
        dims = {t: (input_width(f), f.cardinalities) for t, f in g.features.items()}
        edge_dims = {et[1]: (input_width(f), f.cardinalities) for et, f in g.edge_features.items()}
        rows = {t: len(f.numeric) for t, f in g.features.items()}
        return MuseNet(dims, edge_dims, g.canonical_etypes, rows, len(data.sampler.fanouts), hidden, out_dim,
                       data.seed_type, dropout, row_encoding, **params)
