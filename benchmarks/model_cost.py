"""What each GNN costs to train, over sage, on the same batches: the price of a model known before a sweep.

Every graph model of conf/model (those that take binary tasks) is built on one graph (synthetic taste at
12,000 users, r2n, fanouts 10, 10) and its training step (forward, backward, AdamW step) is timed on the
same sampled batches (one rng, one sampler: the models differ only in their network). An epoch is its
steps, so the median step over sage's is the epoch-time ratio. All run on one thread, interleaved
round by round so each sees the same machine load; the fastest of ``ROUNDS`` counts. The goal (the
field's models cost at most 2x sage, the graph transformer 3x) is met when ``ratio`` (sage's time over
the model's) is at least 1/2 (1/3).
"""
from __future__ import annotations

import os
import sys

THREADS = 1
os.environ["OMP_NUM_THREADS"] = str(THREADS)  # DGL's kernels and torch's, before either is loaded

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import bench, load, load_average  # noqa: E402

BATCHES = 12
ROUNDS = 3
BATCH_SIZE = 512
COST_GOAL = {"relgt": 3.0}  # the graph transformer attends over every token; the others: 2x


def graph_models() -> list[str]:
    from fourdb.models import MODELS
    from fourdb.tasks import TaskType

    return sorted(n for n, cls in MODELS.items() if cls.input_kind == "graph" and TaskType.BINARY in cls.task_types)


def main(models):
    from fourdb.engine.timing import measure_steps
    from fourdb.models import TaskInfo, create_model
    from fourdb.train.trainer import TrainerConfig

    torch.set_num_threads(THREADS)
    data = load("synthetic-12000", "taste", max_val=10)
    trainer_cfg = TrainerConfig(batch_size=BATCH_SIZE, progress=False)
    built = {}
    for name in ["sage", *[m for m in models if m != "sage"]]:
        model = create_model(name, TaskInfo("binary", 2, "auroc"), seed=0)
        module = model.build(data)
        batches, _ = model.make_source(data, trainer_cfg).timed_batches(np.random.default_rng(0), BATCHES)
        built[name] = (module, batches, torch.optim.AdamW(module.parameters(), lr=1e-3))
    times = {name: [] for name in built}
    for _ in range(ROUNDS):
        for name, (module, batches, opt) in built.items():
            times[name].append(measure_steps(module, "cpu", batches, opt))
    sage_s = min(times["sage"])
    for name in built:
        if name == "sage":
            continue
        step_s = min(times[name])
        goal = COST_GOAL.get(name, 2.0)
        bench("model_cost", f"synthetic-12000/taste/{name}", sage_s / step_s, 1 / goal,
              cost_vs_sage=step_s / sage_s, goal_cost=goal, step_s=step_s, sage_step_s=sage_s,
              batches=BATCHES, batch_size=BATCH_SIZE, best_of=ROUNDS, threads=THREADS, load=load_average())


if __name__ == "__main__":
    main(sys.argv[1:] or graph_models())
