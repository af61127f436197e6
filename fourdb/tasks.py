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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fourdb.errors import TaskError
from fourdb.rdb import Database
from fourdb.utils import stable_hash

TASK_TYPES = ("binary", "multiclass", "regression")
KINDS = ("entity_window", "row_column")
DEFAULT_METRICS = {"binary": ["auroc", "accuracy"], "multiclass": ["accuracy", "macro_f1"],
                   "regression": ["mae", "rmse"]}
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
        def need(key):
            if raw.get(key) in (None, ""):
                raise TaskError(f"{where}: missing '{key}'")
            return raw[key]

        kind = need("kind")
        if kind not in KINDS:
            raise TaskError(f"{where}: kind must be one of {KINDS}, got '{kind}'")
        task_type = need("task_type")
        if task_type not in TASK_TYPES:
            raise TaskError(f"{where}: task_type must be one of {TASK_TYPES}, got '{task_type}'")
        ts = need("timestamps")
        for k in ("val", "test"):
            if k not in ts:
                raise TaskError(f"{where}: timestamps needs '{k}'")
        spec = cls(
            name=need("name"), dataset=raw.get("dataset", ""), kind=kind, task_type=task_type,
            entity_table=need("entity_table") if kind == "entity_window" else need("table"),
            timestamps={k: v for k, v in ts.items()},
            metrics=list(raw.get("metrics") or DEFAULT_METRICS[task_type]),
            description=raw.get("description", ""), sanity=bool(raw.get("sanity", False)), raw=raw,
        )
        if kind == "entity_window":
            spec.sql, spec.window = need("sql"), need("window")
            if not spec.timestamps.get("step"):  # default: one cutoff per window
                spec.timestamps["step"] = spec.window
        else:
            spec.label, spec.cutoff_column = need("label"), need("cutoff_column")
            spec.where = raw.get("where")
            spec.known_columns = list(need("known_columns"))
        return spec

    @classmethod
    def load(cls, path: str | Path) -> "TaskSpec":
        path = Path(path)
        if not path.exists():
            raise TaskError(f"task file {path} not found")
        return cls.from_dict(yaml.safe_load(path.read_text()) or {}, str(path))


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

    def split(self, name: str) -> pd.DataFrame:
        return self.frame[self.frame["split"] == name].reset_index(drop=True)

    @property
    def hidden_columns(self) -> list[str]:
        """Columns of the seed row a model must not see (row-column tasks only)."""
        return getattr(self, "_hidden", [])


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
    task = Task(spec, frame[["entity", "node", "cutoff", "label", "label_known_at", "split"]], num_classes)
    task._hidden = [] if spec.kind == "entity_window" else [
        c for c in table.column_names if c not in spec.known_columns and c != pk]
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
