"""A validated relational database held in DuckDB, with "the database as of time t".

Everything a user can get wrong in a database folder is checked here, before any work starts, and
reported as one line naming the table, the column and the first offending value.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from fourdb.errors import SchemaError
from fourdb.rdb.schema import Schema, Table
from fourdb.utils import duckdb_connect


def _first_bad(values: pd.Series, bad_mask: pd.Series) -> str:
    idx = bad_mask.to_numpy().nonzero()[0]
    first = idx[0]
    return f"value {values.iloc[first]!r} (row {first + 1}; {len(idx)} bad rows)"


def _read_source(folder: Path, table: Table) -> pd.DataFrame:
    path = folder / table.source
    if not path.exists():
        raise SchemaError(f"table '{table.name}': source file '{table.source}' not found in {folder}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        if suffix in (".csv", ".tsv"):
            return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", low_memory=False)
    except Exception as e:  # noqa: BLE001 - any reader failure is a user-facing bad file
        raise SchemaError(f"table '{table.name}': cannot read '{table.source}': {e}") from None
    raise SchemaError(f"table '{table.name}': source '{table.source}' must be .parquet or .csv")


def _coerce_column(table: Table, name: str, dtype: str, values: pd.Series) -> pd.Series:
    """Convert a raw column to its declared dtype, or raise naming the first value that does not fit."""
    where = f"table '{table.name}', column '{name}'"
    if dtype == "numeric":
        if pd.api.types.is_bool_dtype(values):
            return values.astype("float64")
        out = pd.to_numeric(values, errors="coerce")
        bad = out.isna() & values.notna()
        if bad.any():
            raise SchemaError(f"{where}: {_first_bad(values, bad)} is not numeric")
        return out.astype("float64")
    if dtype == "datetime":
        if pd.api.types.is_datetime64_any_dtype(values):
            out = values
        else:
            out = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
            bad = out.isna() & values.notna()
            if bad.any():
                raise SchemaError(f"{where}: {_first_bad(values, bad)} is not a parseable timestamp")
        if getattr(out.dt, "tz", None) is not None:
            out = out.dt.tz_convert("UTC").dt.tz_localize(None)
        return out.astype("datetime64[ns]")
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

    def __init__(self, schema: Schema, tables: dict[str, pd.DataFrame], folder: Path | None = None):
        self.schema = schema
        self.tables = tables
        self.folder = folder
        self._con = None

    # ---- loading & validation -------------------------------------------
    @classmethod
    def load(cls, folder: str | Path) -> "Database":
        folder = Path(folder)
        schema = Schema.load(folder)
        tables = {t.name: cls._load_table(folder, t) for t in schema.tables}
        cls._check_keys(schema, tables)
        return cls(schema, tables, folder)

    @staticmethod
    def _load_table(folder: Path, table: Table) -> pd.DataFrame:
        raw = _read_source(folder, table)
        if len(raw) == 0:
            raise SchemaError(f"table '{table.name}': source '{table.source}' has no rows")
        missing = [c for c in table.column_names if c not in raw.columns]
        if missing:
            raise SchemaError(
                f"table '{table.name}', column '{missing[0]}': declared in schema.yaml but not in "
                f"'{table.source}' (it has: {', '.join(map(str, raw.columns[:12]))})"
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
        out = pd.DataFrame(
            {c.name: _coerce_column(table, c.name, c.dtype, raw[c.name]) for c in table.columns}
        )
        pk = table.primary_key
        if pk is not None:
            nulls = out[pk].isna()
            if nulls.any():
                raise SchemaError(
                    f"table '{table.name}', column '{pk}': primary key is null in row "
                    f"{int(nulls.to_numpy().nonzero()[0][0]) + 1} ({int(nulls.sum())} null rows)"
                )
            dup = out[pk].duplicated()
            if dup.any():
                first = out[pk][dup].iloc[0]
                raise SchemaError(
                    f"table '{table.name}', column '{pk}': duplicate primary key {first!r} "
                    f"({int(dup.sum())} duplicate rows)"
                )
        return out

    @staticmethod
    def _check_keys(schema: Schema, tables: dict[str, pd.DataFrame]) -> None:
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
                    n = int(dangling.sum())
                    if schema.on_dangling_foreign_key == "null":
                        if pd.api.types.is_integer_dtype(values):
                            values = values.astype("Int64")  # int64 would turn into float64 and lose precision
                        tables[table.name][fk.name] = values.where(~dangling, None)
                        continue
                    first = values[dangling].iloc[0]
                    raise SchemaError(
                        f"{where}: {n} dangling foreign-key values not found in {fk.link_to} "
                        f"(first: {first!r}); set on_dangling_foreign_key: null to drop them"
                    )

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
        return self.con.execute(query).df()

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
        return Database(self.schema, tables, self.folder)

    @property
    def max_time(self) -> pd.Timestamp:
        times = [self.tables[t.name][t.time_column].max() for t in self.schema.tables if t.time_column]
        return max(times) if times else pd.Timestamp.max

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
                    "time_column": t.time_column,
                }
            )
        return pd.DataFrame(rows)


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
