"""Prediction tasks defined as files, materialized with DuckDB and split strictly by time.

A task file ``tasks/<dataset>/<task>.yaml`` is one of two kinds:

* ``entity_window`` (as RelBench): SQL that yields ``(<entity key>, cutoff, label)`` for a table
  ``cutoffs(cutoff TIMESTAMP)``; ``{window}`` in the SQL is the label window as a DuckDB interval.
  Cutoffs are laid out backwards from ``timestamps.val`` (train), from ``val`` to ``test`` (val) and
  from ``test`` on (test), every ``step``; each split's label windows end before the next split starts.
* ``row_column`` (as 4DBInfer): predict an expression over an event table's own row, asked at the row's
  ``cutoff_column``; only ``known_columns`` of the seed row may be used as its features.

The materialized task is a frame with columns ``entity`` (the entity table's primary key value),
``node`` (its row number), ``cutoff``, ``label`` and ``split``.
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
from fourdb.rdb.schema import check_keys, did_you_mean
from fourdb.utils import stable_hash

TASK_TYPES = ("binary", "multiclass", "regression")
KINDS = ("entity_window", "row_column")
DEFAULT_METRICS = {"binary": ["auroc", "accuracy"], "multiclass": ["accuracy", "macro_f1"],
                   "regression": ["mae", "rmse"]}
# The keys a task file may have, shared and per kind: an unknown key is refused, since a typo would
# silently drop its setting
COMMON_KEYS = ("name", "dataset", "description", "kind", "task_type", "metrics", "timestamps", "sanity")
KIND_KEYS = {"entity_window": ("entity_table", "sql", "window"),
             "row_column": ("table", "label", "where", "cutoff_column", "known_columns")}
TIMESTAMP_KEYS = {"entity_window": ("start", "end", "step", "max_train_cutoffs"), "row_column": ()}
# Duration units that pandas.Timedelta and DuckDB's INTERVAL both read, and read alike (a window is used
# by both). Years and months have no fixed length, so neither reads them as a duration.
DURATION_UNITS = {"w", "W", "d", "D", "day", "days", "h", "hr", "hour", "hours", "m", "min", "minute", "minutes",
                  "s", "sec", "second", "seconds", "ms", "millisecond", "milliseconds",
                  "us", "microsecond", "microseconds"}
ACCEPTED_UNITS = "w, d/days, h/hours, min/minutes, s/seconds, ms, us"
_CALENDAR_UNITS = {"y", "Y", "yr", "yrs", "year", "years", "M", "mo", "mon", "mons", "month", "months"}
log = logging.getLogger("fourdb")
TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"


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
    description: str = ""
    sanity: bool = False  # a check (e.g. a planted leak that must stay at chance), left out of average ranks
    raw: dict = field(default_factory=dict)

    @property
    def metric(self) -> str:
        """The metric used for early stopping and ranking: the first one listed."""
        return self.metrics[0]

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
        spec = cls(
            name=need("name"), dataset=raw.get("dataset") or "", kind=kind, task_type=task_type,
            entity_table=need("entity_table") if kind == "entity_window" else need("table"),
            timestamps=ts, metrics=_metrics(raw.get("metrics"), task_type, where),
            description=raw.get("description") or "", sanity=bool(sanity), raw=raw,
        )
        if kind == "entity_window":
            spec.sql, spec.window = need("sql"), need("window")
            if not isinstance(spec.sql, str):
                raise TaskError(f"{where}: sql must be text (a SELECT over cutoffs), got {spec.sql!r}")
            _duration(spec.window, "window", where)
            if spec.timestamps.get("step") in (None, ""):  # default: one cutoff per window
                spec.timestamps["step"] = spec.window
            _duration(spec.timestamps["step"], "timestamps.step", where)
        else:
            spec.label, spec.cutoff_column = need("label"), need("cutoff_column")
            spec.where = raw.get("where")
            spec.known_columns = _names(need("known_columns"), "known_columns", where)
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
        if (folder / f"{task}.yaml").exists():
            return TaskSpec.load(folder / f"{task}.yaml")
    available = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
    raise TaskError(f"no task '{task}' for dataset '{dataset}' (available: {', '.join(available) or 'none'})")


@dataclass
class Task:
    """A materialized task: one row per (entity, cutoff) with its label and split."""

    spec: TaskSpec
    frame: pd.DataFrame
    num_classes: int = 2
    dropped: dict = field(default_factory=dict)  # split -> seeds dropped because their entity did not exist yet
    hidden_columns: list[str] = field(default_factory=list)  # of the seed row, never shown to a model (row-column)

    def split(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["split"] == name].reset_index(drop=True)

    @property
    def fit_until(self) -> pd.Timestamp:
        """Encoders and statistics are fitted on the rows known by then: the start of validation."""
        return pd.Timestamp(self.spec.timestamps["val"])


def _ts(value) -> pd.Timestamp:
    return pd.Timestamp(value)


def entity_window_cutoffs(spec: TaskSpec, db: Database) -> dict[str, list[pd.Timestamp]]:
    ts = spec.timestamps
    val, test = _ts(ts["val"]), _ts(ts["test"])
    window, step = pd.Timedelta(spec.window), pd.Timedelta(ts["step"])
    end = _ts(ts["end"]) if ts.get("end") else db.max_time
    start = _ts(ts["start"]) if ts.get("start") else None
    if not val < test:
        raise TaskError(f"task '{spec.name}': timestamps.val ({val}) must be before timestamps.test ({test})")
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


def materialize(spec: TaskSpec, db: Database) -> Task:
    if spec.entity_table not in db.schema.table_names:
        raise TaskError(f"task '{spec.name}': table '{spec.entity_table}' is not in the database")
    table = db.schema.table(spec.entity_table)
    pk = table.primary_key
    if pk is None:
        raise TaskError(f"task '{spec.name}': table '{spec.entity_table}' has no primary key to predict for")
    frame = _materialize_window(spec, db, pk) if spec.kind == "entity_window" else _materialize_row(spec, db, pk)
    frame = frame.dropna(subset=["label"])
    if frame.duplicated(["entity", "cutoff"]).any():
        first = frame[frame.duplicated(["entity", "cutoff"])].iloc[0]
        raise TaskError(f"task '{spec.name}': the SQL yields two labels for entity {first['entity']!r} at {first['cutoff']}")
    index = pd.Index(db.tables[spec.entity_table][pk])
    frame["node"] = index.get_indexer(frame["entity"])
    if (frame["node"] < 0).any():
        bad = frame.loc[frame["node"] < 0, "entity"].iloc[0]
        raise TaskError(f"task '{spec.name}': entity {bad!r} is not a key of table '{spec.entity_table}'")
    dropped = {}
    if spec.kind == "entity_window":
        frame, dropped = _drop_unborn(spec, db, frame)
    for name in ("train", "val", "test"):
        if not (frame["split"] == name).any():
            raise TaskError(f"task '{spec.name}': the {name} split is empty; check timestamps")
    num_classes = 2
    if spec.task_type == "binary":
        labels = set(np.unique(frame["label"]))
        if not labels <= {0, 1}:
            raise TaskError(f"task '{spec.name}': binary labels must be 0/1, got {sorted(labels)[:5]}")
        frame["label"] = frame["label"].astype("int64")
    elif spec.task_type == "multiclass":
        frame["label"], classes = pd.factorize(frame["label"], sort=True)
        num_classes = len(classes)
    else:
        frame["label"] = frame["label"].astype("float64")
    frame = frame.sort_values(["split", "cutoff", "node"], kind="stable").reset_index(drop=True)
    hidden = [] if spec.kind == "entity_window" else [
        c for c in table.column_names if c not in spec.known_columns and c != pk]
    task = Task(spec, frame[["entity", "node", "cutoff", "label", "label_known_at", "split"]], num_classes,
                dropped, hidden)
    check_time_splits(task)
    return task


def _materialize_window(spec: TaskSpec, db: Database, pk: str) -> pd.DataFrame:
    cuts = entity_window_cutoffs(spec, db)
    con = db.con
    sql = spec.sql.replace("{window}", f"INTERVAL '{spec.window}'")
    parts = []
    for split, times in cuts.items():
        con.register("cutoffs", pd.DataFrame({"cutoff": pd.to_datetime(times).astype("datetime64[ns]")}))
        try:
            out = con.execute(sql).df()
        except Exception as e:  # noqa: BLE001 - a broken task SQL is a user error
            raise TaskError(f"task '{spec.name}': SQL failed: {str(e).splitlines()[0]}") from None
        finally:
            con.unregister("cutoffs")
        missing = [c for c in (pk, "cutoff", "label") if c not in out.columns]
        if missing:
            raise TaskError(f"task '{spec.name}': SQL must return columns {pk}, cutoff, label; missing {missing}")
        out = out.rename(columns={pk: "entity"})[["entity", "cutoff", "label"]]
        out["split"] = split
        parts.append(out)
    frame = pd.concat(parts, ignore_index=True)
    frame["cutoff"] = pd.to_datetime(frame["cutoff"]).astype("datetime64[ns]")
    frame["label_known_at"] = frame["cutoff"] + pd.Timedelta(spec.window)
    return frame


def _drop_unborn(spec: TaskSpec, db: Database, frame: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Drop seeds whose entity row is newer than their cutoff: the row did not exist yet, and its own
    columns (or its mere presence) would give the label away. Rows without a time exist always."""
    table = db.schema.table(spec.entity_table)
    if table.time_column is None:
        return frame, {}
    born = db.tables[table.name][table.time_column].to_numpy()[frame["node"].to_numpy()]
    unborn = ~np.isnat(born) & (born > frame["cutoff"].to_numpy())
    if not unborn.any():
        return frame, {}
    dropped = {s: int(n) for s, n in frame.loc[unborn, "split"].value_counts().items()}
    kept = frame[~unborn]
    emptied = [s for s in ("train", "val", "test") if dropped.get(s) and not (kept["split"] == s).any()]
    where = f"table '{table.name}' (time column {table.time_column})"
    if emptied:
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
    where = f"WHERE {spec.where}" if spec.where else ""
    sql = (f'SELECT "{pk}" AS entity, "{spec.cutoff_column}" AS cutoff, ({spec.label}) AS label, '
           f'"{table.time_column}" AS label_known_at FROM "{table.name}" {where}')
    try:
        frame = db.sql(sql)
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
    val, test = _ts(spec.timestamps["val"]), _ts(spec.timestamps["test"])
    frame["split"] = np.where(frame["cutoff"] >= test, "test", np.where(frame["cutoff"] >= val, "val", "train"))
    # a row belongs to a split only if its label is known before the next split begins
    keep = ((frame["split"] == "train") & (frame["label_known_at"] < val)) | \
           ((frame["split"] == "val") & (frame["label_known_at"] < test)) | (frame["split"] == "test")
    return frame[keep]


def check_time_splits(task: Task) -> None:
    """Refuse a task whose splits overlap in time: no training label may come from val time or later."""
    ts = task.spec.timestamps
    val, test = _ts(ts["val"]), _ts(ts["test"])
    f = task.frame
    train, valid = f[f["split"] == "train"], f[f["split"] == "val"]
    if len(train) and (train["cutoff"].max() >= val or train["label_known_at"].max() > val):
        raise TaskError(f"task '{task.spec.name}': a training label comes from the validation period")
    if len(valid) and (valid["cutoff"].min() < val or valid["cutoff"].max() >= test):
        raise TaskError(f"task '{task.spec.name}': validation cutoffs fall outside [val, test)")


def load_task(db: Database, dataset: str, task: str) -> Task:
    return materialize(find_task(dataset, task), db)
