"""An identity-aware GNN for recommendation (the ID-GNN idea, as in RelBench): the seed row is marked
by a learned vector added to its input state, messages flow out from it through its own sampled tree
(edges in both directions, ``fourdb.engine.sampling.links.IdentitySource``), and every destination row the tree
reaches is scored by the head on its final state. So a score is about this destination as seen from
this source. Destinations outside the tree are ranked after the reached ones, by popularity.

With ``id_embeddings: true`` every destination node of the tree adds a learned vector of its row, found by
key (``fourdb.models.id_embeddings``), to its input state, as RelBench's ID-GNN adds shallow embeddings."""
from __future__ import annotations

import torch
from torch import nn

from fourdb.engine.sampling.links import IdentitySource
from fourdb.tasks.interactions import RecData
from fourdb.models.base import register_model
from fourdb.models.gnn import HeteroGNN, RecommendationGNN
from fourdb.models.id_embeddings import IdEmbeddings


class IdentityNet(nn.Module):
    def __init__(self, encoder: HeteroGNN, source: str, destination: str, hidden: int,
                 ids: IdEmbeddings | None = None):
        super().__init__()
        self.encoder, self.source, self.destination = encoder, source, destination
        self.identity = nn.Parameter(torch.randn(hidden))
        self.ids = ids

    def states(self, block, feats, num_seeds: int) -> dict[str, torch.Tensor]:
        """Every node's final state, messages having flowed out from the marked seeds."""
        h = self.encoder.encode(feats)
        if self.ids is not None:
            h = self.ids.add_to(h, feats, self.destination)
        seeds = h[self.source]
        h[self.source] = torch.cat([seeds[:num_seeds] + self.identity, seeds[num_seeds:]])
        for i in range(self.encoder.num_layers):
            h = self.encoder.layer(i, block, h)
        return h

    def pair_scores(self, h: dict[str, torch.Tensor]) -> torch.Tensor:
        """One score per destination node: this destination as seen from the seed whose tree holds it."""
        return self.encoder.head(h[self.destination]).view(-1)

    def forward(self, block, feats, index: torch.Tensor, num_seeds: int, width: int) -> torch.Tensor:
        """Logits [seeds, width]: ``index`` (seed, slot) per destination node of ``block``; -inf pads."""
        scores = self.pair_scores(self.states(block, feats, num_seeds))
        out = scores.new_full((num_seeds, width), float("-inf"))
        out[index[0], index[1]] = scores
        return out


@register_model("idgnn")
class IDGNN(RecommendationGNN):
    extra_params = ("gnn", "id_embeddings")

    def build(self, data: RecData) -> IdentityNet:
        return IdentityNet(self.network(data.graph, 1), data.graph.seed_type, data.destination,
                           self.params["hidden"], self.id_embeddings(data))

    def make_source(self, data: RecData, trainer_cfg) -> IdentitySource:
        return IdentitySource(data, trainer_cfg.batch_size, self.id_keys(data))
