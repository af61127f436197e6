"""Prediction tasks: task files (``spec``) of a kind (``kinds``) and a type (``types``), materialized into seeds,
labels and time splits (``materialize``)."""
from fourdb.tasks.kinds import TASK_KINDS, TaskKind
from fourdb.tasks.materialize import Task, check_time_splits, cutoffs, load_task, materialize
from fourdb.tasks.spec import DEFAULT_METRICS, DURATION_UNITS, TASK_TYPES, TASKS_DIR, TaskSpec, find_task
from fourdb.tasks.types import TaskType

__all__ = ["DEFAULT_METRICS", "DURATION_UNITS", "TASK_KINDS", "TASK_TYPES", "TASKS_DIR", "Task", "TaskKind",
           "TaskSpec", "TaskType", "check_time_splits", "cutoffs", "find_task", "load_task", "materialize"]
