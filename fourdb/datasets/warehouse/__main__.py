"""``python -m fourdb.datasets.warehouse [OUT] [--rows N] [--seed S] [--format duckdb|parquet] [--tasks DIR]``:
write the warehouse for ``fourdb import`` and/or its task files (into the imported folder's ``tasks/``)."""
from __future__ import annotations

import argparse
import time

from fourdb.datasets.warehouse import write_tasks, write_warehouse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fourdb.datasets.warehouse",
                                description="Write a TPC-DS-shaped warehouse with no key declared.")
    p.add_argument("out", nargs="?", help="a .duckdb file, or a folder for parquet files (left out: only --tasks)")
    p.add_argument("--rows", type=int, default=100_000, help="about how many rows over all tables (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=("duckdb", "parquet"), default=None,
                   help="default: duckdb for a .duckdb or .db path, else parquet")
    p.add_argument("--tasks", metavar="DIR", help="also write the task files (churn, next-items) into DIR")
    args = p.parse_args(argv)
    if not args.out and not args.tasks:
        p.error("give OUT, --tasks DIR, or both")
    if args.out:
        start = time.perf_counter()
        counts = write_warehouse(args.out, args.rows, args.seed, args.format)
        print(f"wrote {args.out}: {len(counts)} tables, {sum(counts.values()):,} rows in "
              f"{time.perf_counter() - start:.1f} s")
        for name, n in counts.items():
            print(f"  {name}: {n:,}")
    if args.tasks:
        for path in write_tasks(args.tasks):
            print(f"task file {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
