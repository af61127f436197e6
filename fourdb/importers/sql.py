"""SQLite and DuckDB files, each recognised by its header: every table with its SQL column types and the
single-column keys its catalog declares. Undeclared keys and every time column are inferred (``infer_keys``).
"""
from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from fourdb.errors import UntrustedInputError
from fourdb.importers.base import IMPORTERS, Format, Imported, ImportReport, SourceTable
from fourdb.rdb.sandbox import bounded, bounded_frame, quote_ident
from fourdb.untrusted import (MEMORY, QUERY_SECONDS, LimitError, check_bytes, check_name, human_bytes,
                              memory_budget, query_seconds, reading, safe_text)
from fourdb.utils import duckdb_connect

SQLITE_MAGIC = b"SQLite format 3\x00"
FRAME_VALUE_BYTES = 57  # what a value takes in a frame besides its content (a Python object's header)
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB file


def _head(path: Path) -> bytes:
    if not path.stat().st_size:
        return b""
    with open(path, "rb") as f:  # the header only: a database file can be far larger than memory
        return f.read(16)


# ---- SQLite ---------------------------------------------------------------------------------------------------
# SQLite's own tables (sqlite_sequence, sqlite_stat1): "_" is a LIKE wildcard, so it is escaped, or a user's table
# named "sqlitex" or "sqlite1x" would be skipped as one of them
SQLITE_INTERNAL = "name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
VIRTUAL = re.compile(r"\s*CREATE\s+VIRTUAL\s+TABLE", re.IGNORECASE)
MAX_VALUE_SHARE = 16  # one text or blob value may take at most this share of the memory bound...
MAX_VALUE_BYTES = 256 * 2**20  # ...and at most this (a cell larger than this is no table data fourdb can use)
PROGRESS_STEPS = 10_000
HIDDEN, COMPUTED_ON_READ = 1, 2  # PRAGMA table_xinfo's "hidden": a virtual table's hidden column; a VIRTUAL generated
# column (3, a STORED one, is data the file holds)  # SQLite virtual-machine steps between two looks at the clock


def sqlite_uri(path: Path) -> str:
    """The read-only URI of the SQLite file at ``path``, every character of its name escaped: ``#``, ``?`` and
    ``%`` in a file name are part of the name, never a fragment, a parameter or an escape."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


def max_value_bytes() -> int:
    return int(min(memory_budget() // MAX_VALUE_SHARE, MAX_VALUE_BYTES))


class _Clock:
    """The deadline a SQLite connection's progress handler stops statements at, restarted for each table."""

    def __init__(self):
        self.seconds = query_seconds()
        self.deadline = time.monotonic() + self.seconds

    def restart(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def past(self) -> int:
        return int(time.monotonic() > self.deadline)


def _open_sqlite(path: Path) -> tuple[sqlite3.Connection, _Clock]:
    """The file opened read-only, where no value may pass ``max_value_bytes`` and no statement may run past
    ``FOURDB_QUERY_SECONDS`` (a generated column is computed as it is read, by whatever expression it holds)."""
    con = sqlite3.connect(sqlite_uri(path), uri=True)
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes())
    con.execute("PRAGMA query_only = ON")
    con.execute("PRAGMA trusted_schema = OFF")  # functions with side effects are not run from the schema
    clock = _Clock()
    con.set_progress_handler(clock.past, PROGRESS_STEPS)
    return con, clock


@contextlib.contextmanager
def _sqlite_bounded(clock: _Clock, where: str):
    """Statements inside this block stop at ``FOURDB_QUERY_SECONDS`` and at the value size bound, each as one
    ``LimitError`` naming ``where``; any other SQLite error (a corrupt page) as one line naming it."""
    clock.restart()
    with reading(where):
        try:
            yield
        except sqlite3.Error as e:
            if "interrupted" in str(e):
                raise LimitError(f"{where}: reading it ran past {clock.seconds:g} s and was stopped "
                                 f"({QUERY_SECONDS.env} raises the bound)") from None
            if "too big" in str(e):
                raise _too_big(where) from None
            raise


def _too_big(where: str) -> LimitError:
    return LimitError(f"{where}: a value is larger than {human_bytes(max_value_bytes())}, the most one value may "
                      f"take (1/{MAX_VALUE_SHARE} of the memory bound, at most {human_bytes(MAX_VALUE_BYTES)}; "
                      f"{MEMORY.env} raises it)")


def _sqlite_tables(con: sqlite3.Connection, clock: _Clock, path: Path, report: ImportReport) -> list[str]:
    """The file's own tables, in the order they were made; a virtual table (rows made by a module's code, not
    stored in the file) is skipped with a note."""
    with _sqlite_bounded(clock, f"{path}: the catalog"):
        rows = con.execute(f"SELECT name, sql FROM sqlite_master WHERE type = 'table' AND {SQLITE_INTERNAL} "
                           f"ORDER BY rowid").fetchall()
    names = []
    for name, sql in rows:
        name = check_name(name, f"{path}", "table name")
        if isinstance(sql, str) and VIRTUAL.match(sql):
            report.notes.append(f"table '{safe_text(name)}' is a virtual table (its rows come from a module's "
                                f"code, not the file); not imported")
            continue
        names.append(name)
    return names


def _sqlite_table(con: sqlite3.Connection, clock: _Clock, path: Path, name: str, report: ImportReport) -> SourceTable:
    """One table: its stored columns with their SQL types, its declared single-column keys, and its rows, sized in
    SQLite before they become a frame. A VIRTUAL generated column is left out with a note: its values are not in
    the file but computed on read by an expression it holds (one can make gigabytes a row, and SQLite's printf
    turns a value past the size bound into NULL silently), and they are a function of the row's stored columns,
    which are imported."""
    where = f"{path}, table '{safe_text(name)}'"
    table = quote_ident(name)
    with _sqlite_bounded(clock, where):
        info = con.execute(f"PRAGMA table_xinfo({table})").fetchall()  # cid, name, type, notnull, default, pk, hidden
        info = [r for r in info if r[6] != HIDDEN]
        for r in info:
            check_name(r[1], where, "column name")
            if r[6] == COMPUTED_ON_READ:
                report.notes.append(f"table '{safe_text(name)}', column '{safe_text(r[1])}' is a virtual generated "
                                    f"column (computed on read from the row's other columns, not stored in the "
                                    f"file); not imported")
        info = [r for r in info if r[6] != COMPUTED_ON_READ]
        if not info:
            raise UntrustedInputError(f"{where}: no stored column (only virtual generated ones)")
        pks = [r[1] for r in sorted(info, key=lambda r: r[5]) if r[5] > 0]
        fks: dict[str, tuple[str, str | None]] = {}
        groups: dict[int, list] = {}
        for r in con.execute(f"PRAGMA foreign_key_list({table})").fetchall():  # id, seq, table, from, to, ...
            groups.setdefault(r[0], []).append(r)
        for rows in groups.values():
            if len(rows) == 1:
                fks[rows[0][3]] = (rows[0][2], rows[0][4])
        _check_sqlite_size(con, table, [r[1] for r in info], where)
        frame = pd.read_sql_query(f"SELECT {', '.join(quote_ident(r[1]) for r in info)} FROM {table}", con)
    return SourceTable(name, frame, {r[1]: r[2] or "" for r in info}, pks[0] if len(pks) == 1 else None, fks)


def _check_sqlite_size(con: sqlite3.Connection, table: str, columns: list[str], where: str) -> None:
    """Count the rows and the bytes of their values in SQLite, and refuse a table past the memory bound before
    a frame is made of it (each value is also computed here, so a generated column that cannot be is refused
    here, within the time and value bounds)."""
    sizes = [f"coalesce(sum(length(CAST({quote_ident(c)} AS BLOB))), 0)" for c in columns] or ["0"]
    rows, nbytes = con.execute(f"SELECT count(*), {' + '.join(sizes)} FROM {table}").fetchone()
    check_bytes(nbytes + rows * len(columns) * FRAME_VALUE_BYTES, where,
                f"its {rows:,} rows ({human_bytes(nbytes)} of values) as a frame")


def _read_sqlite(path: Path, report: ImportReport) -> list[SourceTable]:
    with reading(path, "cannot read the SQLite database"):
        con, clock = _open_sqlite(path)
    try:
        return [_sqlite_table(con, clock, path, name, report) for name in _sqlite_tables(con, clock, path, report)]
    finally:
        con.close()


# ---- DuckDB ---------------------------------------------------------------------------------------------------
def _read_duckdb(path: Path) -> list[SourceTable]:
    with reading(path, "cannot open the DuckDB database"):
        con = duckdb_connect(str(path), read_only=True)
    try:
        with bounded(con, f"{path}: the catalog"), reading(f"{path}: the catalog"):
            tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal "
                                 "AND NOT temporary ORDER BY schema_name <> 'main', schema_name, table_name"
                                 ).fetchall()
            cons = con.execute("SELECT * FROM duckdb_constraints()").df()
        names = [t for _, t in tables]
        out = []
        for schema_name, t in tables:
            check_name(schema_name, str(path), "schema name")
            check_name(t, str(path), "table name")
            tname = t if names.count(t) == 1 else f"{schema_name}_{t}"
            mine = cons[(cons["schema_name"] == schema_name) & (cons["table_name"] == t)]
            pk, fks = _duckdb_keys(mine)
            out.append(_duckdb_table(con, path, schema_name, t, tname, pk, fks))
    finally:
        con.close()
    return out


def _duckdb_keys(constraints: pd.DataFrame) -> tuple[str | None, dict[str, tuple[str, str | None]]]:
    """A table's declared single-column primary key and foreign keys, from its rows of duckdb_constraints()."""
    pk, fks = None, {}
    for _, c in constraints.iterrows():
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
    return pk, fks


def _duckdb_table(con, path: Path, schema_name: str, t: str, tname: str, pk, fks) -> SourceTable:
    """One table's rows, every name quoted, under the time bound, sized before they are built (a generated
    column can make a gigabyte per row from a few bytes of file) and again before they become a frame."""
    where = f"{path}, table '{safe_text(tname)}'"
    relation = f"{quote_ident(schema_name)}.{quote_ident(t)}"
    with bounded(con, where), reading(where):
        types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = ? "
                                 "AND table_name = ?", [schema_name, t]).fetchall())
        for column in types:
            check_name(column, where, "column name")
        sizes = [f"coalesce(sum(strlen(CAST({quote_ident(c)} AS VARCHAR))), 0)" for c in types] or ["0"]
        rows, nbytes = con.execute(f"SELECT count(*), {' + '.join(sizes)} FROM {relation}").fetchone()
        check_bytes(nbytes + rows * len(types) * FRAME_VALUE_BYTES, where,
                    f"its {rows:,} rows ({human_bytes(nbytes)} of values) as a frame")
        frame = bounded_frame(con, f"SELECT * FROM {relation}", where, memory_budget())
    return SourceTable(tname, frame, types, pk, fks)


def _sqlite(path: Path, report: ImportReport) -> Imported:
    return _read_sqlite(path, report), {}, path.stem


def _duckdb(path: Path, report: ImportReport) -> Imported:
    return _read_duckdb(path), {}, path.stem


IMPORTERS.register("sqlite", Format("SQLite", folder=False, order=10, infer_keys=True,
                                    detect=lambda p: _head(p).startswith(SQLITE_MAGIC), read=_sqlite))
IMPORTERS.register("duckdb", Format("DuckDB", folder=False, order=20, infer_keys=True,
                                    detect=lambda p: _head(p)[8:12] == DUCKDB_MAGIC, read=_duckdb))
