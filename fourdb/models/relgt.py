"""Relational Graph Transformer (RelGT; Dwivedi et al., 2025) on the engine's sampled subgraphs.

Every row a seed's sampled subgraph reaches is a token of that seed: its node rows and, under
``graph=r2ne``, the link rows its featured edges carry (a link row reached both ways is one token). A
token is the sum of five encodings:

- features: the row's encoded columns through its table's column encoder (``TypeEncoder``, as every
  GNN here encodes rows, ``row_encoder`` included; a link table has one linear encoder for both edge
  directions), LayerNormed;
- table: an embedding of the row's table;
- hop: an embedding of its hop distance from the seed (the fewest sampled edges between them);
- time: a small MLP of the row's own age at the seed's cutoff (log(1 + days), is static: the last two
  numbers the engine gathers for every row and edge), LayerNormed;
- local structure: an embedding of log2(reach), reach being how many sampled edges the seed's walk
  crossed into the row (each edge once per hop it is drawn in), so a row linked several times to the
  seed or to its neighbours stands out.

A seed keeps at most ``max_tokens`` tokens: nearest hops first, then the newest rows, then by table,
by reach (most first) and by a hash of the row's inputs. The order is a function of the seed's own
tokens, so the kept set (and every output) depends neither on which seeds share its batch nor on row
numbers (what ``fourdb certify`` changes).

The local module is ``layers`` pre-LayerNorm transformer layers with attention masked to the seed's
own tokens, read out (as the paper's) as the seed's token plus an attention-weighted sum of its tokens;
the global module lets the seed's input token attend to ``centroids`` learned vectors. The two are
concatenated, mixed by a feed-forward block and read by a two-layer head. docs/models.md says what
differs from the paper.

A transformer over a seed's tokens is not one step per hop, so there is no exact layer-wise inference:
predictions come from sampled subgraphs, and ``engine.inference=layerwise`` is refused before training.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import dgl
import torch
from torch import nn

from fourdb.engine.sampling.data import RELATIVE_TIME_DIMS, input_width
from fourdb.engine.sampling.source import GraphSource
from fourdb.errors import FourdbError, SettingError
from fourdb.models.base import NeuralModel, keywords, register_model
from fourdb.models.encoders import RowEncoding, TypeEncoder, key

REACH_BUCKETS = 12  # reach 1, 2-3, 4-7, ..., 2048 and more
REACH_KEY = (1 << 16) - 1  # the token order ranks reach up to this
TIME_WIDTH = 16  # the age MLP's hidden width: two numbers in, so a narrow layer is enough


@dataclass
class Tokens:
    """A batch's kept tokens, ordered by seed and then slot (slot 0 is the seed row itself)."""

    seed: torch.Tensor  # [M] the seed each token belongs to
    slot: torch.Tensor  # [M] its position among the seed's tokens
    kind: torch.Tensor  # [M] its table: node tables (sorted), then link tables (sorted)
    index: torch.Tensor  # [M] its row in ``inputs[kind]``: a node's local id, or a featured block edge
    hop: torch.Tensor  # [M]
    reach: torch.Tensor  # [M] sampled edges the seed's walk crossed into it
    eid: torch.Tensor  # [M] a link row's edge id in its link table (-1 for a node row)
    inputs: list  # per kind: (num, cat) of the batch's rows of that table (node inputs, or link rows)

    def age(self) -> torch.Tensor:
        """[M, 2]: log(1 + age in days at the seed's cutoff), is static (the engine's own-age columns)."""
        out = None
        for k, x in enumerate(self.inputs):
            at = self.kind == k
            if x is not None and at.any():
                part = x[0][self.index[at], -RELATIVE_TIME_DIMS:]
                out = part.new_zeros(len(self.kind), RELATIVE_TIME_DIMS) if out is None else out
                out[at] = part
        return out


def _order(*keys: torch.Tensor) -> torch.Tensor:
    """The permutation that sorts by ``keys[0]``, then ``keys[1]``, ... (a sort by the last key, then
    stable sorts; rows equal in every key come in any order)."""
    perm = torch.sort(keys[-1]).indices
    for k in reversed(keys[:-1]):
        perm = perm[torch.sort(k[perm], stable=True).indices]
    return perm


def _firsts(sorted_key: torch.Tensor) -> torch.Tensor:
    """True at the first element of each run of equal values."""
    first = torch.ones_like(sorted_key, dtype=torch.bool)
    first[1:] = sorted_key[1:] != sorted_key[:-1]
    return first


def _groups(key: torch.Tensor, span: int, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each group ``key // span``: the position of its least ``key`` (the low part ranks a group's
    members) and the sum of its ``weight``. One sort of the packed key."""
    perm = torch.sort(key).indices
    starts = _firsts(key[perm] // span)
    group = torch.cumsum(starts.long(), 0) - 1
    return perm[starts], weight.new_zeros(int(starts.sum())).index_add_(0, group, weight[perm])


def _content_hash(num: torch.Tensor, cat: torch.Tensor) -> torch.Tensor:
    """32 bits of a fixed function of each row's inputs (int64 in [0, 2^32)), the last tie-break of the
    token order: two rows tie only when they would be equal tokens (or by a 2^-32 chance), so which one
    is kept does not depend on where the rows sit in the batch."""
    def weights(n):
        return torch.cos(torch.arange(1, n + 1, dtype=torch.float32, device=num.device))

    h = torch.nan_to_num(num.float(), nan=0.0, posinf=0.0, neginf=0.0) @ weights(num.shape[1])
    h = h + cat.float() @ (weights(cat.shape[1]) + 2.0)
    return h.view(torch.int32).long() & 0xFFFFFFFF


def tokenize(blocks: list, feats: dict, seed_type: str, tables: list[str], links: dict[str, str],
             max_tokens: int) -> Tokens:
    """Each seed's tokens in a sampled batch (``blocks`` input layer first, ``feats`` table -> inputs of the
    first block's sources). ``tables``: the node tables, sorted; ``links``: featured relation -> its link
    table. A node's local id is the same in every block (a block's destinations are the first of its
    sources), so the walk runs on one id space of nodes: ``start[table] + local id``."""
    dev = blocks[-1].device
    num_seeds = blocks[-1].num_dst_nodes(seed_type)
    sizes = [len(feats[t]["num"]) if t in feats else 0 for t in tables]
    n = sum(sizes)
    start = dict(zip(tables, [sum(sizes[:i]) for i in range(len(tables))]))
    node_kind = torch.repeat_interleave(torch.arange(len(tables), device=dev), torch.tensor(sizes, device=dev))
    relations, link_names = sorted(links), sorted(set(links.values()))
    steps, featured = _block_edges(blocks, start, links, relations, link_names)
    inputs = [(feats[t]["num"], feats[t]["cat"]) if t in feats else None for t in tables]
    link, rank, edge_id, index, ident = _link_rows(featured, link_names, inputs, dev)

    hop_span, rank_span = len(blocks) + 1, len(relations) + 1
    (seed, node, hop, reach), crossed = _walk(steps, num_seeds, start[seed_type], n, hop_span, dev)
    kind = node_kind[node]
    local = node - torch.tensor([start[t] for t in tables], device=dev)[kind]
    # a link row's token: its nearest hop, then the first relation (the two directions' ages differ)
    empty = torch.zeros(0, dtype=torch.long, device=dev)
    c_seed, c_row, c_hop = (torch.cat(x) for x in zip(*crossed)) if crossed else (empty, empty, empty)
    packed = ((c_seed * (len(edge_id) + 1) + ident[c_row]) * hop_span + c_hop) * rank_span + rank[c_row]
    keep, l_reach = _groups(packed, hop_span * rank_span, torch.ones_like(c_seed))
    l_row = c_row[keep]
    seed, hop, reach = torch.cat([seed, c_seed[keep]]), torch.cat([hop, c_hop[keep]]), torch.cat([reach, l_reach])
    kind, index = torch.cat([kind, len(tables) + link[l_row]]), torch.cat([local, index[l_row]])
    eid = torch.cat([torch.full_like(local, -1), edge_id[l_row]])
    return _capped(seed, kind, index, hop, reach, eid, inputs, hop_span, max_tokens)


def _block_edges(blocks: list, start: dict[str, int], links: dict[str, str], relations: list[str],
                 link_names: list[str]) -> tuple[list[tuple], list[tuple]]:
    """Every block's edges in the one id space of nodes, as (src, dst, row); a featured edge's row is its
    place in ``featured``, the batch's featured edges of all blocks: (link table, relation, its data)
    (-1: not featured)."""
    dev = blocks[-1].device
    steps, featured = [], []
    for block in blocks:
        src, dst, row = [], [], []
        for et in block.canonical_etypes:
            s, d = block.edges(etype=et)
            src.append(s.long() + start[et[0]])
            dst.append(d.long() + start[et[2]])
            if et[1] in links and len(s):
                at = sum(len(f[2][dgl.EID]) for f in featured)
                featured.append((link_names.index(links[et[1]]), relations.index(et[1]), block.edges[et].data))
                row.append(at + torch.arange(len(s), device=dev))
            else:
                row.append(torch.full_like(src[-1], -1))
        steps.append(tuple(torch.cat(x) for x in (src, dst, row)))
    return steps, featured


def _link_rows(featured: list[tuple], link_names: list[str], inputs: list, dev: torch.device) -> tuple:
    """Per featured edge: its link table, its relation's rank, its edge id, its row among its link table's
    and the token it is (a link row is one token however it is reached: (link table, edge id) is the same
    both ways). Each link table's inputs are appended to ``inputs``."""
    empty = torch.zeros(0, dtype=torch.long, device=dev)
    link, rank, edge_id = empty, empty, empty
    if featured:
        size = torch.tensor([len(f[2][dgl.EID]) for f in featured], device=dev)
        link, rank = (torch.repeat_interleave(torch.tensor([f[i] for f in featured], device=dev), size) for i in (0, 1))
        edge_id = torch.cat([f[2][dgl.EID].long() for f in featured])
    index = torch.zeros_like(link)
    for k in range(len(link_names)):
        at = link == k
        index[at] = torch.arange(int(at.sum()), device=dev)
        parts = [f[2] for f in featured if f[0] == k]
        inputs.append((torch.cat([p["num"] for p in parts]), torch.cat([p["cat"] for p in parts])) if parts else None)
    ident = torch.unique(link * (int(edge_id.max()) + 1 if len(edge_id) else 1) + edge_id, return_inverse=True)[1]
    return link, rank, edge_id, index, ident


def _walk(steps: list[tuple], num_seeds: int, first_seed: int, n: int, hop_span: int,
          dev: torch.device) -> tuple[tuple, list[tuple]]:
    """The walk, one block at a time from the seeds down: (seed, node, hop, reach) of every node reached
    (each once per seed, at its nearest hop) and (seed, featured edge, hop) of every featured edge crossed."""
    seeds = torch.arange(num_seeds, device=dev)
    front = (seeds, first_seed + seeds, torch.zeros_like(seeds), torch.ones_like(seeds))
    crossed = []
    for src, dst, row in reversed(steps):
        order = torch.sort(dst).indices
        degree = torch.bincount(dst, minlength=n)
        f_seed, f_node, f_hop, _ = front
        count = degree[f_node]
        which = torch.repeat_interleave(torch.arange(len(f_node), device=dev), count)
        within = torch.arange(len(which), device=dev) - (torch.cumsum(count, 0) - count)[which]
        e = order[(torch.cumsum(degree, 0) - degree)[f_node][which] + within]  # in-edges of each front pair
        seed, hop = f_seed[which], f_hop[which] + 1
        edge = row[e] >= 0
        crossed.append((seed[edge], row[e][edge], hop[edge]))
        f_seed, f_node, f_hop, f_reach = (torch.cat([a, b]) for a, b in zip(front, (seed, src[e], hop,
                                                                                        torch.ones_like(hop))))
        keep, reach = _groups((f_seed * n + f_node) * hop_span + f_hop, hop_span, f_reach)
        front = (f_seed[keep], f_node[keep], f_hop[keep], reach)
    return front, crossed


def _capped(seed, kind, index, hop, reach, eid, inputs: list, hop_span: int, max_tokens: int) -> Tokens:
    """The cap: each seed's ``max_tokens`` first by nearest hops, then the newest rows, then table, reach
    (most first) and the content hash."""
    dev = seed.device
    age = torch.zeros(len(seed), dtype=torch.float32, device=dev)
    content = torch.zeros(len(seed), dtype=torch.long, device=dev)
    for k, x in enumerate(inputs):
        at = kind == k
        if x is not None and at.any():
            num, cat = x[0][index[at]], x[1][index[at]]
            age[at] = num[:, -RELATIVE_TIME_DIMS]
            content[at] = _content_hash(num, cat)
    # two int64 keys: (seed, hop, age), a non-negative float32's bits sorting as it does; then (table,
    # reach, content hash)
    near = ((seed * hop_span + hop) << 31) | age.view(torch.int32).long()
    rest = (kind << 48) | ((REACH_KEY - reach.clamp(max=REACH_KEY)) << 32) | content
    perm = _order(near, rest)
    seed = seed[perm]
    starts = _firsts(seed)
    slot = torch.arange(len(seed), device=dev) - torch.nonzero(starts).view(-1)[torch.cumsum(starts.long(), 0) - 1]
    kept = slot < max_tokens
    perm = perm[kept]
    return Tokens(seed[kept], slot[kept], kind[perm], index[perm], hop[perm], reach[perm], eid[perm], inputs)


class LocalLayer(nn.Module):
    """A pre-LayerNorm transformer layer over each seed's tokens: self-attention (``bias`` is 0 for a
    seed's tokens, -inf for padding) and a GELU feed-forward block of width ``hidden``, each residual."""

    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.attention_norm, self.ffn_norm = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, hidden),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, w, h = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).view(b, w, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, bias, self.dropout if self.training else 0.0)
        x = x + nn.functional.dropout(self.out(a.transpose(1, 2).reshape(b, w, h)), self.dropout, self.training)
        return x + self.ffn(self.ffn_norm(x))


class RelGTNet(nn.Module):
    def __init__(self, dims: dict, link_dims: dict, links: dict[str, str], hops: int, out_dim: int,
                 seed_type: str, *, hidden: int, dropout: float, heads: int, layers: int, max_tokens: int,
                 centroids: int, row_encoder: str | None = None, row_encoder_layers: int | None = None):
        """``dims``: node table -> (numeric dim, cardinalities); ``link_dims`` the same per link table;
        ``links``: featured relation -> its link table; ``hops``: sampled hops (the largest hop);
        ``row_encoder``, ``row_encoder_layers``: the node tables' row encoder (``RowEncoding``; linear
        when not given)."""
        super().__init__()
        if hidden % heads:
            raise FourdbError(f"model 'relgt': hidden={hidden} must be divisible by heads={heads}")
        if max_tokens < 1:
            raise FourdbError(f"model 'relgt': max_tokens must be at least 1 (the seed row), got {max_tokens}")
        self.seed_type, self.max_tokens = seed_type, max_tokens
        self.tables, self.links = sorted(dims), dict(links)
        row_encoding = RowEncoding.of("model 'relgt'", {"row_encoder": row_encoder,
                                                        "row_encoder_layers": row_encoder_layers}, dropout)
        self.encoder = TypeEncoder(dims, hidden, row_encoding)
        self.edge_encoders = TypeEncoder(link_dims, hidden) if link_dims else None
        kinds = self.tables + sorted(link_dims)
        self.kind_keys = [key(k) for k in kinds]
        self.table = nn.Embedding(len(kinds), hidden)
        self.hop = nn.Embedding(hops + 1, hidden)
        self.time = nn.Sequential(nn.Linear(RELATIVE_TIME_DIMS, TIME_WIDTH), nn.ReLU(), nn.Linear(TIME_WIDTH, hidden))
        self.structure = nn.Embedding(REACH_BUCKETS, hidden)
        self.feature_norm, self.time_norm = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.local = nn.ModuleList(LocalLayer(hidden, heads, dropout) for _ in range(layers))
        self.local_norm = nn.LayerNorm(hidden)
        self.pool = nn.Linear(2 * hidden, 1)
        self.centroids = nn.Parameter(torch.randn(centroids, hidden) * hidden ** -0.5)
        self.glob = nn.MultiheadAttention(hidden, heads, dropout=dropout, batch_first=True)
        self.global_norm = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(2 * hidden, 2 * hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(2 * hidden, hidden), nn.LayerNorm(hidden))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def tokenize(self, blocks, feats) -> Tokens:
        return tokenize(blocks, feats, self.seed_type, self.tables, self.links, self.max_tokens)

    def embed(self, tok: Tokens) -> torch.Tensor:
        """[M, hidden]: the sum of each token's five encodings (the encoders' outputs LayerNormed, so that
        each is on the embeddings' scale)."""
        hidden = self.hop.embedding_dim
        features = None
        for k, x in enumerate(tok.inputs):
            at = tok.kind == k
            if x is None or not at.any():
                continue
            encoders = self.encoder.encoders if k < len(self.tables) else self.edge_encoders.encoders
            part = encoders[self.kind_keys[k]](x[0][tok.index[at]], x[1][tok.index[at]])
            features = part.new_zeros(len(tok.kind), hidden) if features is None else features
            features[at] = part
        reach = torch.log2(tok.reach.double()).long().clamp(max=REACH_BUCKETS - 1)  # 1, 2-3, 4-7, ...
        return (self.feature_norm(features) + self.table(tok.kind) + self.hop(tok.hop)
                + self.time_norm(self.time(tok.age())) + self.structure(reach))

    def forward(self, blocks, feats):
        tok = self.tokenize(blocks, feats)
        num_seeds, width = blocks[-1].num_dst_nodes(self.seed_type), int(tok.slot.max()) + 1
        x = self.embed(tok)
        seq = x.new_zeros(num_seeds, width, x.shape[1])
        seq[tok.seed, tok.slot] = x
        pad = torch.ones(num_seeds, width, dtype=torch.bool, device=x.device)
        pad[tok.seed, tok.slot] = False
        bias = x.new_zeros(num_seeds, 1, 1, width).masked_fill(pad[:, None, None], -torch.inf)
        query = seq[:, :1]  # the seed's input token (slot 0), as the paper's global module reads it
        for layer in self.local:
            seq = layer(seq, bias)
        seq = self.local_norm(seq)
        score = self.pool(torch.cat([seq[:, :1].expand_as(seq), seq], 2)).squeeze(2).masked_fill(pad, -torch.inf)
        local = seq[:, 0] + (torch.softmax(score, 1).unsqueeze(2) * seq).sum(1)
        centroids = self.centroids.expand(num_seeds, -1, -1)
        glob = self.glob(query, centroids, centroids, need_weights=False)[0][:, 0]
        return self.head(self.ffn(torch.cat([local, self.global_norm(glob)], 1)))


@register_model("relgt")
class RelGT(NeuralModel):
    """The model: a ``RelGTNet`` trained by the one trainer on the engine's sampled batches."""

    input_kind = "graph"

    @classmethod
    def ranked_by(cls) -> None:
        return None  # no convolution for two towers to run

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        RowEncoding.of(f"model '{cls.name}'", params)  # its values checked before any data is read
        return keywords(RelGTNet.__init__, skip=("self", "dims", "link_dims", "links", "hops", "out_dim", "seed_type"))

    def build(self, data) -> RelGTNet:
        g = data.graph
        dims = {t: (input_width(f), f.cardinalities) for t, f in g.features.items()}
        # both directions of a link table read its one encoder, named after the lesser relation name
        links = {et[1]: min(et[1], g.reverse.get(et, et)[1]) for et in g.edge_features}
        link_dims = {links[et[1]]: (input_width(f), f.cardinalities) for et, f in g.edge_features.items()}
        return RelGTNet(dims, link_dims, links, len(data.sampler.fanouts), self.info.out_dim, data.seed_type,
                        **self.params)

    def make_source(self, data, trainer_cfg) -> GraphSource:
        if data.engine.inference == "layerwise":
            raise SettingError("model 'relgt' has no layer-wise inference (a transformer over each seed's tokens is "
                               "not one step per hop): use engine.inference=sampled")
        return GraphSource(data, trainer_cfg.batch_size)
