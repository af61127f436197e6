"""A validated relational database held in DuckDB, with "the database as of time t".

Everything a user can get wrong in a database folder is checked here, before any work starts, and
reported as one line naming the table, the column and the first offending value.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

import duckdb
import numpy as np
import pandas as pd

from fourdb.errors import FourdbError, SchemaError
from fourdb.rdb.datedim import date_dimensions, time_sources
from fourdb.rdb.files import ParquetSource, read_csv
from fourdb.rdb.links import link_fit
from fourdb.rdb.sandbox import SQLSandbox, inside_folder
from fourdb.rdb.schema import Column, Schema, Table
from fourdb.rdb.timeline import untimed_rows
from fourdb.untrusted import LimitError, reading, safe_text
from fourdb.utils import duckdb_connect, naive_utc


def first_bad(values: pd.Series, bad_mask: pd.Series) -> str:
    """The first value ``bad_mask`` marks, its row and how many are marked: for an error message."""
    idx = bad_mask.to_numpy().nonzero()[0]
    first = idx[0]
    return f"value {values.iloc[first]!r} (row {first + 1}; {len(idx)} bad rows)"


def _read_source(folder: Path, table: Table, allow_outside_paths: bool = False
                 ) -> tuple[list[str], int, Callable[[str], pd.Series]]:
    """A source file's column names, its row count and a reader of one column.

    A parquet file is read a column at a time, so loading holds one raw column beside the converted
    table, never the whole table twice (a 100M-row database would not fit otherwise). Every read is
    bounded (``fourdb.rdb.files``): a file that would decode past the memory bound is refused in one line."""
    where = f"table '{table.name}', source"
    if not isinstance(table.source, str) or "\x00" in table.source:
        raise SchemaError(f"{where} {safe_text(table.source)!r}: not a file name (it holds a NUL byte)")
    path = inside_folder(folder, table.source, where, allow_outside_paths)
    if not path.exists():
        raise SchemaError(f"table '{table.name}': source file '{table.source}' not found in {folder}")
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv", ".tsv"):
        raise SchemaError(f"table '{table.name}': source '{table.source}' must be .parquet or .csv")
    where = f"table '{table.name}', source '{safe_text(table.source)}'"
    with as_schema_error():
        if suffix == ".parquet":
            file = ParquetSource(path, where)
            return list(file.names), file.num_rows, as_schema_error()(file.column)
        frame = read_csv(path, where, sep="\t" if suffix == ".tsv" else ",", low_memory=False)
    return list(frame.columns), len(frame), frame.__getitem__


@contextlib.contextmanager
def as_schema_error():
    """A malformed data file is a bad database folder: its one-line error as a ``SchemaError`` (a bound it
    runs into stays a ``LimitError``)."""
    try:
        yield
    except (SchemaError, LimitError):
        raise
    except FourdbError as e:
        raise SchemaError(str(e)) from None


def _read_column(table: Table, column: Column, read: Callable[[str], pd.Series]) -> pd.Series:
    """One column read and converted to its dtype; a value the libraries cannot convert (a year-9999 timestamp
    past nanoseconds) ends in one line naming the table and column."""
    with as_schema_error(), reading(f"table '{table.name}', column '{column.name}' (source "
                                    f"'{safe_text(table.source)}')", "cannot be read or converted"):
        return _coerce_column(table, column.name, column.dtype, read(column.name))


def ascending_integers(values: pd.Series) -> bool:
    """Whether integer keys strictly ascend (so are distinct), checked in one pass without hashing."""
    if not isinstance(values.dtype, np.dtype) or values.dtype.kind not in "iu" or len(values) < 2:
        return False
    v = values.to_numpy()
    return bool((v[1:] > v[:-1]).all())


class RowLookup:
    """Row positions of key values (-1 where a value is missing or unknown). Integer keys that ascend
    densely are looked up in an array, in one pass; any other keys through a hash index."""

    def __init__(self, keys: pd.Series):
        self.keys, self.table, self.index = keys, None, None  # the hash index is made when first needed
        if ascending_integers(keys):
            v = keys.to_numpy()
            self.low, span = int(v[0]), int(v[-1]) - int(v[0]) + 1
            if span <= 2 * len(v):
                self.table = np.full(span, -1, np.int64)
                self.table[v - self.low] = np.arange(len(v))

    def __call__(self, values: pd.Series) -> np.ndarray:
        if self.table is None or not (isinstance(values.dtype, np.dtype) and values.dtype.kind in "iu"):
            if self.index is None:
                self.index = pd.Index(self.keys)
            return self.index.get_indexer(values)
        at = values.to_numpy().astype(np.int64, copy=False) - self.low
        inside = (at >= 0) & (at < len(self.table))
        if inside.all():
            return self.table[at]
        return np.where(inside, self.table[np.where(inside, at, 0)], -1)


def take_rows(values: pd.Series, rows: np.ndarray):
    """The values at row positions ``rows``, without the index a ``Series.take`` would build: a numpy array,
    or the column's own extension array."""
    return values.to_numpy()[rows] if isinstance(values.dtype, np.dtype) else values.array.take(rows)


def _coerce_column(table: Table, name: str, dtype: str, values: pd.Series) -> pd.Series:
    """Convert a raw column to its declared dtype, or raise naming the first value that does not fit."""
    where = f"table '{table.name}', column '{name}'"
    if dtype == "numeric":
        if pd.api.types.is_bool_dtype(values):
            return values.astype("float64")
        if values.dtype == np.float64:
            return values
        out = pd.to_numeric(values, errors="coerce")
        bad = out.isna() & values.notna()
        if bad.any():
            raise SchemaError(f"{where}: {first_bad(values, bad)} is not numeric")
        return out.astype("float64", copy=False)
    if dtype == "datetime":
        if pd.api.types.is_datetime64_any_dtype(values):
            out = values
        else:
            out = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
            bad = out.isna() & values.notna()
            if bad.any():
                raise SchemaError(f"{where}: {first_bad(values, bad)} is not a parseable timestamp")
        out = naive_utc(out)
        return out.astype("datetime64[ns]", copy=False)
    if dtype in ("category", "text"):
        return values.astype("string").astype(object).where(values.notna(), None)
    # keys keep their own type (integers or strings), nulls allowed for foreign keys
    if pd.api.types.is_float_dtype(values):
        ints = values.dropna()
        if (ints == ints.round()).all():
            return values.astype("Int64")
    return values


class Database:
    """Tables of a validated database folder, registered as DuckDB tables of the same names."""

    def __init__(self, schema: Schema, tables: dict[str, pd.DataFrame], folder: Path | None = None,
                 notes: list[str] | None = None):
        self.schema = schema
        self.tables = tables
        self.folder = folder
        self.notes = notes or []  # what loading decided for the user (inherited times), shown by validate
        self._con = None
        self._sandbox = None
        self.allow_outside_paths = False

    # ---- loading & validation -------------------------------------------
    @classmethod
    def load(cls, folder: str | Path, allow_outside_paths: bool = False) -> "Database":
        """The database folder's tables, validated. A table's source must be a file inside the folder unless
        the user opts in with ``allow_outside_paths`` (README, "What fourdb trusts")."""
        folder = Path(folder)
        schema = Schema.load(folder)
        tables = {t.name: cls._load_table(folder, t, allow_outside_paths) for t in schema.tables}
        notes = cls._check_keys(schema, tables)
        notes += inherit_times(schema, tables)
        notes += [u.note() for u in untimed_rows(schema, tables)]  # known at every cutoff: worth saying
        db = cls(schema, tables, folder, notes)
        db.allow_outside_paths = allow_outside_paths  # a task's files (candidates) are held to the same rule
        return db

    @staticmethod
    def _load_table(folder: Path, table: Table, allow_outside_paths: bool = False) -> pd.DataFrame:
        names, rows, read = _read_source(folder, table, allow_outside_paths)
        if rows == 0:
            raise SchemaError(f"table '{table.name}': source '{table.source}' has no rows")
        missing = [c for c in table.column_names if c not in names]
        if missing:
            raise SchemaError(
                f"table '{table.name}', column '{missing[0]}': declared in schema.yaml but not in "
                f"'{table.source}' (it has: {', '.join(map(str, names[:12]))})"
            )
        if table.time_column is not None:
            if table.time_column not in table.column_names:
                raise SchemaError(
                    f"table '{table.name}', column '{table.time_column}': time_column is not a declared column"
                )
            tdtype = table.column(table.time_column).dtype
            if tdtype != "datetime":
                raise SchemaError(
                    f"table '{table.name}', column '{table.time_column}': time_column must have dtype "
                    f"datetime, not {tdtype}"
                )
        # one column read and converted at a time; one block per column (no consolidated copy)
        out = pd.DataFrame({c.name: _read_column(table, c, read) for c in table.columns}, copy=False)
        pk = table.primary_key
        if pk is not None:
            nulls = out[pk].isna()
            if nulls.any():
                raise SchemaError(
                    f"table '{table.name}', column '{pk}': primary key is null in row "
                    f"{int(nulls.to_numpy().nonzero()[0][0]) + 1} ({int(nulls.sum())} null rows)"
                )
            if not ascending_integers(out[pk]):  # ascending keys are distinct; others are hashed
                dup = out[pk].duplicated()
                if dup.any():
                    first = out[pk][dup].iloc[0]
                    raise SchemaError(
                        f"table '{table.name}', column '{pk}': duplicate primary key {first!r} "
                        f"({int(dup.sum())} duplicate rows)"
                    )
        return out

    @staticmethod
    def _check_keys(schema: Schema, tables: dict[str, pd.DataFrame]) -> list[str]:
        """Every foreign key points to a primary key that holds its values; under ``on_dangling_foreign_key:
        null`` the dangling values become null, with a note each (else it is an error)."""
        notes = []
        for table in schema.tables:
            for fk in table.foreign_keys:
                where = f"table '{table.name}', column '{fk.name}'"
                if fk.link_table not in tables:
                    raise SchemaError(f"{where}: link_to '{fk.link_to}' names unknown table '{fk.link_table}'")
                target = schema.table(fk.link_table)
                if fk.link_column not in target.column_names:
                    raise SchemaError(
                        f"{where}: link_to '{fk.link_to}' names unknown column '{fk.link_column}' "
                        f"of table '{fk.link_table}'"
                    )
                if target.primary_key != fk.link_column:
                    raise SchemaError(
                        f"{where}: link_to '{fk.link_to}' must point to the primary key of "
                        f"'{fk.link_table}' (which is {target.primary_key!r})"
                    )
                values = tables[table.name][fk.name]
                parent = tables[fk.link_table][fk.link_column]
                dangling = values.notna() & ~values.isin(parent)
                if dangling.any():
                    notes.append(_dangling(schema, tables, table, fk, dangling))  # raises under the error policy
                    if pd.api.types.is_integer_dtype(values):
                        values = values.astype("Int64")  # int64 would turn into float64 and lose precision
                    tables[table.name][fk.name] = values.where(~dangling, None)
        return notes

    # ---- access ----------------------------------------------------------
    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = duckdb_connect()
            for name, df in self.tables.items():
                self._con.register(f"__df_{name}", df)
                self._con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "__df_{name}"')
        return self._con

    def sql(self, query: str) -> pd.DataFrame:
        """Your own SQL over the tables (a notebook's). SQL from a file goes through ``query``."""
        return self.con.execute(query).df()

    @property
    def sandbox(self) -> SQLSandbox:
        """The DuckDB instance that runs SQL from task files and manifests: the tables and nothing else."""
        if self._sandbox is None:
            self._sandbox = SQLSandbox(self.tables)
        return self._sandbox

    def reset_sandbox(self, settings: dict | None = None) -> None:
        """A new sandbox with fourdb's own DuckDB ``settings`` (a benchmark's), set before it is locked."""
        if self._sandbox is not None:
            self._sandbox.close()
        self._sandbox = SQLSandbox(self.tables, settings)

    def query(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
        """SQL from a file (``where`` names it), run in the sandbox: one query over the tables and
        ``relations``; anything else raises ``UntrustedInputError`` before it runs."""
        return self.sandbox.query(sql, where, relations)

    def time_of(self, table: str) -> np.ndarray | None:
        """Each row's known-at time as datetime64[ns], or None for a table without a time column."""
        tcol = self.schema.table(table).time_column
        return None if tcol is None else self.tables[table][tcol].to_numpy()

    def as_of(self, cutoff) -> "Database":
        """The database restricted to rows known at ``cutoff`` (rows with no time are always known)."""
        cutoff = pd.Timestamp(cutoff)
        tables = {}
        for t in self.schema.tables:
            df = self.tables[t.name]
            if t.time_column is not None:
                times = df[t.time_column]
                df = df[times.isna() | (times <= cutoff)]
            tables[t.name] = df.reset_index(drop=True)
        db = Database(self.schema, tables, self.folder, self.notes)
        db.allow_outside_paths = self.allow_outside_paths
        return db

    @property
    def max_time(self) -> pd.Timestamp:
        times = [self.tables[t.name][t.time_column].max() for t in self.schema.tables if t.time_column]
        return max(times) if times else pd.Timestamp.max

    @property
    def min_time(self) -> pd.Timestamp:
        times = [self.tables[t.name][t.time_column].min() for t in self.schema.tables if t.time_column]
        return min(times) if times else pd.Timestamp.min

    @staticmethod
    def time_label(t: Table) -> str:
        """When a table's rows become known: its time column, the parents it inherits from, or static."""
        if t.time_column is None:
            return "static"
        if t.inherited_from:
            return "from " + ", ".join(f"{t.column(fk).link_table} (via {fk})" for fk in t.inherited_from)
        return t.time_column

    def time_range(self, t: Table) -> str:
        """First and last row time of a timed table ('' for a static one), to the second where it has them."""
        if t.time_column is None:
            return ""
        times = self.tables[t.name][t.time_column].dropna()
        if times.empty:
            return "no row has a time"
        unit = "D" if (times == times.dt.normalize()).all() else "s"
        return f"{times.min().floor(unit)} .. {times.max().floor(unit)}".replace(" 00:00:00", "")

    def summary(self) -> pd.DataFrame:
        rows = []
        for t in self.schema.tables:
            rows.append(
                {
                    "table": t.name,
                    "rows": len(self.tables[t.name]),
                    "columns": len(t.columns),
                    "primary_key": t.primary_key,
                    "foreign_keys": ", ".join(f"{c.name}->{c.link_to}" for c in t.foreign_keys),
                    "time": self.time_label(t),
                    "time range": self.time_range(t),
                }
            )
        return pd.DataFrame(rows)


def _dangling(schema: Schema, tables: dict[str, pd.DataFrame], table: Table, fk: Column, dangling: pd.Series) -> str:
    """What to do about a foreign key's dangling values, with counts: fix ``link_to`` (naming a table whose key
    fits its values better, where one does) or make them null. Under the null policy a note; else the error."""
    n, total = int(dangling.sum()), int(tables[table.name][fk.name].notna().sum())
    fit = link_fit(schema, tables, table.name, fk).text()
    counts = f"{n:,} of {total:,} values ({n / total:.1%})"
    if schema.on_dangling_foreign_key == "null":
        return (f"table '{table.name}', column '{fk.name}': {counts} not found in {fk.link_to} were made null "
                f"(on_dangling_foreign_key: null){'; ' + fit if fit else ''}")
    first = tables[table.name][fk.name][dangling].iloc[0]
    raise SchemaError(
        f"table '{table.name}', column '{fk.name}': {n} dangling foreign-key values not found in {fk.link_to} "
        f"({counts}; first: {first!r}){'; ' + fit if fit else ''}. Either fix link_to if it names the wrong table, "
        f"or set on_dangling_foreign_key: null to make the {n:,} dangling values null")


INHERITED_TIME = "__inherited_time"  # the derived time column of a table that takes its parents' time


def inherit_times(schema: Schema, tables: dict[str, pd.DataFrame]) -> list[str]:
    """Give every table without its own time column that references timed tables its parents' time.

    A line item (an invoice line of a dated invoice) is known no earlier than what it points to, so
    a row takes the latest time of the parents its ``time_from`` foreign keys point to (missing where
    all of them are null). Undeclared, ``time_from`` is every foreign key to a timed table (timed by
    its own column or, in turn, by its parents); ``static: true`` keeps a table always visible. The
    time becomes a derived column (``INHERITED_TIME``, not a feature), so every path that reads
    ``time_column`` honours it. Returns a note per table that got one.
    """
    notes = []
    pending = {t.name: t for t in schema.tables if t.time_column is None and not t.static}
    for t in schema.tables:
        if t.time_column is not None and (t.time_from or t.static):
            raise SchemaError(f"table '{t.name}': has time_column '{t.time_column}', so it cannot also declare "
                              f"{'time_from' if t.time_from else 'static: true'}")
        if t.static and t.time_from:
            raise SchemaError(f"table '{t.name}': static: true and time_from contradict each other")
        for fk in t.time_from or ():
            if fk not in t.column_names or t.column(fk).dtype != "foreign_key":
                fks = [c.name for c in t.foreign_keys]
                raise SchemaError(f"table '{t.name}': time_from names '{fk}', which is not one of its foreign keys "
                                  f"({', '.join(fks) or 'none'})")
    timed = {t.name for t in schema.tables if t.time_column is not None}
    own_timed, date_dims = set(timed), date_dimensions(schema.tables, tables)
    for t in schema.tables:
        if t.static and any(fk.link_table in timed for fk in t.foreign_keys):
            parents = sorted({fk.link_table for fk in t.foreign_keys if fk.link_table in timed})
            notes.append(f"table '{t.name}' is declared static but references timed table(s) {', '.join(parents)}: "
                         f"its rows are visible at every cutoff")
    while pending:  # parents first: a chain (sub-lines -> lines -> invoices) resolves top down
        progressed = False
        for name, t in list(pending.items()):
            fks = [fk for fk in t.foreign_keys if t.time_from is None or fk.name in t.time_from]
            if any(fk.link_table in pending and fk.link_table != name for fk in fks):
                continue
            del pending[name]
            progressed = True
            sources = [fk for fk in fks if fk.link_table in timed and fk.link_table != name]
            if t.time_from is not None and len(sources) < len(t.time_from):
                bad = next(fk.name for fk in fks if fk not in sources)
                raise SchemaError(f"table '{t.name}': time_from '{bad}' points to '{t.column(bad).link_table}', "
                                  f"which has no time (own or inherited)")
            if t.time_from is None:  # a sale dated through the calendar takes the day, not its customer's time
                sources = time_sources(sources, date_dims, own_timed)
            if not sources:
                continue
            times = [_parent_times(schema, tables, fk, tables[t.name][fk.name]) for fk in sources]
            derived = pd.concat(times, axis=1).max(axis=1) if len(times) > 1 else times[0]
            tables[t.name][INHERITED_TIME] = derived.astype("datetime64[ns]").to_numpy()
            t.columns.append(Column(INHERITED_TIME, "datetime", derived=True))
            t.time_column = INHERITED_TIME
            t.inherited_from = [fk.name for fk in sources]
            timed.add(name)
            how = "declared" if t.time_from is not None else "inferred; declare time_from or static: true to change it"
            parents = ", ".join(f"{fk.link_table} (via {fk.name})" for fk in sources)
            notes.append(f"table '{name}' has no time column: a row takes the "
                         f"{'latest ' if len(sources) > 1 else ''}time of the {parents} row it references ({how})")
        if not progressed:  # a cycle of untimed tables: none of them can inherit from the others
            for name in pending:
                notes.append(f"table '{name}' has no time column and its time parents form a cycle; rows always "
                             f"visible")
            break
    return notes


def _parent_times(schema: Schema, tables: dict[str, pd.DataFrame], fk, values: pd.Series) -> pd.Series:
    parent = schema.table(fk.link_table)
    ptime = pd.Series(tables[parent.name][parent.time_column].to_numpy(),
                      index=pd.Index(tables[parent.name][parent.primary_key]))
    return pd.Series(ptime.reindex(values.to_numpy()).to_numpy(), index=values.index)


def write_database(folder: str | Path, schema: Schema, tables: dict[str, pd.DataFrame]) -> Path:
    """Write tables as parquet plus schema.yaml; used by the built-in datasets and importers."""
    from fourdb.utils import atomic_write_bytes

    import io

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for t in schema.tables:
        buf = io.BytesIO()
        tables[t.name].to_parquet(buf, index=False)
        atomic_write_bytes(folder / t.source, buf.getvalue())
    schema.save(folder)
    return folder
