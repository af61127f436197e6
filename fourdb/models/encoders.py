"""Column encoders: one per node type (a table's rows) or featured edge type (a link table's rows).

Which network turns a table's encoded row into its ``hidden`` input state is a model setting
(``row_encoder``, read by ``RowEncoding``):

- ``linear`` (the default, also when not given): numeric columns through one linear layer, each
  categorical column its own embedding, summed (``RowEncoder``);
- ``resnet``: RelBench's per-table encoder, torch_frame's ResNet (``ResNetRowEncoder``): every column its
  own vector, side by side, through ``row_encoder_layers`` residual blocks, then LayerNorm, ReLU and a
  linear layer.

Only node tables take the setting; a featured edge type's link rows keep the linear encoder (one per
layer, added to a row's state). Both read a row's own inputs only (LayerNorm, never BatchNorm), so a row's
state never depends on which rows share its batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fourdb.errors import SettingError, did_you_mean

ROW_ENCODERS = ("linear", "resnet")
ROW_ENCODER_PARAMS = ("row_encoder", "row_encoder_layers")  # the model params RowEncoding reads
RESNET_LAYERS = 2  # residual blocks of row_encoder=resnet when row_encoder_layers is not given


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


class ColumnVectors(nn.Module):
    """torch_frame's per-column encoders: each number x of a row becomes x * w + b (a w and b per number,
    small at first, as its LinearEncoder starts), each categorical column its own embedding. Out:
    [rows, columns * hidden], the columns' vectors side by side."""

    def __init__(self, numeric_dim: int, cardinalities: list[int], hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(numeric_dim, hidden) * 0.01)
        self.bias = nn.Parameter(torch.zeros(numeric_dim, hidden))
        self.embeddings = nn.ModuleList(nn.Embedding(c, hidden) for c in cardinalities)

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        numbers = num.unsqueeze(-1) * self.weight + self.bias
        columns = [emb(cat[:, i]).unsqueeze(1) for i, emb in enumerate(self.embeddings)]
        return torch.cat([numbers, *columns], 1).flatten(1)


class ResidualBlock(nn.Module):
    """torch_frame's FCResidualBlock with LayerNorm: (Linear, LayerNorm, ReLU, Dropout) twice, plus the input
    (through a linear layer where the widths differ), then ReLU."""

    def __init__(self, width: int, hidden: int, dropout: float):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Dropout(dropout))
        self.shortcut = nn.Linear(width, hidden) if width != hidden else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNetRowEncoder(nn.Module):
    """One table's ResNet, as RelBench's HeteroEncoder builds one per node type (torch_frame's ResNet with
    ``channels`` = ``hidden``): column vectors, ``layers`` residual blocks, LayerNorm, ReLU, Linear."""

    def __init__(self, numeric_dim: int, cardinalities: list[int], hidden: int, layers: int, dropout: float):
        super().__init__()
        self.columns = ColumnVectors(numeric_dim, cardinalities, hidden)
        width = (numeric_dim + len(cardinalities)) * hidden
        self.blocks = nn.Sequential(*(ResidualBlock(width if i == 0 else hidden, hidden, dropout)
                                      for i in range(layers)))
        self.out = nn.Sequential(nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, hidden))

    def forward(self, num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
        return self.out(self.blocks(self.columns(num, cat)))


@dataclass(frozen=True)
class RowEncoding:
    """Which network encodes each table's row (the model's ``row_encoder``, ``row_encoder_layers``);
    called with a table's (numeric dim, cardinalities, hidden), it builds that table's encoder."""

    name: str = "linear"
    layers: int = RESNET_LAYERS
    dropout: float = 0.0  # the resnet's, between its layers: the model's dropout

    @classmethod
    def of(cls, where: str, params: dict, dropout: float = 0.0) -> "RowEncoding":
        """From a model's ``params``, or a one-line ``SettingError`` naming ``where`` (e.g. "model 'sage'").
        Not given: linear, so every run made before the setting existed keeps its config and outputs."""
        name, layers = params.get("row_encoder"), params.get("row_encoder_layers")
        name = "linear" if name is None else name
        if name not in ROW_ENCODERS:
            raise SettingError(f"{where}: row_encoder must be one of {', '.join(ROW_ENCODERS)}, not '{name}'"
                               f"{did_you_mean(name, ROW_ENCODERS)}")
        if layers is None:
            return cls(name, RESNET_LAYERS, dropout)
        if name != "resnet":
            raise SettingError(f"{where}: row_encoder_layers={layers} needs row_encoder=resnet (the linear "
                               f"encoder has no layers to count)")
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise SettingError(f"{where}: row_encoder_layers must be a positive integer, not {layers!r}")
        return cls(name, layers, dropout)

    def __call__(self, numeric_dim: int, cardinalities: list[int], hidden: int) -> nn.Module:
        if self.name == "resnet":
            return ResNetRowEncoder(numeric_dim, cardinalities, hidden, self.layers, self.dropout)
        return RowEncoder(numeric_dim, cardinalities, hidden)


class TypeEncoder(nn.Module):
    """One row encoder per type: per table for nodes, per featured edge type for edges (``row_encoding``:
    which network; not given, linear)."""

    def __init__(self, dims: dict[str, tuple[int, list[int]]], hidden: int, row_encoding: RowEncoding | None = None):
        super().__init__()
        make = row_encoding or RowEncoding()
        self.encoders = nn.ModuleDict({key(t): make(n, c, hidden) for t, (n, c) in dims.items()})

    def forward(self, feats: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {t: self.encoders[key(t)](f["num"], f["cat"]) for t, f in feats.items()}


def key(name: str) -> str:
    """A ModuleDict key for a table or edge name: prefixed (names like 'items' clash with ModuleDict
    attributes) and without '.', which torch refuses in module names (escaped reversibly)."""
    return "t_" + name.replace("%", "%25").replace(".", "%2E")
