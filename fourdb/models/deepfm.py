"""DeepFM (Guo et al., 2017): a factorization machine and a deep network over shared field embeddings.

Every column is a field with a ``embed_dim``-vector v_j (x_j v_j for a numeric column, an embedding
for a category column). The output sums a first-order term (one weight per numeric column, one per
category value), the pairwise interactions sum_{i<j} <v_i, v_j> (computed as 0.5 ((sum v)^2 - sum v^2),
mapped by a linear layer so multiclass outputs get their own weights) and an MLP on all v_j.
"""
from __future__ import annotations

import torch
from torch import nn

from fourdb.models.base import register_model
from fourdb.models.tabular import FeatureTokenizer, TabularModel, feed_forward


class DeepFMNet(nn.Module):
    def __init__(self, numeric_dim: int, cardinalities: list[int], out_dim: int, hidden: int, layers: int,
                 dropout: float, embed_dim: int):
        super().__init__()
        fields = numeric_dim + len(cardinalities)
        # small initial weights: the first-order term sums over all fields, the pairwise one over their pairs
        self.first_order = FeatureTokenizer(numeric_dim, cardinalities, out_dim, bias=False, scale=0.01)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.fields = FeatureTokenizer(numeric_dim, cardinalities, embed_dim, bias=False, scale=0.01)
        self.interaction = nn.Linear(embed_dim, out_dim, bias=False)
        nn.init.constant_(self.interaction.weight, 1.0)  # starts as the plain FM sum
        self.deep = nn.Sequential(feed_forward(fields * embed_dim, hidden, layers, dropout), nn.Linear(hidden, out_dim))

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        linear = self.first_order(num, cat).sum(1) + self.bias
        v = self.fields(num, cat)  # [B, fields, embed_dim]
        pairwise = 0.5 * (v.sum(1) ** 2 - (v ** 2).sum(1))
        return linear + self.interaction(pairwise) + self.deep(v.flatten(1))


@register_model("deepfm")
class DeepFM(TabularModel):
    net = DeepFMNet
