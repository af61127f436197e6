"""Date dimensions: a calendar table (one row per day, keyed, with one date column) that other tables reference
instead of holding a date of their own, as a warehouse's facts do (``ss_sold_date_sk`` -> ``date_dim``).

A row that points to a day takes its time from that day. Its other parents (the customer, the web page) are
dimensions whose own times are dates of their own (a first purchase, a page's creation), not the row's, so
where a table references a date dimension its time comes from its date keys and from parents with a time
column of their own (an order), never from parents that are themselves dated through the calendar.
"""
from __future__ import annotations

import pandas as pd

from fourdb.rdb.schema import Column, Table

MIN_DAYS = 28  # fewer rows than this is a short list of dates, not a calendar
COVERAGE = 0.9  # of the days between its first and its last, the share a calendar has a row for


def is_date_dimension(table: Table, frame: pd.DataFrame) -> bool:
    """A keyed table whose only datetime column is its time column, holding distinct whole days that cover
    (nearly) every day between the first and the last."""
    if table.primary_key is None or table.time_column is None or table.inherited_from:
        return False
    dates = [c.name for c in table.columns if c.dtype == "datetime" and not c.derived]
    if dates != [table.time_column] or len(frame) < MIN_DAYS:
        return False
    days = frame[table.time_column]
    if days.isna().any():
        return False
    span = (days.max() - days.min()) // pd.Timedelta(days=1) + 1
    if not COVERAGE * span <= len(days) <= span:  # a table of events has many rows a day: refused here, cheaply
        return False
    return bool((days == days.dt.normalize()).all() and days.is_unique)


def date_dimensions(tables: list[Table], frames: dict[str, pd.DataFrame]) -> set[str]:
    """The names of the date dimensions among ``tables``."""
    return {t.name for t in tables if is_date_dimension(t, frames[t.name])}


def time_sources(fks: list[Column], date_dims: set[str], own_timed: set[str]) -> list[Column]:
    """Of a table's foreign keys to timed parents, those its time comes from: all of them; or, where some point to
    a date dimension, those and the ones to parents with a time column of their own (``own_timed``)."""
    if not any(fk.link_table in date_dims for fk in fks):
        return fks
    return [fk for fk in fks if fk.link_table in own_timed]
