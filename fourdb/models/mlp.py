"""Multi-layer perceptron on the seed row's features: numeric columns and one embedding per category column,
concatenated, through ``layers`` x (Linear, LayerNorm, ReLU, Dropout) and a linear output."""
from __future__ import annotations

import torch
from torch import nn

from fourdb.models.base import register_model
from fourdb.models.tabular import TabularModel, feed_forward


class MLPNet(nn.Module):
    def __init__(self, numeric_dim: int, cardinalities: list[int], out_dim: int, hidden: int, layers: int,
                 dropout: float, embed_dim: int):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embed_dim) for c in cardinalities)
        self.body = feed_forward(numeric_dim + embed_dim * len(cardinalities), hidden, layers, dropout)
        self.out = nn.Linear(hidden, out_dim)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        x = torch.cat([num, *(emb(cat[:, i]) for i, emb in enumerate(self.embeddings))], 1)
        return self.out(self.body(x))


@register_model("mlp")
class MLP(TabularModel):
    net = MLPNet
