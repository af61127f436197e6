"""A task given as files of samples (4DBInfer's and RelBench's) -> a table of the samples plus a fourdb
row-column task over it, each sample's label known just before the next split starts."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.dtypes import parse_datetimes
from fourdb.tasks.types import TaskType


def samples_task(name: str, dname: str, splits: dict[str, pd.DataFrame], key: str, link: tuple[str, str],
                  time_col: str, target: str, kind: TaskType | str, metric: str | None, dtypes: dict[str, str],
                  description: str, report: ImportReport) -> tuple[SourceTable, dict] | None:
    """A task given as sample files -> a table of samples plus a row-column task file over it."""
    kind = TaskType(kind)
    skip = f"task '{name}' not converted:"
    for split, f in splits.items():
        missing = [c for c in (key, time_col, target) if c not in f.columns]
        if missing:
            report.notes.append(f"{skip} its {split} samples lack column(s) {', '.join(missing)}")
            return None
        if len(f) == 0:
            report.notes.append(f"{skip} it has no {split} samples")
            return None
    frame = pd.concat([f.assign(__split=s) for s, f in splits.items()], ignore_index=True)
    cutoff = parse_datetimes(pd.Series(frame[time_col]), numbers_as_ns=True)
    if cutoff is None or cutoff.isna().any():
        report.notes.append(f"{skip} its time column '{time_col}' is not all timestamps")
        return None
    frame[time_col] = cutoff
    val, test = cutoff[frame["__split"] == "val"].min(), cutoff[frame["__split"] == "test"].min()
    if not val < test:
        report.notes.append(f"{skip} its validation samples do not start before its test samples")
        return None
    by_time = np.where(cutoff >= test, "test", np.where(cutoff >= val, "val", "train"))
    moved = int((by_time != frame["__split"].to_numpy()).sum())
    if moved:
        report.notes.append(f"task '{name}': {moved} samples fall in another split by time (fourdb splits strictly "
                            f"by time: validation from {val}, test from {test})")
    tick = pd.Timedelta(microseconds=1)
    boundary = pd.Series(cutoff.max() + pd.Timedelta(days=1), index=cutoff.index)
    boundary[by_time == "train"], boundary[by_time == "val"] = val, test
    known = np.maximum(boundary - tick, cutoff + tick)  # just before the next split starts, after the cutoff
    table = f"task_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
    rows = frame.drop(columns="__split")
    rows.insert(0, "sample_id", np.arange(len(rows)))
    rows["label_known_at"] = known.astype("datetime64[ns]")
    feats = [c for c in rows.columns if c not in ("sample_id", key, time_col, target, "label_known_at")]
    tdtypes = {c: dtypes.get(c) or "" for c in feats}
    tdtypes = {c: d for c, d in tdtypes.items() if d}
    tdtypes.update({time_col: "datetime", "label_known_at": "datetime"})
    tdtypes[target] = "category" if kind.per_class else "numeric"
    src = SourceTable(table, rows, {}, "sample_id", {key: link}, tdtypes, "label_known_at")
    label = f'CAST("{target}" AS INTEGER)' if kind is TaskType.BINARY else f'"{target}"'
    spec = {
        "name": name, "dataset": dname, "description": description, "kind": "row_column", "task_type": kind.value,
        "metrics": _metrics(kind, metric), "table": table, "label": label, "where": f'"{target}" IS NOT NULL',
        "cutoff_column": time_col, "known_columns": [key, time_col, *feats],
        "timestamps": {"val": str(val), "test": str(test)},
    }
    return src, spec


def _metrics(kind: TaskType, first: str | None) -> list[str]:
    base = kind.default_metrics
    if kind is TaskType.BINARY:  # 4DBInfer and RelBench also report it
        base.insert(1, "average_precision")
    if first in base:
        base.remove(first)
        base.insert(0, first)
    return base
