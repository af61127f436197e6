"""The ``fourdb`` command, one module per subcommand: run, certify and plan (Hydra apps, ``run``, ``plan``),
validate, describe, import (``convert``), datasets, rerun, export and export-dataset, and leaderboard
(``fourdb.leaderboard.cli``); a sweep's summary is ``summary``."""
from __future__ import annotations

import argparse
import sys

from fourdb.cli.errors import fail


def command(module: str, name: str):
    """The function ``name`` of ``fourdb.cli.<module>``, imported when its subcommand runs (each brings its own
    dependencies: ``fourdb datasets`` loads no torch)."""
    def run(args) -> int:
        import importlib

        return getattr(importlib.import_module(f"fourdb.cli.{module}"), name)(args)

    return run


def _outside_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-outside-paths", action="store_true",
                   help="let the folder's files name sources outside it (an absolute path, '..', a symlink out); "
                        "refused by default, see README 'What fourdb trusts'")


def _import_parser(sub) -> None:
    p = sub.add_parser("import", help="convert a SQLite/DuckDB file, a folder of parquet/CSV files, a 4DBInfer or a "
                                      "RelBench folder into a database folder")
    p.add_argument("path")
    p.add_argument("--out", required=True, help="database folder to write (must not exist, or be empty)")
    p.add_argument("--name", default=None, help="database name (default: the file or folder name)")
    p.add_argument("--lenient", action="store_true",
                   help="make values that break their declared type NULL and drop rows with a null or repeated "
                        "declared primary key, counted in warnings (default: stop with an error)")
    p.add_argument("--no-infer-keys", dest="infer_keys", action="store_false",
                   help="keep only the keys the source declares (default: infer the others from names and values, "
                        "each with its evidence in the output and in schema.yaml)")
    p.add_argument("--keep-identifiers", action="store_true",
                   help="keep as features the columns that identify a row or a person (ids, names, e-mail "
                        "addresses; default: written feature: false, each with why)")
    _outside_flag(p)
    p.set_defaults(func=command("convert", "convert"))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except Exception as e:  # noqa: BLE001 - one line, never a traceback (error_line)
        return fail(e)


def _main(argv: list[str]) -> int:
    # run, plan and certify hand their arguments to Hydra as overrides, so argparse does not read them
    if argv and argv[0] == "run":
        from fourdb.cli.run import hydra_run

        hydra_run(argv[1:])
        return 0
    if argv and argv[0] == "plan":  # Hydra overrides as for run, and --out FILE.png
        from fourdb.cli.plan import plan

        plan(argv[1:])
        return 0
    if argv and argv[0] == "certify":  # a run that also proves its test predictions leak-free
        from fourdb.cli.run import hydra_run

        hydra_run([*argv[1:], "certify.enabled=true"])
        return 0
    parser = argparse.ArgumentParser(prog="fourdb", description="Predictive ML on relational databases.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run experiments (Hydra overrides follow, e.g. model=sage -m)")
    sub.add_parser("plan", help="predict epoch time and peak memory of every engine strategy for a run, mark the "
                                "Pareto frontier and draw it (Hydra overrides as for run; --out FILE.png)")
    sub.add_parser("certify", help="run, then check that deleting or scrambling every row after a test cutoff "
                                   "leaves its predictions unchanged (Hydra overrides as for run)")
    _import_parser(sub)
    p = sub.add_parser("validate", help="check a database folder (schema.yaml plus data files) and its tasks")
    p.add_argument("folder")
    p.add_argument("--task", action="append", metavar="NAME_OR_FILE",
                   help="check this task (a name in FOLDER/tasks or a task file) instead of every task in "
                        "FOLDER/tasks (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=command("validate", "validate"))
    p = sub.add_parser("describe", help="what every table holds, which columns each model kind reads (and how, or "
                                        "why not), and the schema diagram (SVG and PNG)")
    p.add_argument("dataset", metavar="DATASET", help="a database folder or a built-in dataset")
    p.add_argument("--task", metavar="NAME_OR_FILE", help="report the columns as this task's runs read them")
    p.add_argument("--graph", default="r2ne", help="the graph construction (r2n or r2ne; default r2ne)")
    p.add_argument("--depth", type=int, help="DFS depth (default: conf/features/dfs.yaml's)")
    p.add_argument("--out", default=".", metavar="FOLDER", help="where the diagram goes (default: here)")
    p.add_argument("--dataset-param", action="append", metavar="KEY=VALUE",
                   help="a built-in dataset parameter, e.g. size=150 (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=command("describe", "describe"))
    p = sub.add_parser("datasets", help="list the built-in databases and their tasks")
    p.set_defaults(func=command("datasets", "datasets"))
    p = sub.add_parser("rerun", help="run a record again from its own config into a fresh run folder and say whether "
                                     "its metrics repeat (exit status 1 when they do not)")
    p.add_argument("record", metavar="RECORD", help="a record.json, a run folder, or a board line: BOARD.jsonl:N")
    p.add_argument("--line", type=int, metavar="N", help="the board's line to rerun (1-based), as BOARD.jsonl:N")
    p.add_argument("--out", metavar="FOLDER", help="the rerun's run folder (new or empty; default: outputs/rerun/...)")
    _outside_flag(p)
    p.set_defaults(func=command("rerun", "rerun"))
    p = sub.add_parser("export", help="write a run's test predictions as a RelBench prediction table (CSV)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (record.json and predictions.parquet)")
    p.add_argument("--format", default="relbench", help="the table's format: relbench (default)")
    p.add_argument("--out", required=True, metavar="FILE.csv")
    p.set_defaults(func=command("export", "export"))
    p = sub.add_parser("export-dataset", help="write a database and its tasks as a RelBench 3 dataset folder")
    p.add_argument("dataset", metavar="DATASET", help="a built-in dataset or a database folder")
    p.add_argument("--out", required=True, metavar="FOLDER", help="folder to write (new, empty or an earlier export)")
    p.add_argument("--tasks", metavar="A,B", help="these tasks (names or task files) only (default: all)")
    p.add_argument("--dataset-param", action="append", metavar="KEY=VALUE",
                   help="a built-in dataset parameter, e.g. size=150 (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=command("export", "export_dataset"))
    from fourdb.leaderboard.cli import add_parser as add_leaderboard

    add_leaderboard(sub)
    args = parser.parse_args(argv)
    return args.func(args)
