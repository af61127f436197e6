"""``fourdb datasets``: the built-in databases and their tasks."""
from __future__ import annotations


def datasets(args) -> int:
    from fourdb.datasets import DATASETS
    from fourdb.tasks import TASKS_DIR

    for name, entry in sorted(DATASETS.items()):
        tasks = sorted(p.stem for p in (TASKS_DIR / name).glob("*.yaml"))
        print(f"{name:14s} {entry.description}")
        print(f"{'':14s} tasks: {', '.join(tasks) or '-'}; params: {entry.defaults}")
    return 0
