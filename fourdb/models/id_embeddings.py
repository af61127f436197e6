"""A learned vector per destination row, found by key: ContextGNN's shallow destination embeddings, and
the two towers' and the identity-aware GNN's with ``id_embeddings: true``.

A destination's vector is the sum of its own row's and, per foreign key, its parent row's (the products
of one shelf share the shelf's, so a product with few links of its own still lands near its kind). The
rows are the source's (``fourdb.engine.sampling.links.key_rows``): found by key, never by row number, so a model
fitted on one build of a database scores another (certification cuts it) with the same vectors.

All id columns' vectors are one table, so that a data-parallel run exchanges one gradient for it, row by
row (``trainer.embedding_sync``, ``fourdb.engine.distribution.embedding_sync``): ``reads`` is where it learns which
rows a training step read.
"""
from __future__ import annotations

import torch
from torch import nn


class IdEmbeddings(nn.Module):
    def __init__(self, sizes: list[int], dim: int, scale: float = 1.0):
        """``sizes``: rows of each id column's block (``fourdb.engine.sampling.links.key_sizes``)."""
        super().__init__()
        self.scale = float(scale)
        # stored divided by the scale: the vectors then move ``scale`` times faster under Adam than the
        # network's weights (each row is updated only when a batch reads it)
        self.weight = nn.Parameter(torch.cat([torch.randn(n, dim) for n in sizes]) * 0.1 / self.scale)
        self.reads: list[torch.Tensor] | None = None  # a list: training steps record the rows they read

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """[n, dim] from ``rows`` [id columns, n]: each destination's vector and its parents'."""
        if self.reads is not None and self.training:
            self.reads.append(rows.reshape(-1))
        return sum(self.weight[r] for r in rows) * self.scale

    def add_to(self, h: dict[str, torch.Tensor], feats: dict, ntype: str) -> dict[str, torch.Tensor]:
        """Input states ``h`` with each ``ntype`` node's vector added (its rows: ``feats[ntype]["id_rows"]``)."""
        if ntype in feats and "id_rows" in feats[ntype]:
            h = {**h, ntype: h[ntype] + self(feats[ntype]["id_rows"])}
        return h
