"""RelBench's parquet layout: ``db/<table>.parquet`` with keys and time column in each file's parquet metadata,
and node tasks in ``tasks/<task>/{train,val,test}.parquet`` converted to fourdb tasks (see ``samples``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.errors import DatabaseImportError, FourdbError
from fourdb.importers.base import IMPORTERS, Format, ImportReport, SourceTable
from fourdb.importers.dtypes import is_nested
from fourdb.importers.samples import samples_task
from fourdb.rdb.files import read_parquet
from fourdb.tasks.types import TaskType
from fourdb.untrusted import check_name, load_json, reading

RELBENCH_KEYS = (b"fkey_col_to_pkey_table", b"pkey_col", b"time_col")


def _relbench_meta(path: Path, strict: bool = False) -> dict | None:
    """The keys and time column a RelBench parquet file's metadata holds, or None where it holds none. A file
    that is not readable parquet is None when only recognising a folder and one line naming the file when reading
    it (``strict``); metadata that is not valid JSON is that one line either way (the file says it is RelBench's)."""
    import pyarrow.parquet as pq

    try:
        with reading(path):
            meta = pq.read_schema(path).metadata or {}
    except FourdbError:
        if strict:
            raise
        return None
    if not any(k in meta for k in RELBENCH_KEYS):
        return None
    where = f"{path}: RelBench metadata"
    return {k.decode(): load_json(meta[k], f"{where} '{k.decode()}'", DatabaseImportError) if k in meta else None
            for k in RELBENCH_KEYS}


def _checked_meta(meta: dict, path: Path) -> dict:
    """RelBench's metadata in the shapes it has: foreign keys a mapping of column -> table, the key and time
    column names."""
    fkeys = meta.get("fkey_col_to_pkey_table") or {}
    if not isinstance(fkeys, dict) or not all(isinstance(v, str) for v in fkeys.values()):
        raise DatabaseImportError(f"{path}: RelBench metadata 'fkey_col_to_pkey_table' is not a mapping of "
                                  f"column -> table")
    where = f"{path}: RelBench metadata"
    return {"fkey_col_to_pkey_table": {check_name(str(c), where, "column name"): check_name(t, where, "table name")
                                       for c, t in fkeys.items()},
            "pkey_col": None if meta.get("pkey_col") is None else check_name(meta["pkey_col"], where, "pkey_col"),
            "time_col": None if meta.get("time_col") is None else check_name(meta["time_col"], where, "time_col")}


def _relbench_db_folder(path: Path) -> Path | None:
    for folder in (path / "db", path):
        files = sorted(folder.glob("*.parquet"))
        if files and any(_relbench_meta(f) is not None for f in files):
            return folder
    return None


def _read_relbench(path: Path, report: ImportReport) -> tuple[list[SourceTable], dict[str, dict], str]:
    db_folder = _relbench_db_folder(path)
    raw = {}
    for f in sorted(db_folder.glob("*.parquet")):
        meta = _relbench_meta(f, strict=True)
        if meta is None:
            report.notes.append(f"{f.name}: no RelBench key metadata; imported with no keys")
            meta = {"fkey_col_to_pkey_table": {}, "pkey_col": None, "time_col": None}
        raw[f.stem] = (read_parquet(f, str(f)), _checked_meta(meta, f))
    sources = []
    for tname, (df, meta) in raw.items():
        fks = {}
        for col, ref in (meta.get("fkey_col_to_pkey_table") or {}).items():
            if ref not in raw:
                raise DatabaseImportError(f"table '{tname}', column '{col}': foreign key points to missing table "
                                          f"'{ref}'")
            fks[col] = (ref, raw[ref][1].get("pkey_col"))
        sources.append(SourceTable(tname, df, {}, meta.get("pkey_col"), fks, {}, meta.get("time_col")))
    dname = path.name if db_folder != path else path.name
    tasks: dict[str, dict] = {}
    task_root = db_folder.parent / "tasks" if db_folder.name == "db" else path / "tasks"
    by_name = {s.name: s for s in sources}
    for tdir in sorted(p for p in task_root.glob("*") if p.is_dir()):
        converted = _relbench_task(tdir, by_name, dname, report)
        if converted is not None:
            table, spec = converted
            sources.append(table)
            by_name[table.name] = table
            tasks[spec["name"]] = spec
    return sources, tasks, dname


def _relbench_task(tdir: Path, tables: dict[str, SourceTable], dname: str,
                   report: ImportReport) -> tuple[SourceTable, dict] | None:
    name = tdir.name
    skip = f"RelBench task '{name}' not converted:"
    files = {s: tdir / f"{f}.parquet" for s, f in (("train", "train"), ("val", "val"), ("test", "test"))}
    if not all(f.exists() for f in files.values()):
        report.notes.append(f"{skip} it needs train.parquet, val.parquet and test.parquet")
        return None
    meta = _relbench_meta(files["train"], strict=True)
    meta = {} if meta is None else _checked_meta(meta, files["train"])
    fkeys, time_col = meta.get("fkey_col_to_pkey_table") or {}, meta.get("time_col")
    if len(fkeys) != 1 or not time_col:
        report.notes.append(f"{skip} it has {len(fkeys)} entity columns and time column {time_col!r}; only node "
                            f"tasks (one entity, one time) convert")
        return None
    key, entity = next(iter(fkeys.items()))
    if entity not in tables or tables[entity].primary_key is None:
        report.notes.append(f"{skip} its entity table '{entity}' is missing or has no primary key")
        return None
    splits = {s: read_parquet(f, str(f)) for s, f in files.items()}
    targets = [c for c in splits["train"].columns if c not in (key, time_col)]
    if len(targets) != 1:
        report.notes.append(f"{skip} it has {len(targets)} target columns ({', '.join(targets)}); one is needed")
        return None
    target = targets[0]
    if target not in splits["test"].columns:
        report.notes.append(f"{skip} its test samples have no '{target}' column (masked labels)")
        return None
    labels = pd.concat([f[target] for f in splits.values()]).dropna()
    if is_nested(labels) or not pd.api.types.is_numeric_dtype(labels):
        report.notes.append(f"{skip} its target '{target}' is not a number (link or multilabel tasks do not convert)")
        return None
    kind = TaskType.BINARY if set(np.unique(labels)) <= {0, 1} else TaskType.REGRESSION
    return samples_task(name, dname, splits, key, (entity, tables[entity].primary_key), time_col, target, kind,
                         None, {}, f"Converted from RelBench task '{name}' (entity {entity}).", report)


IMPORTERS.register("relbench", Format("RelBench", folder=True, order=20, lacks="no db/*.parquet with key metadata",
                                      detect=lambda p: _relbench_db_folder(p) is not None, read=_read_relbench))
