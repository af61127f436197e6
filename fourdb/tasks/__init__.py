"""Prediction tasks: task files (``spec``) materialized into seeds, labels and time splits
(``materialize``)."""
from fourdb.tasks.materialize import Task, check_time_splits, cutoffs, load_task, materialize
from fourdb.tasks.spec import (DEFAULT_METRICS, DURATION_UNITS, KINDS, TASK_TYPES, TASKS_DIR, WINDOW_KINDS, TaskSpec,
                               find_task)

__all__ = ["DEFAULT_METRICS", "DURATION_UNITS", "KINDS", "TASK_TYPES", "TASKS_DIR", "WINDOW_KINDS", "Task", "TaskSpec",
           "check_time_splits", "cutoffs", "find_task", "load_task", "materialize"]
