"""Relational GCN: one weight matrix per relation (edge type), mean over each relation's neighbours.

h_v' = W_0 h_v + sum_r mean_{u in N_r(v)} W_r h_u, as RelGraphConv without basis decomposition; the
self-connection W_0 is a linear layer per node type (the shared layer adds the residual and norm).
"""
from __future__ import annotations

import dgl.nn as dglnn
from torch import nn

from fourdb.models.base import register_model
from fourdb.models.encoders import key
from fourdb.models.gnn import GNN


class RelGraphConv(nn.Module):
    def __init__(self, etypes, hidden: int):
        super().__init__()
        self.relations = dglnn.HeteroGraphConv(
            {et[1]: dglnn.GraphConv(hidden, hidden, norm="right", bias=False, allow_zero_in_degree=True)
             for et in etypes},
            aggregate="sum")
        # sorted: a set's order changes with the process's hash seed, and with it which layer gets which init
        self.self_loop = nn.ModuleDict({key(t): nn.Linear(hidden, hidden) for t in sorted({et[2] for et in etypes})})

    def forward(self, block, h):
        h_src, h_dst = h
        out = self.relations(block, (h_src, h_dst))
        return {t: v + self.self_loop[key(t)](h_dst[t]) for t, v in out.items()}


@register_model("rgcn")
class RGCN(GNN):
    def conv(self, etypes, hidden):
        return RelGraphConv(etypes, hidden)
