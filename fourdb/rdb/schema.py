"""The schema of a relational database: tables, typed columns, keys and time columns.

A database folder holds one data file per table (parquet or CSV) and a ``schema.yaml``:

    name: shop
    on_dangling_foreign_key: error      # or: null (dangling values become NULL)
    tables:
      - name: users
        source: users.parquet
        time_column: signup_at          # the moment a row's values are all known (optional)
        columns:
          - {name: user_id, dtype: primary_key}
          - {name: signup_at, dtype: datetime}
          - {name: country, dtype: category}
      - name: orders
        source: orders.csv
        time_column: ordered_at
        columns:
          - {name: order_id, dtype: primary_key}
          - {name: user_id, dtype: foreign_key, link_to: users.user_id}
          - {name: ordered_at, dtype: datetime}
          - {name: amount, dtype: numeric}
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from fourdb.errors import SchemaError, did_you_mean  # noqa: F401 (did_you_mean: imported from here too)
from fourdb.untrusted import check_name, read_yaml

DTYPES = ("numeric", "category", "datetime", "text", "primary_key", "foreign_key")
FEATURE_DTYPES = ("numeric", "category", "datetime", "text")
DANGLING_POLICIES = ("error", "null")
SCHEMA_KEYS = ("name", "tables", "on_dangling_foreign_key")
TABLE_KEYS = ("name", "source", "time_column", "time_from", "static", "columns")
COLUMN_KEYS = ("name", "dtype", "link_to", "inferred", "feature")


def check_keys(raw: dict, known, where: str, error: type = SchemaError) -> None:
    """Refuse a key that is not one of ``known``: a typo must not silently drop a setting."""
    for key in raw:
        if key not in known:
            raise error(f"{where}: unknown key '{key}'{did_you_mean(key, known)} "
                              f"(allowed: {', '.join(known)})")


def text_name(value, where: str, noun: str) -> str:
    """A name from schema.yaml as text: a YAML number (a table called 2019) is its text; a list, a mapping, an
    empty name or one with a NUL or control character is refused in one line (``check_name``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return check_name(value, where, noun)


def file_stem(name: str, fallback: str) -> str:
    """A name from input as a file name's stem, where the file is fourdb's own (a diagram, a cache entry): the
    name itself where it is plain, else with every character outside letters, digits, ``.``, ``_`` and ``-``
    made ``_`` (no separator, no leading dot, nothing a shell or Hydra reads); ``fallback`` if nothing is left."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".-")
    return stem or fallback


@dataclass
class Column:
    name: str
    dtype: str
    link_to: str | None = None  # "Table.column" for foreign keys
    inferred: bool = False  # key found by inference rather than declared
    # false: kept for tasks to read, never a model's input (an import marks columns that identify a row or a
    # person so, see fourdb.rdb.identifiers); only a numeric, category, datetime or text column, not the time
    feature: bool = True
    derived: bool = False  # computed at load (an inherited time), never written to schema.yaml nor a feature

    @property
    def link_table(self) -> str:
        return self.link_to.split(".", 1)[0]

    @property
    def link_column(self) -> str:
        return self.link_to.split(".", 1)[1]


@dataclass
class Table:
    name: str
    source: str
    columns: list[Column]
    time_column: str | None = None
    # a table without its own time takes the latest time of the parents these foreign keys point to
    # (None: inferred at load from the foreign keys to timed tables; see Database.load)
    time_from: list[str] | None = None
    static: bool = False  # declared a true dimension table: rows always known, even if it references timed ones
    inherited_from: list[str] = field(default_factory=list)  # resolved at load: foreign keys its time comes from

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise SchemaError(f"table '{self.name}': no column '{name}'")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def primary_key(self) -> str | None:
        keys = [c.name for c in self.columns if c.dtype == "primary_key"]
        return keys[0] if keys else None

    @property
    def foreign_keys(self) -> list[Column]:
        return [c for c in self.columns if c.dtype == "foreign_key"]

    @property
    def feature_columns(self) -> list[Column]:
        return [c for c in self.columns if c.dtype in FEATURE_DTYPES and not c.derived and c.feature]

    @property
    def not_features(self) -> list[Column]:
        """The columns schema.yaml marks ``feature: false``."""
        return [c for c in self.columns if not c.feature]

    @property
    def declared_columns(self) -> list[Column]:
        return [c for c in self.columns if not c.derived]

    @property
    def has_own_time(self) -> bool:
        """A time column of its own, not one inherited from its parents (which RelBench has no column for)."""
        return self.time_column is not None and not self.inherited_from


@dataclass
class Schema:
    name: str
    tables: list[Table]
    on_dangling_foreign_key: str = "error"

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise SchemaError(f"schema '{self.name}': no table '{name}'")

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    # ---- YAML round trip -------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict, where: str = "schema.yaml") -> "Schema":
        if not isinstance(raw, dict):
            raise SchemaError(f"{where}: expected a mapping with 'name' and 'tables'")
        check_keys(raw, SCHEMA_KEYS, where)
        tables_raw = raw.get("tables")
        if not tables_raw:
            raise SchemaError(f"{where}: no tables declared")
        if not isinstance(tables_raw, list):
            raise SchemaError(f"{where}: 'tables' must be a list of tables")
        policy = raw.get("on_dangling_foreign_key", "error")
        policy = "null" if policy is None else policy  # YAML `null` and the string "null" mean the same
        if policy not in DANGLING_POLICIES:
            raise SchemaError(
                f"{where}: on_dangling_foreign_key must be one of {DANGLING_POLICIES}, got '{policy}'"
            )
        tables = []
        seen = set()
        for i, t in enumerate(tables_raw):
            if not isinstance(t, dict) or "name" not in t:
                raise SchemaError(f"{where}: table #{i + 1} has no name")
            tname = text_name(t["name"], f"{where}, table #{i + 1}", "table name")
            check_keys(t, TABLE_KEYS, f"{where}, table '{tname}'")
            if '"' in tname:  # every table is a DuckDB view named in double quotes
                raise SchemaError(f"{where}: table '{tname}': a table name cannot hold a double quote (\")")
            if tname in seen:
                raise SchemaError(f"{where}: table '{tname}' is declared twice")
            seen.add(tname)
            if "source" not in t:
                raise SchemaError(f"table '{tname}': no source file declared")
            source = text_name(t["source"], f"{where}, table '{tname}'", "source")
            cols = []
            for c in t.get("columns") or []:
                if not isinstance(c, dict) or "name" not in c or "dtype" not in c:
                    raise SchemaError(f"table '{tname}': every column needs 'name' and 'dtype'")
                c = {**c, "name": text_name(c["name"], f"{where}, table '{tname}'", "column name")}
                if c.get("link_to") is not None:
                    c["link_to"] = text_name(c["link_to"], f"{where}, table '{tname}', column '{c['name']}'",
                                             "link_to")
                check_keys(c, COLUMN_KEYS, f"{where}, table '{tname}', column '{c['name']}'")
                if c["dtype"] not in DTYPES:
                    raise SchemaError(
                        f"table '{tname}', column '{c['name']}': unknown dtype '{c['dtype']}' "
                        f"(expected one of {', '.join(DTYPES)})"
                    )
                if c["dtype"] == "foreign_key":
                    link = c.get("link_to")
                    if not link or "." not in str(link):
                        raise SchemaError(
                            f"table '{tname}', column '{c['name']}': foreign_key needs "
                            f"link_to: Table.column"
                        )
                feature = c.get("feature", True)
                if not isinstance(feature, bool) or not feature and c["dtype"] not in FEATURE_DTYPES:
                    raise SchemaError(f"table '{tname}', column '{c['name']}': feature must be true or false, and "
                                      f"false only for a {', '.join(FEATURE_DTYPES)} column (got {feature!r} on a "
                                      f"{c['dtype']} column)")
                cols.append(Column(c["name"], c["dtype"], c.get("link_to"), bool(c.get("inferred", False)), feature=feature))
            if not cols:
                raise SchemaError(f"table '{tname}': no columns declared")
            if sum(c.dtype == "primary_key" for c in cols) > 1:
                raise SchemaError(f"table '{tname}': more than one primary_key column")
            time_from = t.get("time_from")
            if time_from is not None:
                time_from = [time_from] if isinstance(time_from, str) else time_from
                if not isinstance(time_from, list):
                    raise SchemaError(f"table '{tname}': time_from must be a foreign key or a list of them")
                time_from = [text_name(x, f"{where}, table '{tname}'", "time_from") for x in time_from]
            time_column = t.get("time_column")
            if time_column is not None:
                time_column = text_name(time_column, f"{where}, table '{tname}'", "time_column")
            if any(c.name == time_column and not c.feature for c in cols):  # it says when a row is known
                raise SchemaError(f"table '{tname}': the time column '{time_column}' cannot be feature: false")
            static = t.get("static", False)
            if not isinstance(static, bool):
                raise SchemaError(f"table '{tname}': static must be true or false, got {static!r}")
            tables.append(Table(tname, source, cols, time_column, time_from, static))
        name = raw.get("name")
        return cls(text_name("database" if name is None else name, where, "schema name"), tables, policy)

    def to_dict(self) -> dict:
        out = {"name": self.name, "on_dangling_foreign_key": self.on_dangling_foreign_key}
        out["tables"] = []
        for t in self.tables:
            cols = []
            for c in t.declared_columns:
                d = {"name": c.name, "dtype": c.dtype}
                if c.link_to:
                    d["link_to"] = c.link_to
                if c.inferred:
                    d["inferred"] = True
                if not c.feature:
                    d["feature"] = False
                cols.append(d)
            td = {"name": t.name, "source": t.source}
            if t.time_column and not t.column(t.time_column).derived:
                td["time_column"] = t.time_column
            if t.time_from:
                td["time_from"] = list(t.time_from)
            if t.static:
                td["static"] = True
            td["columns"] = cols
            out["tables"].append(td)
        return out

    @classmethod
    def load(cls, folder: str | Path) -> "Schema":
        path = Path(folder) / "schema.yaml"
        if not Path(folder).is_dir():
            raise SchemaError(f"{folder}: not a folder")
        if not path.exists():
            raise SchemaError(f"{folder}: no schema.yaml")
        return cls.from_dict(read_yaml(path, str(path), error=SchemaError), str(path))

    def save(self, folder: str | Path) -> None:
        from fourdb.utils import atomic_write_text, yaml_text

        atomic_write_text(Path(folder) / "schema.yaml", yaml_text(self.to_dict()))
