"""fourdb tasks as RelBench 3 tasks: a manifest (as a dict) and a label table per split.

* A window task (entity_window, recommendation) asked at the dataset's val and test times becomes a
  ``forecast`` task: RelBench's version of it, with RelBench's cutoffs (``timestamps.rule: relbench``).
  Its SQL is fourdb's, run in RelBench's environment, and keeps fourdb's own rules: a seed whose entity
  row is newer than its cutoff, or whose label is null, is dropped, and a destination list holds each
  destination once. The labels shipped are fourdb's materialization of exactly that SQL on the exported
  tables, so RelBench regenerating them gives the same rows.
* Any other task becomes an ``external`` task: fourdb's labels as they are, served as-is by RelBench.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.errors import TaskError
from fourdb.export.keys import Positions
from fourdb.rdb import Database, Schema
from fourdb.rdb.schema import FEATURE_DTYPES
from fourdb.tasks import TaskSpec, materialize
from fourdb.tasks.materialize import SPLITS
from fourdb.tasks.spec import relbench_sql as relbench_template

MANIFEST_VERSION = 1


@dataclass
class ExportedTask:
    name: str
    manifest: dict
    splits: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)


def column_names(spec: TaskSpec, schema: Schema) -> dict[str, str]:
    """The label table's columns (entity, cutoff, label): the task's ``output`` names (a task imported from
    RelBench keeps RelBench's), else the entity table's primary key, ``cutoff`` and ``label``; an autocomplete
    task's are its table's, as RelBench names them: the key, the time column and the column predicted."""
    table = schema.table(spec.entity_table)
    if spec.kind.label_is_column:
        return {"entity": table.primary_key, "cutoff": table.time_column, "label": spec.label}
    return {"entity": table.primary_key, "cutoff": "cutoff", "label": "label", **spec.output}


def stamp(t) -> str:
    t = pd.Timestamp(t)
    return str(t.date()) if t == t.normalize() else t.isoformat(sep=" ")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def relbench_sql(spec: TaskSpec, schema: Schema, names: dict[str, str]) -> str:
    """fourdb's task SQL in RelBench's environment: ``cutoffs`` from RelBench's ``timestamps``, the window
    as the interval RelBench substitutes for ``{timedelta}``, and fourdb's seed rules applied to its rows."""
    body = relbench_template(spec.sql)
    entity, cutoff, label = (_q(names[k]) for k in ("entity", "cutoff", "label"))
    if spec.task_type.is_ranking:  # RelBench keeps repeated destinations; fourdb counts each once
        value = f"list_sort(list_distinct(CAST(l.{label} AS BIGINT[])))"
    else:
        value = f"l.{label}"
    where = [f"l.{label} IS NOT NULL"]
    table = schema.table(spec.entity_table)
    if table.time_column is not None:  # the entity must exist at the cutoff
        where.append(f"NOT EXISTS (SELECT 1 FROM {_q(table.name)} e WHERE e.{_q(table.primary_key)} = l.{entity} "
                     f"AND e.{_q(table.time_column)} > l.{cutoff})")
    return (f"WITH cutoffs AS (SELECT timestamp AS cutoff FROM timestamps),\n"
            f"labels AS (\n{body}\n)\n"
            f"SELECT CAST(l.{entity} AS BIGINT) AS {entity}, l.{cutoff}, {value} AS {label}\n"
            f"FROM labels l\n"
            f"WHERE " + "\n  AND ".join(where))


def forecast(spec: TaskSpec, tables: Database, val, test) -> ExportedTask:
    """The window task as a RelBench forecast task over ``tables`` (the exported, reindexed tables).
    TaskError when RelBench's cutoffs do not fit the task (too little data before or after them)."""
    names = column_names(spec, tables.schema)
    n = int(spec.timestamps.get("num_eval_timestamps", 1))
    if spec.task_type.is_ranking and n != 1:
        raise TaskError(f"task '{spec.name}': RelBench's recommendation tasks have one evaluation window, "
                        f"this one has {n}")
    sql = relbench_sql(spec, tables.schema, names)
    raw = {**spec.raw, "sql": sql, "output": names, "remove_columns": None,
           "timestamps": {"val": stamp(val), "test": stamp(test), "rule": "relbench", "num_eval_timestamps": n}}
    # RelBench computes labels with the task's removed columns gone, so fourdb does too
    task = materialize(TaskSpec.from_dict(raw, f"task '{spec.name}'"), _without(tables, spec.remove_columns))
    keys = task.frame["entity"].to_numpy(np.int64)
    labels = [np.asarray(v, np.int64) for v in task.frame["label"]] if spec.task_type.is_ranking \
        else task.frame["label"]
    manifest = {**_head(spec, "forecast"), **_roles(spec, names), "timedelta": spec.window}
    if n != 1:
        manifest["num_eval_timestamps"] = n
    if spec.remove_columns:
        manifest["remove_columns"] = [list(p) for p in spec.remove_columns]
    manifest["sql"] = sql
    manifest["manifest_version"] = MANIFEST_VERSION
    return ExportedTask(spec.name, manifest, _splits(task.frame, keys, labels, names))


def external(spec: TaskSpec, db: Database, pos: Positions) -> ExportedTask:
    """The task's labels as fourdb materializes them on ``db`` (the database as loaded), keyed by positions."""
    task = materialize(spec, db)
    names = column_names(spec, db.schema)
    keys = pos.of_rows(spec.entity_table, task.frame["node"])
    if spec.task_type.is_ranking:
        labels = [np.sort(pos.of_rows(spec.destination_table, v)) for v in task.frame["label"]]
    else:
        labels = task.frame["label"]
    removed = [list(p) for p in task.removed_columns]
    table = db.schema.table(spec.entity_table)
    kept = []
    for name in task.hidden_columns:  # a row-column task's columns the seed row must not show
        col = table.column(name)
        if col.dtype in FEATURE_DTYPES and not col.derived and name != table.time_column:
            removed.append([table.name, name])
        elif not col.derived:
            kept.append(name)
    notes = [f"task '{spec.name}': RelBench cannot remove a key or a time column, so the seed row of "
             f"'{table.name}' shows its {', '.join(kept)}"] if kept else []
    manifest = {**_head(spec, "external"), **_roles(spec, names)}
    if removed:
        manifest["remove_columns"] = removed
    manifest["manifest_version"] = MANIFEST_VERSION
    return ExportedTask(spec.name, manifest, _splits(task.frame, keys, labels, names), notes)


def _roles(spec: TaskSpec, names: dict[str, str]) -> dict:
    if spec.task_type.is_ranking:
        return {"src_entity_table": spec.entity_table, "src_entity_col": names["entity"],
                "dst_entity_table": spec.destination_table, "dst_entity_col": names["label"],
                "eval_k": spec.eval_k, "time_col": names["cutoff"]}
    return {"entity_table": spec.entity_table, "entity_col": names["entity"], "target_col": names["label"],
            "time_col": names["cutoff"]}


def _head(spec: TaskSpec, kind: str) -> dict:
    head = {"name": spec.name, "kind": kind, "task_type": spec.task_type.relbench_name}
    if spec.description:
        head["description"] = spec.description.strip()
    return head


def _splits(frame: pd.DataFrame, keys: np.ndarray, labels, names: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Per split, (entity, cutoff, label) sorted by time, then entity: the order RelBench expects on disk."""
    table = pd.DataFrame({names["entity"]: keys, names["cutoff"]: frame["cutoff"].to_numpy(),
                          names["label"]: list(labels) if not isinstance(labels, pd.Series) else labels.to_numpy()})
    out = {}
    for split in SPLITS:
        part = table[(frame["split"] == split).to_numpy()]
        out[split] = part.sort_values([names["cutoff"], names["entity"]], kind="stable").reset_index(drop=True)
    return out


def _without(db: Database, columns) -> Database:
    if not columns:
        return db
    gone: dict[str, list[str]] = {}
    for table, column in columns:
        gone.setdefault(table, []).append(column)
    tables = {name: df.drop(columns=[c for c in gone.get(name, []) if c in df.columns])
              for name, df in db.tables.items()}
    return Database(db.schema, tables, db.folder, db.notes)


def convertible(spec: TaskSpec) -> bool:
    return spec.task_type.relbench_evaluates


def as_forecast(spec: TaskSpec, val, test) -> bool:
    ts = spec.timestamps
    return spec.kind.has_cutoff_grid and pd.Timestamp(ts["val"]) == val and pd.Timestamp(ts["test"]) == test
