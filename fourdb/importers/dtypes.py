"""The fourdb dtype of a source column (numeric, datetime, category or text) and its values converted to it."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from fourdb.utils import naive_utc

CATEGORY_MAX_UNIQUE = 50  # strings with at most this many distinct values (or 20% of rows) are categories
TEXT_MIN_LENGTH = 30  # strings this long on average are text
_DATE_LIKE = re.compile(r"^\s*(\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{4}/\d{1,2}/\d{1,2})([ T]\d.*)?\s*$")
_SQL_TIME_TYPES = re.compile(r"DATE|TIME", re.IGNORECASE)


def is_nested(values: pd.Series) -> bool:
    s = values.dropna()
    return len(s) > 0 and isinstance(s.iloc[0], (list, tuple, dict, np.ndarray, bytes, bytearray, memoryview))


def parse_datetimes(values: pd.Series, numbers_as_ns: bool = False) -> pd.Series | None:
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
    out = naive_utc(out)
    return out.astype("datetime64[ns]")


def infer_dtype(values: pd.Series, sql_type: str = "") -> str | None:
    """The fourdb dtype of a non-key column: numeric, datetime, category or text (None: cannot be kept)."""
    if is_nested(values):
        return None
    if pd.api.types.is_datetime64_any_dtype(values):
        return "datetime"
    if _SQL_TIME_TYPES.search(sql_type or "") and parse_datetimes(values) is not None:
        return "datetime"
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return "numeric"
    s = values.dropna().astype(str)
    if len(s) == 0:
        return "category"
    sample = s.iloc[:: max(1, len(s) // 1000)]
    if sample.str.match(_DATE_LIKE).all() and parse_datetimes(values) is not None:
        return "datetime"
    if pd.to_numeric(s, errors="coerce").notna().all():
        return "numeric"
    if s.str.len().mean() >= TEXT_MIN_LENGTH:
        return "text"
    return "category" if s.nunique() <= max(CATEGORY_MAX_UNIQUE, 0.2 * len(s)) else "text"


def convert_values(values: pd.Series, dtype: str) -> pd.Series:
    """A source column's values as a column of ``dtype`` holds them."""
    if dtype == "datetime":
        return parse_datetimes(values, numbers_as_ns=True)
    if dtype == "numeric" and not pd.api.types.is_numeric_dtype(values):
        return pd.to_numeric(values, errors="coerce")
    if dtype in ("category", "text"):  # as strings: a SQLite column may mix numbers and text, parquet cannot
        return values.map(str, na_action="ignore").astype(object).where(values.notna(), None)
    return values
