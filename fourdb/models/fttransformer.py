"""FT-Transformer (Gorishniy et al., 2021): every column becomes a token, a [CLS] token is prepended,
a pre-norm transformer encoder mixes them, and the head reads the [CLS] token."""
from __future__ import annotations

import torch
from torch import nn

from fourdb.errors import FourdbError
from fourdb.models.base import register_model
from fourdb.models.tabular import FeatureTokenizer, TabularModel


class FTTransformerNet(nn.Module):
    def __init__(self, numeric_dim: int, cardinalities: list[int], out_dim: int, hidden: int, layers: int,
                 heads: int, dropout: float, ffn_factor: float):
        super().__init__()
        if hidden % heads:
            raise FourdbError(f"model 'fttransformer': hidden={hidden} must be divisible by heads={heads}")
        self.tokenizer = FeatureTokenizer(numeric_dim, cardinalities, hidden)
        self.cls = nn.Parameter(torch.empty(1, 1, hidden).uniform_(-hidden ** -0.5, hidden ** -0.5))
        layer = nn.TransformerEncoderLayer(hidden, heads, int(hidden * ffn_factor), dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        tokens = self.tokenizer(num, cat)
        x = torch.cat([self.cls.expand(len(tokens), -1, -1), tokens], 1)
        return self.head(self.encoder(x)[:, 0])


@register_model("fttransformer")
class FTTransformer(TabularModel):
    net = FTTransformerNet
