"""``row_column`` (4DBInfer's tasks): predict an expression over an event table's own row, asked at the row's
``cutoff_column``; only ``known_columns`` of the seed row are visible."""
from __future__ import annotations

import pandas as pd

from fourdb.errors import FourdbError, TaskError
from fourdb.rdb.sandbox import check_query
from fourdb.tasks import fields
from fourdb.tasks.kinds import TASK_KINDS, TaskKind, as_times
from fourdb.tasks.splits import by_time, known_in_time


class RowColumn(TaskKind):
    name = "row_column"
    keys = ("label", "where", "cutoff_column", "known_columns")
    seed_row_after_cutoff = True

    def parse(self, spec, raw, need, where):
        spec.label, spec.cutoff_column = need("label"), fields.name(need("cutoff_column"), "cutoff_column", where)
        spec.where = raw.get("where")
        spec.known_columns = fields.names(need("known_columns"), "known_columns", where)
        for key in ("label", "where"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise TaskError(f"{where}: {key} must be a SQL expression (text), got {raw[key]!r}")
        check_query(spec.row_sql("entity", "t", "time"), f"{where}, label and where")

    def labels(self, spec, db, pk):
        table = db.schema.table(spec.entity_table)
        for col in [spec.cutoff_column, *spec.known_columns]:
            if col not in table.column_names:
                raise TaskError(f"task '{spec.name}': table '{table.name}' has no column '{col}'")
        if table.time_column is None:
            raise TaskError(f"task '{spec.name}': table '{table.name}' needs a time_column (when a row's label is "
                            f"known)")
        try:
            frame = db.query(spec.row_sql(pk, table.name, table.time_column),
                             f"{spec.origin or f'task {spec.name!r}'}, label and where")
        except FourdbError:
            raise
        except Exception as e:  # noqa: BLE001 - a broken expression is a user error
            raise TaskError(f"task '{spec.name}': label SQL failed: {str(e).splitlines()[0]}") from None
        for col, name in (("cutoff", spec.cutoff_column), ("label_known_at", table.time_column)):
            frame[col] = as_times(frame[col], spec, name)
        early = frame["label_known_at"] <= frame["cutoff"]
        if early.any():
            raise TaskError(
                f"task '{spec.name}': row {frame.loc[early, 'entity'].iloc[0]!r} of '{table.name}' is known "
                f"({table.time_column}) at or before its cutoff ({spec.cutoff_column}); its label would leak")
        val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
        frame["split"] = by_time(frame["cutoff"], val, test)
        return frame[known_in_time(frame, val, test)]

    def hidden_columns(self, spec, table):
        return [c for c in table.column_names if c not in spec.known_columns and c != table.primary_key]


TASK_KINDS.register("row_column", RowColumn())
