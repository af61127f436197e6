"""Infer keys a source does not declare: a primary key by its name (id, <table>_id) and uniqueness, and
foreign keys by their names and by every value appearing in the parent's key."""
from __future__ import annotations

import pandas as pd

from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.dtypes import is_nested


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


def usable_key(values: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_datetime64_any_dtype(values) or is_nested(values):
        return False
    s = values.dropna()
    return not (pd.api.types.is_float_dtype(s) and not (s == s.round()).all())


def is_unique_key(values: pd.Series) -> bool:
    return len(values) > 0 and values.notna().all() and values.is_unique and usable_key(values)


def missing_references(child: pd.Series, parent: pd.Series) -> int:
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
        if col is not None and is_unique_key(frame[col]):
            return col
    return None


def infer_foreign_keys(tables: dict[str, SourceTable], report: ImportReport | None = None) -> None:
    """Add foreign keys named <other>_id (or like another table's primary key) whose values all appear there."""
    for t in tables.values():
        for col in t.frame.columns:
            if col == t.primary_key or col in t.foreign_keys or not usable_key(t.frame[col]):
                continue
            low = str(col).lower()
            if low == "id" or t.frame[col].notna().sum() == 0:
                continue
            by_name = [u for u in tables.values() if u is not t and u.primary_key
                       and low in {f"{f}{sep}id" for f in _forms(u.name) for sep in ("_", "")}]
            by_pk = [u for u in tables.values() if u is not t and u.primary_key and u not in by_name
                     and str(u.primary_key).lower() == low and low != "id"]
            for u in by_name + by_pk:
                n = missing_references(t.frame[col], u.frame[u.primary_key])
                if n == 0:
                    t.foreign_keys[col] = (u.name, u.primary_key)
                    t.inferred_fks.add(col)
                    break
                if report is not None:
                    report.notes.append(f"table '{t.name}', column '{col}': looks like a key to "
                                        f"{u.name}.{u.primary_key} but {n} values are not there; left a plain column")
