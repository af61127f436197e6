"""GraphSAGE over the relational heterograph: one SAGEConv per edge type, summed per node type."""
from __future__ import annotations

import dgl.nn as dglnn

from fourdb.models.base import register_model
from fourdb.models.gnn import GNN


@register_model("sage")
class SAGE(GNN):
    def conv(self, etypes, hidden, aggregator: str):
        return dglnn.HeteroGraphConv({et[1]: dglnn.SAGEConv(hidden, hidden, aggregator) for et in etypes},
                                     aggregate="sum")
