"""Task kinds: how a task's seeds and labels are made, one module each behind ``TaskKind``.

A kind says which keys its task files hold and reads them (``parse``), which task types it goes with, how
its labels are made from a database (``labels``, then ``finish``), when a label is known, which columns it
hides from models, and whether a seed's entity must exist at its cutoff. Adding a kind is one module in
this package that registers an instance (``TASK_KINDS.register``), plus its tests; nothing else changes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from fourdb.errors import TaskError
from fourdb.registry import Registry
from fourdb.tasks.types import TaskType
from fourdb.untrusted import first_line

if TYPE_CHECKING:
    import numpy as np

    from fourdb.rdb import Database
    from fourdb.rdb.schema import Table

# a kind reads and fills a ``TaskSpec`` (fourdb.tasks.spec), which imports the kinds: named, not imported


class TaskKind:
    name = "kind"
    table_key = "table"  # the task file's key naming the entity (or source) table
    keys: tuple[str, ...] = ()  # the task file's keys of this kind, beside the common ones
    timestamp_keys: tuple[str, ...] = ()  # timestamps.* keys beside val and test
    task_types: tuple[TaskType, ...] = (TaskType.BINARY, TaskType.MULTICLASS, TaskType.REGRESSION)
    drops_unborn = False  # seeds whose entity row is newer than their cutoff are dropped (it did not exist yet)
    asked_at_row_time = False  # a seed is asked at its own row's time: one at val exactly is a training seed
    has_cutoff_grid = False  # seeds are asked at a grid of cutoffs (``cutoffs``), as RelBench's forecast tasks
    label_is_column = False  # the label is a column of the entity row itself (removed from every input)
    seed_row_after_cutoff = False  # the seed's own row is newer than its cutoff (its label is on it), shown masked

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"TaskKind({self.name!r})"

    def parse(self, spec: "TaskSpec", raw: dict, need, where: str) -> None:
        """Read this kind's keys of ``raw`` into ``spec`` (``need(key)``: a required key's value)."""

    def labels(self, spec: "TaskSpec", db: "Database", pk: str) -> pd.DataFrame:
        """Seeds with their labels: ``entity``, ``cutoff``, ``label``, ``label_known_at`` and ``split``."""
        raise NotImplementedError

    def finish(self, spec: "TaskSpec", db: "Database", frame: pd.DataFrame) -> pd.DataFrame:
        """The seeds once their rows are known (``node``): a kind's last say (recommendation: destinations)."""
        return frame

    def hidden_columns(self, spec: "TaskSpec", table: "Table") -> list[str]:
        """Columns of the seed row that a model never sees (the row's own label, for a row task)."""
        return []

    def removed_columns(self, spec: "TaskSpec", table: "Table") -> list[tuple[str, str]]:
        """(table, column) pairs gone from every input, beside the task file's ``remove_columns``."""
        return list(spec.remove_columns)


TASK_KINDS: Registry[TaskKind] = Registry("task kind", package="fourdb.tasks.kinds")


def as_times(values, spec: "TaskSpec", column: str) -> pd.Series:
    """``values`` (a column a task's SQL or table yields) as nanosecond times, or one line naming the task and
    the column: a time in year 9999 (or 1) does not fit, nor does a value that is no time."""
    try:
        return pd.to_datetime(values).astype("datetime64[ns]")
    except (ValueError, TypeError, OverflowError) as e:  # pandas' OutOfBounds errors are ValueErrors
        raise TaskError(f"task '{spec.name}': column '{column}' holds a value that is not a time from "
                        f"{pd.Timestamp.min.date()} to {pd.Timestamp.max.date()} ({first_line(e)})") from None


def shifted(times: pd.Series, delta, spec: "TaskSpec", column: str) -> pd.Series:
    """``times + delta``, or one line naming the task and the column where the sum passes the last time."""
    try:
        return times + delta
    except (OverflowError, ValueError) as e:
        raise TaskError(f"task '{spec.name}': column '{column}' plus {delta} is past {pd.Timestamp.max} "
                        f"({first_line(e)})") from None


def rows_of(db: "Database", table: str, keys) -> "np.ndarray":
    """Row numbers of ``keys`` in ``table`` (-1: not a key)."""
    from fourdb.rdb.database import RowLookup

    return RowLookup(db.tables[table][db.schema.table(table).primary_key])(keys)
