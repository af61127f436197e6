"""What every GNN here shares; a GNN file adds only its convolution.

``HeteroGNN`` reads top to bottom: per-table column encoders turn each sampled (row, cutoff) into a
vector, then one layer per sampled hop runs the model's heterograph convolution from a block's
source nodes to its destination nodes, adds the destination's own state (residual), normalizes
(LayerNorm per table), and applies ReLU and dropout; a two-layer head reads the seed rows.

Edge features (r2ne link rows, set on the blocks by the loader) reach every convolution the same way:
before a layer's convolution, each edge of a featured edge type becomes a source node of its own,
appended to its source table's nodes, whose state is its source row's state plus the encoded link row
(an encoder per featured edge type and layer). The convolution then weighs (neighbour, link row)
pairs as it weighs neighbours, with no code of its own for edge features; a destination's in-edges
are the same multiset as before, so layer-wise inference stays exact.

``GNN`` is the ``Model`` wrapper (fit/predict through the one trainer, from ``NeuralModel``). A
subclass implements ``conv(etypes, hidden, **params)``: a module called as ``conv(block, (h_src,
h_dst))`` with dicts of per-table tensors, returning a ``[num_dst, hidden]`` tensor per destination
table that has in-edges. Its keyword parameters come from the model's YAML ``params`` (beside
``hidden``, ``dropout`` and ``layers``, which must equal the number of sampled hops), which also give
their defaults: a convolution states none of its own.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from fourdb.engine.sampling.data import input_width
from fourdb.engine.sampling.source import GraphSource
from fourdb.engine.sampling.blocks import make_block
from fourdb.engine.sampling.links import key_sizes, key_vocabularies
from fourdb.errors import FourdbError, SettingError, did_you_mean
from fourdb.models.base import MODELS, NeuralModel, keywords
from fourdb.tasks.types import TaskType
from fourdb.models.encoders import ROW_ENCODER_PARAMS, RowEncoding, TypeEncoder, key
from fourdb.models.id_embeddings import IdEmbeddings



class HeteroGNN(nn.Module):
    def __init__(self, conv, dims: dict, layers: int, hidden: int, out_dim: int, seed_type: str,
                 dropout: float, edge_dims: dict | None = None,
                 row_encoding: RowEncoding | None = None):
        """``conv()`` builds one layer's convolution; ``dims`` is table -> (numeric dim, cardinalities),
        ``edge_dims`` the same per featured edge type name; ``row_encoding``: the tables' row encoder (linear
        when not given; link rows' encoders are linear)."""
        super().__init__()
        self.seed_type = seed_type
        self.num_layers = layers
        self.encoder = TypeEncoder(dims, hidden, row_encoding)
        self.edge_encoders = nn.ModuleList(TypeEncoder(edge_dims, hidden) for _ in range(layers)) if edge_dims else None
        self.convs = nn.ModuleList(conv() for _ in range(layers))
        self.norms = nn.ModuleList(nn.ModuleDict({key(t): nn.LayerNorm(hidden) for t in dims})
                                   for _ in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, blocks, feats):
        """``blocks`` input layer first; ``feats`` table -> {"num", "cat"} of the first block's sources (and
        "row_key", "cutoff": which (row, cutoff) each is, ``fourdb.engine.sampling.data.node_names``)."""
        return self.embed(blocks, feats, self.seed_type)

    def embed(self, blocks, feats, ntype: str, h: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The head's output for the destination rows of ``ntype`` in the last block; ``h``: the input states,
        where the caller has added to them (learned row vectors), else encoded from ``feats``."""
        h = self.encode(feats) if h is None else h
        for i, block in enumerate(blocks):
            h = self.layer(i, block, h)
        return self.head(h[ntype][: blocks[-1].num_dst_nodes(ntype)])

    def encode(self, feats) -> dict[str, torch.Tensor]:
        return self.encoder(feats)

    def layer(self, i: int, block, h: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hop ``i``: source states ``h`` of ``block`` -> states of its destination nodes."""
        # tables with no destination rows stay (empty), so every edge type into a table takes part in
        # every batch alike: a row's output does not depend on which other rows share its batch
        dst = {t: v[: block.num_dst_nodes(t)] for t, v in h.items()}
        conv_block, src = self.edges_as_sources(i, block, h)
        out = self.convs[i](conv_block, (src, dst))
        # a table whose in-edges were all empty keeps its own state
        return {t: self.dropout(torch.relu(self.norms[i][key(t)](out.get(t, dst[t]) + dst[t]))) for t in dst}

    def edges_as_sources(self, i: int, block, h: dict[str, torch.Tensor]):
        """``block`` and source states as layer ``i``'s convolution sees them: an edge of a featured edge
        type is a source node of its own (appended after its source table's nodes, so the destination
        prefix stays), with state h[source] + its encoded features. Without featured edges, unchanged."""
        encoders = self.edge_encoders[i].encoders if self.edge_encoders is not None else {}
        featured = [et for et in block.canonical_etypes if key(et[1]) in encoders and block.num_edges(et)]
        if not featured:
            return block, h
        num_src = {t: block.num_src_nodes(t) for t in block.srctypes}
        rel, extra = {}, {}
        for et in block.canonical_etypes:
            s, d = block.edges(etype=et)
            if et in featured:
                x = block.edges[et].data
                extra.setdefault(et[0], []).append(h[et[0]][s] + encoders[key(et[1])](x["num"], x["cat"]))
                s = torch.arange(num_src[et[0]], num_src[et[0]] + len(s), device=s.device)
                num_src[et[0]] += len(s)
            rel[et] = (s, d)
        h = {t: torch.cat([v, *extra[t]]) if t in extra else v for t, v in h.items()}
        return make_block(rel, num_src, {t: block.num_dst_nodes(t) for t in block.dsttypes}, block.device), h

    def readout(self, h: dict[str, torch.Tensor], num_seeds: int) -> torch.Tensor:
        return self.head(h[self.seed_type][:num_seeds])


class GNN(NeuralModel):
    """A GNN model: sampled blocks from ``GraphSource``, one layer per sampled hop."""

    input_kind = "graph"
    ranking = ("two_tower", "gnn")  # a recommendation task: its convolution encodes both towers
    extra_params: tuple[str, ...] = ()  # parameters of the model itself, not of its convolution

    def conv(self, etypes: list[tuple[str, str, str]], hidden: int, **params) -> nn.Module:
        raise NotImplementedError

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        """Those every GNN's ``network`` reads (``layers``: one per sampled hop unless given; the row encoder's,
        linear unless given, whose values are checked here, before any data is read), and its convolution's."""
        shared = {name: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in ("hidden", "dropout")}
        for name in ("layers", *ROW_ENCODER_PARAMS):
            shared[name] = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)
        RowEncoding.of(f"model '{cls.name}'", params)
        return {**shared, **keywords(cls.conv, skip=("self", "etypes", "hidden"))}

    def build(self, data) -> HeteroGNN:
        return self.network(data, self.info.out_dim)

    def shared_params(self, data) -> tuple[dict, int, float, RowEncoding]:
        """(the rest of the params, hidden, dropout, the row encoder): what every GNN's network reads, with
        ``layers`` checked against the sampled hops."""
        params = {k: v for k, v in self.params.items() if k not in self.extra_params}
        hidden, dropout = params.pop("hidden"), params.pop("dropout")
        layers = params.pop("layers", None)
        if layers is not None and layers != len(data.sampler.fanouts):
            raise FourdbError(f"model '{self.name}': layers={layers} but the sampler draws "
                              f"{len(data.sampler.fanouts)} hops (sampler.fanouts has one per layer)")
        row_encoding = RowEncoding.of(f"model '{self.name}'", params, dropout)
        return {k: v for k, v in params.items() if k not in ROW_ENCODER_PARAMS}, hidden, dropout, row_encoding

    def network(self, data, out_dim: int) -> HeteroGNN:
        """The GNN over ``data`` (GraphData) with ``out_dim`` outputs per seed row."""
        params, hidden, dropout, row_encoding = self.shared_params(data)
        dims = {t: (input_width(f), f.cardinalities) for t, f in data.graph.features.items()}
        edge_dims = {et[1]: (input_width(f), f.cardinalities)
                     for et, f in data.graph.edge_features.items()}
        etypes = data.graph.canonical_etypes
        return HeteroGNN(lambda: self.conv(etypes, hidden, **params), dims, len(data.sampler.fanouts), hidden,
                         out_dim, data.seed_type, dropout, edge_dims, row_encoding)

    def make_source(self, data, trainer_cfg) -> GraphSource:
        return GraphSource(data, trainer_cfg.batch_size)


class RecommendationGNN(GNN):
    """A recommendation model around the convolution of a named GNN (``gnn: sage``): the two towers
    and the identity-aware GNN. ``build`` and ``make_source`` take a ``RecData`` whose ``graph`` is set."""

    extra_params: tuple[str, ...] = ("gnn",)
    task_types = (TaskType.RECOMMENDATION,)

    def __init__(self, info, seed: int = 0, **params):
        super().__init__(info, seed, **params)
        self.gnn = MODELS.get(params["gnn"])(info, seed=seed)
        self.vocabularies: dict | None = None  # per id column of the destinations, the keys it learns vectors for

    def keys(self, data) -> dict:
        """The keys of the destination rows (and of their parent rows) that the model learns a vector for:
        the training database's, fixed when it is fitted; another build of the database (certification
        cuts it) finds its rows among them by key (``fourdb.engine.sampling.links.key_rows``)."""
        if self.vocabularies is None:
            self.vocabularies = key_vocabularies(data.interactions.dst_ids)
        return self.vocabularies

    def id_embeddings(self, data) -> IdEmbeddings | None:
        """With ``id_embeddings: true``, a learned vector per destination row (and parent row), found by key,
        added to every destination node's input state; not given: none, the model as it was."""
        if not self.params.get("id_embeddings"):
            return None
        return IdEmbeddings(key_sizes(self.keys(data)), self.params["hidden"])

    def id_keys(self, data) -> dict | None:
        """The keys by which the data source hands the model its destinations' rows (None: it learns no vectors)."""
        return self.keys(data) if self.params.get("id_embeddings") else None

    def conv(self, etypes, hidden, **params):
        return self.gnn.conv(etypes, hidden, **params)

    @classmethod
    def wraps(cls, params: dict) -> str | None:
        return params.get("gnn")

    @classmethod
    def parameters(cls, params: dict) -> dict[str, inspect.Parameter]:
        """Its own (``extra_params``) and those of the named GNN, whose convolution it runs."""
        gnn = params.get("gnn")
        gnns = [name for name, c in MODELS.items() if issubclass(c, GNN) and c.ranked_by() == ("two_tower", "gnn")
                and not issubclass(c, RecommendationGNN)]  # GNNs that lend their convolution
        if gnn not in gnns:
            raise SettingError(f"model '{cls.name}': gnn must be one of {', '.join(gnns)}, not '{gnn}'"
                               f"{did_you_mean(gnn, gnns)}")
        RowEncoding.of(f"model '{cls.name}'", params)  # named as the model run, not as the GNN it wraps
        own = {name: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in cls.extra_params}
        return {**own, **MODELS.get(gnn).parameters(params)}
