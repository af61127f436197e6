"""Import a database from another format into a fourdb database folder (parquet files + schema.yaml).

``import_database(path, out)`` recognises:

* a SQLite or DuckDB file: every table is exported; primary and foreign keys declared in the catalog
  are kept, and where none are declared they are inferred (see ``infer_keys``) and marked
  ``inferred: true`` in schema.yaml; column dtypes are inferred from the SQL types and the values;
  a table with exactly one datetime column gets it as its time column (a guess, reported). SQLite stores
  any value in any column, so a value that does not fit its declared type (text in a REAL column, an
  unparseable date in a DATETIME one) and a declared primary key with nulls or duplicates are errors;
  ``lenient=True`` makes such values NULL and drops such rows instead, and counts them in the report.
* a folder in 4DBInfer's format (``metadata.yaml`` with ``dataset_name``, ``tables`` and ``tasks``):
  its declared columns, keys and time columns are converted, and its tasks that predict one value per
  row at a time become row-column task files in ``DIR/tasks/``.
* a folder in RelBench's layout (``db/<table>.parquet``, keys and time column in each file's parquet
  metadata), with its node tasks (``tasks/<task>/{train,val,test}.parquet``) converted the same way.

A converted task's rows become a table of the database (``task_<name>``: one row per sample with its
entity key, its time, its label and ``label_known_at``). fourdb splits by time, so validation starts at
the earliest validation sample and test at the earliest test sample; a sample's label becomes known
just before the next split starts (as 4DBInfer's temporal constraint and RelBench's timestamps
allow), so a training label is never visible to another training seed but is to validation seeds.

A table left without a time column that references timed tables (the lines of dated invoices) gets
``time_from``: its rows take the latest time of the parent rows they point to, so they cannot leak.

Everything is written to a temporary folder beside ``out``, loaded back through ``Database.load``
(so the result passes ``fourdb validate``), and only then renamed to ``out``.
"""
from __future__ import annotations

import datetime
import json
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fourdb.errors import DatabaseImportError, FourdbError
from fourdb.rdb.database import Database, _first_bad, write_database
from fourdb.rdb.schema import Column, Schema, Table
from fourdb.utils import atomic_write_text, duckdb_connect

SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB file
CATEGORY_MAX_UNIQUE = 50  # strings with at most this many distinct values (or 20% of rows) are categories
TEXT_MIN_LENGTH = 30  # strings this long on average are text
_DATE_LIKE = re.compile(r"^\s*(\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{4}/\d{1,2}/\d{1,2})([ T]\d.*)?\s*$")
_SQL_TIME_TYPES = re.compile(r"DATE|TIME", re.IGNORECASE)


@dataclass
class SourceTable:
    """A table as read from the source, before dtypes and keys are settled."""

    name: str
    frame: pd.DataFrame
    sql_types: dict[str, str] = field(default_factory=dict)
    primary_key: str | None = None
    foreign_keys: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # column -> (table, column)
    dtypes: dict[str, str] = field(default_factory=dict)  # fourdb dtypes given by the source
    time_column: str | None = None
    inferred_fks: set[str] = field(default_factory=set)


@dataclass
class ImportReport:
    source: str
    kind: str
    out: Path | None = None
    schema: Schema | None = None
    rows: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what a lenient import dropped or made NULL
    guessed_time: set[str] = field(default_factory=set)

    def format(self) -> str:
        lines = [f"imported {self.source} ({self.kind}) -> {self.out}: {len(self.schema.tables)} tables"]
        for t in self.schema.tables:
            pk = t.primary_key
            parts = [f"{self.rows[t.name]} rows"]
            if pk:
                parts.append(f"primary key {pk}" + (" (inferred)" if t.column(pk).inferred else ""))
            for fk in t.foreign_keys:
                parts.append(f"{fk.name} -> {fk.link_to}" + (" (inferred)" if fk.inferred else ""))
            if t.time_column:
                parts.append(f"time column {t.time_column}" + (" (guessed: its only datetime column)" if t.name in self.guessed_time else ""))
            elif t.time_from:
                parts.append("time from " + ", ".join(f"{c} -> {t.column(c).link_table}" for c in t.time_from)
                             + (" (the latest)" if len(t.time_from) > 1 else ""))
            lines.append(f"  {t.name}: " + ", ".join(parts))
        for name, counts in self.tasks.items():
            lines.append(f"  task {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        lines += [f"  warning: {w}" for w in self.warnings]
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"review {self.out}/schema.yaml (inferred keys say `inferred: true`; guessed time columns "
                     f"and time_from can be changed), then: fourdb validate {self.out}")
        return "\n".join(lines)


# ---- entry point ------------------------------------------------------------------------------
def import_database(path: str | Path, out: str | Path, name: str | None = None,
                    lenient: bool = False) -> ImportReport:
    """Convert the database at ``path`` into a fourdb database folder ``out`` (which must not exist or be empty).

    ``lenient``: values that do not fit their declared type become NULL and rows with a null or repeated
    declared primary key are dropped (the first of each key kept), counted in the report's warnings,
    where otherwise they are errors.
    """
    path, out = Path(path), Path(out)
    if not path.exists():
        raise DatabaseImportError(f"{path}: no such file or folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatabaseImportError(f"{out}: already exists and is not an empty folder; choose another --out")
    report = ImportReport(str(path), "")
    tasks: dict[str, dict] = {}
    if path.is_dir():
        if (path / "metadata.yaml").exists():
            report.kind = "4dbinfer"
            sources, tasks, dname = _read_4dbinfer(path, report)
        elif _relbench_db_folder(path) is not None:
            report.kind = "relbench"
            sources, tasks, dname = _read_relbench(path, report)
        else:
            raise DatabaseImportError(
                f"{path}: not a 4DBInfer folder (no metadata.yaml) nor a RelBench one (no db/*.parquet with "
                f"key metadata); a folder of parquet/CSV files needs a schema.yaml instead")
        infer = False
    else:
        head = path.read_bytes()[:16] if path.stat().st_size else b""
        if head.startswith(SQLITE_MAGIC):
            report.kind, sources = "sqlite", _read_sqlite(path)
        elif head[8:12] == DUCKDB_MAGIC:
            report.kind, sources = "duckdb", _read_duckdb(path)
        else:
            raise DatabaseImportError(f"{path}: not a SQLite or DuckDB database file")
        dname, infer = path.stem, True
    if not sources:
        raise DatabaseImportError(f"{path}: the database has no tables")
    schema, frames = assemble(name or dname, sources, infer, report, lenient)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-import-"))
    try:
        write_database(tmp, schema, frames)
        db = Database.load(tmp)  # the written folder must be valid, or nothing is kept
        for tname, spec in tasks.items():
            report.tasks[tname] = _check_task(tmp, db, tname, spec, report)
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.out, report.schema = out, schema
    report.rows = {t: len(df) for t, df in frames.items()}
    return report


def _check_task(folder: Path, db: Database, name: str, spec: dict, report: ImportReport) -> dict[str, int]:
    """Write a converted task file and materialize it once; a task that does not materialize is dropped."""
    from fourdb.tasks import TaskSpec, materialize

    text = yaml.safe_dump(spec, sort_keys=False)
    try:
        task = materialize(TaskSpec.from_dict(yaml.safe_load(text), f"tasks/{name}.yaml"), db)
    except FourdbError as e:
        report.notes.append(f"task '{name}' not converted: {e}")
        return {}
    atomic_write_text(folder / "tasks" / f"{name}.yaml", text)
    return {s: int((task.frame["split"] == s).sum()) for s in ("train", "val", "test")}


# ---- SQLite and DuckDB --------------------------------------------------------------------------
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


# ---- dtype inference ---------------------------------------------------------------------------
def _is_nested(values: pd.Series) -> bool:
    s = values.dropna()
    return len(s) > 0 and isinstance(s.iloc[0], (list, tuple, dict, np.ndarray, bytes, bytearray, memoryview))


def _parse_datetimes(values: pd.Series, numbers_as_ns: bool = False) -> pd.Series | None:
    """All non-null values as naive UTC datetime64[ns], or None if any does not parse.

    Numbers are not timestamps unless ``numbers_as_ns`` (4DBInfer's ``timestamp`` dtype: int64 nanoseconds).
    """
    if pd.api.types.is_datetime64_any_dtype(values):
        out = values
    elif pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        if not numbers_as_ns or pd.api.types.is_bool_dtype(values):
            return None
        out = pd.to_datetime(values.astype("float64"), unit="ns")
    else:
        with np.errstate(all="ignore"):
            try:
                out = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
            except (ValueError, TypeError, OverflowError):
                return None
        if (out.isna() & values.notna()).any():
            return None
    if getattr(out.dt, "tz", None) is not None:
        out = out.dt.tz_convert("UTC").dt.tz_localize(None)
    return out.astype("datetime64[ns]")


def infer_dtype(values: pd.Series, sql_type: str = "") -> str | None:
    """The fourdb dtype of a non-key column: numeric, datetime, category or text (None: cannot be kept)."""
    if _is_nested(values):
        return None
    if pd.api.types.is_datetime64_any_dtype(values):
        return "datetime"
    if _SQL_TIME_TYPES.search(sql_type or "") and _parse_datetimes(values) is not None:
        return "datetime"
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return "numeric"
    s = values.dropna().astype(str)
    if len(s) == 0:
        return "category"
    sample = s.iloc[:: max(1, len(s) // 1000)]
    if sample.str.match(_DATE_LIKE).all() and _parse_datetimes(values) is not None:
        return "datetime"
    if pd.to_numeric(s, errors="coerce").notna().all():
        return "numeric"
    if s.str.len().mean() >= TEXT_MIN_LENGTH:
        return "text"
    return "category" if s.nunique() <= max(CATEGORY_MAX_UNIQUE, 0.2 * len(s)) else "text"


def _convert(values: pd.Series, dtype: str) -> pd.Series:
    if dtype == "datetime":
        return _parse_datetimes(values, numbers_as_ns=True)
    if dtype == "numeric" and not pd.api.types.is_numeric_dtype(values):
        return pd.to_numeric(values, errors="coerce")
    if dtype in ("category", "text"):  # as strings: a SQLite column may mix numbers and text, parquet cannot
        return values.map(str, na_action="ignore").astype(object).where(values.notna(), None)
    return values


# ---- declared types and keys: bad values stop the import (or, lenient, become NULL) ---------------
def _declared_kind(sql_type: str) -> str | None:
    """'numeric', 'datetime' or None (no check) for a catalog type, by SQLite's type affinity rules.

    INT anywhere wins, then text types, as in SQLite (sqlite.org/datatype3.html, "column affinity"). DATE
    and TIMESTAMP (DATETIME included) are checked as timestamps, but not a bare TIME (a time of day).
    """
    t = re.sub(r"\(.*\)", "", sql_type or "").upper()  # a type's arguments are no type: ENUM('PRINT')
    if "INT" in t:
        return "numeric"
    if any(w in t for w in ("CHAR", "CLOB", "TEXT")):
        return None
    if "DATE" in t or "TIMESTAMP" in t:
        return "datetime"
    if any(w in t for w in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
        return "numeric"
    return None


def _to_timestamps(values: pd.Series) -> pd.Series:
    """Each value as naive UTC datetime64[ns]; NaT where it is not a date (or date string) from 1677 to 2262."""
    if pd.api.types.is_datetime64_any_dtype(values):
        out = values
    elif pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        # a number could be seconds, milliseconds or a Julian day: which one is the user's call
        return pd.Series(pd.NaT, index=values.index, dtype="datetime64[ns]")
    else:
        if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "date", "datetime", "empty"):
            values = values.where(values.map(lambda v: isinstance(v, (str, datetime.date, np.datetime64))))
        with np.errstate(all="ignore"):
            out = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
    if getattr(out.dt, "tz", None) is not None:
        out = out.dt.tz_convert("UTC").dt.tz_localize(None)
    # DuckDB gives microseconds, which reach year 9999 (a common "no end" date); nanoseconds stop in 2262
    out = out.where(out.isna() | ((out >= pd.Timestamp.min) & (out <= pd.Timestamp.max)))
    return out.astype("datetime64[ns]")


def _check_declared_types(t: SourceTable, lenient: bool, report: ImportReport) -> None:
    """Hold each column to its declared type: SQLite stores any value in any column, so 'abc' in a REAL
    column or 'soon' in a DATETIME one is damage to report, not a reason to re-infer the column (a
    DATETIME column re-inferred as text would lose the table its time column)."""
    keys = {t.primary_key, *t.foreign_keys}
    for col, sql_type in t.sql_types.items():
        kind = _declared_kind(sql_type)
        if kind is None or col not in t.frame.columns or _is_nested(t.frame[col]):
            continue
        values = t.frame[col]
        if kind == "numeric":
            if values.dtype != object:  # a numeric, date or interval dtype cannot hold text
                continue
            parsed, problem = pd.to_numeric(values, errors="coerce"), "is not numeric"
        elif col in keys:  # keys keep their values; a date-valued key is compared as written
            continue
        else:
            parsed, problem = _to_timestamps(values), "is not a timestamp from 1677 to 2262"
        bad = values.notna() & parsed.isna()
        if bad.any():
            msg = f"table '{t.name}', column '{col}': {_first_bad(values, bad)} {problem} (declared {sql_type})"
            if not lenient:
                raise DatabaseImportError(f"{msg}; import with --lenient to make such values NULL")
            report.warnings.append(f"{msg}; {int(bad.sum())} values set to NULL")
        t.frame[col] = parsed


def _check_primary_key(t: SourceTable, lenient: bool, report: ImportReport) -> None:
    """A declared primary key with nulls or repeats is damage to report: dropping the key instead would
    silently drop every foreign key to the table too."""
    pk, where = t.primary_key, f"table '{t.name}', column '{t.primary_key}'"
    values = t.frame[pk]
    nulls = values.isna()
    repeats = values.duplicated() & ~nulls
    for bad, problem, fix, kept in (
            (nulls, "is null in row {row} ({n} null rows)", "drop those rows", "rows dropped"),
            (repeats, "repeats {value!r} in row {row} ({n} duplicate rows)", "keep the first row of each key",
             "rows dropped, the first row of each key kept")):
        if bad.any():
            i, n = int(bad.to_numpy().nonzero()[0][0]), int(bad.sum())
            msg = f"{where}: declared primary key " + problem.format(row=i + 1, n=n, value=values.iloc[i])
            if not lenient:
                raise DatabaseImportError(f"{msg}; import with --lenient to {fix}")
            report.warnings.append(f"{msg}; {n} {kept}")
    t.frame = t.frame[~(nulls | repeats)].reset_index(drop=True)
    if not _usable_key(t.frame[pk]):
        report.notes.append(f"{where}: declared primary key holds values a key cannot (fractional numbers, "
                            f"timestamps, booleans or lists); not used as the key")
        t.primary_key = None


# ---- key inference -----------------------------------------------------------------------------
def _forms(table: str) -> set[str]:
    """Singular and plural spellings of a table name, lower case."""
    t = table.lower()
    forms = {t, t + "s"}
    if t.endswith("ies"):
        forms.add(t[:-3] + "y")
    if t.endswith("es"):
        forms.add(t[:-2])
    if t.endswith("s"):
        forms.add(t[:-1])
    if t.endswith("y"):
        forms.add(t[:-1] + "ies")
    return forms


def _key_values(values: pd.Series) -> pd.Series:
    """Values comparable across tables: integral floats as integers, everything else as is."""
    s = values.dropna()
    if pd.api.types.is_float_dtype(s) and (s == s.round()).all():
        s = s.astype("int64")
    return s


def _usable_key(values: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_datetime64_any_dtype(values) or _is_nested(values):
        return False
    s = values.dropna()
    return not (pd.api.types.is_float_dtype(s) and not (s == s.round()).all())


def _is_unique_key(values: pd.Series) -> bool:
    return len(values) > 0 and values.notna().all() and values.is_unique and _usable_key(values)


def _missing(child: pd.Series, parent: pd.Series) -> int:
    """How many non-null child values are not among the parent's values."""
    c, p = _key_values(child), _key_values(parent)
    if pd.api.types.is_numeric_dtype(c) != pd.api.types.is_numeric_dtype(p):
        c, p = c.astype(str), p.astype(str)
    return int((~c.isin(p)).sum())


def infer_primary_key(table: str, frame: pd.DataFrame) -> str | None:
    """A unique, non-null column named id, <table>_id or <table>id (singular or plural, any case)."""
    wanted = ["id"] + [f"{f}{sep}id" for f in sorted(_forms(table)) for sep in ("_", "")]
    by_lower = {str(c).lower(): c for c in frame.columns}
    for w in wanted:
        col = by_lower.get(w)
        if col is not None and _is_unique_key(frame[col]):
            return col
    return None


def infer_foreign_keys(tables: dict[str, SourceTable], report: ImportReport | None = None) -> None:
    """Add foreign keys named <other>_id (or like another table's primary key) whose values all appear there."""
    for t in tables.values():
        for col in t.frame.columns:
            if col == t.primary_key or col in t.foreign_keys or not _usable_key(t.frame[col]):
                continue
            low = str(col).lower()
            if low == "id" or t.frame[col].notna().sum() == 0:
                continue
            by_name = [u for u in tables.values() if u is not t and u.primary_key
                       and low in {f"{f}{sep}id" for f in _forms(u.name) for sep in ("_", "")}]
            by_pk = [u for u in tables.values() if u is not t and u.primary_key and u not in by_name
                     and str(u.primary_key).lower() == low and low != "id"]
            for u in by_name + by_pk:
                n = _missing(t.frame[col], u.frame[u.primary_key])
                if n == 0:
                    t.foreign_keys[col] = (u.name, u.primary_key)
                    t.inferred_fks.add(col)
                    break
                if report is not None:
                    report.notes.append(f"table '{t.name}', column '{col}': looks like a key to "
                                        f"{u.name}.{u.primary_key} but {n} values are not there; left a plain column")


# ---- turning source tables into a schema ---------------------------------------------------------
def assemble(name: str, sources: list[SourceTable], infer_keys: bool, report: ImportReport,
             lenient: bool = False) -> tuple[Schema, dict[str, pd.DataFrame]]:
    """Settle keys (declared, else inferred when ``infer_keys``), dtypes and time columns of the source tables.

    Values that break their declared type or primary key raise, or with ``lenient`` become NULL or drop
    their rows (reported as warnings).
    """
    tables = {t.name: t for t in sources}
    for t in sources:
        t.frame.columns = [str(c) for c in t.frame.columns]
        if len(t.frame) == 0:
            report.notes.append(f"table '{t.name}' has no rows; skipped")
    empty = [n for n, t in tables.items() if len(t.frame) == 0]
    for t in sources:  # declared keys must point somewhere real
        for col, (ref_t, ref_c) in t.foreign_keys.items():
            where = f"table '{t.name}', column '{col}'"
            if col not in t.frame.columns:
                raise DatabaseImportError(f"{where}: declared foreign key on a column the table does not have")
            if ref_t not in tables:
                raise DatabaseImportError(f"{where}: declared foreign key points to missing table '{ref_t}'")
            if ref_c is not None and ref_c not in tables[ref_t].frame.columns:
                raise DatabaseImportError(
                    f"{where}: declared foreign key points to missing column '{ref_c}' of table '{ref_t}'")
    for n in empty:
        del tables[n]
        for t in tables.values():
            t.foreign_keys = {c: r for c, r in t.foreign_keys.items() if r[0] != n}
    if not tables:
        raise DatabaseImportError(f"database '{name}': every table is empty")

    inferred_pk: set[str] = set()
    for t in tables.values():
        _check_declared_types(t, lenient, report)
        if t.primary_key is not None:
            _check_primary_key(t, lenient, report)
        if t.primary_key is None and infer_keys:
            t.primary_key = infer_primary_key(t.name, t.frame)
            if t.primary_key is not None:
                inferred_pk.add(t.name)
    for t in tables.values():  # resolve FKs to the parent's key, promoting a unique column where needed
        for col, (ref_t, ref_c) in list(t.foreign_keys.items()):
            parent = tables[ref_t]
            ref_c = ref_c or parent.primary_key
            if ref_c is None:
                report.notes.append(f"table '{t.name}', column '{col}': foreign key to '{ref_t}', which has no "
                                    f"primary key; left a plain column")
                del t.foreign_keys[col]
            elif ref_c != parent.primary_key:
                if parent.primary_key is None and _is_unique_key(parent.frame[ref_c]):
                    parent.primary_key = ref_c
                    report.notes.append(f"table '{ref_t}': column '{ref_c}' is referenced by {t.name}.{col} and "
                                        f"unique, so it is the primary key")
                    t.foreign_keys[col] = (ref_t, ref_c)
                else:
                    report.notes.append(f"table '{t.name}', column '{col}': foreign key to {ref_t}.{ref_c}, which "
                                        f"is not that table's primary key; left a plain column")
                    del t.foreign_keys[col]
            else:
                t.foreign_keys[col] = (ref_t, ref_c)
    if infer_keys:
        infer_foreign_keys(tables, report)

    schema_tables, frames, dangling = [], {}, []
    used_sources: set[str] = set()
    for t in tables.values():
        cols, data = [], {}
        for col in t.frame.columns:
            values = t.frame[col]
            if col == t.primary_key:
                cols.append(Column(col, "primary_key", inferred=t.name in inferred_pk))
                data[col] = values
            elif col in t.foreign_keys:
                ref_t, ref_c = t.foreign_keys[col]
                cols.append(Column(col, "foreign_key", f"{ref_t}.{ref_c}", inferred=col in t.inferred_fks))
                data[col] = values
                n = _missing(values, tables[ref_t].frame[ref_c])
                if n:
                    dangling.append(f"{t.name}.{col} ({n} values not in {ref_t}.{ref_c})")
            else:
                dtype = t.dtypes.get(col) or infer_dtype(values, t.sql_types.get(col, ""))
                if dtype == "datetime" and _parse_datetimes(values, numbers_as_ns=True) is None:
                    dtype = infer_dtype(values.astype(object))
                    report.notes.append(f"table '{t.name}', column '{col}': not all values are timestamps; "
                                        f"kept as {dtype}")
                if dtype is None:
                    report.notes.append(f"table '{t.name}', column '{col}': values are lists, arrays or bytes; "
                                        f"dropped")
                    continue
                cols.append(Column(col, dtype))
                data[col] = _convert(values, dtype)
        if not cols:
            report.notes.append(f"table '{t.name}': no usable columns; skipped")
            continue
        time_col = t.time_column
        if time_col is not None and not any(c.name == time_col and c.dtype == "datetime" for c in cols):
            report.notes.append(f"table '{t.name}': time column '{time_col}' is not a datetime column; dropped")
            time_col = None
        if time_col is None and infer_keys:  # 4DBInfer and RelBench declare their time columns
            dts = [c.name for c in cols if c.dtype == "datetime"]
            if len(dts) == 1:
                time_col = dts[0]
                report.guessed_time.add(t.name)
            elif len(dts) > 1:
                report.notes.append(f"table '{t.name}': {len(dts)} datetime columns ({', '.join(dts)}); no time "
                                    f"column chosen, set time_column in schema.yaml")
        source = _file_name(t.name, used_sources)
        schema_tables.append(Table(t.name, source, cols, time_col))
        frames[t.name] = pd.DataFrame(data).reset_index(drop=True)
    _inherit_time(schema_tables, report)
    policy = "error"
    if dangling:
        policy = "null"
        report.notes.append("dangling foreign-key values become NULL (on_dangling_foreign_key: null): "
                            + "; ".join(dangling))
    return Schema(name, schema_tables, policy), frames


def _inherit_time(tables: list[Table], report: ImportReport) -> None:
    """Give each table left without a time column ``time_from``: its foreign keys to timed tables.

    A line item of a dated invoice is known no earlier than its invoice; left timeless it would be
    visible at every cutoff, a leak. Parents are settled first, so a chain (sub-lines -> lines ->
    invoices) passes the time down.
    """
    timed = {t.name for t in tables if t.time_column}
    pending = {t.name: t for t in tables if not t.time_column}
    while pending:
        ready = [t for t in pending.values()
                 if not any(fk.link_table in pending and fk.link_table != t.name for fk in t.foreign_keys)]
        if not ready:  # untimed tables referencing each other: start where one references a timed table
            ready = [t for t in pending.values() if any(fk.link_table in timed for fk in t.foreign_keys)]
            if not ready:
                break
        for t in ready:
            del pending[t.name]
            fks = [fk for fk in t.foreign_keys if fk.link_table in timed and fk.link_table != t.name]
            if not fks:
                continue
            t.time_from = [fk.name for fk in fks]
            timed.add(t.name)
            parents = " and ".join(dict.fromkeys(fk.link_table for fk in fks))
            latest = "latest " if len(fks) > 1 else ""
            report.notes.append(f"table '{t.name}' has no time column; its rows take the {latest}time of the "
                                f"{parents} row{'s' if len(fks) > 1 else ''} they reference "
                                f"(time_from: {', '.join(t.time_from)})")


def _file_name(table: str, used: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", table) or "table"
    name, i = f"{base}.parquet", 1
    while name.lower() in used:
        i += 1
        name = f"{base}_{i}.parquet"
    used.add(name.lower())
    return name


# ---- 4DBInfer ----------------------------------------------------------------------------------
DBB_DTYPES = {"float": "numeric", "category": "category", "datetime": "datetime", "text": "text",
              "timestamp": "datetime"}
DBB_METRICS = {"auroc": "auroc", "ap": "average_precision", "accuracy": "accuracy", "mae": "mae", "rmse": "rmse",
               "mse": "rmse", "r2": "r2"}


def _load_dbb_table(folder: Path, source: str, fmt: str, where: str) -> dict[str, np.ndarray]:
    path = folder / source
    if not path.exists():
        raise DatabaseImportError(f"{where}: source file '{source}' not found in {folder}")
    try:
        if fmt == "parquet":
            df = pd.read_parquet(path)
            return {c: df[c].to_numpy() for c in df.columns}
        if fmt == "numpy":
            with np.load(path, allow_pickle=True) as npz:
                return {k: npz[k] for k in npz.files}
    except Exception as e:  # noqa: BLE001 - any reader failure is a bad file
        raise DatabaseImportError(f"{where}: cannot read '{source}': {e}") from None
    raise DatabaseImportError(f"{where}: unknown format '{fmt}' (expected parquet or numpy)")


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


def _read_4dbinfer(folder: Path, report: ImportReport) -> tuple[list[SourceTable], dict[str, dict], str]:
    try:
        meta = yaml.safe_load((folder / "metadata.yaml").read_text()) or {}
    except yaml.YAMLError as e:
        raise DatabaseImportError(f"{folder}/metadata.yaml: not valid YAML ({e.__class__.__name__})") from None
    if not isinstance(meta, dict) or not meta.get("tables"):
        raise DatabaseImportError(f"{folder}/metadata.yaml: no tables declared")
    sources: dict[str, SourceTable] = {}
    for i, tm in enumerate(meta["tables"]):
        tname = str(tm.get("name", f"table{i + 1}"))
        where = f"table '{tname}'"
        data = _load_dbb_table(folder, str(tm.get("source", "")), tm.get("format", "parquet"), where)
        frame, dtypes, links = _dbb_frame(data, tm.get("columns") or [], where, report)
        pks = [str(c["name"]) for c in tm.get("columns") or [] if c.get("dtype") == "primary_key"]
        fks = {}
        for col, link in links.items():
            if "." not in link:
                raise DatabaseImportError(f"{where}, column '{col}': foreign_key without link_to: Table.column")
            fks[col] = tuple(link.split(".", 1))
        sources[tname] = SourceTable(tname, frame, {}, pks[0] if pks else None, fks, dtypes, tm.get("time_column"))
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
    for tm in meta.get("tasks") or []:
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
        report.notes.append(f"{skip} retrieval (key prediction) tasks have no fourdb equivalent")
        return None
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
        data = _load_dbb_table(folder, str(tm["source"]).format(split=split), tm.get("format", "parquet"),
                               f"4DBInfer task '{name}'")
        frame, dtypes, _ = _dbb_frame(data, cols, f"4DBInfer task '{name}'", report)
        splits[fourdb_split] = frame
    task_type = tm.get("task_type")
    if task_type == "classification":
        labels = pd.concat([f[target] for f in splits.values() if target in f.columns]).dropna()
        kind = "binary" if set(np.unique(labels)) <= {0, 1} else "multiclass"
    elif task_type == "regression":
        kind = "regression"
    else:
        report.notes.append(f"{skip} task_type '{task_type}' is not classification or regression")
        return None
    metric = DBB_METRICS.get(str(tm.get("evaluation_metric")))
    return _samples_task(name, dname, splits, key["name"], link, tcol, target, kind, metric, dtypes,
                         f"Converted from 4DBInfer task '{name}' (target {ttable}.{target}).", report)


def _samples_task(name: str, dname: str, splits: dict[str, pd.DataFrame], key: str, link: tuple[str, str],
                  time_col: str, target: str, kind: str, metric: str | None, dtypes: dict[str, str],
                  description: str, report: ImportReport) -> tuple[SourceTable, dict] | None:
    """A task given as sample files -> a table of samples plus a row-column task file over it."""
    skip = f"task '{name}' not converted:"
    for split, f in splits.items():
        missing = [c for c in (key, time_col, target) if c not in f.columns]
        if missing:
            report.notes.append(f"{skip} its {split} samples lack column(s) {', '.join(missing)}")
            return None
        if len(f) == 0:
            report.notes.append(f"{skip} it has no {split} samples")
            return None
    frame = pd.concat([f.assign(__split=s) for s, f in splits.items()], ignore_index=True)
    cutoff = _parse_datetimes(pd.Series(frame[time_col]), numbers_as_ns=True)
    if cutoff is None or cutoff.isna().any():
        report.notes.append(f"{skip} its time column '{time_col}' is not all timestamps")
        return None
    frame[time_col] = cutoff
    val, test = cutoff[frame["__split"] == "val"].min(), cutoff[frame["__split"] == "test"].min()
    if not val < test:
        report.notes.append(f"{skip} its validation samples do not start before its test samples")
        return None
    by_time = np.where(cutoff >= test, "test", np.where(cutoff >= val, "val", "train"))
    moved = int((by_time != frame["__split"].to_numpy()).sum())
    if moved:
        report.notes.append(f"task '{name}': {moved} samples fall in another split by time (fourdb splits strictly "
                            f"by time: validation from {val}, test from {test})")
    tick = pd.Timedelta(microseconds=1)
    boundary = pd.Series(cutoff.max() + pd.Timedelta(days=1), index=cutoff.index)
    boundary[by_time == "train"], boundary[by_time == "val"] = val, test
    known = np.maximum(boundary - tick, cutoff + tick)  # just before the next split starts, after the cutoff
    table = f"task_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
    rows = frame.drop(columns="__split")
    rows.insert(0, "sample_id", np.arange(len(rows)))
    rows["label_known_at"] = known.astype("datetime64[ns]")
    feats = [c for c in rows.columns if c not in ("sample_id", key, time_col, target, "label_known_at")]
    tdtypes = {c: dtypes.get(c) or "" for c in feats}
    tdtypes = {c: d for c, d in tdtypes.items() if d}
    tdtypes.update({time_col: "datetime", "label_known_at": "datetime"})
    if kind == "regression":
        tdtypes[target] = "numeric"
    elif kind == "binary":
        tdtypes[target] = "numeric"
    else:
        tdtypes[target] = "category"
    src = SourceTable(table, rows, {}, "sample_id", {key: link}, tdtypes, "label_known_at")
    label = f'CAST("{target}" AS INTEGER)' if kind == "binary" else f'"{target}"'
    spec = {
        "name": name, "dataset": dname, "description": description, "kind": "row_column", "task_type": kind,
        "metrics": _metrics(kind, metric), "table": table, "label": label, "where": f'"{target}" IS NOT NULL',
        "cutoff_column": time_col, "known_columns": [key, time_col, *feats],
        "timestamps": {"val": str(val), "test": str(test)},
    }
    return src, spec


def _metrics(kind: str, first: str | None) -> list[str]:
    base = {"binary": ["auroc", "average_precision", "accuracy"], "multiclass": ["accuracy", "macro_f1"],
            "regression": ["mae", "rmse"]}[kind]
    if first in base:
        base.remove(first)
        base.insert(0, first)
    return base


# ---- RelBench ----------------------------------------------------------------------------------
RELBENCH_KEYS = (b"fkey_col_to_pkey_table", b"pkey_col", b"time_col")


def _relbench_meta(path: Path) -> dict | None:
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - not a readable parquet file
        return None
    if not any(k in meta for k in RELBENCH_KEYS):
        return None
    try:
        return {k.decode(): json.loads(meta[k].decode()) if k in meta else None for k in RELBENCH_KEYS}
    except (ValueError, UnicodeDecodeError):
        return None


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
        meta = _relbench_meta(f)
        if meta is None:
            report.notes.append(f"{f.name}: no RelBench key metadata; imported with no keys")
            meta = {"fkey_col_to_pkey_table": {}, "pkey_col": None, "time_col": None}
        raw[f.stem] = (pd.read_parquet(f), meta)
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
    meta = _relbench_meta(files["train"]) or {}
    fkeys, time_col = meta.get("fkey_col_to_pkey_table") or {}, meta.get("time_col")
    if len(fkeys) != 1 or not time_col:
        report.notes.append(f"{skip} it has {len(fkeys)} entity columns and time column {time_col!r}; only node "
                            f"tasks (one entity, one time) convert")
        return None
    key, entity = next(iter(fkeys.items()))
    if entity not in tables or tables[entity].primary_key is None:
        report.notes.append(f"{skip} its entity table '{entity}' is missing or has no primary key")
        return None
    splits = {s: pd.read_parquet(f) for s, f in files.items()}
    targets = [c for c in splits["train"].columns if c not in (key, time_col)]
    if len(targets) != 1:
        report.notes.append(f"{skip} it has {len(targets)} target columns ({', '.join(targets)}); one is needed")
        return None
    target = targets[0]
    if target not in splits["test"].columns:
        report.notes.append(f"{skip} its test samples have no '{target}' column (masked labels)")
        return None
    labels = pd.concat([f[target] for f in splits.values()]).dropna()
    if _is_nested(labels) or not pd.api.types.is_numeric_dtype(labels):
        report.notes.append(f"{skip} its target '{target}' is not a number (link or multilabel tasks do not convert)")
        return None
    kind = "binary" if set(np.unique(labels)) <= {0, 1} else "regression"
    return _samples_task(name, dname, splits, key, (entity, tables[entity].primary_key), time_col, target, kind,
                         None, {}, f"Converted from RelBench task '{name}' (entity {entity}).", report)
