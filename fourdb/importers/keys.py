"""Infer keys a source does not declare: a primary key by its name (``id``, ``<table>_id``, ``<prefix>_<table>_sk``,
...) and uniqueness, and foreign keys proposed by their names (``keynames``) and confirmed by their values
(``containment``): the share of a column's values found in the parent's key.

The stronger the name, the less the values need to prove: a child whose name holds the parent key's whole name
(``ss_customer_sk`` for ``c_customer_sk``, ``ws_bill_customer_sk`` with a role) is a key when at least
``MIN_SHARE`` of its values are found (the rest dangle, and become NULL); an abbreviation (``ss_addr_sk`` for
``ca_address_sk``) or a name of the table (``user_id`` for ``users.id``) needs every value found. Names propose
pairs first, so the values are read for a few pairs per column, never for every pair of columns. Each key found
comes with its evidence (``ImportReport.explain``).
"""
from __future__ import annotations

import pandas as pd

from fourdb.importers.base import ImportReport, SourceTable
from fourdb.importers.containment import Share, ValueChecks, key_values
from fourdb.importers.dtypes import is_nested
from fourdb.importers.keynames import name_match, primary_key_rank, table_prefix, words

MIN_SHARE = 0.99  # of a strongly named column's values, the share that must be in the parent's key


def usable_key(values: pd.Series) -> bool:
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_datetime64_any_dtype(values) or is_nested(values):
        return False
    s = values.dropna()
    return not (pd.api.types.is_float_dtype(s) and not (s == s.round()).all())


def is_unique_key(values: pd.Series) -> bool:
    return len(values) > 0 and values.notna().all() and values.is_unique and usable_key(values)


def missing_references(child: pd.Series, parent: pd.Series) -> int:
    """How many non-null child values are not among the parent's values."""
    c, p = key_values(child).dropna(), key_values(parent).dropna()
    if pd.api.types.is_numeric_dtype(c) != pd.api.types.is_numeric_dtype(p):
        c, p = c.astype(str), p.astype(str)
    return int((~c.isin(p)).sum())


def primary_key_candidate(table: str, frame: pd.DataFrame) -> tuple[str, str] | None:
    """The column that is the table's key, and why: the best-named of the unique, non-null columns named like
    its key (``id``, then ``<table>_id``, then ``<prefix>_<table>_sk``, ``_key``, ``_id``)."""
    prefix = table_prefix(frame.columns)
    named = {col: found for col in frame.columns if (found := primary_key_rank(col, table, prefix)) is not None}
    for col in sorted(named, key=lambda c: named[c][0]):  # a stable sort: a tie keeps column order
        why = named[col][1]
        if is_unique_key(frame[col]):
            return col, f"primary key {col}: {why}; unique and never null in {len(frame):,} rows"
    return None


def infer_primary_key(table: str, frame: pd.DataFrame) -> str | None:
    """A unique, non-null column named like the table's key (see ``primary_key_candidate``)."""
    found = primary_key_candidate(table, frame)
    return found[0] if found else None


def infer_foreign_keys(tables: dict[str, SourceTable], report: ImportReport | None = None,
                       checks: ValueChecks | None = None) -> None:
    """Add the foreign keys the names propose and the values confirm, with their evidence in ``report``."""
    own = checks is None
    checks = checks or ValueChecks()
    try:
        parents = [u for u in tables.values() if u.primary_key]
        prefixes = {t.name: table_prefix(t.frame.columns) for t in tables.values()}
        for t in tables.values():
            for col in t.frame.columns:
                if _candidate_column(t, col):
                    _link(t, col, prefixes, parents, checks, report)
            checks.forget(t)
    finally:
        if own:
            checks.close()


def _candidate_column(t: SourceTable, col: str) -> bool:
    values = t.frame[col]
    return (col != t.primary_key and col not in t.foreign_keys and words(col) != ["id"] and usable_key(values)
            and bool(values.notna().any()))


def _link(t: SourceTable, col: str, prefixes: dict, parents: list[SourceTable], checks: ValueChecks,
          report: ImportReport | None) -> None:
    """Link ``t.col`` to the parent whose name matches best and whose key holds its values: of the parents of
    the strongest name tier that any passes, the one holding most of them."""
    matches = sorted(((m, u) for u in parents if u is not t
                      if (m := name_match(col, prefixes[t.name], u.name, u.primary_key, prefixes[u.name]))),
                     key=lambda mu: (mu[0].tier, mu[1].name))
    failed = []
    for tier in sorted({m.tier for m, _ in matches}):
        passed = []
        for m, u in ((m, u) for m, u in matches if m.tier == tier):
            share = checks.contained(t, col, u, u.primary_key)
            (passed if _enough(share, m.strong) else failed).append((share, m, u))
        if passed:
            share, m, u = max(passed, key=lambda p: p[0].share)  # a tie keeps the first by name
            t.foreign_keys[col] = (u.name, u.primary_key)
            t.inferred_fks.add(col)
            if report is not None:
                also = [f"{o.name}.{o.primary_key}" for s, _, o in passed if o is not u and s.share == share.share]
                report.explain(t.name, f"{col} -> {u.name}.{u.primary_key}: {m.why}; {share.text()}"
                               + (f" (so are {', '.join(also)}; the first is chosen)" if also else ""))
            return
    if failed and report is not None:
        share, m, u = failed[0]
        need = f"at least {MIN_SHARE:.0%}" if m.strong else "all of them (a name this loose)"
        report.notes.append(f"table '{t.name}', column '{col}': looks like a key to {u.name}.{u.primary_key} "
                            f"({m.why}) but {share.missing} values are not there ({share.text()}; a key needs "
                            f"{need}); left a plain column")


def _enough(share: Share, strong: bool) -> bool:
    return share.checked > 0 and (share.share >= MIN_SHARE if strong else share.missing == 0)
