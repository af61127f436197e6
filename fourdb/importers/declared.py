"""Hold source values to what the source declares: each column to its declared SQL type, and a declared
primary key to being non-null and unique.

A value that breaks its declaration stops the import; with ``lenient`` it becomes NULL (a bad value) or its
row is dropped (a bad key), counted in the report's warnings.
"""
from __future__ import annotations

import datetime
import re

import numpy as np
import pandas as pd

from fourdb.errors import DatabaseImportError
from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.dtypes import is_nested
from fourdb.importers.keys import usable_key
from fourdb.rdb.database import first_bad
from fourdb.utils import naive_utc


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
    out = naive_utc(out)
    # DuckDB gives microseconds, which reach year 9999 (a common "no end" date); nanoseconds stop in 2262
    out = out.where(out.isna() | ((out >= pd.Timestamp.min) & (out <= pd.Timestamp.max)))
    return out.astype("datetime64[ns]")


def check_declared_types(t: SourceTable, lenient: bool, report: ImportReport) -> None:
    """Hold each column to its declared type: SQLite stores any value in any column, so 'abc' in a REAL
    column or 'soon' in a DATETIME one is damage to report, not a reason to re-infer the column (a
    DATETIME column re-inferred as text would lose the table its time column)."""
    keys = {t.primary_key, *t.foreign_keys}
    for col, sql_type in t.sql_types.items():
        kind = _declared_kind(sql_type)
        if kind is None or col not in t.frame.columns or is_nested(t.frame[col]):
            continue
        values = t.frame[col]
        if kind == "numeric":
            if values.dtype != object:  # a numeric, date or interval dtype cannot hold text
                continue
            parsed, problem = pd.to_numeric(values, errors="coerce"), "is not numeric"
            if values.notna().any() and parsed.isna().all():
                # SQLite keeps text in a numeric column by design (its type affinity): with no number at all,
                # the declaration says nothing about the values, which keep the type they have
                report.warnings.append(f"table '{t.name}', column '{col}': declared {sql_type} but holds no number "
                                       f"({int(values.notna().sum())} text values, e.g. "
                                       f"{values.dropna().iloc[0]!r}); imported as the type its values have")
                continue
        elif col in keys:  # keys keep their values; a date-valued key is compared as written
            continue
        else:
            parsed, problem = _to_timestamps(values), "is not a timestamp from 1677 to 2262"
        bad = values.notna() & parsed.isna()
        if bad.any():
            msg = f"table '{t.name}', column '{col}': {first_bad(values, bad)} {problem} (declared {sql_type})"
            if not lenient:
                raise DatabaseImportError(f"{msg}; import with --lenient to make such values NULL")
            report.warnings.append(f"{msg}; {int(bad.sum())} values set to NULL")
        t.frame[col] = parsed


def check_primary_key(t: SourceTable, lenient: bool, report: ImportReport) -> None:
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
    if not usable_key(t.frame[pk]):
        report.notes.append(f"{where}: declared primary key holds values a key cannot (fractional numbers, "
                            f"timestamps, booleans or lists); not used as the key")
        t.primary_key = None
