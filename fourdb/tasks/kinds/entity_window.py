"""``entity_window`` (RelBench's forecast tasks): SQL that yields ``(<entity key>, cutoff, label)`` over a table
``cutoffs(cutoff)`` (also visible as RelBench's ``timestamps(timestamp)``); ``{window}`` is the label window as a
DuckDB interval (``{timedelta}``: its text, as RelBench writes it). ``output`` names the columns when the SQL
calls them otherwise."""
from fourdb.tasks.kinds import TASK_KINDS
from fourdb.tasks.kinds.window import WindowKind


class EntityWindow(WindowKind):
    name = "entity_window"
    table_key = "entity_table"


TASK_KINDS.register("entity_window", EntityWindow())
