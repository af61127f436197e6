"""DGL blocks built fast from edge lists whose ids are known valid (sampled batches, the offline
store's replays, layer-wise inference and the GNNs' edge-as-source view all build theirs here)."""
from __future__ import annotations

import functools

import dgl


@functools.lru_cache(maxsize=64)
def _metagraph(srctypes: tuple, dsttypes: tuple, relations: tuple):
    """The block's type graph: the same for every block of a graph, and immutable once built."""
    from dgl import graph_index

    src_id = {t: i for i, t in enumerate(srctypes)}
    dst_id = {t: i + len(srctypes) for i, t in enumerate(dsttypes)}
    return graph_index.from_coo(len(srctypes) + len(dsttypes), [src_id[r[0]] for r in relations],
                                [dst_id[r[2]] for r in relations], True)


def make_block(edges: dict, num_src: dict, num_dst: dict, device=None, eids: dict | None = None):
    """``dgl.create_block`` for edges whose ids are known valid, without its per-relation DGLGraph.

    ``dgl.create_block`` validates every edge list (a max over it) and builds a whole DGLGraph per
    edge type only to take its index; for a batch's blocks that costs as much as sampling them. This
    builds the same block from the same DGL index functions. Falls back to ``dgl.create_block`` where
    those internals differ. ``eids`` (edge type -> ids, for any edge types) become ``edata[dgl.EID]``.
    """
    try:
        from dgl import heterograph_index, utils
        from dgl.frame import Frame
        from dgl.heterograph import DGLBlock

        srctypes, dsttypes = sorted(num_src), sorted(num_dst)
        relations = sorted(edges)
        rel = [heterograph_index.create_unitgraph_from_coo(
            2, int(num_src[s]), int(num_dst[d]), edges[(s, e, d)][0].contiguous(), edges[(s, e, d)][1].contiguous(),
            ["coo", "csr", "csc"]) for s, e, d in relations]
        metagraph = _metagraph(tuple(srctypes), tuple(dsttypes), tuple(relations))
        counts = utils.toindex([int(num_src[t]) for t in srctypes] + [int(num_dst[t]) for t in dsttypes], "int64")
        # edge data given as frames at construction: setting it per edge type afterwards costs more than the block
        frames = [Frame({dgl.EID: eids[r]}, num_rows=len(eids[r])) if r in eids else None
                  for r in relations] if eids else None
        block = DGLBlock(heterograph_index.create_heterograph_from_relations(metagraph, rel, counts),
                         (srctypes, dsttypes), [r[1] for r in relations], edge_frames=frames)
    except (ImportError, AttributeError, TypeError):  # pragma: no cover - another DGL version
        block = dgl.create_block(edges, num_src_nodes=num_src, num_dst_nodes=num_dst, device=device)
        for et, ids in (eids or {}).items():
            block.edges[et].data[dgl.EID] = ids.to(block.device)
        return block
    return block if device is None else block.to(device)
