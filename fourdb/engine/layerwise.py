"""Exact layer-wise inference with full neighbourhoods, once per distinct cutoff time.

A node of a sampled block is a (row, cutoff) pair, so with full neighbourhoods a seed's prediction at
cutoff t is the full-graph forward pass over the graph as of t: the edges known at t, the seed rows
masked as the task says and their hidden edge types dropped. Instead of expanding every seed's
neighbourhood separately (node-wise, where shared neighbours are recomputed once per batch and per
seed), this computes each layer once for all nodes it needs at t: layer l runs over the rows within
L - l hops of that cutoff's seeds (the rest of "all nodes" cannot reach a seed), every row once.
Its blocks carry edge ids and the edge features of featured edge types, as sampled blocks do.

The module exposes its parts (``fourdb.models.gnn.HeteroGNN`` does): ``encode(feats) -> h``,
``layer(i, block, h) -> h`` (one message passing step, exactly as its forward runs it),
``readout(h, num_seeds)``, ``seed_type`` and ``convs`` (one per layer).
"""
from __future__ import annotations

import numpy as np
import torch

from fourdb.engine.loader import GraphData, add_edge_features, node_inputs
from fourdb.engine.sampler import make_block


def layer_api(module):
    """(encode, layer, readout, number of layers) of a GNN module, or a TypeError naming what is missing."""
    encode = getattr(module, "encode", None) or getattr(module, "encoder", None)
    readout = getattr(module, "readout", None)
    if readout is None and hasattr(module, "head"):
        def readout(h, n):
            return module.head(h[module.seed_type][:n])
    layer = getattr(module, "layer", None)
    if encode is None or layer is None or readout is None or not hasattr(module, "seed_type"):
        raise TypeError(f"{type(module).__name__} lacks a per-layer API: layer-wise inference needs "
                        f"encode(feats) (or encoder), layer(i, block, h), readout(h, n) (or head) and seed_type")
    layers = getattr(module, "num_layers", None) or len(module.convs)
    return encode, layer, readout, layers


class _GraphArrays:
    """Edge lists and times per edge type as numpy, built once per graph."""

    def __init__(self, data: GraphData):
        g = data.graph
        self.ntypes = list(g.ntypes)
        self.num_nodes = {t: g.g.num_nodes(t) for t in self.ntypes}
        self.edges = {et: g.edges(et) for et in g.canonical_etypes}
        self.hidden = {et for et in g.canonical_etypes if et[2] == data.seed_type
                       and (et in data.hidden_etypes or et[1] in data.hidden_etypes)}


def _arrays(data: GraphData) -> _GraphArrays:
    if getattr(data, "_layerwise_arrays", None) is None:
        data._layerwise_arrays = _GraphArrays(data)
    return data._layerwise_arrays


def _features(data: GraphData, ntype: str, nodes: np.ndarray, cutoff: int, num_seeds: int, device):
    feats = node_inputs(data, ntype, nodes, np.full(len(nodes), cutoff, np.int64), num_seeds)
    return {k: v.to(device) for k, v in feats.items()}


def _masks(arr: _GraphArrays, seed_type: str, seeds: np.ndarray, cutoff: int) -> dict:
    is_seed = np.zeros(arr.num_nodes[seed_type], bool)
    is_seed[seeds] = True
    masks = {}
    for et, (src, dst, t) in arr.edges.items():
        m = t <= cutoff
        if et in arr.hidden:
            m &= ~is_seed[dst]
        masks[et] = m
    return masks


@torch.no_grad()
def _one_cutoff(module, data: GraphData, arr: _GraphArrays, seeds: np.ndarray, cutoff: int, device) -> torch.Tensor:
    encode, layer, readout, L = layer_api(module)
    st = data.seed_type
    masks = _masks(arr, st, seeds, cutoff)
    # level: the highest layer whose output a row is needed for (-1: not needed)
    level = {t: np.full(n, -1, np.int8) for t, n in arr.num_nodes.items()}
    level[st][seeds] = L
    for l in range(L, 0, -1):
        for et, (src, dst, _) in arr.edges.items():
            sel = masks[et] & (level[et[2]][dst] >= l)
            if sel.any():
                s = src[sel]
                level[et[0]][s] = np.maximum(level[et[0]][s], l - 1)
    real = {t: v.copy() for t, v in level.items()}
    # a type with no rows at a layer still takes part (as the sampled forward sees it): one idle row
    for t, v in level.items():
        if t != st and len(v) and L and not (v >= L - 1).any():
            v[0] = L - 1  # never a destination of an edge (``real``), and no edge leaves it at that layer
    order, pos, count = {}, {}, {}
    for t, v in level.items():
        if t == st:
            rest = np.nonzero(v >= 0)[0]
            rest = rest[~np.isin(rest, seeds)]
            o = np.concatenate([seeds, rest[np.argsort(-v[rest], kind="stable")]])
        else:
            o = np.nonzero(v >= 0)[0]
            o = o[np.argsort(-v[o], kind="stable")]
        order[t] = o
        p = np.full(len(v), -1, np.int64)
        p[o] = np.arange(len(o))
        pos[t] = p
        count[t] = [int((v >= l).sum()) for l in range(L + 1)]
    feats = {t: _features(data, t, order[t][:count[t][0]], cutoff, len(seeds) if t == st else 0, device)
             for t in arr.ntypes}
    h = encode(feats)
    for l in range(1, L + 1):
        rel, eids = {}, {}
        for et, (src, dst, _) in arr.edges.items():
            sel = masks[et] & (real[et[2]][dst] >= l)
            rel[et] = (torch.from_numpy(pos[et[0]][src[sel]]), torch.from_numpy(pos[et[2]][dst[sel]]))
            eids[et] = torch.from_numpy(np.nonzero(sel)[0])
        block = make_block(rel, {t: count[t][l - 1] for t in arr.ntypes}, {t: count[t][l] for t in arr.ntypes},
                           device, eids)
        add_edge_features(data, [block], {t: np.full(count[t][l], cutoff, np.int64) for t in arr.ntypes})
        h = layer(l - 1, block, h)
    return readout(h, len(seeds))


def layerwise_inference(module, data: GraphData, split: str, device="cpu") -> torch.Tensor:
    """Raw outputs for every seed of ``split``, in split order, by exact layer-wise inference."""
    module.eval()
    arr = _arrays(data)
    seeds, cutoffs = np.asarray(data.seeds[split], np.int64), np.asarray(data.cutoffs[split], np.int64)
    out = None
    for t in np.unique(cutoffs):
        at = np.nonzero(cutoffs == t)[0]
        y = _one_cutoff(module, data, arr, seeds[at], int(t), device)
        if out is None:
            out = torch.empty((len(seeds), *y.shape[1:]), dtype=y.dtype, device=y.device)
        out[torch.from_numpy(at).to(y.device)] = y
    if out is None:
        return torch.zeros((0, 1))
    return out


@torch.no_grad()
def full_graph_forward(module, data: GraphData, split: str, device="cpu") -> torch.Tensor:
    """Reference: the module's own forward on the whole graph as of each cutoff (every row a source
    and a destination of every layer), full neighbourhoods. Slow; for tests and benchmarks."""
    module.eval()
    arr = _arrays(data)
    _, _, _, L = layer_api(module)
    st = data.seed_type
    seeds, cutoffs = np.asarray(data.seeds[split], np.int64), np.asarray(data.cutoffs[split], np.int64)
    out = None
    for t in np.unique(cutoffs):
        at = np.nonzero(cutoffs == t)[0]
        s = seeds[at]
        masks = _masks(arr, st, s, int(t))
        # seed rows first in the seed type, so the feature masking (first rows) and the head line up
        order = {x: np.arange(n) for x, n in arr.num_nodes.items()}
        rest = np.setdiff1d(np.arange(arr.num_nodes[st]), s)
        order[st] = np.concatenate([s, rest])
        pos = {x: np.argsort(o) for x, o in order.items()}
        rel = {et: (torch.from_numpy(pos[et[0]][src[masks[et]]]), torch.from_numpy(pos[et[2]][dst[masks[et]]]))
               for et, (src, dst, _) in arr.edges.items()}
        n = {x: int(v) for x, v in arr.num_nodes.items()}
        block = make_block(rel, n, n, device, {et: torch.from_numpy(np.nonzero(m)[0]) for et, m in masks.items()})
        add_edge_features(data, [block], {x: np.full(v, t, np.int64) for x, v in n.items()})
        feats = {x: _features(data, x, order[x], int(t), len(s) if x == st else 0, device) for x in arr.ntypes}
        y = module([block] * L, feats)[: len(s)]
        if out is None:
            out = torch.empty((len(seeds), *y.shape[1:]), dtype=y.dtype, device=y.device)
        out[torch.from_numpy(at).to(y.device)] = y
    return out
