"""What the window kinds share (entity_window, and recommendation from SQL): a task's SQL run at a grid of
cutoffs, each label made from the window after its cutoff.

Cutoffs (``timestamps.rule``):

* ``fourdb`` (default): training cutoffs step back from ``val - window`` (to ``start``), validation
  cutoffs run from ``val`` while their window ends by ``test``, test cutoffs from ``test`` while their
  window ends by ``end`` (default: the data's last event, ``data_end``: a date dimension's rows to 2100 are
  not events), every ``step``.
* ``relbench``: as RelBench 3 lays them out: training from ``val - window`` back to the database's
  first time (at least 3), validation and test ``num_eval_timestamps`` windows from ``val`` and
  ``test`` (not past ``test - window`` and the last time minus a window); training and validation
  labels are computed on the database cut at ``test``, and labels of entities positioned past the
  rows known at ``test`` are dropped, so the labels equal the ones RelBench generates.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from fourdb.errors import FourdbError, TaskError
from fourdb.rdb import Database
from fourdb.rdb.sandbox import check_query
from fourdb.rdb.schema import check_keys
from fourdb.rdb.timeline import last_event
from fourdb.tasks import fields
from fourdb.tasks.kinds import TaskKind, as_times, shifted
from fourdb.tasks.splits import SPLITS, by_time, split_codes
from fourdb.untrusted import MAX_CUTOFFS, LimitError, first_line, max_cutoffs

RULES = ("fourdb", "relbench")
OUTPUT_KEYS = ("entity", "cutoff", "label")
WINDOW_TIMESTAMPS = ("start", "end", "step", "max_train_cutoffs", "rule", "num_eval_timestamps")


class WindowKind(TaskKind):
    keys = ("sql", "window", "output")
    timestamp_keys = WINDOW_TIMESTAMPS
    drops_unborn = True
    has_cutoff_grid = True

    def parse(self, spec: "TaskSpec", raw: dict, need, where: str) -> None:
        spec.sql = fields.sql_text(need("sql"), "sql", where, "text (a SELECT over cutoffs)")
        spec.window = need("window")
        spec.window_delta = fields.duration(spec.window, "window", where)
        check_query(spec.query_sql, f"{where}, sql")
        ts = spec.timestamps
        if ts.get("step") in (None, ""):  # default: one cutoff per window
            ts["step"] = spec.window
        fields.duration(ts["step"], "timestamps.step", where)
        if spec.rule not in RULES:
            raise TaskError(f"{where}: timestamps.rule must be one of {', '.join(RULES)}, got {spec.rule!r}")
        fields.positive_int(ts.get("num_eval_timestamps", 1), "timestamps.num_eval_timestamps", where)
        output = raw.get("output") or {}
        if not isinstance(output, dict):
            raise TaskError(f"{where}: output must map entity, cutoff, label to the SQL's column names")
        check_keys(output, OUTPUT_KEYS, f"{where}, output", error=TaskError)
        spec.output = {k: fields.name(v, f"output.{k}", where) for k, v in output.items()}

    def labels(self, spec: "TaskSpec", db: Database, pk: str) -> pd.DataFrame:
        """Run the SQL once over every split's cutoffs (a label depends on its own cutoff only), each row in
        the split its cutoff falls in: one pass over the tables instead of one per split. Under the RelBench
        rule, once per split as RelBench does, training and validation labels from the database cut at
        ``test``."""
        by_split = cutoffs(spec, db)
        test = pd.Timestamp(spec.timestamps["test"])
        if spec.rule != "relbench":
            frame = window_labels(spec, db, [t for times in by_split.values() for t in times])
            frame["split"] = by_time(frame["cutoff"], pd.Timestamp(spec.timestamps["val"]), test)
            return frame
        before_test = known_at(db, test)
        parts = [window_labels(spec, db if split == "test" else before_test, times) for split, times in by_split.items()]
        frame = pd.concat(parts, ignore_index=True)
        frame["split"] = split_codes(np.repeat([SPLITS.index(s) for s in by_split], [len(p) for p in parts]))
        return frame

    def finish(self, spec: "TaskSpec", db: Database, frame: pd.DataFrame) -> pd.DataFrame:
        return relbench_dangling(spec, db, frame) if spec.rule == "relbench" else frame


def cutoffs(spec: "TaskSpec", db: Database) -> dict[str, list[pd.Timestamp]]:
    """The cutoffs of each split of a window task, by ``spec.rule`` (see the module docstring). Each split's are
    counted before they are made: past ``max_cutoffs()`` in a split (a step of a second over a year), the task is
    refused in one line."""
    try:
        return _cutoffs(spec, db)
    except (OverflowError, ValueError) as e:  # pandas' OutOfBounds errors are ValueErrors
        raise TaskError(f"task '{spec.name}': its cutoffs run past the times fourdb can hold ({first_line(e)})") \
            from None


def count_cutoffs(first, last, step: pd.Timedelta) -> int:
    """How many of ``first``, ``first + step``, ... lie at or before ``last`` (``date_range``'s count), without
    making them."""
    return 0 if last < first else int((last - first) // step) + 1


def check_cutoffs(spec: "TaskSpec", split: str, count: int) -> None:
    bound = max_cutoffs()
    if count > bound:
        raise LimitError(f"task '{spec.name}': the {split} split would have {count:,} cutoffs, over the bound of "
                         f"{bound:,} per split ({MAX_CUTOFFS.env} raises it; a longer timestamps.step makes fewer)")


def _cutoffs(spec: "TaskSpec", db: Database) -> dict[str, list[pd.Timestamp]]:
    ts = spec.timestamps
    val, test = pd.Timestamp(ts["val"]), pd.Timestamp(ts["test"])
    window, step = spec.window_delta, pd.Timedelta(ts["step"])
    if spec.rule == "relbench":
        return _relbench_cutoffs(spec, db, val, test, window)
    end = pd.Timestamp(ts["end"]) if ts.get("end") else data_end(db)
    start = pd.Timestamp(ts["start"]) if ts.get("start") else None
    max_train = int(ts.get("max_train_cutoffs", 1000))
    check_cutoffs(spec, "train", max_train if start is None else min(max_train, count_cutoffs(start, val - window, step)))
    check_cutoffs(spec, "val", count_cutoffs(val, test - window, step))
    check_cutoffs(spec, "test", count_cutoffs(test, end - window, step))
    train = []
    t = val - window
    while start is None or t >= start:
        train.append(t)
        t -= step
        if len(train) >= max_train:
            break
    val_cuts = list(pd.date_range(val, test - window, freq=step))
    test_cuts = list(pd.date_range(test, end - window, freq=step))
    if not val_cuts or not test_cuts:
        raise TaskError(f"task '{spec.name}': no room for a {spec.window} window between val, test and end ({end})")
    return {"train": sorted(train), "val": val_cuts, "test": test_cuts}


def data_end(db: Database) -> pd.Timestamp:
    """Where test cutoffs' windows stop when a task file sets no ``end``: the data's last event, not a date
    dimension's future rows (``fourdb.rdb.timeline.last_event``)."""
    last = last_event(db)
    return db.max_time if last is None else last.time


def _relbench_cutoffs(spec: "TaskSpec", db: Database, val, test, window) -> dict[str, list[pd.Timestamp]]:
    n = int(spec.timestamps.get("num_eval_timestamps", 1))
    if test - val < window:
        raise TaskError(f"task '{spec.name}': the window {spec.window} is longer than from val to test")
    # over the tables with a time of their own, as RelBench sees them (an inherited time is not a column there)
    own = [t for t in db.schema.tables if t.has_own_time]
    before_test = known_at(db, test)
    first = min((before_test.tables[t.name][t.time_column].min() for t in own), default=pd.Timestamp.min)
    last_before = max((before_test.tables[t.name][t.time_column].max() for t in own), default=pd.Timestamp.max)
    last = max((db.tables[t.name][t.time_column].max() for t in own), default=pd.Timestamp.max)
    if val + window > last_before:
        raise TaskError(f"task '{spec.name}': val + window ({val + window}) is after the last time up to test")
    if test + window > last:
        raise TaskError(f"task '{spec.name}': test + window ({test + window}) is after the database's last time")
    check_cutoffs(spec, "train", count_cutoffs(first, val - window, window))
    train = list(pd.date_range(start=val - window, end=first, freq=-window))
    if len(train) < 3:
        raise TaskError(f"task '{spec.name}': {len(train)} training cutoffs back to the first time ({first}); "
                        f"RelBench needs at least 3")
    # num_eval_timestamps windows, as many as fit: counted first, so a huge one neither overflows nor is made
    n_val, n_test = min(n, count_cutoffs(val, test - window, window)), min(n, count_cutoffs(test, last - window, window))
    check_cutoffs(spec, "val", n_val)
    check_cutoffs(spec, "test", n_test)
    return {"train": sorted(train),
            "val": list(pd.date_range(val, min(val + window * (n_val - 1), test - window), freq=window)),
            "test": list(pd.date_range(test, min(test + window * (n_test - 1), last - window), freq=window))}


def known_at(db: Database, t) -> Database:
    """RelBench's cut of a database at ``t``: rows of timed tables with a time after ``t`` or none are out.
    A table whose time is inherited from its parents has no time column in RelBench, so it stays whole."""
    tables = {}
    for table in db.schema.tables:
        df = db.tables[table.name]
        if table.has_own_time:
            df = df[df[table.time_column] <= t].reset_index(drop=True)
        tables[table.name] = df
    return Database(db.schema, tables, db.folder, db.notes)


def relbench_dangling(spec: "TaskSpec", db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """RelBench drops the labels of entities whose key (a row position there) is at or past the number of
    entity rows known at ``test``, for every split."""
    known = len(known_at(db, pd.Timestamp(spec.timestamps["test"])).tables[spec.entity_table])
    keys = pd.to_numeric(frame["entity"], errors="coerce")
    return frame[~(keys >= known)].reset_index(drop=True)


def window_labels(spec: "TaskSpec", db: Database, times) -> pd.DataFrame:
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
    out["cutoff"] = as_times(out["cutoff"], spec, names["cutoff"])
    out["label_known_at"] = shifted(out["cutoff"], spec.window_delta, spec, names["cutoff"])
    return out
