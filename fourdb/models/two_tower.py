"""Two towers for recommendation: sources and destinations encoded by one heterogeneous GNN (the
convolution of a named GNN, ``gnn: sage``), each over its own temporal subgraph as of the seed's cutoff,
and scored by their dot product; trained with sampled negatives (``fourdb.engine.sampling.links.LinkSource``).

With ``id_embeddings: true`` every destination node (a tower's own seed, or a neighbour in a source's
subgraph) adds a learned vector of its row, found by key (``fourdb.models.id_embeddings``), to its input
state: what the columns cannot tell apart, the row's own history of links can."""
from __future__ import annotations

import torch
from torch import nn

from fourdb.engine.sampling.links import LinkSource
from fourdb.tasks.interactions import RecData
from fourdb.models.base import register_model
from fourdb.models.gnn import HeteroGNN, RecommendationGNN
from fourdb.models.id_embeddings import IdEmbeddings


class TwoTowerNet(nn.Module):
    def __init__(self, encoder: HeteroGNN, source: str, destination: str, dim: int, ids: IdEmbeddings | None = None):
        super().__init__()
        self.encoder, self.source, self.destination, self.dim = encoder, source, destination, dim
        self.ids = ids

    def embed(self, blocks, feats, ntype: str) -> torch.Tensor:
        h = None if self.ids is None else self.ids.add_to(self.encoder.encode(feats), feats, self.destination)
        return self.encoder.embed(blocks, feats, ntype, h)

    def forward(self, src_blocks, src_feats, dst_blocks, dst_feats, pairs) -> torch.Tensor:
        """Logits [B, candidates]: source i against the destinations ``pairs[i]`` (rows of the dst batch)."""
        src = self.embed(src_blocks, src_feats, self.source)
        dst = self.embed(dst_blocks, dst_feats, self.destination)
        return (src[:, None, :] * dst[pairs]).sum(-1)


@register_model("two_tower")
class TwoTower(RecommendationGNN):
    extra_params = ("gnn", "negatives", "id_embeddings")

    def build(self, data: RecData) -> TwoTowerNet:
        hidden = self.params["hidden"]  # the head gives each row a vector of this size
        return TwoTowerNet(self.network(data.graph, hidden), data.graph.seed_type, data.destination, hidden,
                           self.id_embeddings(data))

    def make_source(self, data: RecData, trainer_cfg) -> LinkSource:
        return LinkSource(data, trainer_cfg.batch_size, self.params["negatives"], self.id_keys(data))
