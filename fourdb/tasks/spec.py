"""Task files: what a task asks, checked field by field before any data is read.

A task file ``tasks/<dataset>/<task>.yaml`` (or ``DIR/tasks/<task>.yaml`` beside a database folder) names its
kind (``fourdb.tasks.kinds``: entity_window, recommendation, row_column, autocomplete; each kind's module says
what its files hold) and its type (``fourdb.tasks.types.TaskType``: binary, multiclass, regression,
recommendation). ``TaskSpec.from_dict`` reads the keys every task has and lets the kind read its own.

``remove_columns: [[table, column], ...]`` hides columns a label is derived from, on every input path.
``timestamps.rule: relbench`` lays out cutoffs as RelBench does (``fourdb.tasks.kinds.window``).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from fourdb.errors import TaskError
from fourdb.metrics import METRICS
from fourdb.rdb.sandbox import inside_folder, quote_ident
from fourdb.rdb.schema import check_keys, did_you_mean
from fourdb.tasks import fields
from fourdb.tasks.fields import DURATION_UNITS  # noqa: F401 - re-exported: the units a window may use
from fourdb.tasks.kinds import TASK_KINDS, TaskKind
from fourdb.tasks.types import TASK_TYPES, TaskType, task_type
from fourdb.untrusted import read_yaml
from fourdb.utils import stable_hash

DEFAULT_METRICS = {t.value: t.default_metrics for t in TaskType}
# The keys every task file may have; each kind adds its own. An unknown key is refused, since a typo would
# silently drop its setting
COMMON_KEYS = ("name", "dataset", "description", "kind", "task_type", "metrics", "timestamps", "sanity",
               "remove_columns")
log = logging.getLogger("fourdb")
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


def kinds() -> dict[str, TaskKind]:
    return dict(TASK_KINDS.items())


@dataclass
class TaskSpec:
    name: str
    dataset: str
    kind: TaskKind
    task_type: TaskType
    entity_table: str
    timestamps: dict
    metrics: list[str] = field(default_factory=list)
    sql: str | None = None
    window: str | None = None  # as written (a DuckDB interval's text); ``window_delta`` is it read once
    window_delta: pd.Timedelta | None = None
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
        return expand_window(self.sql, self.window)

    def row_sql(self, key: str, table: str, time_column: str) -> str:
        """A row task's query: every row of ``table`` with its cutoff, its label expression and when it is known."""
        where = f"WHERE {self.where}" if self.where else ""
        return (f"SELECT {quote_ident(key)} AS entity, {quote_ident(self.cutoff_column)} AS cutoff, ({self.label}) "
                f"AS label, {quote_ident(time_column)} AS label_known_at FROM {quote_ident(table)} {where}")

    def for_destinations(self) -> "TaskSpec":
        """This recommendation task's destination rows as the entities of a plain task: each candidate's own row
        is read at its seed's cutoff as an entity's would be."""
        return dataclasses.replace(self, entity_table=self.destination_table, kind=TASK_KINDS.get("entity_window"))

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

        known = kinds()
        kind = known.get(raw.get("kind")) if isinstance(raw.get("kind"), str) else None
        _check_task_keys(raw, kind, known, where)
        if kind is None:
            raise TaskError(f"{where}: kind must be one of {tuple(known)}, got '{need('kind')}'")
        ttype = task_type(need("task_type"), where)
        if ttype not in kind.task_types:
            goes = [k.name for k in known.values() if ttype in k.task_types]
            raise TaskError(f"{where}: task_type {ttype} goes with kind {' or '.join(goes)}, not {kind}")
        ts = need("timestamps")
        if not isinstance(ts, dict):
            raise TaskError(f"{where}: timestamps must be a mapping, e.g. {{val: 2020-10-01, test: 2020-11-15}}")
        _check_timestamp_keys(ts, kind, known, where)
        ts = {k: v for k, v in ts.items() if v is not None}
        times = {}
        for k in ("val", "test", "start", "end"):
            if k in ("val", "test") and ts.get(k) in (None, ""):
                raise TaskError(f"{where}: timestamps needs '{k}'")
            if k in ts:
                times[k] = fields.timestamp(ts[k], f"timestamps.{k}", where)
        if not times["val"] < times["test"]:
            raise TaskError(f"{where}: timestamps.val ({times['val']}) must be before "
                            f"timestamps.test ({times['test']})")
        if "max_train_cutoffs" in ts:
            fields.positive_int(ts["max_train_cutoffs"], "timestamps.max_train_cutoffs", where)
        sanity = raw.get("sanity")
        if sanity is not None and not isinstance(sanity, bool):
            raise TaskError(f"{where}: sanity must be true or false, got {sanity!r}")
        description = raw.get("description") or ""
        if not isinstance(description, str):
            raise TaskError(f"{where}: description must be text, got {type(description).__name__}")
        spec = cls(
            origin=where, name=fields.name(need("name"), "name", where), kind=kind, task_type=ttype,
            dataset=fields.name(raw["dataset"], "dataset", where) if raw.get("dataset") else "",
            entity_table=fields.name(need(kind.table_key), kind.table_key, where), timestamps=ts,
            metrics=_metrics(raw.get("metrics"), ttype, where), description=description, sanity=bool(sanity), raw=raw,
            remove_columns=fields.column_pairs(raw.get("remove_columns"), where),
        )
        kind.parse(spec, raw, need, where)
        return spec

    @classmethod
    def load(cls, path: str | Path) -> "TaskSpec":
        path = Path(path)
        if not path.exists():
            raise TaskError(f"task file {path} not found")
        raw = read_yaml(path, str(path), loader=_SpecLoader, error=TaskError)  # no aliases, nesting bounded
        return cls.from_dict(raw or {}, str(path))


def expand_window(sql: str, window: str) -> str:
    """A window task's SQL as it runs: ``{window}`` a DuckDB interval, ``{timedelta}`` its text (RelBench's)."""
    return sql.replace("{window}", f"INTERVAL '{window}'").replace("{timedelta}", str(pd.Timedelta(window)))


def relbench_sql(sql: str) -> str:
    """A window task's SQL as RelBench writes it: the window only as ``{timedelta}``."""
    return sql.strip().rstrip(";").replace("{window}", "INTERVAL '{timedelta}'")


class _SpecLoader(yaml.SafeLoader):
    """YAML that keeps dates as text, so a bad one (2020-13-45) is reported with its field by
    TaskSpec.from_dict rather than failing inside the YAML parser."""


_SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _check_task_keys(raw: dict, kind: TaskKind | None, known: dict[str, TaskKind], where: str) -> None:
    """Refuse a key of another kind of task (saying which kind it belongs to) or an unknown one. With no
    known kind yet, any kind's keys pass (the kind itself is checked next)."""
    per_kind = {name: (k.table_key, *k.keys) for name, k in known.items()}
    _refuse_keys(raw, kind, per_kind, COMMON_KEYS, where, "")


def _check_timestamp_keys(ts: dict, kind: TaskKind, known: dict[str, TaskKind], where: str) -> None:
    _refuse_keys(ts, kind, {name: k.timestamp_keys for name, k in known.items()}, ("val", "test"), where,
                 "timestamps.")


def _refuse_keys(raw: dict, kind: TaskKind | None, per_kind: dict, common, where: str, prefix: str) -> None:
    allowed = [*common, *(per_kind[kind.name] if kind else [k for keys in per_kind.values() for k in keys])]
    for key in raw:
        owner = next((k for k, keys in per_kind.items() if key in keys), None)
        if key not in allowed and owner is not None:
            raise TaskError(f"{where}: '{prefix}{key}' is a key of {owner} tasks, and this task is {kind}")
    check_keys(raw, allowed, f"{where}, timestamps" if prefix else where, error=TaskError)


def _metrics(value, ttype: TaskType, where: str) -> list[str]:
    """The task's metrics (YAML null or none: the defaults), each one its task type can be scored by."""
    names = fields.names(value, "metrics", where) if value not in (None, "") else []
    everything, fitting = METRICS.names(), ttype.metrics()
    for name in names:
        if name in fitting:
            continue
        allowed = f"{ttype} metrics: {', '.join(fitting)}"
        if name in everything:
            raise TaskError(f"{where}: metric '{name}' does not fit a {ttype} task ({allowed})")
        hint = did_you_mean(name, fitting) or did_you_mean(name, everything)
        raise TaskError(f"{where}: unknown metric '{name}'{hint} ({allowed})")
    return names or ttype.default_metrics


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
