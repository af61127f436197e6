"""Reference implementations the tests compare the engine against (slow, obviously right)."""
import numpy as np
import torch

from fourdb.engine.sampling.blocks import make_block
from fourdb.engine.sampling.data import GraphData, add_edge_features
from fourdb.engine.feeding.layerwise import _arrays, _features, _masks, layer_api


@torch.no_grad()
def full_graph_forward(module, data: GraphData, split: str, device="cpu") -> torch.Tensor:
    """Reference: the module's own forward on the whole graph as of each cutoff (every row a source
    and a destination of every layer), full neighbourhoods. Slow; for tests and benchmarks."""
    module.eval()
    arr = _arrays(data)
    L = layer_api(module).num_layers
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
