"""What each GNN costs to train, over sage, on the same batches: the price of a model known before a sweep.

Every graph model of conf/model (those that take binary tasks) is built on one graph (synthetic taste at
12,000 users, r2n, fanouts 10, 10) and its training step (forward, backward, AdamW step) is timed on the
same sampled batches (one rng, one sampler: the models differ only in their network). An epoch is its
steps, so the median step over sage's is the epoch-time ratio. All run on one thread, interleaved
round by round so each sees the same machine load; the fastest of ``ROUNDS`` counts. The goal (the
field's models cost at most 2x sage, the graph transformer 3x) is met when ``ratio`` (sage's time over
the model's) is at least 1/2 (1/3).

The recommendation GNNs (``idgnn``, ``contextgnn``) are timed the same way on browsing next-views
(2,000 users), over sage's own recommendation form, its two towers, each on the same training seeds
(batch by batch) and the same convolution; each builds its own inputs for those seeds (trees, or the two
towers' subgraphs with sampled negatives), and only the training step is timed.
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


def rec_models() -> list[str]:
    from fourdb.models import MODELS
    from fourdb.tasks import TaskType

    return sorted(n for n, cls in MODELS.items() if cls.input_kind == "graph" and cls.task_types == (TaskType.RECOMMENDATION,)
                  and n != "two_tower")


def rec_data(size: int = 2000, max_train: int = 6000):
    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR
    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs import INPUT_KINDS, subsample
    from fourdb.tasks import load_task

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=["dataset=browsing", "task=next-views", "model=idgnn"])
    db = load_dataset("browsing", size=size)
    task = load_task(db, "browsing", "next-views")
    return INPUT_KINDS.get("graph").build(cfg, db, task, subsample(task, max_train, 10))


def time_models(names: list[str], info, data, label: str, baseline: str = "sage") -> None:
    """Build each model on ``data``, time its training steps on its first batches (interleaved rounds),
    and print its cost over ``baseline``'s."""
    from fourdb.engine.planning.timing import measure_steps
    from fourdb.models import create_model
    from fourdb.train.trainer import TrainerConfig

    trainer_cfg = TrainerConfig(batch_size=BATCH_SIZE, progress=False)
    built = {}
    for name in [baseline, *[m for m in names if m != baseline]]:
        model = create_model(name, info, seed=0)
        source = model.make_source(data, trainer_cfg)
        module = model.build(data)
        batches, _ = source.timed_batches(np.random.default_rng(0), BATCHES)
        built[name] = (module, batches, torch.optim.AdamW(module.parameters(), lr=1e-3))
    times = {name: [] for name in built}
    for _ in range(ROUNDS):
        for name, (module, batches, opt) in built.items():
            times[name].append(measure_steps(module, "cpu", batches, opt))
    base_s = min(times[baseline])
    for name in built:
        if name == baseline:
            continue
        step_s = min(times[name])
        goal = COST_GOAL.get(name, 2.0)
        bench("model_cost", f"{label}/{name}", base_s / step_s, 1 / goal,
              cost_vs_sage=step_s / base_s, goal_cost=goal, step_s=step_s, sage_step_s=base_s,
              batches=BATCHES, batch_size=BATCH_SIZE, best_of=ROUNDS, threads=THREADS, load=load_average())


def main(models):
    from fourdb.models import TaskInfo

    torch.set_num_threads(THREADS)
    binary = [m for m in models if m not in rec_models()]
    if binary:
        time_models(binary, TaskInfo("binary", 2, "auroc"), load("synthetic-12000", "taste", max_val=10),
                    "synthetic-12000/taste")
    ranking = [m for m in models if m in rec_models()]
    if ranking:  # sage's recommendation form is its two towers (``two_tower`` with sage's convolution)
        time_models(ranking, TaskInfo("recommendation", 0, "map"), rec_data(), "browsing-2000/next-views")


if __name__ == "__main__":
    main(sys.argv[1:] or graph_models() + rec_models())
