"""What the values say about a proposed key, computed in DuckDB over the frames read: the share of a column's
values found in another table's key, whether columns are unique together, and the share of a composite's
tuples found among another table's.

Every query runs under the input bounds (``bounded``). A column with more than ``MAX_CHECKED`` values is
checked on a repeatable sample of that many, and the evidence says so: a sample proves a share, not that
every value is there.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fourdb.importers.base import SourceTable
from fourdb.rdb.sandbox import bounded
from fourdb.untrusted import safe_text
from fourdb.utils import duckdb_connect

MAX_CHECKED = 1_000_000  # values of one column (or tuples of a composite) checked; beyond, a sample of this many
HEAD_ROWS = 50_000  # rows a uniqueness check looks at first: a repeat there is a repeat in the table
SAMPLE_SEED = 7


@dataclass(frozen=True)
class Share:
    """How many of the checked non-null values were found, of how many non-null values in all."""

    found: int
    checked: int
    total: int

    @property
    def share(self) -> float:
        return self.found / self.checked if self.checked else 0.0

    @property
    def missing(self) -> int:
        return self.checked - self.found

    def text(self) -> str:
        where = f"of {self.checked:,} values" if self.checked == self.total else \
            f"of a sample of {self.checked:,} of its {self.total:,} values"
        return f"{_percent(self.share)} {where} found"


def _percent(share: float) -> str:
    """A share as a percentage that never rounds a miss up to 100% (nor a hit down to 0%)."""
    text = f"{share:.1%}"
    if text == "100.0%" and share < 1:
        return ">99.9%"
    return "<0.1%" if text == "0.0%" and share > 0 else text


def key_values(values: pd.Series) -> pd.Series:
    """Values comparable across tables: integral floats as integers, text as text (a column of mixed Python
    objects as their text)."""
    if pd.api.types.is_float_dtype(values):
        s = values.dropna()
        if (s == s.round()).all():
            return values.astype("Int64")
    if values.dtype == object:
        return values.where(values.isna(), values.astype(str))
    return values


class ValueChecks:
    """One DuckDB connection for every check of an import; frames are registered column by column, as needed."""

    def __init__(self):
        self.con = duckdb_connect()
        self.relations: dict[tuple, str] = {}  # (table, columns, as text) -> its registered name
        self.made = 0

    def close(self) -> None:
        self.con.close()

    def _register(self, t: SourceTable, columns: list[str], as_text: bool = False) -> str:
        """``columns`` of ``t`` as a relation with columns k0, k1, ...: key values, as text if ``as_text``. A
        parent's key is checked against many columns: it is registered once."""
        wanted = (t.name, tuple(columns), as_text)
        if wanted not in self.relations:
            frame = pd.DataFrame({f"k{i}": key_values(t.frame[c]) for i, c in enumerate(columns)})
            self.made += 1
            self.relations[wanted] = name = f"r{self.made}"
            self.con.register(name, frame.astype("string") if as_text else frame)
        return self.relations[wanted]

    def forget(self, t: SourceTable) -> None:
        """Let go of ``t``'s registered columns but its key (another table's columns may still be checked
        against it)."""
        for wanted in [w for w in self.relations if w[0] == t.name and w[1] != (t.primary_key,)]:
            self.con.unregister(self.relations.pop(wanted))

    @staticmethod
    def _sampled(relation: str, width: int, total: int) -> str:
        """The rows of ``relation`` with no null among its ``width`` columns; a repeatable sample of them if
        there are more than ``MAX_CHECKED`` (``total``)."""
        rows = f"SELECT * FROM {relation} WHERE " + " AND ".join(f"k{i} IS NOT NULL" for i in range(width))
        if total <= MAX_CHECKED:
            return rows
        return f"SELECT * FROM ({rows}) USING SAMPLE reservoir({MAX_CHECKED} ROWS) REPEATABLE ({SAMPLE_SEED})"

    def contained(self, child: SourceTable, column: str, parent: SourceTable, key: str) -> Share:
        """The share of ``child.column``'s non-null values found among ``parent.key``'s."""
        total = int(child.frame[column].notna().sum())
        as_text = _numeric(child.frame[column]) != _numeric(parent.frame[key])
        c, p = self._register(child, [column], as_text), self._register(parent, [key], as_text)
        where = f"table '{safe_text(child.name)}', column '{safe_text(column)}' against {safe_text(parent.name)}"
        with bounded(self.con, where):
            checked, found = self.con.execute(
                f"SELECT count(*), count(p.k0) FROM ({self._sampled(c, 1, total)}) c "
                f"LEFT JOIN (SELECT DISTINCT k0 FROM {p}) p ON c.k0 = p.k0").fetchall()[0]
        return Share(int(found), int(checked), total)

    def unique_together(self, t: SourceTable, pool: list[str], columns: tuple[str, ...]) -> bool:
        """No two rows of ``t`` hold the same values in ``columns`` (of ``pool``, the columns registered once for
        every set tried; none holds a null)."""
        r = self._register(t, pool)
        keys = ", ".join(f"k{pool.index(c)}" for c in columns)
        where = f"table '{safe_text(t.name)}', columns {', '.join(safe_text(c) for c in columns)}"
        with bounded(self.con, where):
            for source in (f"(SELECT {keys} FROM {r} LIMIT {HEAD_ROWS})", r):
                if self.con.execute(f"SELECT 1 FROM {source} GROUP BY {keys} HAVING count(*) > 1 LIMIT 1").fetchall():
                    return False
                if len(t.frame) <= HEAD_ROWS:
                    break
        return True

    def tuples_contained(self, child: SourceTable, columns: list[str], parent: SourceTable,
                         parent_columns: list[str]) -> Share:
        """The share of ``child``'s tuples of ``columns`` found among ``parent``'s of ``parent_columns``."""
        total = int(child.frame[columns].notna().all(axis=1).sum())
        as_text = any(_numeric(child.frame[a]) != _numeric(parent.frame[b]) for a, b in zip(columns, parent_columns))
        c, p = self._register(child, columns, as_text), self._register(parent, parent_columns, as_text)
        keys = ", ".join(f"k{i}" for i in range(len(columns)))
        on = " AND ".join(f"c.k{i} = p.k{i}" for i in range(len(columns)))
        with bounded(self.con, f"table '{safe_text(child.name)}' against {safe_text(parent.name)}"):
            checked, found = self.con.execute(
                f"SELECT count(*), count(p.hit) FROM ({self._sampled(c, len(columns), total)}) c "
                f"LEFT JOIN (SELECT DISTINCT {keys}, 1 AS hit FROM {p}) p ON {on}").fetchall()[0]
        return Share(int(found), int(checked), total)


def _numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)

