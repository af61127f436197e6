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

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fourdb.errors import SchemaError

DTYPES = ("numeric", "category", "datetime", "text", "primary_key", "foreign_key")
FEATURE_DTYPES = ("numeric", "category", "datetime", "text")
DANGLING_POLICIES = ("error", "null")


@dataclass
class Column:
    name: str
    dtype: str
    link_to: str | None = None  # "Table.column" for foreign keys
    inferred: bool = False  # key found by inference rather than declared

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
        return [c for c in self.columns if c.dtype in FEATURE_DTYPES]


@dataclass
class Schema:
    name: str
    tables: list[Table]
    on_dangling_foreign_key: str = "error"
    extra: dict = field(default_factory=dict)

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
        tables_raw = raw.get("tables")
        if not tables_raw:
            raise SchemaError(f"{where}: no tables declared")
        policy = raw.get("on_dangling_foreign_key", "error")
        if policy not in DANGLING_POLICIES:
            raise SchemaError(
                f"{where}: on_dangling_foreign_key must be one of {DANGLING_POLICIES}, got '{policy}'"
            )
        tables = []
        seen = set()
        for i, t in enumerate(tables_raw):
            if not isinstance(t, dict) or "name" not in t:
                raise SchemaError(f"{where}: table #{i + 1} has no name")
            tname = str(t["name"])
            if tname in seen:
                raise SchemaError(f"{where}: table '{tname}' is declared twice")
            seen.add(tname)
            if "source" not in t:
                raise SchemaError(f"table '{tname}': no source file declared")
            cols = []
            for c in t.get("columns") or []:
                if not isinstance(c, dict) or "name" not in c or "dtype" not in c:
                    raise SchemaError(f"table '{tname}': every column needs 'name' and 'dtype'")
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
                link = c.get("link_to")
                cols.append(Column(str(c["name"]), c["dtype"], None if link is None else str(link),
                                   bool(c.get("inferred", False))))
            if not cols:
                raise SchemaError(f"table '{tname}': no columns declared")
            if sum(c.dtype == "primary_key" for c in cols) > 1:
                raise SchemaError(f"table '{tname}': more than one primary_key column")
            tables.append(Table(tname, str(t["source"]), cols, t.get("time_column")))
        known = {"name", "tables", "on_dangling_foreign_key"}
        extra = {k: v for k, v in raw.items() if k not in known}
        return cls(str(raw.get("name", "database")), tables, policy, extra)

    def to_dict(self) -> dict:
        out = {"name": self.name, "on_dangling_foreign_key": self.on_dangling_foreign_key, **self.extra}
        out["tables"] = []
        for t in self.tables:
            cols = []
            for c in t.columns:
                d = {"name": c.name, "dtype": c.dtype}
                if c.link_to:
                    d["link_to"] = c.link_to
                if c.inferred:
                    d["inferred"] = True
                cols.append(d)
            td = {"name": t.name, "source": t.source}
            if t.time_column:
                td["time_column"] = t.time_column
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
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise SchemaError(f"{path}: not valid YAML ({e.__class__.__name__})") from None
        return cls.from_dict(raw, str(path))

    def save(self, folder: str | Path) -> None:
        from fourdb.utils import atomic_write_text

        atomic_write_text(Path(folder) / "schema.yaml", yaml.safe_dump(self.to_dict(), sort_keys=False))
