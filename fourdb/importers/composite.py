"""Composite keys: a table left without a single-column key whose rows are told apart by two or three columns
together (a sale line by its item and ticket number, an inventory count by its date, item and warehouse).

fourdb keys a table by one column, so such a table keeps no primary key: nothing can link to its rows, and each
row is its own entity. Its parts stay columns (a part that references another table is a foreign key; a ticket
number is a number), and the composite key is said, never dropped silently: in the import's output and in
schema.yaml. A composite whose parts' names and values match another table's composite (a return's item and
ticket are its sale's) is a composite foreign key, which fourdb cannot link; that is said too.
"""
from __future__ import annotations

from itertools import combinations

from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.containment import ValueChecks
from fourdb.importers.keynames import core, split_key, table_prefix
from fourdb.importers.keys import MIN_SHARE, usable_key

MAX_PARTS = 3  # a composite of more columns than this is not looked for
MAX_COLUMNS = 12  # key-like columns of one table considered (the first ones)
MAX_CHECKS = 64  # column sets checked per table
NUMBER_WORDS = ("number", "num", "no", "nbr", "code")  # a ticket or order number: a key part naming no table


def _key_like(t: SourceTable, col: str, prefix: str | None) -> bool:
    values = t.frame[col]
    if not usable_key(values) or values.isna().any():
        return False
    w = core(col, prefix)
    return col in t.foreign_keys or split_key(w) is not None or bool(w and w[-1] in NUMBER_WORDS)


def _key_columns(t: SourceTable) -> list[str]:
    """The key-like columns without nulls a composite key is made of, at most ``MAX_COLUMNS`` (those that
    reference no table, a ticket number, kept first), in column order."""
    prefix = table_prefix(t.frame.columns)
    cols = [c for c in t.frame.columns if _key_like(t, c, prefix)]
    kept = set(sorted(cols, key=lambda c: c in t.foreign_keys)[:MAX_COLUMNS])
    return [c for c in cols if c in kept]


def _column_sets(t: SourceTable, cols: list[str]) -> list[tuple[str, ...]]:
    """Sets of 2 to ``MAX_PARTS`` of ``cols``, smallest first; among sets of a size, those holding a column that
    references no table (a ticket number) first, then in column order."""
    out = []
    for size in range(2, MAX_PARTS + 1):
        sets = list(combinations(cols, size))
        out += sorted(sets, key=lambda s: not any(c not in t.foreign_keys for c in s))
    return out[:MAX_CHECKS]


def find_composite_key(t: SourceTable, checks: ValueChecks) -> tuple[str, ...] | None:
    """The first set of columns (see ``_column_sets``) unique together in ``t``, none of them null."""
    if len(t.frame) < 2:
        return None
    pool = _key_columns(t)
    try:
        return next((cols for cols in _column_sets(t, pool) if checks.unique_together(t, pool, cols)), None)
    finally:
        checks.forget(t)


def infer_composite_keys(tables: dict[str, SourceTable], checks: ValueChecks,
                         report: ImportReport) -> dict[str, tuple[str, ...]]:
    """Every keyless table's composite key, said in ``report`` with how fourdb treats it; and the composite
    foreign keys between them."""
    found = {}
    for t in tables.values():
        if t.primary_key is None and (cols := find_composite_key(t, checks)):
            found[t.name] = cols
            report.explain(t.name, _composite_text(t, cols))
    for name, cols in found.items():
        for other, other_cols in found.items():
            if other != name and (text := _composite_link(tables[name], cols, tables[other], other_cols, checks)):
                report.explain(name, text)
    return found


def _composite_text(t: SourceTable, cols: tuple[str, ...]) -> str:
    parts = ", ".join(f"{c} -> {t.foreign_keys[c][0]}" if c in t.foreign_keys else f"{c} a plain column"
                      for c in cols)
    return (f"composite key ({', '.join(cols)}): unique together and never null in {len(t.frame):,} rows. fourdb "
            f"keys a table by one column, so {t.name} has no primary key (no foreign key can point to its rows; "
            f"each row is its own entity); its parts stay columns: {parts}")


def _twins(cols: tuple[str, ...], prefix: str | None, other_cols: tuple[str, ...],
           other_prefix: str | None) -> list[str] | None:
    """``other_cols`` reordered to match ``cols`` part for part by name without prefix, or None."""
    by_core = {tuple(core(c, other_prefix)): c for c in other_cols}
    twins = [by_core.get(tuple(core(c, prefix))) for c in cols]
    return twins if all(twins) and len(set(twins)) == len(cols) else None


def _composite_link(t: SourceTable, cols: tuple[str, ...], u: SourceTable, ucols: tuple[str, ...],
                    checks: ValueChecks) -> str | None:
    """The line saying ``t``'s composite key points to ``u``'s, where names and values say so."""
    if len(cols) != len(ucols):
        return None
    twins = _twins(cols, table_prefix(t.frame.columns), ucols, table_prefix(u.frame.columns))
    if twins is None:
        return None
    share = checks.tuples_contained(t, list(cols), u, twins)
    if share.checked == 0 or share.share < MIN_SHARE:
        return None
    return (f"composite foreign key ({', '.join(cols)}) -> {u.name} ({', '.join(twins)}): the same names, "
            f"{share.text().replace('values', 'rows')}; fourdb links by one column, so it is not linked")
