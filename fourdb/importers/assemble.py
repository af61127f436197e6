"""Turn the tables read from any source into a fourdb schema and frames: settle keys (declared, else
inferred), dtypes and time columns, and give a timeless table that references timed ones ``time_from``."""
from __future__ import annotations

import re

import pandas as pd

from fourdb.errors import DatabaseImportError
from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.declared import check_declared_types, check_primary_key
from fourdb.importers.dtypes import convert_values, parse_datetimes, infer_dtype
from fourdb.importers.composite import infer_composite_keys
from fourdb.importers.containment import ValueChecks
from fourdb.importers.keys import infer_foreign_keys, is_unique_key, missing_references, primary_key_candidate
from fourdb.rdb.datedim import date_dimensions, time_sources
from fourdb.rdb.schema import Column, Schema, Table


def assemble(name: str, sources: list[SourceTable], infer_keys: bool, report: ImportReport,
             lenient: bool = False, guess_time: bool | None = None) -> tuple[Schema, dict[str, pd.DataFrame]]:
    """Settle keys (declared, else inferred when ``infer_keys``), dtypes and time columns (a lone datetime column
    guessed as the time when ``guess_time``, which defaults to ``infer_keys``) of the source tables.

    Values that break their declared type or primary key raise, or with ``lenient`` become NULL or drop
    their rows (reported as warnings).
    """
    guess_time = infer_keys if guess_time is None else guess_time
    tables = _nonempty_tables(name, sources, report)
    inferred_pk = _settle_primary_keys(tables, infer_keys, lenient, report)
    _resolve_foreign_keys(tables, report)
    if infer_keys:
        checks = ValueChecks()
        try:
            infer_foreign_keys(tables, report, checks)
            infer_composite_keys(tables, checks, report)
        finally:
            checks.close()

    schema_tables, frames, dangling = [], {}, []
    used_sources: set[str] = set()
    for t in tables.values():
        cols, data = _columns(t, tables, t.name in inferred_pk, report, dangling)
        if not cols:
            report.notes.append(f"table '{t.name}': no usable columns; skipped")
            continue
        source = _file_name(t.name, used_sources)
        schema_tables.append(Table(t.name, source, cols, _time_column(t, cols, guess_time, report)))
        frames[t.name] = pd.DataFrame(data).reset_index(drop=True)
    _inherit_time(schema_tables, frames, report)
    policy = "error"
    if dangling:
        policy = "null"
        report.notes.append("dangling foreign-key values become NULL (on_dangling_foreign_key: null): "
                            + "; ".join(dangling))
    return Schema(name, schema_tables, policy), frames


def _nonempty_tables(name: str, sources: list[SourceTable], report: ImportReport) -> dict[str, SourceTable]:
    """The tables with rows, by name, once every declared foreign key is checked to point somewhere real;
    the keys to an empty table are let go."""
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
    return tables


def _settle_primary_keys(tables: dict[str, SourceTable], infer_keys: bool, lenient: bool,
                         report: ImportReport) -> set[str]:
    """Check declared types and primary keys, infer a missing key when ``infer_keys``; the tables whose key
    was inferred."""
    inferred_pk: set[str] = set()
    for t in tables.values():
        check_declared_types(t, lenient, report)
        if t.primary_key is not None:
            check_primary_key(t, lenient, report)
        if t.primary_key is None and infer_keys and (found := primary_key_candidate(t.name, t.frame)):
            t.primary_key = found[0]
            inferred_pk.add(t.name)
            report.explain(t.name, found[1])
    return inferred_pk


def _resolve_foreign_keys(tables: dict[str, SourceTable], report: ImportReport) -> None:
    """Resolve each foreign key to its parent's key, promoting a unique column where needed; a key that
    cannot be resolved is left a plain column."""
    for t in tables.values():
        for col, (ref_t, ref_c) in list(t.foreign_keys.items()):
            parent = tables[ref_t]
            ref_c = ref_c or parent.primary_key
            if ref_c is None:
                report.notes.append(f"table '{t.name}', column '{col}': foreign key to '{ref_t}', which has no "
                                    f"primary key; left a plain column")
                del t.foreign_keys[col]
            elif ref_c != parent.primary_key:
                if parent.primary_key is None and is_unique_key(parent.frame[ref_c]):
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


def _columns(t: SourceTable, tables: dict[str, SourceTable], inferred_pk: bool, report: ImportReport,
             dangling: list[str]) -> tuple[list[Column], dict[str, pd.Series]]:
    """A table's schema columns and their converted values; a foreign key's values missing from its parent
    are added to ``dangling``."""
    cols, data = [], {}
    for col in t.frame.columns:
        values = t.frame[col]
        if col == t.primary_key:
            cols.append(Column(col, "primary_key", inferred=inferred_pk))
            data[col] = values
        elif col in t.foreign_keys:
            ref_t, ref_c = t.foreign_keys[col]
            cols.append(Column(col, "foreign_key", f"{ref_t}.{ref_c}", inferred=col in t.inferred_fks))
            data[col] = values
            n = missing_references(values, tables[ref_t].frame[ref_c])
            if n:
                dangling.append(f"{t.name}.{col} ({n} values not in {ref_t}.{ref_c})")
        else:
            dtype = t.dtypes.get(col) or infer_dtype(values, t.sql_types.get(col, ""))
            if dtype == "datetime" and parse_datetimes(values, numbers_as_ns=True) is None:
                dtype = infer_dtype(values.astype(object))
                report.notes.append(f"table '{t.name}', column '{col}': not all values are timestamps; "
                                    f"kept as {dtype}")
            if dtype is None:
                report.notes.append(f"table '{t.name}', column '{col}': values are lists, arrays or bytes; "
                                    f"dropped")
                continue
            cols.append(Column(col, dtype))
            data[col] = convert_values(values, dtype)
    return cols, data


def _time_column(t: SourceTable, cols: list[Column], infer_keys: bool, report: ImportReport) -> str | None:
    """The declared time column if it is a datetime column; else, when guessing (``infer_keys``), the one
    datetime column there is."""
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
    return time_col


def _inherit_time(tables: list[Table], frames: dict[str, pd.DataFrame], report: ImportReport) -> None:
    """Give each table left without a time column ``time_from``: its foreign keys to timed tables.

    A line item of a dated invoice is known no earlier than its invoice; left timeless it would be
    visible at every cutoff, a leak. Parents are settled first, so a chain (sub-lines -> lines ->
    invoices) passes the time down. A table that references a date dimension takes its time from its date
    keys (and from parents with a time column of their own), not from dimensions dated through the calendar.
    """
    own_timed = {t.name for t in tables if t.time_column}
    date_dims = date_dimensions(tables, frames)
    for d in sorted(date_dims):
        report.explain(d, _date_dimension_text(next(t for t in tables if t.name == d), frames[d]))
    timed = set(own_timed)
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
            every = [fk for fk in t.foreign_keys if fk.link_table in timed and fk.link_table != t.name]
            fks = time_sources(every, date_dims, own_timed)
            if not fks:
                continue
            t.time_from = [fk.name for fk in fks]
            timed.add(t.name)
            _say_time(t, fks, every, date_dims, frames[t.name], report)


def _date_dimension_text(t: Table, frame: pd.DataFrame) -> str:
    days = frame[t.time_column]
    return (f"a date dimension: one row per day from {days.min():%Y-%m-%d} to {days.max():%Y-%m-%d} in "
            f"{t.time_column}, keyed by {t.primary_key}; a table whose keys point here takes its time from the day")


def _say_time(t: Table, fks: list[Column], every: list[Column], date_dims: set[str], frame: pd.DataFrame,
              report: ImportReport) -> None:
    """The note (and, through a date dimension, the evidence) saying where a table's time comes from, with its
    rows that get none."""
    parents = " and ".join(dict.fromkeys(fk.link_table for fk in fks))
    latest = "latest " if len(fks) > 1 else ""
    report.notes.append(f"table '{t.name}' has no time column; its rows take the {latest}time of the {parents} "
                        f"row{'s' if len(fks) > 1 else ''} they reference (time_from: {', '.join(t.time_from)})")
    if not any(fk.link_table in date_dims for fk in fks):
        return
    left = list(dict.fromkeys(fk.link_table for fk in every if fk not in fks))
    undated = int(frame[[fk.name for fk in fks]].isna().all(axis=1).sum())
    report.explain(t.name, f"time from {', '.join(f'{fk.name} -> {fk.link_table}' for fk in fks)}"
                   + (" (the latest)" if len(fks) > 1 else "") + ", through a date dimension"
                   + (f"; not from {', '.join(left)}, dimensions dated by days of their own" if left else "")
                   + (f"; {undated:,} of {len(frame):,} rows have no date key, so they are known at every cutoff"
                      if undated else ""))


def _file_name(table: str, used: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", table) or "table"
    name, i = f"{base}.parquet", 1
    while name.lower() in used:
        i += 1
        name = f"{base}_{i}.parquet"
    used.add(name.lower())
    return name
