"""What every importer shares: a table as read from its source, the import report, and the registry of
source formats (``IMPORTERS``) that ``import_database`` asks, in order, whether they recognise a path.

A format registers a ``Format`` under its kind from its own module of this package, so adding a format is
adding one module:

    IMPORTERS.register("sqlite", Format("SQLite", folder=False, order=10, detect=..., read=..., infer_keys=True))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from fourdb.rdb.schema import Schema
from fourdb.registry import Registry


@dataclass
class SourceTable:
    """A table as read from the source, before dtypes and keys are settled."""

    name: str
    frame: pd.DataFrame
    sql_types: dict[str, str] = field(default_factory=dict)
    primary_key: str | None = None
    foreign_keys: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # column -> (table, column)
    dtypes: dict[str, str] = field(default_factory=dict)  # fourdb dtypes given by the source
    time_column: str | None = None
    inferred_fks: set[str] = field(default_factory=set)


@dataclass
class ImportReport:
    source: str
    kind: str
    out: Path | None = None
    schema: Schema | None = None
    rows: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what a lenient import dropped or made NULL
    guessed_time: set[str] = field(default_factory=set)
    allow_outside_paths: bool = False  # the user's opt-in: files the source names may lie outside it
    # table -> why its inferred keys and its time are what they are: listed, and written into schema.yaml as comments
    evidence: dict[str, list[str]] = field(default_factory=dict)

    def explain(self, table: str, line: str) -> None:
        self.evidence.setdefault(table, []).append(line)

    def format(self) -> str:
        lines = [f"imported {self.source} ({self.kind}) -> {self.out}: {len(self.schema.tables)} tables"]
        for t in self.schema.tables:
            pk = t.primary_key
            parts = [f"{self.rows[t.name]} rows"]
            if pk:
                parts.append(f"primary key {pk}" + (" (inferred)" if t.column(pk).inferred else ""))
            for fk in t.foreign_keys:
                parts.append(f"{fk.name} -> {fk.link_to}" + (" (inferred)" if fk.inferred else ""))
            if t.time_column:
                parts.append(f"time column {t.time_column}" + (" (guessed: its only datetime column)" if t.name in self.guessed_time else ""))
            elif t.time_from:
                parts.append("time from " + ", ".join(f"{c} -> {t.column(c).link_table}" for c in t.time_from)
                             + (" (the latest)" if len(t.time_from) > 1 else ""))
            lines.append(f"  {t.name}: " + ", ".join(parts))
        for name, counts in self.tasks.items():
            lines.append(f"  task {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        if self.evidence:
            lines.append("  why (also written into schema.yaml as comments):")
            lines += [f"    {table}: {line}" for table, found in self.evidence.items() for line in found]
        lines += [f"  warning: {w}" for w in self.warnings]
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"review {self.out}/schema.yaml (inferred keys say `inferred: true` and why; guessed time columns "
                     f"and time_from can be changed), then: fourdb validate {self.out}")
        return "\n".join(lines)


# what a format's reader returns: its tables, its converted task specs (name -> spec) and the database's name
Imported = tuple[list[SourceTable], dict[str, dict], str]


@dataclass(frozen=True)
class Format:
    """One source format: how to recognise a path in it and how to read it."""

    label: str  # its name in the error when no format recognises a path: "SQLite", "4DBInfer"
    folder: bool  # it is a folder (else a file); a path is only offered to formats of its own shape
    order: int  # formats are asked from the lowest order up and the first to recognise a path reads it
    detect: Callable[[Path], bool]
    read: Callable[[Path, ImportReport], Imported]
    infer_keys: bool = False  # keys the source does not declare are inferred and a lone datetime is the time
    lacks: str = ""  # a folder format: what that error says the folder lacks ("no metadata.yaml")


IMPORTERS: Registry[Format] = Registry("importer format", package="fourdb.importers")
