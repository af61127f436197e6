"""``fourdb plan <overrides>``: every strategy the engine could train this run with, its predicted epoch
time and peak memory, which are on the Pareto frontier, and what ``engine=auto`` would pick.

It prepares the run as ``fourdb run`` would (database, task, graph, an untrained model), then runs
``engine=auto``'s dry run (fourdb/engine/planning/auto.py) on it in explore mode, so that besides how batches are
fed (store, hot tier, sampler threads, prefetch depth) it also prices half and twice the batch size,
sampled and layer-wise evaluation and 1, 2, ... data-parallel processes. It trains nothing, draws the
frontier, and says how far off the last ``engine=auto`` run's prediction was.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from fourdb.engine.planning.auto import last_calibration, measure, runnable, space
from fourdb.engine.planning.cost import price
from fourdb.engine.planning.frontier import Strategy, pareto, pick
from fourdb.engine.sampling.source import GraphSource
from fourdb.errors import FourdbError
from fourdb.experiment.inputs.graph import graph_engine
from fourdb.experiment.prepare import prepare_run


def price_run(cfg, out_dir, run=None) -> tuple:
    """Prepare the run of ``cfg`` as ``fourdb run`` would (or take ``run``, prepared), dry-run it in explore
    mode: its ``Costs``, every priced ``Strategy``, and those ``engine=auto`` may choose for it (its batch
    size, evaluation, processes)."""
    run = run or prepare_run(cfg)
    data, _, _ = run.inputs(out_dir)
    trainer_cfg = run.trainer_config(out_dir)
    source = run.model.make_source(data, trainer_cfg) if run.kind.trains_on_graph else None
    if not isinstance(source, GraphSource):
        raise FourdbError(f"fourdb plan prices the graph engine's strategies; model {cfg.model.name} does not "
                          "train through it")
    device = trainer_cfg.torch_device()
    source.prepare(run.model.build(data).to(device), device, trainer_cfg.epochs)
    costs = measure(source, np.random.default_rng(cfg.seed), explore=True)
    strategies = price(costs, space(costs, source.engine, explore=True))
    nproc = trainer_cfg.nproc if isinstance(trainer_cfg.nproc, int) else 1
    return costs, strategies, runnable(strategies, costs, source.engine, nproc)


def plan_run(cfg, out_dir, png: str | Path | None = None) -> tuple[str, str | None]:
    """The table as text, and the one-line error when no strategy meets ``engine.memory_limit_gb`` (else
    None); the frontier is drawn to ``png`` (default ``out_dir/plan.png``). A model that does not train
    through the graph engine (a tabular model, a pair ranker, a baseline) has nothing to price: one line says so."""
    run = prepare_run(cfg)
    if not run.kind.trains_on_graph:
        return (f"model {cfg.model.name} reads {run.kind.name} inputs and trains without the graph engine, so there "
                f"are no engine strategies to price (fourdb plan prices how a GNN's batches are fed); fourdb run "
                f"with the same overrides trains it"), None
    costs, strategies, allowed = price_run(cfg, out_dir, run)
    eng = graph_engine(cfg)
    try:
        chosen, verdict = pick(allowed, eng.objective, eng.memory_limit_gb), None
    except FourdbError as e:  # the table still says what there is
        chosen, verdict = None, str(e)
    path = Path(png) if png is not None else Path(out_dir) / "plan.png"
    draw(strategies, chosen, path)
    limit = "" if eng.memory_limit_gb is None else f", engine.memory_limit_gb={eng.memory_limit_gb:g}"
    lines = [table(strategies, chosen), "",
             "* on the Pareto frontier (no other strategy is as fast and as small, and better in one); "
             f"-> what engine=auto picks (engine.objective={eng.objective}{limit}) among the strategies with the "
             f"run's batch size ({costs.batch_size}), evaluation ({eng.inference}) and processes "
             f"({allowed[0].nproc if allowed else 1})",
             "epoch s: training plus one validation pass; peak MB: resident memory, summed over the processes",
             *([] if costs.offline else [f"model {cfg.model.name} makes its batches online every epoch (the store "
                                         f"keeps batches of seed rows, not its candidates): no offline strategy"]),
             last_calibration() or "no calibration yet: an engine=auto run records its prediction beside what it "
                                   "measured", f"frontier plot: {path}"]
    return "\n".join(lines), verdict


def table(strategies: list[Strategy], chosen: Strategy | None) -> str:
    front = set(pareto(strategies))
    head = f"   {'mode':8s} {'workers':>7s} {'prefetch':>8s} {'hot MB':>7s} {'batch':>6s} {'eval':9s} {'procs':>5s} " \
           f"{'epoch s':>9s} {'eval s':>8s} {'peak MB':>8s}"
    rows = [head]
    for s in sorted(strategies, key=lambda s: (s.epoch_s, s.peak_mb)):
        mark = ("->" if s == chosen else "  ") + ("*" if s in front else " ")
        rows.append(f"{mark}{s.mode:8s} {s.workers:7d} {s.prefetch:8d} {s.cache_mb:7.0f} {s.batch_size:6d} "
                    f"{s.inference:9s} {s.nproc:5d} {s.epoch_s:9.3f} {s.eval_s:8.3f} {s.peak_mb:8.0f}")
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
        ax.annotate(s.name, (s.epoch_s, s.peak_mb), fontsize=5, xytext=(4, 4), textcoords="offset points")
    if chosen is not None:
        ax.scatter([chosen.epoch_s], [chosen.peak_mb], s=160, facecolors="none", edgecolors="k", label="engine=auto")
    ax.set_xlabel("predicted epoch time, training and validation (s)")
    ax.set_ylabel("predicted peak memory (MB)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buf.getvalue())
