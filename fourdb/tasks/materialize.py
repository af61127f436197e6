"""Materialize a task: run its SQL (or read its rows) at each cutoff, split strictly by time.

The result is a frame with columns ``entity`` (the entity table's primary key value), ``node`` (its
row number), ``cutoff``, ``label`` and ``split``; for a recommendation task ``label`` holds, per
source, the row numbers of the destinations it links to in the window.

Cutoffs (``timestamps.rule``), for the window kinds:

* ``fourdb`` (default): training cutoffs step back from ``val - window`` (to ``start``), validation
  cutoffs run from ``val`` while their window ends by ``test``, test cutoffs from ``test`` while their
  window ends by ``end`` (default: the database's last time), every ``step``.
* ``relbench``: as RelBench 3 lays them out: training from ``val - window`` back to the database's
  first time (at least 3), validation and test ``num_eval_timestamps`` windows from ``val`` and
  ``test`` (not past ``test - window`` and the last time minus a window); training and validation
  labels are computed on the database cut at ``test``, and labels of entities positioned past the
  rows known at ``test`` are dropped, so the labels equal the ones RelBench generates.

Whatever the rule, a seed whose entity row is newer than its cutoff is dropped (it did not exist yet).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.errors import FourdbError, TaskError
from fourdb.rdb import Database
from fourdb.rdb.database import RowLookup, take_rows
from fourdb.rdb.sandbox import inside_folder
from fourdb.rdb.schema import Schema, Table
from fourdb.tasks.spec import TaskSpec, find_task

log = logging.getLogger("fourdb")
SPLITS = ("train", "val", "test")
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
        """``db`` as models may see it: ``removed_columns`` dropped from its tables (labels are computed
        from the whole database first)."""
        if not self.removed_columns:
            return db
        gone: dict[str, set] = {}
        for table, column in self.removed_columns:
            gone.setdefault(table, set()).add(column)
        tables, frames = [], {}
        for t in db.schema.tables:
            drop = gone.get(t.name, set())
            for col in drop:
                c = t.column(col)
                if c.dtype in ("primary_key", "foreign_key") or col == t.time_column:
                    raise TaskError(f"task '{self.spec.name}': cannot remove {t.name}.{col}, a key or the time column")
            tables.append(Table(t.name, t.source, [c for c in t.columns if c.name not in drop], t.time_column,
                                t.time_from, t.static, t.inherited_from))
            frames[t.name] = db.tables[t.name].drop(columns=sorted(drop)) if drop else db.tables[t.name]
        return Database(Schema(db.schema.name, tables, db.schema.on_dangling_foreign_key), frames, db.folder,
                        db.notes)


def cutoffs(spec: TaskSpec, db: Database) -> dict[str, list[pd.Timestamp]]:
    """The cutoffs of each split of a window task, by ``spec.rule`` (see the module docstring)."""
    ts = spec.timestamps
    val, test = pd.Timestamp(ts["val"]), pd.Timestamp(ts["test"])
    window, step = pd.Timedelta(spec.window), pd.Timedelta(ts["step"])
    if spec.rule == "relbench":
        return _relbench_cutoffs(spec, db, val, test, window)
    end = pd.Timestamp(ts["end"]) if ts.get("end") else db.max_time
    start = pd.Timestamp(ts["start"]) if ts.get("start") else None
    train = []
    t = val - window
    while start is None or t >= start:
        train.append(t)
        t -= step
        if len(train) >= int(ts.get("max_train_cutoffs", 1000)):
            break
    val_cuts = list(pd.date_range(val, test - window, freq=step))
    test_cuts = list(pd.date_range(test, end - window, freq=step))
    if not val_cuts or not test_cuts:
        raise TaskError(f"task '{spec.name}': no room for a {spec.window} window between val, test and end ({end})")
    return {"train": sorted(train), "val": val_cuts, "test": test_cuts}


def _relbench_cutoffs(spec: TaskSpec, db: Database, val, test, window) -> dict[str, list[pd.Timestamp]]:
    n = int(spec.timestamps.get("num_eval_timestamps", 1))
    if test - val < window:
        raise TaskError(f"task '{spec.name}': the window {spec.window} is longer than from val to test")
    # over the tables with a time of their own, as RelBench sees them (an inherited time is not a column there)
    own = [t for t in db.schema.tables if t.has_own_time]
    before_test = _known_at(db, test)
    first = min((before_test.tables[t.name][t.time_column].min() for t in own), default=pd.Timestamp.min)
    last_before = max((before_test.tables[t.name][t.time_column].max() for t in own), default=pd.Timestamp.max)
    last = max((db.tables[t.name][t.time_column].max() for t in own), default=pd.Timestamp.max)
    if val + window > last_before:
        raise TaskError(f"task '{spec.name}': val + window ({val + window}) is after the last time up to test")
    if test + window > last:
        raise TaskError(f"task '{spec.name}': test + window ({test + window}) is after the database's last time")
    train = list(pd.date_range(start=val - window, end=first, freq=-window))
    if len(train) < 3:
        raise TaskError(f"task '{spec.name}': {len(train)} training cutoffs back to the first time ({first}); "
                        f"RelBench needs at least 3")
    return {"train": sorted(train),
            "val": list(pd.date_range(val, min(val + window * (n - 1), test - window), freq=window)),
            "test": list(pd.date_range(test, min(test + window * (n - 1), last - window), freq=window))}


def _known_at(db: Database, t) -> Database:
    """RelBench's cut of a database at ``t``: rows of timed tables with a time after ``t`` or none are out.
    A table whose time is inherited from its parents has no time column in RelBench, so it stays whole."""
    tables = {}
    for table in db.schema.tables:
        df = db.tables[table.name]
        if table.has_own_time:
            df = df[df[table.time_column] <= t].reset_index(drop=True)
        tables[table.name] = df
    return Database(db.schema, tables, db.folder, db.notes)


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
    frame = {"entity_window": _materialize_window, "recommendation": _materialize_links if spec.link_table else
             _materialize_window, "row_column": _materialize_row, "autocomplete": _materialize_column}[spec.kind](spec, db, pk)
    if frame["label"].isna().any():  # (a copy only when something is dropped: 100M-row tasks have tens of millions of seeds)
        frame = frame.dropna(subset=["label"])
    frame["node"] = _rows(db, spec.entity_table, frame["entity"])
    if _has_duplicate_seeds(frame):
        first = frame[frame.duplicated(["entity", "cutoff"])].iloc[0]
        raise TaskError(f"task '{spec.name}': the SQL yields two labels for entity {first['entity']!r} at {first['cutoff']}")
    if (frame["node"] < 0).any():
        bad = frame.loc[frame["node"] < 0, "entity"].iloc[0]
        raise TaskError(f"task '{spec.name}': entity {bad!r} is not a key of table '{spec.entity_table}'")
    if spec.rule == "relbench":
        frame = _relbench_dangling(spec, db, frame)
    if spec.kind == "recommendation":
        frame = _destinations(spec, db, frame)
        if spec.candidates:
            frame = _with_candidates(spec, db, frame)
    dropped = {}
    if spec.kind in ("entity_window", "recommendation"):
        frame, dropped = _drop_unborn(spec, db, frame, allow_empty_splits)
    for name in SPLITS:
        if not allow_empty_splits and not (frame["split"] == name).any():
            raise TaskError(f"task '{spec.name}': the {name} split is empty; check timestamps")
    num_classes = 2
    if spec.task_type == "binary":
        labels = set(pd.unique(frame["label"].to_numpy()))
        if not labels <= {0, 1}:
            raise TaskError(f"task '{spec.name}': binary labels must be 0/1, got {sorted(labels)[:5]}")
        frame["label"] = frame["label"].astype("int64")
    elif spec.task_type == "multiclass":
        frame["label"], classes = pd.factorize(frame["label"], sort=True)
        num_classes = len(classes)
    elif spec.task_type == "regression":
        frame["label"] = frame["label"].astype("float64")
    _check_time_splits(spec, frame)
    hidden = [c for c in table.column_names if c not in spec.known_columns and c != pk] \
        if spec.kind == "row_column" else []
    removed = list(spec.remove_columns) + ([(table.name, spec.label)] if spec.kind == "autocomplete" else [])
    columns = ["entity", "node", "cutoff", "label", "label_known_at", "split"] + \
        (["candidates"] if "candidates" in frame.columns else [])
    return Task(spec, _sorted_seeds(frame, columns), num_classes, dropped, hidden, removed)


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


def _split_codes(codes) -> pd.Categorical:
    return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int8), categories=SPLITS)


def _by_time(cutoff: pd.Series, val, test, bound_in_earlier: bool = False) -> pd.Categorical:
    """train before ``val``, val before ``test``, test from ``test`` on; with ``bound_in_earlier`` a cutoff
    equal to ``val`` or ``test`` belongs to the split before it."""
    later = cutoff.gt if bound_in_earlier else cutoff.ge
    return _split_codes(later(val).to_numpy(np.int8) + later(test).to_numpy(np.int8))


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


def _rows(db: Database, table: str, keys) -> np.ndarray:
    """Row numbers of ``keys`` in ``table`` (-1: not a key)."""
    return RowLookup(db.tables[table][db.schema.table(table).primary_key])(keys)


def _materialize_window(spec: TaskSpec, db: Database, pk: str) -> pd.DataFrame:
    """Run the SQL once over every split's cutoffs (a label depends on its own cutoff only), each row in the
    split its cutoff falls in: one pass over the tables instead of one per split. Under the RelBench rule,
    once per split as RelBench does, training and validation labels from the database cut at ``test``."""
    by_split = cutoffs(spec, db)
    test = pd.Timestamp(spec.timestamps["test"])
    if spec.rule != "relbench":
        frame = window_labels(spec, db, [t for times in by_split.values() for t in times])
        frame["split"] = _by_time(frame["cutoff"], pd.Timestamp(spec.timestamps["val"]), test)
        return frame
    before_test = _known_at(db, test)
    parts = [window_labels(spec, db if split == "test" else before_test, times) for split, times in by_split.items()]
    frame = pd.concat(parts, ignore_index=True)
    frame["split"] = _split_codes(np.repeat([SPLITS.index(s) for s in by_split], [len(p) for p in parts]))
    return frame


def window_labels(spec: TaskSpec, db: Database, times) -> pd.DataFrame:
    """The task's SQL at ``times`` (registered as ``cutoffs(cutoff)`` and ``timestamps(timestamp)``):
    ``entity``, ``cutoff``, ``label`` and ``label_known_at`` (when the window closes)."""
    names = {"entity": db.schema.table(spec.entity_table).primary_key, "cutoff": "cutoff", "label": "label",
             **spec.output}
    times = pd.to_datetime(pd.Series(list(times), dtype="datetime64[ns]")).astype("datetime64[ns]")
    relations = {"cutoffs": pd.DataFrame({"cutoff": times}), "timestamps": pd.DataFrame({"timestamp": times})}
    try:
        out = db.query(spec.query_sql, f"{spec.origin or f'task {spec.name!r}'}, sql", relations)
    except FourdbError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken task SQL is a user error
        raise TaskError(f"task '{spec.name}': SQL failed: {str(e).splitlines()[0]}") from None
    missing = [c for c in names.values() if c not in out.columns]
    if missing:
        raise TaskError(f"task '{spec.name}': SQL must return columns {', '.join(names.values())}; "
                        f"missing {missing}")
    out = out[[names["entity"], names["cutoff"], names["label"]]]
    out.columns = ["entity", "cutoff", "label"]
    out["cutoff"] = pd.to_datetime(out["cutoff"]).astype("datetime64[ns]")
    out["label_known_at"] = out["cutoff"] + pd.Timedelta(spec.window)
    return out


def past_links(task: "Task", db: Database) -> pd.DataFrame:
    """A recommendation task's links as the database shows them, window by window at every cutoff of
    the task: ``node`` (source row), ``dst`` (destination rows) and ``known`` (when the window closes). A
    model may use a link once it is known: these are the database's past, read with the task's SQL, not
    the label table (so later test seeds see the weeks after the first test cutoff too). From a table of
    timed links: every link, known at its time."""
    if task.spec.link_table:
        frame = link_queries(task.spec, db)
    else:
        frame = window_labels(task.spec, db, np.unique(task.frame["cutoff"].to_numpy()))
    frame["node"] = _rows(db, task.spec.entity_table, frame["entity"])
    frame = _destinations(task.spec, db, frame[frame["node"] >= 0].assign(split="links"))
    return frame.rename(columns={"label": "dst", "label_known_at": "known"})[["node", "dst", "known"]]


def link_queries(spec: TaskSpec, db: Database) -> pd.DataFrame:
    """A table of timed links as queries: per (source, time), the destination keys linked then, asked 1 ns
    before (so neither the link nor anything else stamped at that time is known yet)."""
    table = db.schema.table(spec.link_table) if spec.link_table in db.schema.table_names else None
    if table is None:
        raise TaskError(f"task '{spec.name}': table '{spec.link_table}' is not in the database")
    columns = (spec.source_column, spec.destination_column, spec.cutoff_column)
    for col in columns:
        if col not in table.column_names:
            raise TaskError(f"task '{spec.name}': table '{table.name}' has no column '{col}'")
    df = db.tables[table.name][list(columns)].dropna()
    df.columns = ["entity", "dst", "time"]
    df["time"] = pd.to_datetime(df["time"]).astype("datetime64[ns]")
    out = df.groupby(["entity", "time"], sort=True)["dst"].agg(list).reset_index()
    return pd.DataFrame({"entity": out["entity"], "cutoff": out["time"] - pd.Timedelta(1, "ns"),
                         "label": out["dst"], "label_known_at": out["time"]})


def _materialize_links(spec: TaskSpec, db: Database, pk: str) -> pd.DataFrame:
    frame = link_queries(spec, db)
    val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
    frame["split"] = _by_time(frame["cutoff"], val, test)
    # a query belongs to a split only if its links are known before the next split begins
    keep = ((frame["split"] == "train") & (frame["label_known_at"] <= val)) | \
           ((frame["split"] == "val") & (frame["label_known_at"] <= test)) | (frame["split"] == "test")
    return frame[keep].reset_index(drop=True)


def _with_candidates(spec: TaskSpec, db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """Each validation and test query's candidate destination rows, from the task's ``candidates`` file (its
    true destinations among them); a query the file lists nothing for is dropped (it could not be scored)."""
    path = inside_folder(db.folder or ".", spec.candidates, f"{spec.origin or f'task {spec.name!r}'}, candidates",
                         db.allow_outside_paths)
    if not path.exists():
        raise TaskError(f"task '{spec.name}': candidates file {path} not found")
    try:
        listed = pd.read_parquet(path, columns=[spec.source_column, spec.cutoff_column, spec.destination_column])
    except Exception as e:  # noqa: BLE001 - any reader failure is a bad file
        raise TaskError(f"task '{spec.name}': cannot read candidates {path}: {str(e).splitlines()[0]}") from None
    listed.columns = ["entity", "time", "dst"]
    listed["cutoff"] = pd.to_datetime(listed["time"]).astype("datetime64[ns]") - pd.Timedelta(1, "ns")
    listed["row"] = _rows(db, spec.destination_table, listed["dst"])
    listed = listed[listed["row"] >= 0].drop_duplicates(["entity", "cutoff", "row"])
    per_query = listed.groupby(["entity", "cutoff"])["row"].agg(list)
    found = pd.MultiIndex.from_frame(frame[["entity", "cutoff"]]).map(per_query.to_dict().get) if len(frame) else []
    frame = frame.assign(candidates=list(found))
    scored = frame["split"] != "train"
    missing = scored & frame["candidates"].isna()
    if missing.all() and scored.any():
        raise TaskError(f"task '{spec.name}': no validation or test query (source, {spec.cutoff_column}) has "
                        f"candidates in {path}")
    if missing.any():
        log.warning("task '%s': %d validation and test queries have no candidates in %s and were dropped",
                    spec.name, int(missing.sum()), path)
    frame = frame[~missing].reset_index(drop=True)
    frame["candidates"] = [None if s == "train" else np.union1d(c, y).astype(np.int64)
                           for s, c, y in zip(frame["split"], frame["candidates"], frame["label"])]
    return frame


def _relbench_dangling(spec: TaskSpec, db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """RelBench drops the labels of entities whose key (a row position there) is at or past the number of
    entity rows known at ``test``, for every split."""
    known = len(_known_at(db, pd.Timestamp(spec.timestamps["test"])).tables[spec.entity_table])
    keys = pd.to_numeric(frame["entity"], errors="coerce")
    return frame[~(keys >= known)].reset_index(drop=True)


def _destinations(spec: TaskSpec, db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """Each source's destination keys -> destination row numbers; keys not in the destination table are
    dropped (under the RelBench rule, as RelBench does: positions past the rows known at ``test``), and so
    are sources left with none (nothing to score)."""
    if len(frame) and not frame["label"].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).all():
        raise TaskError(f"task '{spec.name}': a recommendation SQL must yield a LIST of destination keys as its "
                        f"label (e.g. LIST(DISTINCT p.item_id))")
    pk = db.schema.table(spec.destination_table).primary_key
    limit = len(_known_at(db, pd.Timestamp(spec.timestamps["test"])).tables[spec.destination_table]) \
        if spec.rule == "relbench" else len(db.tables[spec.destination_table])

    # every key looked up once; then split back per source
    keys = [k for v in frame["label"] for k in v]
    found = _rows(db, spec.destination_table, pd.Series(keys)) if keys else np.zeros(0, np.int64)
    unknown = np.flatnonzero(found < 0)
    if len(keys) and len(unknown) == len(keys):
        raise TaskError(f"task '{spec.name}': no label key is a key of {spec.destination_table} (e.g. "
                        f"{keys[unknown[0]]!r}); the LIST must hold {spec.destination_table}."
                        f"{pk} values")
    if len(unknown):
        print(f"task '{spec.name}': {len(unknown)} of {len(keys)} label keys are not in "
              f"{spec.destination_table} and were dropped (e.g. {keys[unknown[0]]!r})")
    per_source = np.split(found, np.cumsum(frame["label"].map(len).to_numpy())[:-1]) if len(frame) else []
    frame = frame.assign(label=[np.unique(r[(r >= 0) & (r < limit)]).astype(np.int64) for r in per_source])
    return frame[frame["label"].map(len) > 0].reset_index(drop=True)


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
    emptied = [s for s in ("train", "val", "test") if dropped.get(s) and not (kept["split"] == s).any()]
    where = f"table '{table.name}' (time column {table.time_column})"
    if emptied and not allow_empty_splits:
        raise TaskError(f"task '{spec.name}': every {emptied[0]} seed's entity row in {where} is newer than its "
                        f"cutoff ({dropped[emptied[0]]} dropped); the SQL yields entities before they exist")
    log.warning("task '%s': dropped %s seeds whose entity row in %s is newer than the cutoff", spec.name,
                ", ".join(f"{dropped.get(s, 0)} {s}" for s in ("train", "val", "test")), where)
    return kept.reset_index(drop=True), dropped


def _materialize_row(spec: TaskSpec, db: Database, pk: str) -> pd.DataFrame:
    table = db.schema.table(spec.entity_table)
    for col in [spec.cutoff_column, *spec.known_columns]:
        if col not in table.column_names:
            raise TaskError(f"task '{spec.name}': table '{table.name}' has no column '{col}'")
    if table.time_column is None:
        raise TaskError(f"task '{spec.name}': table '{table.name}' needs a time_column (when a row's label is known)")
    try:
        frame = db.query(spec.row_sql(pk, table.name, table.time_column),
                         f"{spec.origin or f'task {spec.name!r}'}, label and where")
    except FourdbError:
        raise
    except Exception as e:  # noqa: BLE001
        raise TaskError(f"task '{spec.name}': label SQL failed: {str(e).splitlines()[0]}") from None
    for col in ("cutoff", "label_known_at"):
        frame[col] = pd.to_datetime(frame[col]).astype("datetime64[ns]")
    early = frame["label_known_at"] <= frame["cutoff"]
    if early.any():
        raise TaskError(
            f"task '{spec.name}': row {frame.loc[early, 'entity'].iloc[0]!r} of '{table.name}' is known "
            f"({table.time_column}) at or before its cutoff ({spec.cutoff_column}); its label would leak"
        )
    val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
    frame["split"] = _by_time(frame["cutoff"], val, test)
    # a row belongs to a split only if its label is known before the next split begins
    keep = ((frame["split"] == "train") & (frame["label_known_at"] < val)) | \
           ((frame["split"] == "val") & (frame["label_known_at"] < test)) | (frame["split"] == "test")
    return frame[keep]


def _materialize_column(spec: TaskSpec, db: Database, pk: str) -> pd.DataFrame:
    """Autocomplete: every row of the table with a value in the column, asked at the row's own time: train
    up to ``val``, validation after it up to ``test``, test after ``test`` (RelBench's split)."""
    table = db.schema.table(spec.entity_table)
    if spec.label not in table.column_names:
        raise TaskError(f"task '{spec.name}': table '{table.name}' has no column '{spec.label}'")
    if table.time_column is None:
        raise TaskError(f"task '{spec.name}': table '{table.name}' needs a time column: a row is asked at its time")
    df = db.tables[table.name]
    frame = pd.DataFrame({"entity": df[pk].to_numpy(), "cutoff": df[table.time_column].to_numpy(),
                          "label": df[spec.label].to_numpy()})
    frame = frame[frame["cutoff"].notna()]
    val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
    frame["split"] = _by_time(frame["cutoff"], val, test, bound_in_earlier=True)
    frame["cutoff"] = frame["cutoff"].astype("datetime64[ns]")
    frame["label_known_at"] = frame["cutoff"]  # known with the row; the column is removed from every input
    return frame


def check_time_splits(task: Task) -> None:
    """Refuse a task whose splits overlap in time: no training label may come from val time or later."""
    _check_time_splits(task.spec, task.frame)


def _check_time_splits(spec: TaskSpec, frame: pd.DataFrame) -> None:
    val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
    train, valid = (frame["split"] == "train").to_numpy(), (frame["split"] == "val").to_numpy()
    cutoff = frame["cutoff"]
    # an autocomplete row is asked at its own time, which may be val itself (RelBench's (.., val] split)
    at_val = spec.kind == "autocomplete"
    if train.any() and (cutoff[train].max() > val if at_val else cutoff[train].max() >= val) \
            or train.any() and frame["label_known_at"][train].max() > val:
        raise TaskError(f"task '{spec.name}': a training label comes from the validation period")
    if valid.any():
        first, last = cutoff[valid].min(), cutoff[valid].max()
        if not ((first > val and last <= test) if at_val else (first >= val and last < test)):
            raise TaskError(f"task '{spec.name}': validation cutoffs fall outside the validation period")


def load_task(db: Database, dataset: str, task: str) -> Task:
    return materialize(find_task(dataset, task), db)
