"""ContextGNN (Yuan et al., "ContextGNN: Beyond Two-Tower Recommendation Systems", 2024): a destination
inside the source's sampled subgraph is scored pair-wise from its identity-aware state (as ``idgnn``
does); every other destination by a two-tower score of the source against a shallow embedding per
destination; a learned, per-source weight fuses the two.

The fusion is a mixture: the model says how likely the next destination lies inside the subgraph
(``fuse``) and, separately, which one inside (softmax over the pair scores of the reached rows) and which
one outside (softmax over the tower scores of the rest). So the two scorers never need a common scale,
and the listwise loss over all destinations trains all three. The tower's source vector is a projection
of the source's GNN state plus the mean embedding of the destinations its subgraph reached (its context);
a destination's tower score adds a learned weighting of its popularity at the cutoff, so a destination
no one's subgraph reaches is still ranked sensibly. A destination that does not exist at the cutoff
gets no score. Inputs come from ``fourdb.engine.sampling.links.ContextSource``.
"""
from __future__ import annotations

import torch
from torch import nn

from fourdb.engine.sampling.links import ContextSource, key_sizes
from fourdb.tasks.interactions import RecData
from fourdb.models.base import register_model
from fourdb.models.gnn import RecommendationGNN
from fourdb.models.id_embeddings import IdEmbeddings
from fourdb.models.idgnn import IdentityNet


def within(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-softmax of ``scores`` over the masked entries of each row; -inf elsewhere (and on empty rows)."""
    masked = scores.masked_fill(~mask, float("-inf"))
    norm = torch.logsumexp(masked.masked_fill(~mask.any(1, keepdim=True), 0.0), 1, keepdim=True)
    return torch.where(mask, scores - norm, torch.full_like(scores, float("-inf")))


class ContextNet(nn.Module):
    def __init__(self, identity: IdentityNet, sizes: list[int], hidden: int, embedding_scale: float):
        """``sizes``: rows of each id column's block of the embedding table (the destinations', then one per
        foreign key's parents; ``fourdb.engine.sampling.links.key_sizes``)."""
        super().__init__()
        self.identity = identity
        self.ids = IdEmbeddings(sizes, hidden, embedding_scale)
        self.project = nn.Linear(hidden, hidden)
        self.popularity = nn.Parameter(torch.tensor([1.0, 0.1]))  # (recent, all-time) log counts
        self.fuse = nn.Linear(hidden, 2)  # (inside, outside) the subgraph, per source

    def forward(self, block, feats, reached: torch.Tensor, num_seeds: int, at: torch.Tensor, prior: torch.Tensor,
                alive: torch.Tensor, embedding_rows: torch.Tensor) -> torch.Tensor:
        """Log-probabilities [seeds, destinations] of being the next destination; -inf where none exists."""
        h = self.identity.states(block, feats, num_seeds)
        source = h[self.identity.source][:num_seeds]
        alive = alive[at]
        inside = torch.zeros_like(alive)
        inside[reached[0], reached[1]] = True
        inside &= alive
        pair = torch.full(alive.shape, float("-inf"), device=alive.device)
        pair[reached[0], reached[1]] = self.identity.pair_scores(h)

        table = self.ids(embedding_rows)  # every destination's vector: its own embedding plus its parent rows'
        context = torch.zeros_like(source).index_add_(0, reached[0], table[reached[1]])
        context = context / torch.bincount(reached[0], minlength=num_seeds).clamp(min=1)[:, None]
        # detached: the tower reads the source's state without pulling it away from what the pair scores need
        query = self.project(source.detach()) + context
        tower = query @ table.T + prior[at] @ self.popularity

        weight = torch.log_softmax(self.fuse(source), 1)
        return torch.where(inside, within(pair, inside) + weight[:, :1],
                           within(tower, alive & ~inside) + weight[:, 1:])


@register_model("contextgnn")
class ContextGNN(RecommendationGNN):
    extra_params = ("gnn", "embedding_scale")

    def build(self, data: RecData) -> ContextNet:
        identity = IdentityNet(self.network(data.graph, 1), data.graph.seed_type, data.destination,
                               self.params["hidden"])
        return ContextNet(identity, key_sizes(self.keys(data)), self.params["hidden"], self.params["embedding_scale"])

    def make_source(self, data: RecData, trainer_cfg) -> ContextSource:
        return ContextSource(data, trainer_cfg.batch_size, self.keys(data))
