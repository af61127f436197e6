"""4DBInfer's dataset folders: ``metadata.yaml`` with ``dataset_name``, ``tables`` and ``tasks``.

Declared columns, keys and time columns are converted; a task that predicts one value per row at a time
becomes a fourdb task over a table of its samples (see ``samples``).
"""
from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.errors import DatabaseImportError, UntrustedInputError
from fourdb.importers.base import IMPORTERS, Format, ImportReport, SourceTable
from fourdb.importers.dtypes import parse_datetimes
from fourdb.importers.samples import samples_task
from fourdb.rdb.files import read_parquet
from fourdb.rdb.sandbox import inside_folder
from fourdb.tasks.types import TaskType
from fourdb.untrusted import check_bytes, check_name, human_bytes, memory_budget, read_yaml, reading, safe_text

DBB_DTYPES = {"float": "numeric", "category": "category", "datetime": "datetime", "text": "text",
              "timestamp": "datetime"}
# 4DBInfer's task types -> fourdb's, given whether the labels are all 0 or 1
DBB_TASK_TYPES = {"classification": lambda zero_one: TaskType.BINARY if zero_one else TaskType.MULTICLASS,
                  "regression": lambda zero_one: TaskType.REGRESSION}
DBB_METRICS = {"auroc": "auroc", "ap": "average_precision", "accuracy": "accuracy", "mae": "mae", "rmse": "rmse",
               "mse": "rmse", "r2": "r2"}


def _load_dbb_table(folder: Path, source: str, fmt: str, where: str, report: ImportReport) -> dict[str, np.ndarray]:
    if not isinstance(source, str) or "\x00" in source:
        raise UntrustedInputError(f"{where}: source {safe_text(source)!r} is not a file name")
    path = inside_folder(folder, source, f"{where}, source", report.allow_outside_paths)
    if not path.exists():
        raise DatabaseImportError(f"{where}: source file '{source}' not found in {folder}")
    at = f"{where}, source '{safe_text(source)}'"
    if fmt == "parquet":
        df = read_parquet(path, at)
        return {c: df[c].to_numpy() for c in df.columns}
    if fmt == "numpy":
        with reading(at):
            return load_plain_npz(path, where)
    raise DatabaseImportError(f"{where}: unknown format {safe_text(fmt)!r} (expected parquet or numpy)")


def check_npz(path: Path, where: str) -> None:
    """Refuse, before a byte is inflated, an ``.npz`` whose members (zip entries) would take more than the memory
    bound: each member's uncompressed size as its zip entry states it (zipfile reads no more than that), and each
    array's size as its header states it (numpy allocates that before it reads)."""
    at = f"{where}: {path.name}"
    budget, total = memory_budget(), 0
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            ratio = info.file_size / max(info.compress_size, 1)
            check_bytes(info.file_size, f"{at}, member '{safe_text(info.filename)}'",
                        f"inflating it ({human_bytes(info.compress_size)} stored, {ratio:,.0f}:1)", budget)
            total += info.file_size
            check_bytes(total, at, "inflating its members", budget)
            if not info.filename.endswith(".npy"):
                continue
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                shape, _, dtype = np.lib.format._read_array_header(f, version)
            items = int(np.prod(shape, dtype=object)) if shape else 1
            check_bytes(items * max(dtype.itemsize, 1), f"{at}, column '{safe_text(info.filename[:-4])}'",
                        f"its array {shape} of {dtype}", budget)


# What a pickled array of plain values needs to be rebuilt, and nothing else: an array holding any other
# object names another global (its class, or a function to call) and is refused before it is made.
_ARRAY_GLOBALS = {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray")
                  for n in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}
PLAIN_TYPES = (str, bytes, int, float, bool, np.number, np.bool_, type(None))


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ARRAY_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it holds a {module}.{name} object")


def load_plain_npz(path: Path, where: str) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, without running anything it holds: numeric arrays as numpy reads them
    with pickling off, and object arrays (4DBInfer's strings and categories) through an unpickler that
    rebuilds arrays of plain values (str, bytes, numbers, None) only. Anything else is refused in one line
    naming the file and the column."""
    check_npz(path, where)
    out = {}
    with np.load(path, allow_pickle=False) as npz, zipfile.ZipFile(path) as zf:
        for key in npz.files:
            try:
                out[key] = npz[key]
                continue
            except ValueError:  # an object array: pickled
                pass
            with zf.open(f"{key}.npy") as f:
                version = np.lib.format.read_magic(f)
                shape, _, dtype = np.lib.format._read_array_header(f, version)
                if not dtype.hasobject:
                    raise DatabaseImportError(f"{where}: {path.name}, column '{key}': unreadable array")
                try:
                    arr = _ArrayUnpickler(f).load()
                except Exception as e:  # noqa: BLE001 - refused or broken: either way not plain values
                    raise UntrustedInputError(f"{where}: {path.name}, column '{key}': not an array of plain values "
                                              f"(str, bytes, numbers, None): {e}; not loaded") from None
            if not isinstance(arr, np.ndarray) or arr.shape != shape:
                raise UntrustedInputError(f"{where}: {path.name}, column '{key}': not an array of plain values; "
                                          f"not loaded")
            bad = next((v for v in arr.ravel() if not isinstance(v, PLAIN_TYPES)), _NONE)
            if bad is not _NONE:
                raise UntrustedInputError(f"{where}: {path.name}, column '{key}': holds a {type(bad).__name__}, not "
                                          f"a plain value (str, bytes, numbers, None); not loaded")
            out[key] = arr
    return out


_NONE = object()


def _dbb_frame(data: dict[str, np.ndarray], columns: list[dict], where: str,
               report: ImportReport) -> tuple[pd.DataFrame, dict[str, str], dict[str, str]]:
    """Columns of a 4DBInfer table as a frame, with fourdb dtypes and foreign keys (column -> link_to)."""
    frame, dtypes, links = {}, {}, {}
    for c in columns:
        cname, dt = str(c.get("name")), c.get("dtype")
        if cname not in data:
            raise DatabaseImportError(f"{where}, column '{cname}': declared in metadata.yaml but not in the data")
        arr = data[cname]
        if dt == "foreign_key":
            links[cname] = str(c.get("link_to", ""))
        if arr.ndim > 1:  # a vector per row (an embedding): one numeric column per dimension
            flat = arr.reshape(len(arr), -1)
            for i in range(flat.shape[1]):
                frame[f"{cname}_{i}"] = flat[:, i]
                dtypes[f"{cname}_{i}"] = "numeric"
            report.notes.append(f"{where}, column '{cname}': {flat.shape[1]}-dimensional vectors split into "
                                f"numeric columns {cname}_0..{cname}_{flat.shape[1] - 1}")
            continue
        if dt not in DBB_DTYPES and dt not in ("primary_key", "foreign_key"):
            report.notes.append(f"{where}, column '{cname}': dtype '{dt}' is not supported; dropped")
            continue
        frame[cname] = arr
        if dt in DBB_DTYPES:
            dtypes[cname] = DBB_DTYPES[dt]
    return pd.DataFrame(frame), dtypes, links


def _mapping(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise DatabaseImportError(f"{where}: expected a mapping of fields, got {type(value).__name__}")
    return value


def _listed(value, where: str, of: str) -> list[dict]:
    """A list of mappings from metadata.yaml (tables, columns, tasks), each checked; missing is empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DatabaseImportError(f"{where}: expected a list of {of}, got {type(value).__name__}")
    return [_mapping(v, f"{where} #{i + 1}") for i, v in enumerate(value)]


def _text(value, where: str, noun: str) -> str:
    """A name from metadata.yaml as text (a YAML number is its text), refused if it is anything else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return check_name(value, where, noun)


def _read_4dbinfer(folder: Path, report: ImportReport) -> tuple[list[SourceTable], dict[str, dict], str]:
    where = f"{folder}/metadata.yaml"
    meta = read_yaml(folder / "metadata.yaml", where, error=DatabaseImportError)
    meta = _mapping({} if meta is None else meta, where)
    tables = _listed(meta.get("tables"), f"{where}, tables", "tables")
    if not tables:
        raise DatabaseImportError(f"{where}: no tables declared")
    for tm in tables:
        tm["columns"] = _listed(tm.get("columns"), f"{where}, table '{safe_text(tm.get('name'))}', columns",
                                "columns")
        for c in tm["columns"]:
            c["name"] = _text(c.get("name"), f"{where}, table '{safe_text(tm.get('name'))}'", "column name")
    tasks_meta = _listed(meta.get("tasks"), f"{where}, tasks", "tasks")
    for tm in tasks_meta:
        tm["columns"] = _listed(tm.get("columns"), f"{where}, task '{safe_text(tm.get('name'))}', columns",
                                "columns")
        for c in tm["columns"]:
            c["name"] = _text(c.get("name"), f"{where}, task '{safe_text(tm.get('name'))}'", "column name")
    sources: dict[str, SourceTable] = {}
    for i, tm in enumerate(tables):
        tname = _text(tm.get("name", f"table{i + 1}"), f"{where}, table #{i + 1}", "table name")
        where_t = f"table '{tname}'"
        data = _load_dbb_table(folder, tm.get("source", ""), tm.get("format", "parquet"), where_t, report)
        frame, dtypes, links = _dbb_frame(data, tm["columns"], where_t, report)
        pks = [c["name"] for c in tm["columns"] if c.get("dtype") == "primary_key"]
        fks = {}
        for col, link in links.items():
            if "." not in link:
                raise DatabaseImportError(f"{where_t}, column '{col}': foreign_key without link_to: Table.column")
            fks[col] = tuple(link.split(".", 1))
        time_column = tm.get("time_column")
        time_column = None if time_column is None else _text(time_column, where_t, "time_column")
        sources[tname] = SourceTable(tname, frame, {}, pks[0] if pks else None, fks, dtypes, time_column)
    # 4DBInfer lets a foreign key point to a table that is not stored; make it from the referenced values
    for ref_t, ref_c in sorted({r for t in list(sources.values()) for r in t.foreign_keys.values()}):
        if ref_t not in sources:
            values = pd.concat([t.frame[c] for t in sources.values() for c, r in t.foreign_keys.items()
                                if r == (ref_t, ref_c)]).dropna().drop_duplicates().reset_index(drop=True)
            sources[ref_t] = SourceTable(ref_t, pd.DataFrame({ref_c: values}), primary_key=ref_c)
            report.notes.append(f"table '{ref_t}' is referenced but not stored; created from the {len(values)} "
                                f"distinct keys that point to it")
    dname = str(meta.get("dataset_name") or folder.name)
    tasks: dict[str, dict] = {}
    for tm in tasks_meta:
        converted = _dbb_task(folder, tm, sources, dname, report)
        if converted is not None:
            table, spec = converted
            sources[table.name] = table
            tasks[spec["name"]] = spec
    return list(sources.values()), tasks, dname


def _dbb_task(folder: Path, tm: dict, sources: dict[str, SourceTable], dname: str,
              report: ImportReport) -> tuple[SourceTable, dict] | None:
    name = str(tm.get("name", "task"))
    skip = f"4DBInfer task '{name}' not converted:"
    if tm.get("task_type") == "retrieval":
        return _retrieval_task(folder, tm, sources, dname, report)
    cols = tm.get("columns") or []
    keys = [c for c in cols if c.get("dtype") in ("primary_key", "foreign_key")]
    if len(keys) != 1:
        report.notes.append(f"{skip} it predicts over {len(keys)} keys; fourdb tasks predict for one entity")
        return None
    tcol, target, ttable = tm.get("time_column"), tm.get("target_column"), tm.get("target_table")
    if not tcol:
        report.notes.append(f"{skip} it has no time column, and fourdb tasks are asked at a time")
        return None
    key = keys[0]
    if key["dtype"] == "primary_key":
        entity = ttable
        if entity not in sources or sources[entity].primary_key is None:
            report.notes.append(f"{skip} its target table '{entity}' has no primary key")
            return None
        link = (entity, sources[entity].primary_key)
        if target in sources[entity].frame.columns:
            report.notes.append(f"4DBInfer task '{name}': table '{entity}' also holds column '{target}'; if it is "
                                f"the label, drop it from the table, or models see it through the link")
    else:
        link = tuple(str(key["link_to"]).split(".", 1)) if key.get("link_to") else None
        if link is None and ttable in sources:  # the task's key is the target table's foreign key
            link = sources[ttable].foreign_keys.get(key["name"])
        if not link or len(link) != 2 or link[0] not in sources:
            report.notes.append(f"{skip} its key '{key['name']}' does not link to a table")
            return None
    splits = {}
    for split, fourdb_split in (("train", "train"), ("validation", "val"), ("test", "test")):
        data = _load_dbb_table(folder, str(tm.get("source", "")).replace("{split}", split), tm.get("format", "parquet"),
                               f"4DBInfer task '{name}'", report)
        frame, dtypes, _ = _dbb_frame(data, cols, f"4DBInfer task '{name}'", report)
        splits[fourdb_split] = frame
    task_type = tm.get("task_type")
    if task_type not in DBB_TASK_TYPES:
        report.notes.append(f"{skip} task_type '{task_type}' is not classification or regression")
        return None
    labels = pd.concat([f[target] for f in splits.values() if target in f.columns]).dropna()
    kind = DBB_TASK_TYPES[task_type](set(np.unique(labels)) <= {0, 1})
    metric = DBB_METRICS.get(str(tm.get("evaluation_metric")))
    return samples_task(name, dname, splits, key["name"], link, tcol, target, kind, metric, dtypes,
                         f"Converted from 4DBInfer task '{name}' (target {ttable}.{target}).", report)


IMPORTERS.register("4dbinfer", Format("4DBInfer", folder=True, order=10, lacks="no metadata.yaml",
                                      detect=lambda p: (p / "metadata.yaml").exists(), read=_read_4dbinfer))


RETRIEVAL_METRICS = {"mrr": "mrr", "hr": "hit_rate", "ndcg": "ndcg"}


def _retrieval_task(folder: Path, tm: dict, sources: dict[str, SourceTable], dname: str,
                    report: ImportReport) -> tuple[SourceTable, dict] | None:
    """A retrieval (key prediction) task -> a recommendation task over a table of its links.

    Its rows (source key, target key, time) are the links: every split's true ones become a table of the
    database, each known at its time, and every (source, time) a query asked just before it. The
    validation and test files' rows, true and negative (``key_prediction_label_column``), are each
    query's candidates, ranked under 4DBInfer's protocol (MRR over the shipped candidates)."""
    name = str(tm.get("name", "task"))
    skip = f"4DBInfer task '{name}' not converted:"
    cols = tm.get("columns") or []
    target, tcol = tm.get("target_column"), tm.get("time_column")
    keys = {str(c["name"]): str(c.get("link_to") or "") for c in cols if c.get("dtype") == "foreign_key"}
    if target not in keys or "." not in keys[target]:
        report.notes.append(f"{skip} its target column '{target}' is not a foreign key with link_to")
        return None
    others = [k for k in keys if k != target]
    if len(others) != 1 or "." not in keys[others[0]]:
        report.notes.append(f"{skip} it has {len(others)} query keys beside '{target}'; fourdb queries one source")
        return None
    if not tcol:
        report.notes.append(f"{skip} it has no time column, and fourdb asks a query at a time")
        return None
    source_key = others[0]
    (src_table, src_pk), (dst_table, dst_pk) = (keys[source_key].split(".", 1), keys[target].split(".", 1))
    label = tm.get("key_prediction_label_column") or "label"
    splits = {}
    for split, ours in (("train", "train"), ("validation", "val"), ("test", "test")):
        data = _load_dbb_table(folder, str(tm.get("source", "")).replace("{split}", split), tm.get("format", "parquet"),
                               f"4DBInfer task '{name}'", report)
        missing = [c for c in (source_key, target, tcol) if c not in data]
        if missing or (ours != "train" and label not in data):
            report.notes.append(f"{skip} its {split} rows lack column(s) {', '.join(missing or [label])}")
            return None
        when = parse_datetimes(pd.Series(data[tcol]), numbers_as_ns=True)
        if when is None or when.isna().any():
            report.notes.append(f"{skip} its time column '{tcol}' is not all timestamps")
            return None
        true = np.asarray(data[label]) == 1 if label in data else np.ones(len(when), bool)
        splits[ours] = pd.DataFrame({source_key: data[source_key], target: data[target], tcol: when, "true": true})
    extra = sorted({str(c["name"]) for c in cols} - {source_key, target, tcol})
    if extra:
        report.notes.append(f"4DBInfer task '{name}': its columns {', '.join(extra)} are not part of a query here")
    links = pd.concat([f[f["true"]] for f in splits.values()], ignore_index=True).drop(columns="true")
    links = links.sort_values(tcol, kind="stable").reset_index(drop=True)
    links.insert(0, "link_id", np.arange(len(links)))
    table = f"task_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
    linked = SourceTable(table, links, {}, "link_id", {source_key: (src_table, src_pk), target: (dst_table, dst_pk)},
                         {tcol: "datetime"}, tcol)
    candidates = pd.concat([splits["val"], splits["test"]], ignore_index=True).drop(columns="true")
    starts = {s: splits[s][tcol].min() - pd.Timedelta(1, "ns") for s in ("val", "test")}
    window = max(1, (starts["test"] - starts["val"]).days)
    first = RETRIEVAL_METRICS.get(str(tm.get("evaluation_metric")), "mrr")
    spec = {
        "name": name, "dataset": dname, "kind": "recommendation", "task_type": TaskType.RECOMMENDATION.value,
        "description": f"Converted from 4DBInfer retrieval task '{name}': which {dst_table} a {src_table} links to "
                       f"at a time (target {tm.get('target_table')}.{target}), ranked among the shipped candidates.",
        "metrics": [first] + [m for m in ("mrr", "hit_rate", "ndcg") if m != first],
        "source_table": src_table, "destination_table": dst_table, "table": table, "source_column": source_key,
        "destination_column": target, "cutoff_column": tcol, "candidates": candidates,
        "window": f"{window} days", "eval_k": 10,
        "timestamps": {"val": str(starts["val"]), "test": str(starts["test"])},
    }
    return linked, spec
