"""The values a task file holds, each read with a one-line error naming its field: durations, timestamps,
lists of names, (table, column) pairs, positive whole numbers."""
from __future__ import annotations

import re
from datetime import date

import pandas as pd

from fourdb.errors import TaskError
from fourdb.untrusted import check_name, safe_text

# Duration units that pandas.Timedelta and DuckDB's INTERVAL both read, and read alike (a window is used
# by both). Years and months have no fixed length, so neither reads them as a duration.
DURATION_UNITS = {"w", "W", "d", "D", "day", "days", "h", "hr", "hour", "hours", "m", "min", "minute", "minutes",
                  "s", "sec", "second", "seconds", "ms", "millisecond", "milliseconds",
                  "us", "microsecond", "microseconds"}
ACCEPTED_UNITS = "w, d/days, h/hours, min/minutes, s/seconds, ms, us"
_CALENDAR_UNITS = {"y", "Y", "yr", "yrs", "year", "years", "M", "mo", "mon", "mons", "month", "months"}


def name(value, field: str, where: str) -> str:
    """A table, column or task name: text (a YAML number is its text), without NUL or control characters. It is
    quoted wherever SQL names it and checked as a plain file name wherever it names a file."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return check_name(value, where, field)


def names(value, field: str, where: str) -> list:
    """A list of names from YAML, where one name may be written without brackets."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise TaskError(f"{where}: {field} must be a list, e.g. [a, b], got {short(value)}")
    return [name(v, field, where) for v in value]


def column_pairs(value, where: str) -> list[tuple[str, str]]:
    """``remove_columns``: [[table, column], ...]."""
    if value in (None, ""):
        return []
    if not isinstance(value, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        raise TaskError(f"{where}: remove_columns must be a list of [table, column] pairs, got {short(value)}")
    return [(name(t, "remove_columns", where), name(c, "remove_columns", where)) for t, c in value]


def short(value) -> str:
    """A value from a file as a short printable line, for an error naming it."""
    return repr(safe_text(value, 80)) if isinstance(value, str) else safe_text(repr(value), 80)


def duration(value, field: str, where: str) -> pd.Timedelta:
    """A positive duration such as '14 days', in units pandas and DuckDB both read."""
    accepted = f"accepted units: {ACCEPTED_UNITS}"
    if not isinstance(value, str):  # a bare number would be read as nanoseconds
        raise TaskError(f"{where}: {field} must be a duration with a unit, e.g. '14 days', got {value!r} ({accepted})")
    for unit in re.findall(r"[^\d\s.:+-]+", value):
        if unit not in DURATION_UNITS:
            note = "; years and months have no fixed length, write e.g. '365.25 days'" \
                if unit in _CALENDAR_UNITS else ""
            raise TaskError(f"{where}: {field} '{value}' has an unknown unit '{unit}' ({accepted}{note})")
    try:
        delta = pd.Timedelta(value)
    except ValueError:
        raise TaskError(f"{where}: {field} '{value}' is not a duration, e.g. '14 days' ({accepted})") from None
    if pd.isna(delta) or delta <= pd.Timedelta(0):
        raise TaskError(f"{where}: {field} must be positive, got '{value}'")
    return delta


def timestamp(value, field: str, where: str) -> pd.Timestamp:
    """A point in time written as a date (2020-10-01) or a date and time (2020-10-01 12:00)."""
    stamp = pd.NaT
    if isinstance(value, (str, date)):  # a bare number would be read as nanoseconds since 1970
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError):
            pass
    if pd.isna(stamp):
        raise TaskError(f"{where}: {field} '{safe_text(value, 80)}' is not a timestamp, e.g. 2020-10-01 or "
                        f"2020-10-01 12:00")
    if stamp.tz is not None:  # database times are naive UTC; comparing with an aware one fails later
        raise TaskError(f"{where}: {field} '{value}' has a time zone; write it in UTC without one")
    if not pd.Timestamp.min <= stamp <= pd.Timestamp.max:  # times are compared at nanoseconds, as the data's are
        raise TaskError(f"{where}: {field} '{value}' is outside the times fourdb can hold "
                        f"({pd.Timestamp.min.date()} to {pd.Timestamp.max.date()})")
    return stamp.as_unit("ns")


def positive_int(value, field: str, where: str, most: int | None = None) -> int:
    """A positive whole number, at most ``most`` where a larger one would only ask for more work."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskError(f"{where}: {field} must be a positive whole number, got {safe_text(repr(value), 60)}")
    if most is not None and value > most:
        raise TaskError(f"{where}: {field} is {value:,}, over the {most:,} fourdb allows")
    return value


def sql_text(value, field: str, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise TaskError(f"{where}: {field} must be {what}, got {value!r}")
    return value
