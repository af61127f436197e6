"""``fourdb plan <overrides>``: every strategy the engine could train this run with, its predicted epoch
time and peak memory, which are on the Pareto frontier, and what ``engine=auto`` would pick.

It prepares the run as ``fourdb run`` would (database, task, graph, an untrained model), then runs
``engine=auto``'s dry run (fourdb/engine/auto.py) on it, trains nothing, and draws the frontier.
"""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np

from fourdb.engine.auto import choose
from fourdb.engine.frontier import Strategy, pareto, pick
from fourdb.engine.source import GraphSource
from fourdb.errors import FourdbError
from fourdb.prepare import prepare_run


def plan_run(cfg, out_dir, png: str | Path | None = None) -> tuple[str, str | None]:
    """The table as text, and the one-line error when no strategy meets ``engine.memory_limit_gb`` (else
    None); the frontier is drawn to ``png`` (default ``out_dir/plan.png``)."""
    run = prepare_run(cfg)
    data, _, _ = run.inputs(out_dir)
    trainer_cfg = run.trainer_config(out_dir)
    source = run.model.make_source(data, trainer_cfg) if run.model.input_kind == "graph" else None
    if not isinstance(source, GraphSource):
        raise FourdbError(f"fourdb plan prices the graph engine's strategies; model {cfg.model.name} does not "
                          "train through it")
    device = trainer_cfg.torch_device()
    source.prepare(run.model.build(data).to(device), device, trainer_cfg.epochs)
    wanted = source.engine
    source.engine = dataclasses.replace(wanted, memory_limit_gb=None)  # price every strategy, pick below
    strategies = choose(source, np.random.default_rng(cfg.seed)).strategies
    try:
        chosen, verdict = pick(strategies, wanted.objective, wanted.memory_limit_gb), None
    except FourdbError as e:  # the table still says what there is
        chosen, verdict = None, str(e)
    path = Path(png) if png is not None else Path(out_dir) / "plan.png"
    draw(strategies, chosen, path)
    limit = "" if wanted.memory_limit_gb is None else f", engine.memory_limit_gb={wanted.memory_limit_gb:g}"
    lines = [table(strategies, chosen), "",
             "* on the Pareto frontier (no other strategy is as fast and as small, and better in one); "
             f"-> what engine=auto picks (engine.objective={wanted.objective}{limit})", f"frontier plot: {path}"]
    return "\n".join(lines), verdict


def table(strategies: list[Strategy], chosen: Strategy | None) -> str:
    front = set(pareto(strategies))
    width = max(len(s.name) for s in strategies)
    rows = [f"   {'strategy':{width}s} {'epoch s':>9s} {'peak MB':>9s}"]
    for s in sorted(strategies, key=lambda s: (s.epoch_s, s.peak_mb)):
        mark = ("->" if s == chosen else "  ") + ("*" if s in front else " ")
        rows.append(f"{mark}{s.name:{width}s} {s.epoch_s:9.3f} {s.peak_mb:9.0f}")
    return "\n".join(rows)


def draw(strategies: list[Strategy], chosen: Strategy | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as plt

    from fourdb.utils import atomic_write_bytes

    front = pareto(strategies)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([s.epoch_s for s in strategies], [s.peak_mb for s in strategies], c="0.6", label="strategy")
    ax.plot([s.epoch_s for s in front], [s.peak_mb for s in front], "o-", c="tab:red", label="Pareto frontier")
    for s in front:
        ax.annotate(s.name, (s.epoch_s, s.peak_mb), fontsize=7, xytext=(4, 4), textcoords="offset points")
    if chosen is not None:
        ax.scatter([chosen.epoch_s], [chosen.peak_mb], s=160, facecolors="none", edgecolors="k", label="engine=auto")
    ax.set_xlabel("predicted epoch time (s)")
    ax.set_ylabel("predicted peak memory (MB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())
