"""``autocomplete`` (RelBench's): predict a column of every row of a table, asked at the row's time; the column
is removed from every input. Training rows are those up to ``val``, validation after it up to ``test``, test
after ``test`` (RelBench's split)."""
from __future__ import annotations

import pandas as pd

from fourdb.errors import TaskError
from fourdb.tasks import fields
from fourdb.tasks.kinds import TASK_KINDS, TaskKind, as_times
from fourdb.tasks.splits import by_time


class Autocomplete(TaskKind):
    name = "autocomplete"
    keys = ("label",)
    asked_at_row_time = True
    label_is_column = True

    def parse(self, spec, raw, need, where):
        spec.label = need("label")
        if not isinstance(spec.label, str):
            raise TaskError(f"{where}: label must be the name of the column to predict, got {fields.short(spec.label)}")
        fields.name(spec.label, "label", where)

    def labels(self, spec, db, pk):
        table = db.schema.table(spec.entity_table)
        if spec.label not in table.column_names:
            raise TaskError(f"task '{spec.name}': table '{table.name}' has no column '{spec.label}'")
        if table.time_column is None:
            raise TaskError(f"task '{spec.name}': table '{table.name}' needs a time column: a row is asked at its time")
        df = db.tables[table.name]
        frame = pd.DataFrame({"entity": df[pk].to_numpy(), "cutoff": df[table.time_column].to_numpy(),
                              "label": df[spec.label].to_numpy()})
        frame = frame[frame["cutoff"].notna()]
        val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
        frame["split"] = by_time(frame["cutoff"], val, test, bound_in_earlier=True)
        frame["cutoff"] = as_times(frame["cutoff"], spec, table.time_column)
        frame["label_known_at"] = frame["cutoff"]  # known with the row; the column is removed from every input
        return frame

    def removed_columns(self, spec, table):
        return [*spec.remove_columns, (table.name, spec.label)]


TASK_KINDS.register("autocomplete", Autocomplete())
