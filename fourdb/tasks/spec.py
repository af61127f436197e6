"""Task files: what a task asks, checked field by field before any data is read.

A task file ``tasks/<dataset>/<task>.yaml`` (or ``DIR/tasks/<task>.yaml`` beside a database folder) is
one of four kinds (``fourdb.tasks.materialize`` turns it into seeds and labels):

* ``entity_window`` (RelBench's forecast tasks): SQL that yields ``(<entity key>, cutoff, label)`` over a
  table ``cutoffs(cutoff)`` (also visible as RelBench's ``timestamps(timestamp)``); ``{window}`` is the
  label window as a DuckDB interval (``{timedelta}``: its text, as RelBench writes it). ``output`` names
  the columns when the SQL calls them otherwise.
* ``recommendation``: the same, yielding ``(<source key>, cutoff, LIST(<destination key>))``: which
  destinations each source links to in the window; scored at ``eval_k``. Or, instead of ``sql``, a table
  of timed links (``table``, ``source_column``, ``destination_column``, ``cutoff_column``; 4DBInfer's
  retrieval tasks): every (source, time) is a query asked just before that time (1 ns), for the
  destinations linked then; ``candidates`` (a parquet file in the database folder with the same three
  columns) limits each validation and test query's ranking to its listed destinations, 4DBInfer's
  protocol. ``window`` is then the span "recent" popularity counts.
* ``row_column`` (4DBInfer's tasks): predict an expression over an event table's own row, asked at the
  row's ``cutoff_column``; only ``known_columns`` of the seed row are visible.
* ``autocomplete`` (RelBench's): predict a column of every row of a table, asked at the row's time;
  the column is removed from every input.

``remove_columns: [[table, column], ...]`` hides columns a label is derived from, on every input path.
``timestamps.rule: relbench`` lays out cutoffs as RelBench does (see ``cutoffs``).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fourdb.errors import TaskError
from fourdb.metrics import METRICS, metrics_for
from fourdb.rdb import Database
from fourdb.rdb.sandbox import check_query, inside_folder, quote_ident
from fourdb.rdb.schema import check_keys, did_you_mean
from fourdb.utils import stable_hash

TASK_TYPES = ("binary", "multiclass", "regression", "recommendation")
KINDS = ("entity_window", "row_column", "autocomplete", "recommendation")
WINDOW_KINDS = ("entity_window", "recommendation")  # SQL over cutoffs, labels from a window after each
DEFAULT_METRICS = {"binary": ["auroc", "accuracy"], "multiclass": ["accuracy", "macro_f1"],
                   "regression": ["mae", "rmse"], "recommendation": ["map", "precision", "recall", "mrr"]}
RULES = ("fourdb", "relbench")  # how cutoffs are laid out (fourdb.tasks.materialize.cutoffs)
# The keys a task file may have, shared and per kind: an unknown key is refused, since a typo would
# silently drop its setting
COMMON_KEYS = ("name", "dataset", "description", "kind", "task_type", "metrics", "timestamps", "sanity",
               "remove_columns")
KIND_KEYS = {"entity_window": ("entity_table", "sql", "window", "output"),
             "recommendation": ("source_table", "destination_table", "sql", "window", "output", "eval_k", "table",
                                "source_column", "destination_column", "cutoff_column", "candidates"),
             "row_column": ("table", "label", "where", "cutoff_column", "known_columns"),
             "autocomplete": ("table", "label")}
WINDOW_TIMESTAMPS = ("start", "end", "step", "max_train_cutoffs", "rule", "num_eval_timestamps")
TIMESTAMP_KEYS = {"entity_window": WINDOW_TIMESTAMPS, "recommendation": WINDOW_TIMESTAMPS, "row_column": (),
                  "autocomplete": ()}
OUTPUT_KEYS = ("entity", "cutoff", "label")
# Duration units that pandas.Timedelta and DuckDB's INTERVAL both read, and read alike (a window is used
# by both). Years and months have no fixed length, so neither reads them as a duration.
DURATION_UNITS = {"w", "W", "d", "D", "day", "days", "h", "hr", "hour", "hours", "m", "min", "minute", "minutes",
                  "s", "sec", "second", "seconds", "ms", "millisecond", "milliseconds",
                  "us", "microsecond", "microseconds"}
ACCEPTED_UNITS = "w, d/days, h/hours, min/minutes, s/seconds, ms, us"
_CALENDAR_UNITS = {"y", "Y", "yr", "yrs", "year", "years", "M", "mo", "mon", "mons", "month", "months"}
log = logging.getLogger("fourdb")
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


@dataclass
class TaskSpec:
    name: str
    dataset: str
    kind: str
    task_type: str
    entity_table: str
    timestamps: dict
    metrics: list[str] = field(default_factory=list)
    sql: str | None = None
    window: str | None = None
    label: str | None = None
    where: str | None = None
    cutoff_column: str | None = None
    known_columns: list[str] = field(default_factory=list)
    output: dict = field(default_factory=dict)  # entity / cutoff / label -> the column the SQL names it
    destination_table: str | None = None  # recommendation: the table whose rows are recommended
    eval_k: int | None = None  # recommendation: how many destinations a prediction lists
    link_table: str | None = None  # recommendation from a table of timed links (instead of sql)
    source_column: str | None = None
    destination_column: str | None = None
    candidates: str | None = None  # recommendation: a file of the destinations each val/test query ranks
    remove_columns: list[tuple[str, str]] = field(default_factory=list)  # hidden from every input path
    description: str = ""
    sanity: bool = False  # a check (e.g. a planted leak that must stay at chance), left out of average ranks
    raw: dict = field(default_factory=dict)
    origin: str = ""  # the task file (or manifest) it was read from, named by errors

    @property
    def query_sql(self) -> str:
        """The task's SQL as it runs: ``{window}`` a DuckDB interval, ``{timedelta}`` its text (RelBench's)."""
        return self.sql.replace("{window}", f"INTERVAL '{self.window}'").replace(
            "{timedelta}", str(pd.Timedelta(self.window)))

    def row_sql(self, key: str, table: str, time_column: str) -> str:
        """A row task's query: every row of ``table`` with its cutoff, its label expression and when it is known."""
        where = f"WHERE {self.where}" if self.where else ""
        return (f"SELECT {quote_ident(key)} AS entity, {quote_ident(self.cutoff_column)} AS cutoff, ({self.label}) "
                f"AS label, {quote_ident(time_column)} AS label_known_at FROM {quote_ident(table)} {where}")

    @property
    def metric(self) -> str:
        """The metric used for early stopping and ranking: the first one listed."""
        return self.metrics[0]

    @property
    def rule(self) -> str:
        return self.timestamps.get("rule", "fourdb")

    @property
    def spec_hash(self) -> str:
        return stable_hash(self.raw)

    @classmethod
    def from_dict(cls, raw: dict, where: str) -> "TaskSpec":
        """Check a task file's keys and values, so a bad one fails here, before any data is read."""
        if not isinstance(raw, dict):
            raise TaskError(f"{where}: expected a mapping of task keys (name, kind, task_type, ...)")

        def need(key):  # YAML null counts as missing
            if raw.get(key) in (None, ""):
                raise TaskError(f"{where}: missing '{key}'")
            return raw[key]

        _check_task_keys(raw, raw.get("kind"), COMMON_KEYS, KIND_KEYS, where, "")
        kind = need("kind")
        if kind not in KINDS:
            raise TaskError(f"{where}: kind must be one of {KINDS}, got '{kind}'")
        task_type = need("task_type")
        if task_type not in TASK_TYPES:
            raise TaskError(f"{where}: task_type must be one of {TASK_TYPES}, got '{task_type}'")
        ts = need("timestamps")
        if not isinstance(ts, dict):
            raise TaskError(f"{where}: timestamps must be a mapping, e.g. {{val: 2020-10-01, test: 2020-11-15}}")
        _check_task_keys(ts, kind, ("val", "test"), TIMESTAMP_KEYS, where, "timestamps.")
        ts = {k: v for k, v in ts.items() if v is not None}
        times = {}
        for k in ("val", "test", "start", "end"):
            if k in ("val", "test") and ts.get(k) in (None, ""):
                raise TaskError(f"{where}: timestamps needs '{k}'")
            if k in ts:
                times[k] = _timestamp(ts[k], f"timestamps.{k}", where)
        if not times["val"] < times["test"]:
            raise TaskError(f"{where}: timestamps.val ({times['val']}) must be before "
                            f"timestamps.test ({times['test']})")
        if "max_train_cutoffs" in ts:
            n = ts["max_train_cutoffs"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise TaskError(f"{where}: timestamps.max_train_cutoffs must be a positive whole number, got {n!r}")
        sanity = raw.get("sanity")
        if sanity is not None and not isinstance(sanity, bool):
            raise TaskError(f"{where}: sanity must be true or false, got {sanity!r}")
        table_key = {"entity_window": "entity_table", "recommendation": "source_table"}.get(kind, "table")
        spec = cls(
            origin=where, name=need("name"), dataset=raw.get("dataset") or "", kind=kind, task_type=task_type,
            entity_table=need(table_key), timestamps=ts, metrics=_metrics(raw.get("metrics"), task_type, where),
            description=raw.get("description") or "", sanity=bool(sanity), raw=raw,
            remove_columns=_column_pairs(raw.get("remove_columns"), where),
        )
        if (task_type == "recommendation") != (kind == "recommendation"):
            raise TaskError(f"{where}: task_type recommendation goes with kind recommendation (and only it)")
        links = kind == "recommendation" and raw.get("sql") in (None, "")
        if links:  # a table of timed links: one query per (source, time), no cutoff grid
            spec.window = need("window")
            _duration(spec.window, "window", where)
            spec.link_table, spec.cutoff_column = need("table"), need("cutoff_column")
            spec.source_column, spec.destination_column = need("source_column"), need("destination_column")
            spec.candidates = raw.get("candidates") or None
        elif kind in WINDOW_KINDS:
            spec.sql, spec.window = need("sql"), need("window")
            if not isinstance(spec.sql, str):
                raise TaskError(f"{where}: sql must be text (a SELECT over cutoffs), got {spec.sql!r}")
            _duration(spec.window, "window", where)
            check_query(spec.query_sql, f"{where}, sql")
            if spec.timestamps.get("step") in (None, ""):  # default: one cutoff per window
                spec.timestamps["step"] = spec.window
            _duration(spec.timestamps["step"], "timestamps.step", where)
            if spec.rule not in RULES:
                raise TaskError(f"{where}: timestamps.rule must be one of {', '.join(RULES)}, got {spec.rule!r}")
            n = spec.timestamps.get("num_eval_timestamps", 1)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise TaskError(f"{where}: timestamps.num_eval_timestamps must be a positive whole number, got {n!r}")
            output = raw.get("output") or {}
            if not isinstance(output, dict):
                raise TaskError(f"{where}: output must map entity, cutoff, label to the SQL's column names")
            check_keys(output, OUTPUT_KEYS, f"{where}, output", error=TaskError)
            spec.output = {k: str(v) for k, v in output.items()}
        if kind == "recommendation":
            spec.destination_table = need("destination_table")
            k = need("eval_k")
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise TaskError(f"{where}: eval_k must be a positive whole number, got {k!r}")
            spec.eval_k = k
        elif kind == "row_column":
            spec.label, spec.cutoff_column = need("label"), need("cutoff_column")
            spec.where = raw.get("where")
            spec.known_columns = _names(need("known_columns"), "known_columns", where)
            for key in ("label", "where"):
                if raw.get(key) is not None and not isinstance(raw[key], str):
                    raise TaskError(f"{where}: {key} must be a SQL expression (text), got {raw[key]!r}")
            check_query(spec.row_sql("entity", "t", "time"), f"{where}, label and where")
        elif kind == "autocomplete":
            spec.label = need("label")
            if not isinstance(spec.label, str):
                raise TaskError(f"{where}: label must be the name of the column to predict, got {spec.label!r}")
        return spec

    @classmethod
    def load(cls, path: str | Path) -> "TaskSpec":
        path = Path(path)
        if not path.exists():
            raise TaskError(f"task file {path} not found")
        try:
            raw = yaml.load(path.read_text(), Loader=_SpecLoader)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f"line {mark.line + 1}: " if mark is not None else ""
            raise TaskError(f"{path}: not valid YAML ({at}{getattr(e, 'problem', None) or type(e).__name__})") from None
        return cls.from_dict(raw or {}, str(path))


class _SpecLoader(yaml.SafeLoader):
    """YAML that keeps dates as text, so a bad one (2020-13-45) is reported with its field by
    TaskSpec.from_dict rather than failing inside the YAML parser."""


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check_task_keys(raw: dict, kind, common, per_kind: dict, where: str, prefix: str) -> None:
    """Refuse a key of the other kind of task (saying which kind it belongs to) or an unknown one."""
    known_kind = isinstance(kind, str) and kind in per_kind  # else: any kind's keys, the kind itself is checked next
    allowed = [*common, *(per_kind[kind] if known_kind else [k for keys in per_kind.values() for k in keys])]
    for key in raw:
        owner = next((k for k, keys in per_kind.items() if key in keys), None)
        if key not in allowed and owner is not None:
            raise TaskError(f"{where}: '{prefix}{key}' is a key of {owner} tasks, and this task is {kind}")
    check_keys(raw, allowed, f"{where}, timestamps" if prefix else where, error=TaskError)


def _names(value, field: str, where: str) -> list:
    """A list from YAML, where one name may be written without brackets."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise TaskError(f"{where}: {field} must be a list, e.g. [a, b], got {value!r}")
    return list(value)


def _column_pairs(value, where: str) -> list[tuple[str, str]]:
    """``remove_columns``: [[table, column], ...]."""
    if value in (None, ""):
        return []
    if not isinstance(value, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        raise TaskError(f"{where}: remove_columns must be a list of [table, column] pairs, got {value!r}")
    return [(str(t), str(c)) for t, c in value]


def _metrics(value, task_type: str, where: str) -> list[str]:
    """The task's metrics (YAML null or none: the defaults), each one its task type can be scored by."""
    names = _names(value, "metrics", where) if value not in (None, "") else []
    everything, fitting = METRICS.names(), metrics_for(task_type)
    for name in names:
        if name in fitting:
            continue
        allowed = f"{task_type} metrics: {', '.join(fitting)}"
        if name in everything:
            raise TaskError(f"{where}: metric '{name}' does not fit a {task_type} task ({allowed})")
        hint = did_you_mean(name, fitting) or did_you_mean(name, everything)
        raise TaskError(f"{where}: unknown metric '{name}'{hint} ({allowed})")
    return names or list(DEFAULT_METRICS[task_type])


def _duration(value, field: str, where: str) -> pd.Timedelta:
    """A positive duration such as '14 days', in units pandas and DuckDB both read."""
    accepted = f"accepted units: {ACCEPTED_UNITS}"
    if not isinstance(value, str):  # a bare number would be read as nanoseconds
        raise TaskError(f"{where}: {field} must be a duration with a unit, e.g. '14 days', got {value!r} ({accepted})")
    for unit in re.findall(r"[^\d\s.:+-]+", value):
        if unit not in DURATION_UNITS:
            note = "; years and months have no fixed length, write e.g. '365.25 days'" \
                if unit in _CALENDAR_UNITS else ""
            raise TaskError(f"{where}: {field} '{value}' has an unknown unit '{unit}' ({accepted}{note})")
    try:
        delta = pd.Timedelta(value)
    except ValueError:
        raise TaskError(f"{where}: {field} '{value}' is not a duration, e.g. '14 days' ({accepted})") from None
    if pd.isna(delta) or delta <= pd.Timedelta(0):
        raise TaskError(f"{where}: {field} must be positive, got '{value}'")
    return delta


def _timestamp(value, field: str, where: str) -> pd.Timestamp:
    """A point in time written as a date (2020-10-01) or a date and time (2020-10-01 12:00)."""
    stamp = pd.NaT
    if isinstance(value, (str, date)):  # a bare number would be read as nanoseconds since 1970
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError):
            pass
    if pd.isna(stamp):
        raise TaskError(f"{where}: {field} '{value}' is not a timestamp, e.g. 2020-10-01 or 2020-10-01 12:00")
    if stamp.tz is not None:  # database times are naive UTC; comparing with an aware one fails later
        raise TaskError(f"{where}: {field} '{value}' has a time zone; write it in UTC without one")
    return stamp


def find_task(dataset: str, task: str) -> TaskSpec:
    """A task by file path, or by name among tasks/<dataset>/ (or a database folder's tasks/)."""
    if task.endswith(".yaml") and Path(task).exists():
        return TaskSpec.load(task)
    folders = (Path(dataset) / "tasks", TASKS_DIR / Path(dataset).name)
    for folder in folders:
        if (folder / f"{task}.yaml").exists():  # a database folder's task file is its own, not a link out
            return TaskSpec.load(inside_folder(folder, f"{task}.yaml", f"task '{task}'"))
    available = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
    raise TaskError(f"no task '{task}' for dataset '{dataset}' (available: {', '.join(available) or 'none'})")
