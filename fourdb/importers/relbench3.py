"""RelBench 3 folders: ``manifest.yaml`` (tables, keys, time columns, split timestamps), ``db/<table>.parquet``
and ``tasks/<task>/manifest.yaml`` with ``{train,val,test}.parquet`` labels.

The manifests are the only source of keys and time columns (the parquet files carry none); key values are
kept, so entity ids stay RelBench's row positions. Tasks convert by kind (``KINDS``: the fields a kind's
manifest needs, its checks against the tables, its converter):

* ``forecast``: the manifest's SQL, verbatim, as an ``entity_window`` (or ``recommendation``) task laid out
  by RelBench's rule (``timestamps.rule: relbench``), so its labels are the ones RelBench regenerates;
* ``autocomplete``: an ``autocomplete`` task over the column;
* ``external``: the shipped labels, as a table of samples and a row-column task (see ``samples``).

A manifest RelBench itself would refuse (unreadable YAML, an unknown kind, a missing field, a key column
absent from its parquet, a foreign key to an unknown table, SQL that does not bind) stops the import with
one line naming the file and the field; a task fourdb cannot express is left out with a note.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fourdb.errors import DatabaseImportError, FourdbError
from fourdb.importers.base import IMPORTERS, Format, ImportReport, Imported, SourceTable
from fourdb.importers.samples import samples_task
from fourdb.rdb.files import read_parquet
from fourdb.rdb.sandbox import SQLSandbox, inside_folder
from fourdb.tasks.splits import SPLITS
from fourdb.tasks.types import TaskType
from fourdb.untrusted import LimitError, check_name, plain_file_name, read_yaml

MANIFEST = "manifest.yaml"
RELBENCH_TASK_TYPES = ("binary_classification", "multiclass_classification", "regression", "recommendation",
                       "multilabel_classification")
# RelBench's own metric first, so fourdb ranks and stops early by it
METRICS = {TaskType.BINARY: ["roc_auc", "average_precision", "accuracy"], TaskType.REGRESSION: ["nmae", "mae", "rmse"],
           TaskType.RECOMMENDATION: TaskType.RECOMMENDATION.default_metrics,
           TaskType.MULTICLASS: TaskType.MULTICLASS.default_metrics}
POSITION_KEY = "primary_key"  # the key RelBench gives a table without one (its row positions)
LINK_FIELDS = ("src_entity_table", "src_entity_col", "dst_entity_table", "dst_entity_col")


def _detect(path: Path) -> bool:
    return (path / MANIFEST).is_file() and (path / "db").is_dir()


def _load_yaml(path: Path) -> dict:
    """A manifest as plain data (aliases refused, size and nesting bounded), which must be a mapping."""
    raw = read_yaml(path, str(path), error=DatabaseImportError)
    if not isinstance(raw, dict):
        raise DatabaseImportError(f"{path}: expected a mapping of manifest fields, got {type(raw).__name__}")
    return raw


def _timestamp(raw: dict, key: str, where: Path) -> pd.Timestamp:
    if raw.get(key) in (None, ""):
        raise DatabaseImportError(f"{where}: missing field '{key}'")
    try:
        stamp = pd.Timestamp(raw[key])
    except (ValueError, TypeError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise DatabaseImportError(f"{where}, {key}: {raw[key]!r} is not a timestamp")
    return stamp


def _read_relbench3(path: Path, report: ImportReport) -> Imported:
    where = path / MANIFEST
    meta = _load_yaml(where)
    if not meta.get("name"):
        raise DatabaseImportError(f"{where}: missing field 'name'")
    val, test = _timestamp(meta, "val_timestamp", where), _timestamp(meta, "test_timestamp", where)
    if not val < test:
        raise DatabaseImportError(f"{where}, val_timestamp: {val} is not before test_timestamp {test}")
    specs = meta.get("tables")
    if not isinstance(specs, dict) or not specs:
        raise DatabaseImportError(f"{where}, tables: missing, or not a mapping of table -> pkey, time_col, fkeys")
    tables = {}
    for name, spec in specs.items():  # a table's name becomes a file name: text with no NUL or control character
        name = check_name(str(name), f"{where}, tables", "table name")
        tables[name] = _read_table(path, name, spec, where)
    frames = {name: df for name, (df, _) in tables.items()}
    specs = {name: spec for name, (_, spec) in tables.items()}
    for name, spec in specs.items():
        for col, parent in spec["fkeys"].items():
            if parent not in frames:
                raise DatabaseImportError(f"{where}, tables.{name}.fkeys.{col}: points to unknown table '{parent}'")
    unlisted = sorted(p.stem for p in (path / "db").glob("*.parquet") if p.stem not in frames)
    if unlisted:
        report.notes.append(f"db/ files not in {MANIFEST} are not imported: {', '.join(unlisted)}")

    dname = str(meta["name"])
    manifests = _task_manifests(path, specs, frames, report)
    for tm, tfile in manifests:  # RelBench keys an autocomplete table without a key by row position
        table = tm.get("entity_table")
        if KINDS[tm["kind"]].keys_by_position and specs[table]["pkey"] is None:
            _position_key(table, specs, frames, tfile, report)
    sources = []
    for name, spec in specs.items():
        fks = {col: (parent, specs[parent]["pkey"]) for col, parent in spec["fkeys"].items()}
        sources.append(SourceTable(name, frames[name], {}, spec["pkey"], fks, {}, spec["time_col"]))
        _check_positions(name, frames[name], spec["pkey"], report)

    tasks: dict[str, dict] = {}
    for tm, tfile in manifests:
        converted = _convert_task(tm, tfile, dname, (val, test), specs, frames, report)
        if converted is None:
            continue
        table, spec = converted
        if spec["name"] in tasks:
            report.notes.append(f"RelBench task '{spec['name']}' in {tfile.parent.name}/ not converted: another "
                                f"task folder has that name")
            continue
        if table is not None:
            sources.append(table)
        tasks[spec["name"]] = spec
    return sources, tasks, dname


def _read_table(path: Path, name: str, spec, where: Path) -> tuple[pd.DataFrame, dict]:
    """A table's parquet and its manifest entry (pkey, time_col, fkeys), each column it names checked."""
    at = f"{where}, tables.{name}"
    spec = {} if spec is None else spec
    if not isinstance(spec, dict):
        raise DatabaseImportError(f"{at}: expected a mapping of pkey, time_col, fkeys")
    fkeys = spec.get("fkeys") or {}
    if not isinstance(fkeys, dict):
        raise DatabaseImportError(f"{at}.fkeys: expected a mapping of fkey column -> table")
    file = inside_folder(path, f"db/{name}.parquet", at)  # a table's name is no path out of the folder
    if not file.exists():
        raise DatabaseImportError(f"{at}: no file db/{name}.parquet")
    df = read_parquet(file, str(file))
    for col in df.columns:  # DuckDB cannot reliably read pandas' string dtype, as RelBench notes
        if isinstance(df[col].dtype, pd.StringDtype):
            df[col] = df[col].astype(object)
    named = [("pkey", spec.get("pkey")), ("time_col", spec.get("time_col"))] + [(f"fkeys.{c}", c) for c in fkeys]
    for field, col in named:
        if col is not None and col not in df.columns:
            raise DatabaseImportError(f"{at}.{field}: column '{col}' is not in db/{name}.parquet")
    pkey, time_col = (None if c is None else str(c) for _, c in named[:2])
    return df, {"pkey": pkey, "time_col": time_col, "fkeys": {str(c): str(t) for c, t in fkeys.items()}}


def _check_positions(name: str, frame: pd.DataFrame, pkey: str | None, report: ImportReport) -> None:
    """RelBench requires keys 0..n-1 in row order; its dangling-entity rule reads them as positions."""
    if pkey is None:
        return
    keys = frame[pkey].to_numpy()
    if not (np.issubdtype(keys.dtype, np.number) and (keys == np.arange(len(keys))).all()):
        report.notes.append(f"table '{name}': primary key '{pkey}' is not 0..n-1 in row order, as RelBench requires; "
                            f"forecast labels under RelBench's rule may differ from RelBench's")


def _position_key(table: str, specs: dict, frames: dict, tfile: Path, report: ImportReport) -> None:
    """Give a table without a key RelBench's: its row positions, which hold in every time cut only if the rows
    are sorted by time."""
    df, time_col = frames[table], specs[table]["time_col"]
    if POSITION_KEY in df.columns:
        raise DatabaseImportError(f"{tfile}, entity_table: table '{table}' has no pkey and already a column "
                                  f"'{POSITION_KEY}', the key RelBench would add")
    if time_col is not None and not df[time_col].is_monotonic_increasing:
        raise DatabaseImportError(f"{tfile}, entity_table: table '{table}' has no pkey and is not sorted by "
                                  f"'{time_col}', so its rows have no identity (RelBench refuses it too)")
    frames[table] = df.assign(**{POSITION_KEY: np.arange(len(df))})[[POSITION_KEY, *df.columns]]
    specs[table]["pkey"] = POSITION_KEY
    report.notes.append(f"table '{table}' has no pkey; it gets RelBench's, '{POSITION_KEY}' (the row position), "
                        f"for autocomplete tasks")


# ---- task manifests ---------------------------------------------------------------------------------
def _task_manifests(path: Path, specs: dict, frames: dict, report: ImportReport) -> list[tuple[dict, Path]]:
    """Every ``tasks/<task>/manifest.yaml``, checked as RelBench checks it, plus the references it makes."""
    out = []
    root = path / "tasks"
    for tdir in sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []:
        tfile = tdir / MANIFEST
        if not tfile.is_file():
            report.notes.append(f"tasks/{tdir.name}: no {MANIFEST}; skipped")
            continue
        tm = _load_yaml(tfile)
        _validate_task(tm, tfile, specs, frames)
        out.append((tm, tfile))
    return out


def _validate_task(tm: dict, tfile: Path, specs: dict, frames: dict) -> None:
    for key in ("name", "kind", "task_type"):
        if not tm.get(key):
            raise DatabaseImportError(f"{tfile}: missing field '{key}'")
    if tm["kind"] not in KINDS:
        raise DatabaseImportError(f"{tfile}, kind: '{tm['kind']}' is not one of {', '.join(KINDS)}")
    if tm["task_type"] not in RELBENCH_TASK_TYPES:
        raise DatabaseImportError(f"{tfile}, task_type: '{tm['task_type']}' is not one of "
                                  f"{', '.join(RELBENCH_TASK_TYPES)}")
    rb = KINDS[tm["kind"]]
    missing = [k for k in rb.required(tm) if not tm.get(k)]
    if missing:
        raise DatabaseImportError(f"{tfile}: a {tm['kind']} {tm['task_type']} task needs field(s) "
                                  f"{', '.join(missing)}")
    for key in ("entity_table", "src_entity_table", "dst_entity_table"):
        if tm.get(key) is not None and tm[key] not in specs:
            raise DatabaseImportError(f"{tfile}, {key}: unknown table '{tm[key]}'")
    if tm.get("timedelta") is not None:
        tm["timedelta"] = _timedelta(tm["timedelta"], tfile)
    for key in ("eval_k", "num_eval_timestamps"):
        n = tm.get(key)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise DatabaseImportError(f"{tfile}, {key}: must be a positive whole number, got {n!r}")
    pairs = tm.get("remove_columns") or []
    if not isinstance(pairs, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise DatabaseImportError(f"{tfile}, remove_columns: expected a list of [table, column] pairs")
    if rb.check is not None:
        rb.check(tm, tfile, specs, frames)


def _timedelta(value, tfile: Path) -> str:
    """The window as fourdb writes durations ('14 days'), equal to RelBench's ``pd.Timedelta(timedelta)``."""
    try:
        delta = pd.Timedelta(value) if isinstance(value, str) else pd.NaT
    except ValueError:
        delta = pd.NaT
    if pd.isna(delta) or delta <= pd.Timedelta(0):
        raise DatabaseImportError(f"{tfile}, timedelta: {value!r} is not a positive duration such as '14 days'")
    return f"{delta.days} days" if delta == pd.Timedelta(days=delta.days) else str(delta)


def _check_autocomplete(tm: dict, tfile: Path, specs: dict, frames: dict) -> None:
    """What RelBench's autocomplete task refuses: a target that is not a plain column of a timed table."""
    table, col = tm["entity_table"], tm["target_col"]
    spec = specs[table]
    if col not in frames[table].columns:
        raise DatabaseImportError(f"{tfile}, target_col: table '{table}' has no column '{col}'")
    if col == spec["pkey"] or col in spec["fkeys"] or col == spec["time_col"]:
        raise DatabaseImportError(f"{tfile}, target_col: '{col}' is a key or the time column of '{table}'; "
                                  f"only a feature column can be predicted")
    if spec["time_col"] is None:
        raise DatabaseImportError(f"{tfile}, entity_table: table '{table}' has no time_col; an autocomplete row "
                                  f"is asked at its time")


def _check_sql(tm: dict, tfile: Path, specs: dict, frames: dict) -> None:
    """Bind the forecast SQL against the tables, as RelBench runs it, without running it: a broken query or a
    missing output column is a broken manifest."""
    sql = tm["sql"]
    if not isinstance(sql, str):
        raise DatabaseImportError(f"{tfile}, sql: expected the text of a query, got {type(sql).__name__}")
    sandbox = SQLSandbox(frames)  # the manifest's SQL is input: one query over the tables, nothing else
    try:
        empty = {"timestamps": pd.DataFrame({"timestamp": pd.Series([], dtype="datetime64[ns]")})}
        try:
            columns = sandbox.columns(sql.replace("{timedelta}", str(pd.Timedelta(tm["timedelta"]))),
                                      f"{tfile}, sql", empty)
        except FourdbError:
            raise
        except Exception as e:  # noqa: BLE001 - any DuckDB error is a broken query
            raise DatabaseImportError(f"{tfile}, sql: the SQL failed: {str(e).splitlines()[0]}") from None
    finally:
        sandbox.close()
    link = TaskType.from_relbench(tm["task_type"]) is TaskType.RECOMMENDATION
    fields = ("src_entity_col", "time_col", "dst_entity_col") if link else ("entity_col", "time_col", "target_col")
    for field in fields:
        col = tm.get(field) or ("timestamp" if field == "time_col" else None)
        if col not in columns:
            raise DatabaseImportError(f"{tfile}, {field}: the SQL returns no column '{col}' "
                                      f"(it returns {', '.join(columns)})")


# ---- conversion -----------------------------------------------------------------------------------
def _convert_task(tm: dict, tfile: Path, dname: str, splits: tuple[pd.Timestamp, pd.Timestamp], specs: dict,
                  frames: dict, report: ImportReport) -> tuple[SourceTable | None, dict] | None:
    """A task manifest -> (a table of samples or None, a fourdb task spec), or None with a note."""
    name = str(tm["name"])
    skip = f"RelBench task '{name}' not converted:"
    if name != tfile.parent.name:
        report.notes.append(f"RelBench task '{name}' is in folder tasks/{tfile.parent.name}; fourdb names it '{name}'")
    kind = TaskType.from_relbench(tm["task_type"])
    if kind is None:
        report.notes.append(f"{skip} multilabel classification has no fourdb task type")
        return None
    rb = KINDS[tm["kind"]]
    if kind.is_ranking and rb.no_links is not None:
        report.notes.append(f"{skip} {rb.no_links}")
        return None
    if kind.is_ranking and tm.get("num_eval_timestamps", 1) != 1:
        report.notes.append(f"{skip} RelBench runs recommendation tasks with num_eval_timestamps 1 only")
        return None
    remove = _removable(tm, specs, frames, report)
    base = {"name": name, "dataset": dname,
            "description": tm.get("description") or f"RelBench {tm['kind']} task '{name}'.",
            "task_type": kind.value, "metrics": list(METRICS[kind])}
    return rb.convert(tm, tfile, base, tuple(_stamp(t) for t in splits), remove, specs, report)


def _stamp(t: pd.Timestamp) -> str:
    return t.strftime("%Y-%m-%d") if t == t.normalize() else str(t)


def _removing(spec: dict, remove: list) -> dict:
    if remove:
        spec["remove_columns"] = remove
    return spec


def _forecast_task(tm: dict, tfile: Path, base: dict, stamps: tuple[str, str], remove: list, specs: dict,
                   report: ImportReport) -> tuple[None, dict]:
    """The manifest's SQL as an entity_window (or recommendation) task, its cutoffs laid out by RelBench's rule."""
    val, test = stamps
    spec = {**base, **_forecast(tm, TaskType.from_relbench(tm["task_type"])), "timestamps": {
        "val": val, "test": test, "rule": "relbench", "num_eval_timestamps": tm.get("num_eval_timestamps", 1)}}
    return None, _removing(spec, remove)


def _forecast(tm: dict, kind: TaskType) -> dict:
    if kind.is_ranking:
        return {"kind": "recommendation", "source_table": tm["src_entity_table"],
                "destination_table": tm["dst_entity_table"], "sql": tm["sql"], "window": tm["timedelta"],
                "output": {"entity": tm["src_entity_col"], "cutoff": tm.get("time_col") or "timestamp",
                           "label": tm["dst_entity_col"]}, "eval_k": tm["eval_k"]}
    return {"kind": "entity_window", "entity_table": tm["entity_table"], "sql": tm["sql"], "window": tm["timedelta"],
            "output": {"entity": tm["entity_col"], "cutoff": tm["time_col"], "label": tm["target_col"]}}


def _autocomplete_task(tm: dict, tfile: Path, base: dict, stamps: tuple[str, str], remove: list, specs: dict,
                       report: ImportReport) -> tuple[None, dict]:
    """An autocomplete task over the target column, which it removes from every input as its label."""
    val, test = stamps
    spec = {**base, "kind": "autocomplete", "table": tm["entity_table"], "label": tm["target_col"],
            "timestamps": {"val": val, "test": test}}
    return None, _removing(spec, [p for p in remove if p != [tm["entity_table"], tm["target_col"]]])


def _removable(tm: dict, specs: dict, frames: dict, report: ImportReport) -> list[list[str]]:
    """``remove_columns`` fourdb can hide: RelBench skips pairs naming no column (with a warning), and fourdb
    cannot hide a key or a time column, which every path needs."""
    kept = []
    for table, col in tm.get("remove_columns") or []:
        table, col = str(table), str(col)
        spec = specs.get(table)
        if spec is None or col not in frames[table].columns:
            report.notes.append(f"RelBench task '{tm['name']}': remove_columns names {table}.{col}, which does not "
                                f"exist; skipped, as RelBench skips it")
        elif col == spec["pkey"] or col in spec["fkeys"] or col == spec["time_col"]:
            report.notes.append(f"RelBench task '{tm['name']}': remove_columns names {table}.{col}, a key or the "
                                f"time column, which fourdb cannot hide; kept")
        else:
            kept.append([table, col])
    return kept


def _external(tm: dict, tfile: Path, base: dict, stamps: tuple[str, str], remove: list, specs: dict,
              report: ImportReport) -> tuple[SourceTable, dict] | None:
    """Shipped labels of an entity task -> a table of samples and a row-column task over it."""
    name, tdir = base["name"], tfile.parent
    skip = f"RelBench task '{name}' not converted:"
    entity, key, time_col = tm["entity_table"], tm.get("entity_col"), tm.get("time_col")
    if not key or not time_col or not tm.get("target_col"):
        report.notes.append(f"{skip} an external task needs entity_col, time_col and target_col to convert")
        return None
    if specs[entity]["pkey"] is None:
        report.notes.append(f"{skip} its entity table '{entity}' has no pkey")
        return None
    files = {s: tdir / f"{s}.parquet" for s in SPLITS}
    if not all(f.exists() for f in files.values()):
        report.notes.append(f"{skip} it needs train.parquet, val.parquet and test.parquet")
        return None
    try:
        splits = {s: read_parquet(f, str(f)) for s, f in files.items()}
    except LimitError:  # past a bound is refused, not left out: the folder asks for more than fourdb gives
        raise
    except FourdbError as e:
        report.notes.append(f"{skip} its labels cannot be read ({e})")
        return None
    if tm.get("evaluator"):
        report.notes.append(f"RelBench task '{name}': its '{tm['evaluator']}' scoring protocol is not reproduced; "
                            f"fourdb scores it with {', '.join(base['metrics'])}")
    converted = samples_task(name, base["dataset"], splits, key, (entity, specs[entity]["pkey"]), time_col,
                              tm["target_col"], base["task_type"], None, {}, base["description"], report)
    if converted is None:
        return None
    table, spec = converted
    spec["metrics"] = base["metrics"]
    return table, _removing(spec, remove)


@dataclass(frozen=True)
class RelBenchKind:
    """A RelBench task kind: what its manifest must hold, what is checked against the tables, how it converts."""
    fields: tuple[str, ...]  # what an entity task of the kind requires (a link task requires LINK_FIELDS)
    convert: Callable[..., tuple[SourceTable | None, dict] | None]  # -> (a table of samples or None, a task spec)
    also: tuple[str, ...] = ()  # what every task of the kind requires besides
    check: Callable[[dict, Path, dict, dict], None] | None = None  # (manifest, file, table specs, frames)
    evaluator_sets_k: bool = False  # a link task with its own evaluator needs no eval_k
    keys_by_position: bool = False  # an entity table without a pkey gets RelBench's, its row positions
    no_links: str | None = None  # why its link (recommendation) tasks do not convert, if they do not

    def required(self, tm: dict) -> list[str]:
        """The fields RelBench's ``TaskManifest.validate`` requires of this kind and task type."""
        if TaskType.from_relbench(tm["task_type"]) is TaskType.RECOMMENDATION:
            required = list(LINK_FIELDS)
            if not (self.evaluator_sets_k and tm.get("evaluator")):
                required.append("eval_k")
        else:
            required = list(self.fields)
        return required + list(self.also)


KINDS = {
    "forecast": RelBenchKind(("entity_table", "entity_col", "target_col", "time_col"), _forecast_task,
                             also=("timedelta", "sql"), check=_check_sql),
    "autocomplete": RelBenchKind(("entity_table", "target_col"), _autocomplete_task, check=_check_autocomplete,
                                 keys_by_position=True),
    "external": RelBenchKind(("entity_table",), _external, evaluator_sets_k=True,
                             no_links="its shipped link labels have no fourdb task kind (fourdb recommendation "
                                      "tasks are computed by SQL)"),
}


# before the older layout (order 20), which also has a db/ folder
IMPORTERS.register("relbench3", Format("RelBench 3", folder=True, order=15, detect=_detect, read=_read_relbench3,
                                       lacks="no manifest.yaml beside a db/ folder"))


def fetch(spec: str, staging: Path) -> Path:
    """RelBench dataset ``spec`` (a name such as ``rel-f1``, a Hub path ``org/repo[/subdir]``, or a local
    folder: whatever ``relbench.load_dataset`` accepts) fetched with RelBench's own loader, laid out in
    ``staging`` as a plain RelBench folder: its manifest, its tables and every task listed for it, those
    hosted apart from it included. Files are hard-linked or copied, never symlinked (the Hub's cache is
    made of links, which an imported folder may not hold)."""
    import os
    import shutil

    import relbench

    try:
        ds = relbench.load_dataset(spec)
        tasks = {name: ds._resolve_task_dir(name) for name in ds.get_task_names()}  # relbench 3.0.2 (pinned)
    except Exception as e:  # the Hub client's errors have no common type besides these
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        offline = any(w in str(e) for w in ("internet connection", "Name or service not known", "offline",
                                            "ConnectError", "Connection"))
        why = "no network reaches the Hugging Face Hub" if offline else first
        raise DatabaseImportError(f"{spec}: not a local file or folder, and RelBench's loader could not fetch it: "
                                  f"{why}") from None

    def place(src: Path, dst: Path) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        real = Path(os.path.realpath(src))
        try:
            os.link(real, dst)
        except OSError:  # another file system
            shutil.copyfile(real, dst)

    place(ds.dataset_dir / MANIFEST, staging / MANIFEST)
    for f in sorted((ds.dataset_dir / "db").glob("*.parquet")):
        place(f, staging / "db" / f.name)
    for name, folder in tasks.items():  # a task's name comes from the download: a file name, never a path
        name = plain_file_name(name, f"{spec}: task", "task name")
        for f in sorted(Path(folder).iterdir()):
            if f.is_file():
                place(f, staging / "tasks" / name / f.name)
    return staging
