"""Which table's key a foreign key's values fit: a ``link_to`` that names the wrong table shows as values that
dangle there and are found in another table's key.

Only where a foreign key has dangling values is anything measured (a link that resolves costs nothing more),
only tables whose key has the same kind of values are candidates (integers with integers, text with text),
and a column with more values than ``SAMPLE`` is measured on a sample of them, which the message states.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

SAMPLE = 100_000  # values a foreign key's fit to other tables' keys is measured on, at most
CLEARLY = 0.2  # a share this much larger than the declared parent's is a clearly better fit


def key_kind(values: pd.Series) -> str:
    """Integers, text or (otherwise) the dtype itself: keys of two kinds never match."""
    if pd.api.types.is_integer_dtype(values):
        return "integer"
    if pd.api.types.is_string_dtype(values) or values.dtype == object:
        return "text"
    return str(values.dtype)


@dataclass(frozen=True)
class LinkFit:
    column: str  # table.column of the foreign key
    declared: str  # the declared parent table
    declared_share: float  # of the measured values, the share found in the declared parent's key
    better: tuple[str, float] | None  # (table.key, share) that fits clearly better, if any
    measured: int  # how many values the shares are of
    values: int  # the column's non-null values

    def text(self) -> str:
        """'values of X.col fit Y's key (100%) better than the declared Z (62%)', or '' where none does."""
        if self.better is None:
            return ""
        sample = f", on a sample of {self.measured:,} of its {self.values:,} values" if self.measured < self.values \
            else ""
        return (f"values of {self.column} fit {self.better[0]} ({self.better[1]:.0%}) better than the declared "
                f"{self.declared} ({self.declared_share:.0%}{sample})")


def link_fit(schema, tables: dict[str, pd.DataFrame], table: str, fk) -> LinkFit:
    """How ``table``'s foreign key ``fk`` fits its declared parent's key and the best other table's key of the
    same kind; ``better`` is set where another fits clearly better (by ``CLEARLY``, or all values where the
    declared parent does not hold all)."""
    values = tables[table][fk.name].dropna()
    measured = values.sample(SAMPLE, random_state=0) if len(values) > SAMPLE else values
    declared = _share(measured, tables[fk.link_table][fk.link_column])
    best = None
    for other in schema.tables:
        pk = other.primary_key
        if other.name == fk.link_table or pk is None or key_kind(tables[other.name][pk]) != key_kind(values):
            continue
        share = _share(measured, tables[other.name][pk])
        clearly = share >= declared + CLEARLY or (share == 1.0 and declared < 1.0)
        if clearly and (best is None or share > best[1]):
            best = (f"{other.name}.{pk}", share)
    return LinkFit(f"{table}.{fk.name}", fk.link_to, declared, best, len(measured), len(values))


def _share(values: pd.Series, keys: pd.Series) -> float:
    return float(values.isin(keys).mean()) if len(values) else 1.0
