"""The shop tasks' own SQL under DuckDB's default hash join and under its partitioned (out-of-core) one.

    .venv/bin/python benchmarks/task_sql.py                          # 1M and 10M rows
    .venv/bin/python benchmarks/task_sql.py --users 6849,68493,684931   # and 100M (about 7 minutes more)

Why the ``tasks`` stage of bench-scale grows faster than its rows: the task's SQL joins every purchase to
its user's (user, cutoff) pairs in a hash table that outgrows the CPU cache between 1M and 10M rows.
DuckDB's ``debug_force_external`` makes the join split both sides into partitions by hash first, which
keeps each partition's table smaller; if the cache is the cost, that helps at 10M rows and not at 1M.
The setting is a debugging switch (it also sends sorts, aggregates and window functions out of core),
measured here, not used by fourdb.

Per size, one process loads the shop, then runs ``window_labels`` (the task's SQL over its cutoffs, as
materialization does) for each task, alternating the two settings for ``--rounds`` rounds, and checks that
both give the same labels. Per task and size, one line with the best time of each (the machine is
noisy; runs are interleaved so drift hits both) and ``ratio`` = default over partitioned (> 1: the
partitioned join is faster):

    BENCH name=task_sql_partitioned task=<t> users=<n> rows=<r> default_s=<t> partitioned_s=<t> ratio=<x>
"""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time

TASKS = ("taste", "leak", "purchase-count")
SETTINGS = {"default": False, "partitioned": True}


def run_one(users: int, tasks: list[str], rounds: int) -> None:
    import pandas as pd

    from fourdb.datasets.base import dataset_folder
    from fourdb.rdb import Database
    from fourdb.tasks.spec import find_task

    materialize = importlib.import_module("fourdb.tasks.materialize")  # the module, not the function so named
    db = Database.load(dataset_folder("synthetic", size=users))
    rows = sum(len(t) for t in db.tables.values())
    for name in tasks:
        spec = find_task("synthetic", name)
        times = [t for cut in materialize.cutoffs(spec, db).values() for t in cut]
        best, labels = {s: float("inf") for s in SETTINGS}, {}
        for _ in range(rounds):
            for setting, external in SETTINGS.items():
                db.reset_sandbox({"debug_force_external": external})  # task SQL runs in the database's sandbox
                start = time.perf_counter()
                frame = materialize.window_labels(spec, db, times)
                best[setting] = min(best[setting], time.perf_counter() - start)
                labels[setting] = frame.sort_values(["entity", "cutoff"], ignore_index=True)
        db.reset_sandbox()
        pd.testing.assert_frame_equal(labels["default"], labels["partitioned"])
        print(f"BENCH name=task_sql_partitioned task={name} users={users} rows={rows} "
              f"default_s={best['default']:.2f} partitioned_s={best['partitioned']:.2f} "
              f"ratio={best['default'] / best['partitioned']:.2f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", default="6849,68493", help="shop sizes in users (146 rows each)")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process: one size
    args = ap.parse_args(argv)
    tasks = args.tasks.split(",")
    if args.one:
        run_one(args.one, tasks, args.rounds)
        return 0
    for users in (int(u) for u in args.users.split(",")):
        with tempfile.TemporaryDirectory() as cache:  # each size in a fresh process and an empty cache
            subprocess.run([sys.executable, __file__, "--one", str(users), "--tasks", args.tasks,
                            "--rounds", str(args.rounds)], env={**os.environ, "FOURDB_CACHE": cache}, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
