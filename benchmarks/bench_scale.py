"""How fourdb's stages grow with the database: the synthetic shop at three sizes a factor 10 apart.

    make bench-scale                                   # 1M, 10M and 100M rows (the default)
    .venv/bin/python benchmarks/bench_scale.py --rows 1e5,1e6,1e7

Per size, one fresh process runs the stages a user runs, in order, on the shop's ``taste`` task:
``generate`` (build the database folder), ``load`` (load and validate it), ``tasks`` (materialize the
task: every seed), ``dfs`` (DFS depth 2 over a fixed number of seeds), ``graph`` (the r2ne graph, its
sampler index and seed features), ``train`` (one epoch of sage over a fixed number of training seeds,
with its validation pass) and ``infer`` (predictions for every test seed). Each stage reports its wall
time, the process's peak RSS while it ran (sampled every 50 ms), so a stage is charged for what the
earlier ones still hold, and the RSS it leaves held for the next. Each size starts from an empty cache folder (nothing built or computed before
is reused), and the parent stops a size whose process passes ``--limit-gb`` (default 16), saying at which
stage.

Per stage, one line over the sizes that completed it:

    BENCH name=scale_<stage> rows=<rows at the largest size> seconds=<t> peak_mb=<m> exponent=<e> ratio=<r>

``exponent`` is the slope of log(seconds) over log(rows) (1: linear growth), and ``ratio`` is the memory
limit over the stage's peak at the largest size (>= 1: it fits). The ``tasks`` line also gives the task's
own SQL, which DuckDB runs (``window_labels``: the query, its result fetched and its columns named), and
the rest of the stage, fourdb's own work, each with its seconds at the largest size and its exponent
(``sql_*``, ``rest_*``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import tempfile
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("DGLBACKEND", "pytorch")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

ROWS_PER_USER = 146  # the shop's rows per user (purchases, audits, the user), measured at 100k users
STAGES = ("generate", "load", "tasks", "dfs", "graph", "train", "infer")
DFS_SEEDS = 5000
TRAIN_SEEDS = 5000
VAL_SEEDS = 1000


class Peak:
    """The process's peak RSS (MB) while a ``with`` block runs."""

    def __enter__(self):
        self.proc, self.peak, self.done = psutil.Process(), 0.0, threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss / 2**20)
            self.done.wait(0.05)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss / 2**20)


def run_one(users: int, cache: Path) -> None:
    """Every stage at one size, one JSON line per stage on stdout."""
    os.environ["FOURDB_CACHE"] = str(cache)
    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR
    from fourdb.datasets.base import dataset_folder
    from fourdb.features import build_table_features
    from fourdb.models import TaskInfo, create_model
    from fourdb.rdb import Database
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task
    from fourdb.train.trainer import TrainerConfig

    materialize = importlib.import_module("fourdb.tasks.materialize")  # the module: the package exports a function so named

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=["dataset=synthetic", f"dataset.params.size={users}", "task=taste",
                                           "model=sage", "graph=r2ne", "sampler=recent", "sampler.fanouts=[10,10]",
                                           f"max_train_seeds={TRAIN_SEEDS}", f"max_val_seeds={VAL_SEEDS}"])
    state = {}

    def stage(name, fn, parts=None):
        with Peak() as peak:
            start = time.perf_counter()
            state[name] = fn()
            seconds = time.perf_counter() - start
        held = psutil.Process().memory_info().rss / 2**20  # what the stage leaves to the next ones
        print(json.dumps({"stage": name, "seconds": round(seconds, 3), "peak_mb": round(peak.peak),
                          "held_mb": round(held), **(parts or {})}), flush=True)

    stage("generate", lambda: dataset_folder("synthetic", size=users))
    stage("load", lambda: Database.load(state["generate"]))
    db = state["load"]
    print(json.dumps({"rows": int(sum(len(t) for t in db.tables.values()))}), flush=True)
    # the task's own SQL, which DuckDB runs, timed apart from the rest of the stage (fourdb's own work)
    sql = {"sql_seconds": 0.0}
    run_sql = materialize.window_labels

    def timed_sql(*args, **kwargs):
        start = time.perf_counter()
        try:
            return run_sql(*args, **kwargs)
        finally:
            sql["sql_seconds"] += time.perf_counter() - start

    materialize.window_labels = timed_sql
    stage("tasks", lambda: load_task(db, "synthetic", "taste"), sql)
    materialize.window_labels = run_sql
    task = state["tasks"]
    rng = np.random.default_rng(0)
    few = {s: f.iloc[np.sort(rng.choice(len(f), min(len(f), n), replace=False))].reset_index(drop=True)
           for (s, f), n in zip(((s, task.split(s)) for s in ("train", "val", "test")),
                                (DFS_SEEDS * 3 // 5, DFS_SEEDS // 5, DFS_SEEDS // 5))}
    dfs = yaml.safe_load((Path(CONF_DIR) / "features" / "dfs.yaml").read_text())
    stage("dfs", lambda: build_table_features("dfs", db, task, few, depth=2, primitives=dfs["primitives"]))
    del state["dfs"]
    splits = subsample(task, TRAIN_SEEDS, VAL_SEEDS)
    stage("graph", lambda: graph_inputs(cfg, db, task, splits))
    data = state["graph"]
    info = TaskInfo(task.spec.task_type, task.num_classes, task.spec.metric)
    model = create_model("sage", info, seed=0, **cfg.model.params)
    trainer = TrainerConfig(epochs=1, progress=False, batch_size=512)
    stage("train", lambda: model.fit(data, trainer))
    stage("infer", lambda: model.predict(data, "test"))
    print(json.dumps({"test_seeds": int(len(data.seeds["test"]))}), flush=True)


def measure(users: int, limit_mb: float, cache: Path) -> dict:
    """Run one size in a child process, stopping it if its RSS passes ``limit_mb``."""
    child = subprocess.Popen([sys.executable, __file__, "--one", str(users), "--cache", str(cache)],
                             stdout=subprocess.PIPE, text=True)
    out = {"users": users, "stages": {}, "stopped": None}
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
    reader.start()
    proc = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            rss = sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20
        except psutil.NoSuchProcess:
            break
        if rss > limit_mb:
            child.kill()
            out["stopped"] = f"RSS {rss:.0f} MB > {limit_mb:.0f} MB"
            break
        time.sleep(0.1)
    child.wait()
    reader.join()
    for line in lines:
        if line.startswith("{"):
            item = json.loads(line)
            if "stage" in item:
                out["stages"][item["stage"]] = item
            else:
                out.update(item)
    if child.returncode and not out["stopped"]:
        out["stopped"] = f"exit code {child.returncode}"
    if out["stopped"]:
        left = [s for s in STAGES if s not in out["stages"]]
        out["stopped"] += f" in stage '{left[0]}'" if left else ""
    return out


def growth(rows: list[float], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) over log(rows)."""
    if len(rows) < 2:
        return float("nan")
    return float(np.polyfit(np.log(rows), np.log(np.maximum(seconds, 1e-3)), 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1e6,1e7,1e8", help="approximate total rows per size, comma-separated")
    ap.add_argument("--limit-gb", type=float, default=16.0)
    ap.add_argument("--cache", default=str(Path(__file__).resolve().parents[1] / ".fourdb_cache" / "bench_scale"))
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        run_one(args.one, Path(args.cache))
        return 0
    results = []
    for rows in (float(r) for r in args.rows.split(",")):
        users = max(100, int(rows / ROWS_PER_USER))
        Path(args.cache).mkdir(parents=True, exist_ok=True)
        fresh = Path(tempfile.mkdtemp(dir=args.cache))  # nothing cached: every stage does its work
        try:
            r = measure(users, args.limit_gb * 1024, fresh)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
        results.append(r)
        print(f"users={users} rows={r.get('rows', '?')} test_seeds={r.get('test_seeds', '?')} "
              + " ".join(f"{s}={v['seconds']:.2f}s/{v['peak_mb']}MB/{v['held_mb']}MB" for s, v in r["stages"].items())
              + (f" STOPPED: {r['stopped']}" if r["stopped"] else ""), flush=True)
    load = os.getloadavg()[0]
    for stage in STAGES:
        done = [r for r in results if stage in r["stages"] and "rows" in r]
        if not done:
            print(f"BENCH name=scale_{stage} rows=- seconds=- peak_mb=- exponent=- ratio=- (no size completed it)")
            continue
        last = done[-1]["stages"][stage]
        exponent = growth([r["rows"] for r in done], [r["stages"][stage]["seconds"] for r in done])
        parts = ""
        if "sql_seconds" in last:  # the task's SQL (DuckDB's work) and the rest of the stage (fourdb's), apart
            rows = [r["rows"] for r in done]
            sql = [r["stages"][stage]["sql_seconds"] for r in done]
            rest = [r["stages"][stage]["seconds"] - q for r, q in zip(done, sql)]
            parts = (f" sql_seconds={sql[-1]:.2f} sql_exponent={growth(rows, sql):.2f} rest_seconds={rest[-1]:.2f} "
                     f"rest_exponent={growth(rows, rest):.2f} sql_seconds_by_size={','.join(f'{q:.2f}' for q in sql)}")
        print(f"BENCH name=scale_{stage} rows={done[-1]['rows']} seconds={last['seconds']:.1f} "
              f"peak_mb={last['peak_mb']} exponent={exponent:.2f} ratio={args.limit_gb * 1024 / last['peak_mb']:.2f} "
              f"sizes={','.join(str(r['rows']) for r in done)}{parts} load={load:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
