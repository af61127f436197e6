"""What every neural tabular model shares; a model file adds only its ``nn.Module``.

``TableSource`` is the data source the trainer pulls from (as ``GraphSource`` is for GNNs): shuffled
mini-batches ``((numeric, categorical), labels)`` of the encoded seed rows. Numeric columns are
re-standardized with training statistics (hand-made or aggregated features need not be), missing or
infinite values become 0, and values outside a column's training range are clipped to it (a later
split can hold far larger counts or ages, which a network, unlike a tree, would extrapolate from).

``TabularModel`` is the ``Model`` wrapper (fit/predict from ``NeuralModel``): it builds
``net(numeric_dim, cardinalities, out_dim, **params)`` from the model's YAML ``params``, which also give
their defaults: a net states none of its own. The net maps
``(num [B, numeric_dim] float32, cat [B, n_categorical] int64)`` to ``[B, out_dim]``.
"""
from __future__ import annotations

import inspect

import numpy as np
import torch
from torch import nn

from fourdb.contracts import DataSource
from fourdb.features import TableData
from fourdb.models.base import NeuralModel, keywords


class TableSource(DataSource):
    def __init__(self, data: TableData, batch_size: int):
        self.batch_size, self._labels = batch_size, data.labels
        train = np.nan_to_num(data.features["train"].numeric.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        mean, std = train.mean(0), train.std(0)
        std[std == 0] = 1.0
        low, high = train.min(0), train.max(0)

        def tensors(feats):
            num = np.nan_to_num(feats.numeric.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            num = ((np.clip(num, low, high) - mean) / std).astype(np.float32)
            return torch.from_numpy(num), torch.from_numpy(np.ascontiguousarray(feats.categorical, dtype=np.int64))

        self.x = {split: tensors(feats) for split, feats in data.features.items()}

    def labels(self, split: str) -> np.ndarray:
        return self._labels[split]

    def num_train_batches(self) -> int:
        return -(-len(self._labels["train"]) // self.batch_size)

    def train_batches(self, rng: np.random.Generator):
        num, cat = self.x["train"]
        y = torch.as_tensor(self._labels["train"])
        order = torch.from_numpy(rng.permutation(len(y)))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            yield (num[idx], cat[idx]), y[idx]

    def batches(self, split: str):
        num, cat = self.x[split]
        for start in range(0, len(num), self.batch_size):
            yield num[start:start + self.batch_size], cat[start:start + self.batch_size]


class TabularModel(NeuralModel):
    input_kind = "table"
    ranking = ("pair_ranker", "inner")  # a recommendation task: it scores (source, candidate) pairs
    net: type[nn.Module]  # built as net(numeric_dim, cardinalities, out_dim, **params)

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        return keywords(cls.net, skip=("numeric_dim", "cardinalities", "out_dim"))

    def build(self, data: TableData) -> nn.Module:
        f = data.features["train"]
        return self.net(f.numeric.shape[1], list(f.cardinalities), self.info.out_dim, **self.params)

    def make_source(self, data: TableData, trainer_cfg) -> TableSource:
        return TableSource(data, trainer_cfg.batch_size)


class FeatureTokenizer(nn.Module):
    """One ``dim``-vector per column: x_j w_j (+ b_j) for numeric column j, an embedding per category
    column. ``[B, numeric_dim]``, ``[B, n_categorical]`` -> ``[B, numeric_dim + n_categorical, dim]``."""

    def __init__(self, numeric_dim: int, cardinalities: list[int], dim: int, bias: bool = True,
                 scale: float | None = None):
        super().__init__()
        scale = dim ** -0.5 if scale is None else scale  # initial weights are uniform in [-scale, scale]
        self.weight = nn.Parameter(torch.empty(numeric_dim, dim).uniform_(-scale, scale))
        self.bias = nn.Parameter(torch.empty(numeric_dim, dim).uniform_(-scale, scale)) if bias else None
        self.embeddings = nn.ModuleList(nn.Embedding(c, dim) for c in cardinalities)
        for emb in self.embeddings:
            nn.init.uniform_(emb.weight, -scale, scale)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        tokens = num.unsqueeze(-1) * self.weight
        if self.bias is not None:
            tokens = tokens + self.bias
        return torch.cat([tokens, *(emb(cat[:, i]).unsqueeze(1) for i, emb in enumerate(self.embeddings))], 1)


def feed_forward(in_dim: int, hidden: int, layers: int, dropout: float) -> nn.Sequential:
    """``layers`` x (Linear, LayerNorm, ReLU, Dropout), ``in_dim`` -> ``hidden``."""
    parts = []
    for i in range(layers):
        parts += [nn.Linear(in_dim if i == 0 else hidden, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(dropout)]
    return nn.Sequential(*parts)
