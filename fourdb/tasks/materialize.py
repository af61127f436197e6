"""Materialize a task: its kind makes the seeds and labels, split strictly by time; here they are checked,
given their rows, coerced by the task's type and ordered.

The result is a frame with columns ``entity`` (the entity table's primary key value), ``node`` (its
row number), ``cutoff``, ``label`` and ``split``; for a recommendation task ``label`` holds, per
source, the row numbers of the destinations it links to in the window. Whatever the kind, a seed whose
entity row is newer than its cutoff is dropped where the kind asks (it did not exist yet).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.errors import TaskError
from fourdb.rdb import Database
from fourdb.rdb.database import take_rows
from fourdb.rdb.identifiers import without_columns
from fourdb.tasks.kinds import rows_of
from fourdb.tasks.kinds.recommendation import past_links  # noqa: F401 - models read a task's link history
from fourdb.tasks.kinds.window import cutoffs, window_labels  # noqa: F401 - benchmarks time the SQL alone
from fourdb.tasks.spec import TaskSpec, find_task
from fourdb.tasks.splits import SPLITS, check_time_splits as _check_time_splits

log = logging.getLogger("fourdb")
# While a task is made its split is a categorical over SPLITS (a byte a seed; comparing and moving tens of millions
# of strings was most of the time past the SQL); the finished frame holds the names, ordered by name as always.
_SPLIT_NAMES = np.array(SPLITS, dtype=object)
_SPLIT_NAME_RANK = np.argsort(np.argsort(SPLITS))


@dataclass
class Task:
    """A materialized task: one row per (entity, cutoff) with its label and split."""

    spec: TaskSpec
    frame: pd.DataFrame
    num_classes: int = 2
    dropped: dict = field(default_factory=dict)  # split -> seeds dropped because their entity did not exist yet
    hidden_columns: list[str] = field(default_factory=list)  # of the seed row, never shown to a model (row-column)
    removed_columns: list[tuple[str, str]] = field(default_factory=list)  # (table, column) gone from every input

    def split(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["split"] == name].reset_index(drop=True)

    @property
    def fit_until(self) -> pd.Timestamp:
        """Encoders and statistics are fitted on the rows known by then: the start of validation."""
        return pd.Timestamp(self.spec.timestamps["val"])

    def input_database(self, db: Database) -> Database:
        """``db`` as models may see it: ``removed_columns``, and the columns its schema marks ``feature: false``,
        dropped from its tables (labels are computed from the whole database first)."""
        gone: dict[str, set] = {t.name: {c.name for c in t.not_features} for t in db.schema.tables}
        for table, column in self.removed_columns:
            c = db.schema.table(table).column(column)
            if c.dtype in ("primary_key", "foreign_key") or column == db.schema.table(table).time_column:
                raise TaskError(f"task '{self.spec.name}': cannot remove {table}.{column}, a key or the time column")
            gone[table].add(column)
        return without_columns(db, gone)


def materialize(spec: TaskSpec, db: Database, allow_empty_splits: bool = False) -> Task:
    """The task's seeds, labels and splits. A split left with no seeds is an error, unless
    ``allow_empty_splits`` (``fourdb validate`` reports it among the task's statistics instead)."""
    for name in (spec.entity_table, spec.destination_table):
        if name is not None and name not in db.schema.table_names:
            raise TaskError(f"task '{spec.name}': table '{name}' is not in the database")
    for table, column in spec.remove_columns:
        if table not in db.schema.table_names or column not in db.schema.table(table).column_names:
            raise TaskError(f"task '{spec.name}': remove_columns names {table}.{column}, which is not in the database")
    table = db.schema.table(spec.entity_table)
    pk = table.primary_key
    if pk is None:
        raise TaskError(f"task '{spec.name}': table '{spec.entity_table}' has no primary key to predict for")
    kind = spec.kind
    frame = kind.labels(spec, db, pk)
    if frame["label"].isna().any():  # (a copy only when something is dropped: 100M-row tasks have tens of millions of seeds)
        frame = frame.dropna(subset=["label"])
    frame["node"] = rows_of(db, spec.entity_table, frame["entity"])
    if _has_duplicate_seeds(frame):
        first = frame[frame.duplicated(["entity", "cutoff"])].iloc[0]
        raise TaskError(f"task '{spec.name}': the SQL yields two labels for entity {first['entity']!r} at {first['cutoff']}")
    if (frame["node"] < 0).any():
        bad = frame.loc[frame["node"] < 0, "entity"].iloc[0]
        raise TaskError(f"task '{spec.name}': entity {bad!r} is not a key of table '{spec.entity_table}'")
    frame = kind.finish(spec, db, frame)
    dropped = {}
    if kind.drops_unborn:
        frame, dropped = _drop_unborn(spec, db, frame, allow_empty_splits)
    for name in SPLITS:
        if not allow_empty_splits and not (frame["split"] == name).any():
            raise TaskError(f"task '{spec.name}': the {name} split is empty; check timestamps")
    frame["label"], num_classes = spec.task_type.coerce(frame["label"], spec.name)
    _check_time_splits(spec, frame)
    columns = ["entity", "node", "cutoff", "label", "label_known_at", "split"] + \
        (["candidates"] if "candidates" in frame.columns else [])
    return Task(spec, _sorted_seeds(frame, columns), num_classes, dropped, kind.hidden_columns(spec, table),
                kind.removed_columns(spec, table))


def _sorted_seeds(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame[columns]`` sorted by split name, cutoff and row (``sort_values(["split", "cutoff", "node"],
    kind="stable")``) with the split's names, as one sort and one gather per column."""
    codes = frame["split"].cat.codes.to_numpy()
    order = _seed_order(_SPLIT_NAME_RANK[codes], frame["cutoff"], frame["node"].to_numpy())

    def gathered(name):
        if name == "split":
            return _SPLIT_NAMES[codes[order]]
        return take_rows(frame[name], order)
    return pd.DataFrame({c: gathered(c) for c in columns}, copy=False)


def _seed_order(rank: np.ndarray, cutoff: pd.Series, node: np.ndarray) -> np.ndarray:
    """``np.lexsort((node, cutoff, rank))``: by one integer key where it fits, placed in an array over the key's
    values where they are few and distinct (``_in_key_order``), else one stable argsort of it."""
    made = _seed_key(cutoff, node, rank)
    if made is None:
        return np.lexsort((node, cutoff.to_numpy(), rank))
    key, span = made
    order = _in_key_order(key, span)
    return np.argsort(key, kind="stable") if order is None else order


def _seed_key(cutoff: pd.Series, node: np.ndarray, rank: np.ndarray | None = None) -> tuple[np.ndarray, int] | None:
    """One int64 per seed, ordered and equal as (rank, cutoff, row) are, and how many values it can take;
    None where it cannot be made: no seeds, an unknown entity (row -1), a missing cutoff, or 2**62 values
    or more. Only the (rank, cutoff) pairs that occur are numbered: the values are about as many as the
    seeds where the seeds are most of the (entity, cutoff) pairs."""
    if len(node) == 0 or node.min() < 0:
        return None
    cutoff_number, distinct = pd.factorize(cutoff, sort=True)
    if cutoff_number.min() < 0:
        return None
    group, groups = cutoff_number.astype(np.int64), len(distinct)
    if rank is not None:  # a split rank: 0, 1 or 2
        pair = rank.astype(np.int64) * groups + group
        occurs = np.bincount(pair) > 0
        group, groups = (np.cumsum(occurs) - 1)[pair], int(occurs.sum())
    rows = int(node.max()) + 1
    if groups * rows >= 2 ** 62:
        return None
    return group * rows + node.astype(np.int64, copy=False), groups * rows


# Seed keys with at most this many possible values per seed are ordered and checked for repeats in an array
# over the values (linear, and read in order) instead of by a sort or a hash table, whose cost per seed grows
# with the seeds as they outgrow the caches
_DENSE_VALUES_PER_SEED = 4


def _dense(key: np.ndarray, span: int) -> bool:
    """Whether keys with ``span`` possible values are few enough per seed to be placed in an array over them."""
    return span <= _DENSE_VALUES_PER_SEED * len(key)


def _in_key_order(key: np.ndarray, span: int) -> np.ndarray | None:
    """The positions of ``key`` (values below ``span``) in key order, each placed at its value in an array
    (a counting sort); None where the values are too many for the seeds or a key repeats."""
    if not _dense(key, span):
        return None
    at = np.full(span, -1, dtype=np.int64)
    at[key] = np.arange(len(key))
    order = at[at >= 0]
    return order if len(order) == len(key) else None


def _has_duplicate_seeds(frame: pd.DataFrame) -> bool:
    """Whether an (entity, cutoff) pair repeats: as one integer (``_seed_key``) where it can be made (pandas'
    two-column ``duplicated`` is several times slower on tens of millions), marked in an array over its values
    where they are few (``_DENSE_VALUES_PER_SEED``), else hashed."""
    made = _seed_key(frame["cutoff"], frame["node"].to_numpy())
    if made is None:
        return bool(frame.duplicated(["entity", "cutoff"]).any())
    key, span = made
    if not _dense(key, span):
        return not pd.Index(key).is_unique
    seen = np.zeros(span, dtype=bool)
    seen[key] = True
    return int(np.count_nonzero(seen)) < len(key)


def _drop_unborn(spec: TaskSpec, db: Database, frame: pd.DataFrame,
                 allow_empty_splits: bool = False) -> tuple[pd.DataFrame, dict]:
    """Drop seeds whose entity row is newer than their cutoff: the row did not exist yet, and its own
    columns (or its mere presence) would give the label away. Rows without a time exist always."""
    table = db.schema.table(spec.entity_table)
    if table.time_column is None:
        return frame, {}
    born = db.tables[table.name][table.time_column].to_numpy()[frame["node"].to_numpy()]
    unborn = ~np.isnat(born) & (born > frame["cutoff"].to_numpy())
    if not unborn.any():
        return frame, {}
    dropped = {s: int(n) for s, n in frame.loc[unborn, "split"].value_counts().items() if n}
    kept = frame[~unborn]
    emptied = [s for s in SPLITS if dropped.get(s) and not (kept["split"] == s).any()]
    where = f"table '{table.name}' (time column {table.time_column})"
    if emptied and not allow_empty_splits:
        raise TaskError(f"task '{spec.name}': every {emptied[0]} seed's entity row in {where} is newer than its "
                        f"cutoff ({dropped[emptied[0]]} dropped); the SQL yields entities before they exist")
    log.warning("task '%s': dropped %s seeds whose entity row in %s is newer than the cutoff", spec.name,
                ", ".join(f"{dropped.get(s, 0)} {s}" for s in SPLITS), where)
    return kept.reset_index(drop=True), dropped


def check_time_splits(task: Task) -> None:
    """Refuse a task whose splits overlap in time: no training label may come from val time or later."""
    _check_time_splits(task.spec, task.frame)


def load_task(db: Database, dataset: str, task: str) -> Task:
    return materialize(find_task(dataset, task), db)
