"""GraphSAGE over the relational heterograph: one SAGEConv per edge type, summed per node type."""
from __future__ import annotations

import dgl.nn as dglnn
import torch
from torch import nn

from fourdb.engine.loader import GraphSource
from fourdb.models import Model, register_model
from fourdb.models.encoders import NodeEncoder, key
from fourdb.train.trainer import Trainer


class HeteroSAGE(nn.Module):
    def __init__(self, dims, etypes, hidden: int, layers: int, out_dim: int, seed_type: str,
                 dropout: float = 0.1, aggregator: str = "mean"):
        super().__init__()
        self.seed_type = seed_type
        self.encoder = NodeEncoder(dims, hidden)
        self.convs = nn.ModuleList(
            dglnn.HeteroGraphConv({et: dglnn.SAGEConv(hidden, hidden, aggregator) for et in etypes}, aggregate="sum")
            for _ in range(layers)
        )
        self.norms = nn.ModuleList(nn.ModuleDict({key(t): nn.LayerNorm(hidden) for t in dims})
                                   for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, blocks, feats):
        h = self.encoder(feats)
        for conv, norms, block in zip(self.convs, self.norms, blocks):
            dst = {t: v[: block.num_dst_nodes(t)] for t, v in h.items() if block.num_dst_nodes(t)}
            out = conv(block, (h, dst))
            # a node type whose in-edges were all empty keeps its own state
            h = {t: self.dropout(torch.relu(norms[key(t)](out.get(t, dst[t]) + dst[t]))) for t in dst}
        return self.head(h[self.seed_type][: blocks[-1].num_dst_nodes(self.seed_type)])


@register_model("sage")
class SAGE(Model):
    input_kind = "graph"

    def _module(self, data) -> HeteroSAGE:
        p = self.params
        extra = 2  # relative-time features added by the loader
        dims = {t: (f.numeric.shape[1] + extra, f.cardinalities) for t, f in data.graph.features.items()}
        etypes = [et[1] for et in data.graph.canonical_etypes]
        return HeteroSAGE(dims, etypes, p.get("hidden", 64), p.get("layers", 2), self.info.out_dim,
                          data.seed_type, p.get("dropout", 0.1), p.get("aggregator", "mean"))

    def fit(self, data, trainer_cfg):
        self.trainer = Trainer(trainer_cfg, self.info.task_type, self.info.metric, self.seed)
        self.source = GraphSource(data, trainer_cfg.batch_size)
        self.module = self.trainer.fit(self._module(data), self.source)
        return self

    def predict(self, data, split):
        return self.trainer.predict(self.module, self.source, split)
