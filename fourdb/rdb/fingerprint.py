"""A fingerprint of a database's content, so results on two databases that share a name are never pooled.

``database_fingerprint`` is the sha256 (first 16 hex digits) of the schema and of every table's
loaded values (column names, then a hash per row), not of its file's bytes: the same rows written by
another pyarrow or pandas version (parquet stores the writer's version) fingerprint alike, and any
changed value does not. A folder's tables are hashed once per file version in a process.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

# (resolved path, size, mtime_ns) -> sha256 of the loaded frame: a sweep loading one folder many times hashes it once
_FRAME_HASHES: dict[tuple[str, int, int], str] = {}


def frame_sha256(frame: pd.DataFrame) -> str:
    h = hashlib.sha256(json.dumps([str(c) for c in frame.columns]).encode())
    h.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return h.hexdigest()


def _table_sha256(db, table) -> str:
    path = Path(db.folder) / table.source if db.folder is not None else None
    if path is None or not path.exists():
        return frame_sha256(db.tables[table.name])
    stat = path.resolve().stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _FRAME_HASHES:
        _FRAME_HASHES[key] = frame_sha256(db.tables[table.name])
    return _FRAME_HASHES[key]


def database_fingerprint(db) -> str:
    """sha256 (16 hex) of ``db``'s schema and its tables' values."""
    h = hashlib.sha256(json.dumps(db.schema.to_dict(), sort_keys=True, default=str).encode())
    for table in db.schema.tables:
        h.update(f"\n{table.name}:{_table_sha256(db, table)}".encode())
    return h.hexdigest()[:16]
