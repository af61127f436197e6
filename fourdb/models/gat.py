"""Graph attention over the relational heterograph: one GATConv per edge type, summed per node type.

Each edge type attends over its own neighbours (``heads`` heads of ``hidden / heads`` dims each,
concatenated back to ``hidden``); the per-type results are summed.
"""
from __future__ import annotations

import dgl.nn as dglnn

from fourdb.errors import FourdbError
from fourdb.models.base import register_model
from fourdb.models.gnn import GNN


class GATConv(dglnn.GATConv):
    """GATConv with its heads concatenated: [num_dst, heads, hidden / heads] -> [num_dst, hidden]."""

    def forward(self, graph, feat):
        return super().forward(graph, feat).flatten(1)


@register_model("gat")
class GAT(GNN):
    def conv(self, etypes, hidden, heads: int, attn_dropout: float):
        if hidden % heads:
            raise FourdbError(f"model 'gat': hidden={hidden} must be divisible by heads={heads}")
        return dglnn.HeteroGraphConv(
            {et[1]: GATConv(hidden, hidden // heads, heads, attn_drop=attn_dropout, allow_zero_in_degree=True)
             for et in etypes},
            aggregate="sum")
