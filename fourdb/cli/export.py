"""``fourdb export`` (a run's test predictions as a RelBench table) and ``fourdb export-dataset`` (a database
and its tasks as a RelBench 3 folder)."""
from __future__ import annotations


def export(args) -> int:
    from fourdb.export import export_predictions

    for line in export_predictions(args.run_dir, args.out, args.format):
        print(line)
    return 0


def export_dataset(args) -> int:
    from fourdb.export import export_dataset
    from fourdb.leaderboard.cli import dataset_params

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    for line in export_dataset(args.dataset, args.out, dataset_params(args.dataset_param), tasks, args.allow_outside_paths):
        print(line)
    return 0
