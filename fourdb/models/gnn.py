"""What every GNN here shares; a GNN file adds only its convolution.

``HeteroGNN`` reads top to bottom: per-table column encoders turn each sampled (row, cutoff) into a
vector, then one layer per sampled hop runs the model's heterograph convolution from a block's
source nodes to its destination nodes, adds the destination's own state (residual), normalizes
(LayerNorm per table), and applies ReLU and dropout; a two-layer head reads the seed rows.

``GNN`` is the ``Model`` wrapper (fit/predict through the one trainer, from ``NeuralModel``). A
subclass implements ``conv(etypes, hidden, **params)``: a module called as ``conv(block, (h_src,
h_dst))`` with dicts of per-table tensors, returning a ``[num_dst, hidden]`` tensor per destination
table that has in-edges. Its keyword parameters come from the model's YAML ``params`` (beside
``hidden``, ``dropout`` and ``layers``, which must equal the number of sampled hops).
"""
from __future__ import annotations

import torch
from torch import nn

from fourdb.engine.loader import GraphSource
from fourdb.errors import FourdbError
from fourdb.models import NeuralModel, check_params
from fourdb.models.encoders import NodeEncoder, key

RELATIVE_TIME_DIMS = 2  # [log age in days, is static] that the loader appends to every row's numbers


class HeteroGNN(nn.Module):
    def __init__(self, conv, dims: dict, layers: int, hidden: int, out_dim: int, seed_type: str,
                 dropout: float = 0.1):
        """``conv()`` builds one layer's convolution; ``dims`` is table -> (numeric dim, cardinalities)."""
        super().__init__()
        self.seed_type = seed_type
        self.encoder = NodeEncoder(dims, hidden)
        self.convs = nn.ModuleList(conv() for _ in range(layers))
        self.norms = nn.ModuleList(nn.ModuleDict({key(t): nn.LayerNorm(hidden) for t in dims})
                                   for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, blocks, feats):
        """``blocks`` input layer first; ``feats`` table -> {"num", "cat"} of the first block's sources."""
        h = self.encode(feats)
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return self.readout(h, blocks[-1].num_dst_nodes(self.seed_type))

    def encode(self, feats) -> dict[str, torch.Tensor]:
        return self.encoder(feats)

    def layer(self, i: int, block, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hop ``i``: source states ``h`` of ``block`` -> states of its destination nodes."""
        # tables with no destination rows stay (empty), so every edge type into a table takes part in
        # every batch alike: a row's output does not depend on which other rows share its batch
        dst = {t: v[: block.num_dst_nodes(t)] for t, v in h.items()}
        out = self.convs[i](block, (h, dst))
        # a table whose in-edges were all empty keeps its own state
        return {t: self.dropout(torch.relu(self.norms[i][key(t)](out.get(t, dst[t]) + dst[t]))) for t in dst}

    def readout(self, h: dict[str, torch.Tensor], num_seeds: int) -> torch.Tensor:
        return self.head(h[self.seed_type][:num_seeds])


class GNN(NeuralModel):
    """A GNN model: sampled blocks from ``GraphSource``, one layer per sampled hop."""

    input_kind = "graph"

    def conv(self, etypes: list[tuple[str, str, str]], hidden: int, **params) -> nn.Module:
        raise NotImplementedError

    def build(self, data) -> HeteroGNN:
        params = dict(self.params)
        hidden, dropout = params.pop("hidden", 64), params.pop("dropout", 0.1)
        layers = params.pop("layers", None)
        if layers is not None and layers != len(data.sampler.fanouts):
            raise FourdbError(f"model '{self.name}': layers={layers} but the sampler draws "
                              f"{len(data.sampler.fanouts)} hops (sampler.fanouts has one per layer)")
        check_params(self.name, self.conv, params, fixed=("etypes", "hidden"), also=("hidden", "dropout", "layers"))
        dims = {t: (f.numeric.shape[1] + RELATIVE_TIME_DIMS, f.cardinalities) for t, f in data.graph.features.items()}
        etypes = data.graph.canonical_etypes
        return HeteroGNN(lambda: self.conv(etypes, hidden, **params), dims, len(data.sampler.fanouts), hidden,
                         self.info.out_dim, data.seed_type, dropout)

    def make_source(self, data, trainer_cfg) -> GraphSource:
        return GraphSource(data, trainer_cfg.batch_size)
