"""``fourdb describe DATASET``: what every table holds, which columns each model kind reads (and how, or why
not), and the schema diagram."""
from __future__ import annotations

import logging
from pathlib import Path

from fourdb.defaults import CONF_DIR


def log_progress() -> None:
    """``fourdb describe`` is not a run, with no run log: its progress lines (``fourdb.utils.progress``) go to
    stderr, beside the bars on a terminal."""
    import sys

    from fourdb.utils import BesideBar

    logger = logging.getLogger("fourdb")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
        handler.addFilter(BesideBar())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def describe(args) -> int:
    from fourdb.datasets import load_dataset
    from fourdb.describe import column_report, report_frame
    from fourdb.leaderboard.cli import dataset_params
    from fourdb.rdb.diagram import write_diagram
    from fourdb.rdb.schema import file_stem
    from fourdb.untrusted import inside_output
    from fourdb.tasks import find_task, materialize

    import yaml

    log_progress()
    dfs = yaml.safe_load((Path(CONF_DIR) / "features" / "dfs.yaml").read_text())  # what features=dfs runs with
    depth = dfs["depth"] if args.depth is None else args.depth
    db = load_dataset(args.dataset, args.allow_outside_paths, **dataset_params(args.dataset_param))
    task = materialize(find_task(args.dataset, args.task), db) if args.task else None
    print(db.summary().to_string(index=False))
    for note in db.notes:
        print(f"note: {note}")
    seeds = f"task {task.spec.name}'s seed rows ({task.spec.entity_table})" if task else \
        "each table as if it were a task's entity table"
    print(f"\nWhat each model kind makes of every column, for {seeds}: single_table reads the seed row; dfs the "
          f"seed row and DFS features to depth {depth}; graph every table ({args.graph}).")
    frame = report_frame(column_report(db, task, graph=args.graph, depth=depth, primitives=dfs["primitives"]))
    for table, part in frame.groupby("table", sort=False):
        print(f"\n{table}\n{part.drop(columns='table').to_string(index=False)}")
    # the schema's name is text from schema.yaml: the diagram is named by a plain stem of it, inside --out
    stem = inside_output(args.out, f"{file_stem(db.schema.name, 'database')}-schema", "describe --out")
    logging.getLogger("fourdb").info("diagram: drawing %d tables and their foreign keys", len(db.schema.tables))
    paths = write_diagram(db.schema, stem)
    print(f"\ndiagram: {', '.join(map(str, paths))}")
    return 0
