"""``recommendation``: SQL as for ``entity_window``, yielding ``(<source key>, cutoff, LIST(<destination key>))``:
which destinations each source links to in the window; scored at ``eval_k``. Or, instead of ``sql``, a table of
timed links (``table``, ``source_column``, ``destination_column``, ``cutoff_column``; 4DBInfer's retrieval
tasks): every (source, time) is a query asked just before that time (1 ns), for the destinations linked then;
``candidates`` (a parquet file in the database folder with the same three columns) limits each validation and
test query's ranking to its listed destinations, 4DBInfer's protocol. ``window`` is then the span "recent"
popularity counts."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from fourdb.errors import TaskError
from fourdb.rdb import Database
from fourdb.rdb.files import read_parquet
from fourdb.rdb.sandbox import inside_folder
from fourdb.tasks import fields
from fourdb.tasks.kinds import TASK_KINDS, as_times, rows_of
from fourdb.tasks.kinds.window import WindowKind, known_at, window_labels
from fourdb.tasks.splits import by_time, known_in_time
from fourdb.tasks.types import TaskType

MAX_EVAL_K = 1000

log = logging.getLogger("fourdb")


class Recommendation(WindowKind):
    name = "recommendation"
    table_key = "source_table"
    keys = ("destination_table", "sql", "window", "output", "eval_k", "table", "source_column",
            "destination_column", "cutoff_column", "candidates")
    task_types = (TaskType.RECOMMENDATION,)

    def parse(self, spec, raw, need, where):
        if raw.get("sql") in (None, ""):  # a table of timed links: one query per (source, time), no cutoff grid
            spec.window = need("window")
            spec.window_delta = fields.duration(spec.window, "window", where)
            spec.link_table, spec.cutoff_column = (fields.name(need(k), k, where) for k in ("table", "cutoff_column"))
            spec.source_column, spec.destination_column = (fields.name(need(k), k, where)
                                                           for k in ("source_column", "destination_column"))
            spec.candidates = fields.name(raw["candidates"], "candidates", where) if raw.get("candidates") else None
        else:
            super().parse(spec, raw, need, where)
        spec.destination_table = fields.name(need("destination_table"), "destination_table", where)
        # every prediction lists eval_k destinations: the field's lists are tens long (RelBench's at most 100)
        spec.eval_k = fields.positive_int(need("eval_k"), "eval_k", where, most=MAX_EVAL_K)

    def labels(self, spec, db, pk):
        if not spec.link_table:
            return super().labels(spec, db, pk)
        frame = link_queries(spec, db)
        val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
        frame["split"] = by_time(frame["cutoff"], val, test)
        return frame[known_in_time(frame, val, test)].reset_index(drop=True)

    def finish(self, spec, db, frame):
        frame = destinations(spec, db, super().finish(spec, db, frame))
        return with_candidates(spec, db, frame) if spec.candidates else frame


TASK_KINDS.register("recommendation", Recommendation())


def past_links(task, db: Database) -> pd.DataFrame:
    """A recommendation task's links as the database shows them, window by window at every cutoff of
    the task: ``node`` (source row), ``dst`` (destination rows) and ``known`` (when the window closes). A
    model may use a link once it is known: these are the database's past, read with the task's SQL, not
    the label table (so later test seeds see the weeks after the first test cutoff too). Each window is
    read on the database as it stood when the window closed: a row known only later (a flight that left
    in the window and landed after it closed) is not part of it then. From a table of timed links: every
    link, known at its time."""
    if task.spec.link_table:
        frame = link_queries(task.spec, db)
    else:
        spec, cutoffs = task.spec, np.unique(task.frame["cutoff"].to_numpy())
        frame = pd.concat([window_labels(spec, db, [])] +
                          [window_labels(spec, db.as_of(pd.Timestamp(c) + spec.window_delta), [c]) for c in cutoffs],
                          ignore_index=True)
    frame["node"] = rows_of(db, task.spec.entity_table, frame["entity"])
    frame = destinations(task.spec, db, frame[frame["node"] >= 0].assign(split="links"))
    return frame.rename(columns={"label": "dst", "label_known_at": "known"})[["node", "dst", "known"]]


def link_queries(spec, db: Database) -> pd.DataFrame:
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
    df["time"] = as_times(df["time"], spec, spec.cutoff_column)
    out = df.groupby(["entity", "time"], sort=True)["dst"].agg(list).reset_index()
    return pd.DataFrame({"entity": out["entity"], "cutoff": out["time"] - pd.Timedelta(1, "ns"),
                         "label": out["dst"], "label_known_at": out["time"]})


def with_candidates(spec, db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """Each validation and test query's candidate destination rows, from the task's ``candidates`` file (its
    true destinations among them); a query the file lists nothing for is dropped (it could not be scored)."""
    path = inside_folder(db.folder or ".", spec.candidates, f"{spec.origin or f'task {spec.name!r}'}, candidates",
                         db.allow_outside_paths)
    if not path.exists():
        raise TaskError(f"task '{spec.name}': candidates file {path} not found")
    listed = read_parquet(path, f"task '{spec.name}', candidates {path}",  # bounded: the file is input
                          [spec.source_column, spec.cutoff_column, spec.destination_column])
    listed.columns = ["entity", "time", "dst"]
    listed["cutoff"] = pd.to_datetime(listed["time"]).astype("datetime64[ns]") - pd.Timedelta(1, "ns")
    listed["row"] = rows_of(db, spec.destination_table, listed["dst"])
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


def destinations(spec, db: Database, frame: pd.DataFrame) -> pd.DataFrame:
    """Each source's destination keys -> destination row numbers; keys not in the destination table are
    dropped (under the RelBench rule, as RelBench does: positions past the rows known at ``test``), and so
    are sources left with none (nothing to score)."""
    if len(frame) and not frame["label"].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).all():
        raise TaskError(f"task '{spec.name}': a recommendation SQL must yield a LIST of destination keys as its "
                        f"label (e.g. LIST(DISTINCT p.item_id))")
    pk = db.schema.table(spec.destination_table).primary_key
    limit = len(known_at(db, pd.Timestamp(spec.timestamps["test"])).tables[spec.destination_table]) \
        if spec.rule == "relbench" else len(db.tables[spec.destination_table])

    # every key looked up once; then split back per source
    keys = [k for v in frame["label"] for k in v]
    found = rows_of(db, spec.destination_table, pd.Series(keys)) if keys else np.zeros(0, np.int64)
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
