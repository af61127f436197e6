"""Column encoders: numeric columns through a linear layer, each categorical column its own embedding;
one encoder per node type (a table's rows) or featured edge type (a link table's rows)."""
from __future__ import annotations

import torch
from torch import nn


class RowEncoder(nn.Module):
    def __init__(self, numeric_dim: int, cardinalities: list[int], hidden: int):
        super().__init__()
        self.numeric = nn.Linear(numeric_dim, hidden) if numeric_dim else None
        self.embeddings = nn.ModuleList(nn.Embedding(c, hidden) for c in cardinalities)
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        h = self.bias.expand(num.shape[0], -1)
        if self.numeric is not None:
            h = h + self.numeric(num)
        for i, emb in enumerate(self.embeddings):
            h = h + emb(cat[:, i])
        return h


class TypeEncoder(nn.Module):
    """One RowEncoder per type: per table for nodes, per featured edge type for edges."""

    def __init__(self, dims: dict[str, tuple[int, list[int]]], hidden: int):
        super().__init__()
        self.encoders = nn.ModuleDict({key(t): RowEncoder(n, c, hidden) for t, (n, c) in dims.items()})

    def forward(self, feats: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {t: self.encoders[key(t)](f["num"], f["cat"]) for t, f in feats.items()}


def key(name: str) -> str:
    """A ModuleDict key for a table or edge name: prefixed (names like 'items' clash with ModuleDict
    attributes) and without '.', which torch refuses in module names (escaped reversibly)."""
    return "t_" + name.replace("%", "%25").replace(".", "%2E")
