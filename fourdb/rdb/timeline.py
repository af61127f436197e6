"""Where a database's data ends, and which rows have no time.

A dimension table may carry times that are not events: a date dimension runs to 2100, a catalog page has an
end date in the coming year. A dimension is what other tables point to, so the data's last event is the latest
time of a timed table that no other table references (a fact: a sale, a return, a visit, a line item dated
through a date key); a timed table that others reference counts only up to that point (``last_event``). A
task's cutoffs stop there unless its file says ``end``, so no label window runs past what the data can show.

A row of a timed table whose time is missing (an empty time column, or a time key that is null or finds no
parent time) is known at every cutoff; ``untimed_rows`` counts them, and loading says so.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class LastEvent:
    time: pd.Timestamp
    table: str  # the table it comes from


def _referenced(schema) -> set[str]:
    """The tables another table's foreign keys point to (a table pointing to itself does not count)."""
    return {fk.link_table for t in schema.tables for fk in t.foreign_keys if fk.link_table != t.name}


def _last_time(db, table) -> pd.Timestamp | None:
    times = db.tables[table.name][table.time_column]
    last = times.max()
    return None if pd.isna(last) else pd.Timestamp(last)


def last_event(db, tables=None) -> LastEvent | None:
    """The data's last event (its time and table), over ``tables`` (names; default every table): a fact's last
    time, or a dimension's (a timed table others reference: a date dimension) capped at the last time of the
    facts among ``tables`` (of every fact where none is). None where none of them has a time."""
    timed = [t for t in db.schema.tables if t.time_column is not None and not t.static]
    lasts = {name: last for name, last in ((t.name, _last_time(db, t)) for t in timed) if last is not None}
    timed = [t.name for t in timed if t.name in lasts]  # a table whose every time is missing has no last event
    chosen = [name for name in timed if tables is None or name in set(tables)]
    dimensions = _referenced(db.schema)
    facts = [lasts[n] for n in chosen if n not in dimensions] or [lasts[n] for n in timed if n not in dimensions]
    facts_end = max(facts) if facts else None
    best = None
    for name in sorted(chosen, key=lambda n: n in dimensions):  # a tie goes to the fact, not a dimension capped at it
        last = lasts[name]
        if facts_end is not None and name in dimensions:
            last = min(last, facts_end)  # a dimension's future rows (dates to 2100) are not events
        if best is None or last > best.time:
            best = LastEvent(last, name)
    return best


@dataclass(frozen=True)
class Untimed:
    table: str
    rows: int
    total: int
    why: str  # which column, or which keys, leave the time missing

    @property
    def share(self) -> float:
        return self.rows / self.total if self.total else 0.0

    def note(self) -> str:
        return (f"table '{self.table}': {self.rows:,} of {self.total:,} rows ({self.share:.1%}) have no time "
                f"({self.why}), so they are known at every cutoff")


def untimed_rows(schema, tables: dict[str, pd.DataFrame]) -> list[Untimed]:
    """Per timed table, the rows whose time is missing: its own time column empty, or (an inherited time) every
    key it takes its time from null or pointing at a parent row without one."""
    out = []
    for t in schema.tables:
        if t.time_column is None or t.static:
            continue
        missing = int(tables[t.name][t.time_column].isna().sum())
        if not missing:
            continue
        if t.inherited_from:
            keys = ", ".join(f"{fk} -> {t.column(fk).link_table}" for fk in t.inherited_from)
            why = f"the keys its time comes from ({keys}) are null or find no parent time"
        else:
            why = f"'{t.time_column}' is empty"
        out.append(Untimed(t.name, missing, len(tables[t.name]), why))
    return out
