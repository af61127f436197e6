"""Exact layer-wise inference with full neighbourhoods, once per distinct cutoff time.

A node of a sampled block is a (row, cutoff) pair, so with full neighbourhoods a seed's prediction at
cutoff t is the full-graph forward pass over the graph as of t: the edges known at t, the seed rows
masked as the task says and their hidden edge types dropped. Instead of expanding every seed's
neighbourhood separately (node-wise, where shared neighbours are recomputed once per batch and per
seed), this computes each layer once for all nodes it needs at t: layer l runs over the rows within
L - l hops of that cutoff's seeds (the rest of "all nodes" cannot reach a seed), every row once.
Its blocks carry edge ids and the edge features of featured edge types, as sampled blocks do.

The module is a ``fourdb.contracts.LayerwiseModule`` (``fourdb.models.gnn.HeteroGNN`` is): ``encode(feats)
-> h``, ``layer(i, block, h) -> h`` (one message passing step, exactly as its forward runs it),
``readout(h, num_seeds)``, ``seed_type`` and ``num_layers``.
"""
from __future__ import annotations

import numpy as np
import torch

from fourdb.contracts import LayerwiseModule
from fourdb.engine.sampling.data import GraphData, add_edge_features, node_inputs
from fourdb.engine.sampling.blocks import make_block


def layer_api(module: LayerwiseModule) -> LayerwiseModule:
    """``module``, or a TypeError naming the contract it does not meet."""
    if not isinstance(module, LayerwiseModule):
        raise TypeError(f"{type(module).__name__} is not a LayerwiseModule (fourdb/contracts.py): layer-wise "
                        f"inference needs seed_type, num_layers, encode(feats), layer(i, block, h), readout(h, n)")
    return module


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
    if "layerwise_arrays" not in data.derived:
        data.derived["layerwise_arrays"] = _GraphArrays(data)
    return data.derived["layerwise_arrays"]


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
    module = layer_api(module)
    encode, layer, readout, L = module.encode, module.layer, module.readout, module.num_layers
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


def cutoff_inference(module, data: GraphData, split: str, cutoff: int, device="cpu") -> torch.Tensor:
    """Raw outputs for the seeds of ``split`` at one cutoff time: one step of ``layerwise_inference``
    (the cost model times one to price them all)."""
    module.eval()
    seeds = np.asarray(data.seeds[split], np.int64)[np.asarray(data.cutoffs[split], np.int64) == cutoff]
    return _one_cutoff(module, data, _arrays(data), seeds, int(cutoff), device)


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
