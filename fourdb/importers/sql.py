"""SQLite and DuckDB files, each recognised by its header: every table with its SQL column types and the
single-column keys its catalog declares. Undeclared keys and every time column are inferred (``infer_keys``).
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pandas as pd

from fourdb.errors import DatabaseImportError
from fourdb.importers.base import IMPORTERS, Format, Imported, ImportReport, SourceTable
from fourdb.utils import duckdb_connect

SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB file


def _head(path: Path) -> bytes:
    if not path.stat().st_size:
        return b""
    with open(path, "rb") as f:  # the header only: a database file can be far larger than memory
        return f.read(16)


def _read_sqlite(path: Path) -> list[SourceTable]:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    except sqlite3.DatabaseError as e:
        raise DatabaseImportError(f"{path}: cannot read the SQLite database ({e})") from None
    out = []
    try:
        for t in names:
            q = t.replace('"', '""')
            info = con.execute(f'PRAGMA table_info("{q}")').fetchall()  # cid, name, type, notnull, default, pk
            pks = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
            fks: dict[str, tuple[str, str | None]] = {}
            groups: dict[int, list] = {}
            for r in con.execute(f'PRAGMA foreign_key_list("{q}")').fetchall():  # id, seq, table, from, to, ...
                groups.setdefault(r[0], []).append(r)
            for rows in groups.values():
                if len(rows) == 1:
                    fks[rows[0][3]] = (rows[0][2], rows[0][4])
            frame = pd.read_sql_query(f'SELECT * FROM "{q}"', con)
            out.append(SourceTable(t, frame, {r[1]: r[2] or "" for r in info},
                                   pks[0] if len(pks) == 1 else None, fks))
    finally:
        con.close()
    return out


def _read_duckdb(path: Path) -> list[SourceTable]:
    try:
        con = duckdb_connect(str(path), read_only=True)
    except Exception as e:  # noqa: BLE001 - any open failure is a bad file
        raise DatabaseImportError(f"{path}: cannot open the DuckDB database ({str(e).splitlines()[0]})") from None
    try:
        tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal "
                             "AND NOT temporary ORDER BY schema_name <> 'main', schema_name, table_name").fetchall()
        names = [t for _, t in tables]
        cons = con.execute("SELECT * FROM duckdb_constraints()").df()
        out = []
        for schema_name, t in tables:
            tname = t if names.count(t) == 1 else f"{schema_name}_{t}"
            mine = cons[(cons["schema_name"] == schema_name) & (cons["table_name"] == t)]
            pk, fks = None, {}
            for _, c in mine.iterrows():
                cols = list(c["constraint_column_names"])
                if c["constraint_type"] == "PRIMARY KEY" and len(cols) == 1:
                    pk = cols[0]
                elif c["constraint_type"] == "FOREIGN KEY" and len(cols) == 1:
                    ref_t, ref_c = c.get("referenced_table"), list(c.get("referenced_column_names", []) or [])
                    if not ref_t:  # older DuckDB: parse "FOREIGN KEY (a) REFERENCES t(b)"
                        m = re.search(r'REFERENCES\s+"?([^"(\s]+)"?\s*\(\s*"?([^")]+)"?\s*\)', c["constraint_text"])
                        ref_t, ref_c = (m.group(1), [m.group(2)]) if m else (None, [])
                    if ref_t:
                        fks[cols[0]] = (ref_t, ref_c[0] if len(ref_c) == 1 else None)
            types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = ? "
                                     "AND table_name = ?", [schema_name, t]).fetchall())
            frame = con.execute(f'SELECT * FROM "{schema_name}"."{t}"').df()
            out.append(SourceTable(tname, frame, types, pk, fks))
    finally:
        con.close()
    return out


def _sqlite(path: Path, report: ImportReport) -> Imported:
    return _read_sqlite(path), {}, path.stem


def _duckdb(path: Path, report: ImportReport) -> Imported:
    return _read_duckdb(path), {}, path.stem


IMPORTERS.register("sqlite", Format("SQLite", folder=False, order=10, infer_keys=True,
                                    detect=lambda p: _head(p).startswith(SQLITE_MAGIC), read=_sqlite))
IMPORTERS.register("duckdb", Format("DuckDB", folder=False, order=20, infer_keys=True,
                                    detect=lambda p: _head(p)[8:12] == DUCKDB_MAGIC, read=_duckdb))
