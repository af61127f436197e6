"""An import's last guess about its columns: those that identify a row or a person (``fourdb.rdb.identifiers``) are
written ``feature: false`` in schema.yaml, kept for tasks to read and never a model's input, each with a note
saying why and how to use it after all."""
from __future__ import annotations

from fourdb.importers.base import ImportReport
from fourdb.rdb.identifiers import identifying_columns
from fourdb.rdb.schema import Schema


def mark_identifiers(schema: Schema, frames: dict, report: ImportReport, keep: bool = False) -> None:
    """Mark the columns of ``schema`` (whose tables hold ``frames``) that identify a row or a person ``feature:
    false``, or, with ``keep``, only say which they are."""
    marked = []
    for t in schema.tables:
        candidates = [c for c in t.feature_columns if c.name != t.time_column]
        for name, why in identifying_columns(candidates, frames[t.name]).items():
            if keep:
                report.notes.append(f"table '{t.name}', column '{name}': {why}; a feature all the same "
                                    f"(--keep-identifiers)")
                continue
            t.column(name).feature = False  # why: in the output and above the table in schema.yaml
            report.explain(t.name, f"{name} is not a feature (feature: false): {why}")
            marked.append(f"{t.name}.{name}")
    if marked:
        report.notes.append(f"{len(marked)} columns that identify a row or a person are not features (feature: false "
                            f"in schema.yaml): set feature: true there to use one, or import with --keep-identifiers")
