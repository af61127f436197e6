"""A fourdb database and its tasks as a RelBench 3 dataset folder, which ``relbench.load_dataset(FOLDER)``
loads: ``manifest.yaml``, ``db/<table>.parquet`` with RelBench's keys (see ``keys``) and
``tasks/<task>/{manifest.yaml, train,val,test.parquet}`` (see ``tasks``).

The dataset's val and test times are the ones most of its tasks share (ties: the first task's); window
tasks asked at them become forecast tasks, every other task an external one.
"""
from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pandas as pd

from fourdb.datasets import DATASETS, dataset_error, load_dataset
from fourdb.errors import FourdbError, TaskError
from fourdb.export.keys import positions, relbench_tables
from fourdb.export.tasks import MANIFEST_VERSION, ExportedTask, as_forecast, convertible, external, forecast, stamp
from fourdb.rdb import Database
from fourdb.tasks import TASKS_DIR, TaskSpec, find_task
from fourdb.tasks.splits import SPLITS
from fourdb.untrusted import inside_output, plain_file_name
from fourdb.utils import atomic_output, yaml_text


def task_names(dataset: str) -> list[str]:
    """Every task ``find_task`` resolves for ``dataset``: its folder's ``tasks/``, then the built-in ones."""
    folders = (Path(dataset) / "tasks", TASKS_DIR / Path(dataset).name)
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def shared_timestamps(specs: list[TaskSpec]) -> tuple[pd.Timestamp, pd.Timestamp]:
    pairs = [(pd.Timestamp(s.timestamps["val"]), pd.Timestamp(s.timestamps["test"])) for s in specs]
    counts = Counter(pairs)
    best = max(counts.values())
    return next(p for p in pairs if counts[p] == best)  # ties: the first task's


def export_dataset(dataset: str, out: str | Path, params: dict | None = None,
                   tasks: list[str] | None = None, allow_outside_paths: bool = False) -> list[str]:
    """Write ``dataset`` (a built-in name or a database folder) and its tasks (all, or these names or task
    files) to ``out``; returns what was done, a line each."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "manifest.yaml").exists())):
        raise FourdbError(f"--out {out}: exists and is not an empty folder or an earlier RelBench export")
    if dataset not in DATASETS and not (Path(dataset) / "schema.yaml").is_file():
        raise dataset_error(dataset)
    specs = [find_task(dataset, name) for name in (tasks or task_names(dataset))]
    for spec in specs:  # a task's name is its folder in the export
        plain_file_name(spec.name, spec.origin or f"task '{spec.name}'", "task name")
    lines = []
    for spec in [s for s in specs if not convertible(s)]:
        lines.append(f"note: task '{spec.name}' left out: RelBench has no evaluator for {spec.task_type} tasks")
    specs = [s for s in specs if convertible(s)]
    seen = Counter(s.name for s in specs)
    if any(n > 1 for n in seen.values()):
        raise FourdbError(f"two tasks are named '{next(k for k, n in seen.items() if n > 1)}'")
    db = load_dataset(dataset, allow_outside_paths, **(params or {}))
    for t in db.schema.tables:  # a table's name is its file in the export
        plain_file_name(t.name, f"dataset '{dataset}', table '{t.name}'", "table name")
    pos = positions(db)
    tables = relbench_tables(db, pos)
    exported, failed = {}, []
    for spec in specs:  # fourdb's own labels first: a task that has none on this database is left out
        try:
            exported[spec.name] = external(spec, db, pos)
        except TaskError as e:
            failed.append(str(e))
            lines.append(f"note: left out: {e}")
    specs = [s for s in specs if s.name in exported]
    if not specs:
        raise FourdbError(failed[0] if failed else f"dataset '{dataset}': no binary, regression or recommendation "
                                                   f"task to export; RelBench takes its val and test times from them")
    val, test = shared_timestamps(specs)
    for spec in specs:
        kind = "external"
        if as_forecast(spec, val, test):
            try:
                exported[spec.name], kind = forecast(spec, tables, val, test), "forecast"
            except TaskError as e:
                lines.append(f"note: {e}; exported with fourdb's labels as an external task")
        task = exported[spec.name]
        lines += [f"note: {n}" for n in task.notes]
        counts = ", ".join(f"{len(task.splits[s])} {s}" for s in SPLITS)
        lines.append(f"task {spec.name}: {kind} ({counts})")
    exported = list(exported.values())
    with atomic_output(out, folder=True) as tmp:
        for t in tables.schema.tables:
            _write_parquet(inside_output(tmp, f"db/{t.name}.parquet", f"table '{t.name}'"), tables.tables[t.name])
        _write_yaml(tmp / "manifest.yaml", _dataset_manifest(tables, dataset, params, val, test))
        for task in exported:
            _write_task(inside_output(tmp, f"tasks/{task.name}", f"task '{task.name}'"), task)
    for t in db.schema.tables:
        if t.inherited_from:
            lines.append(f"note: table {t.name} takes its time from {', '.join(t.inherited_from)} in fourdb; RelBench "
                         f"has no such time, so its rows are visible at every time there")
    lines.append(f"wrote {out}: {len(db.schema.tables)} tables, {len(exported)} tasks, "
                 f"val {stamp(val)}, test {stamp(test)}")
    return lines


def _dataset_manifest(db: Database, dataset: str, params: dict | None, val, test) -> dict:
    tables = {}
    for t in db.schema.tables:
        tables[t.name] = {"pkey": t.primary_key, "time_col": t.time_column,
                          "fkeys": {fk.name: fk.link_table for fk in t.foreign_keys}}
    given = f" ({', '.join(f'{k}={v}' for k, v in params.items())})" if params else ""
    return {"name": db.schema.name, "manifest_version": MANIFEST_VERSION,
            "description": f"The fourdb database '{db.schema.name}'{given}.",
            "val_timestamp": stamp(val), "test_timestamp": stamp(test), "tables": tables}


def _write_task(folder: Path, task: ExportedTask) -> None:
    _write_yaml(folder / "manifest.yaml", task.manifest)
    for split, frame in task.splits.items():
        _write_parquet(folder / f"{split}.parquet", frame)


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    path.write_bytes(buf.getvalue())


def _write_yaml(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml_text(data))
