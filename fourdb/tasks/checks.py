"""What a materialized task holds, split by split, and the mistakes its numbers give away.

``fourdb validate`` prints these for every task beside a database before anyone trains: a task can
load and materialize without error and still be useless (a label that never changes, a split without
seeds, an SQL inner join that keeps only the entities with an event, so every label is positive, a label
window that closes after the data's last event).
"""
from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from fourdb.errors import TaskError
from fourdb.rdb import Database
from fourdb.rdb.timeline import last_event
from fourdb.tasks.materialize import SPLITS, Task
from fourdb.tasks.types import TaskType

QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


LABELS = {"binary": "positive", "multiclass": "classes (most common)", "regression": "label min q25 median q75 max",
          "recommendation": "destinations per source min q25 median q75 max"}  # how each task type's are summed up


def split_stats(task: Task) -> pd.DataFrame:
    """Per split: seeds, distinct entities and cutoffs, the first and last cutoff, the labels in brief
    (``label_summary``) and the share of seeds whose entity is also a training seed's."""
    train_entities = set(task.split("train")["entity"])
    rows = []
    for name in SPLITS:
        f = task.split(name)
        rows.append({"split": name, "seeds": len(f), "entities": f["entity"].nunique(),
                     "cutoffs": f["cutoff"].nunique(),
                     "first cutoff": f["cutoff"].min() if len(f) else None,
                     "last cutoff": f["cutoff"].max() if len(f) else None,
                     LABELS[task.spec.task_type]: label_summary(task, f["label"]),
                     # a model that memorizes entities does well only on the ones it has seen
                     "entity in train": f"{f['entity'].isin(train_entities).mean():.0%}"
                     if len(f) and name != "train" else "-"})
    return pd.DataFrame(rows)


def label_summary(task: Task, labels: pd.Series) -> str:
    """The labels in a few words (see ``LABELS``): the positive share (binary), classes seen and the most
    common one's share (multiclass), quantiles (regression) or destinations per source (recommendation)."""
    if len(labels) == 0:
        return "-"
    kind = task.spec.task_type
    if kind is TaskType.BINARY:
        return f"{labels.mean():.1%}"
    if kind is TaskType.MULTICLASS:
        shares = labels.value_counts(normalize=True)
        return f"{len(shares)} of {task.num_classes} ({shares.iloc[0]:.0%})"
    values = labels.map(len) if kind.is_ranking else labels
    return " ".join(f"{v:.4g}" for v in np.quantile(values.to_numpy(dtype=float), QUANTILES))


def task_warnings(task: Task) -> list[str]:
    """What the task's seeds and labels say is probably wrong, one line each."""
    name, kind = task.spec.name, task.spec.task_type
    out = [f"task '{name}': the {s} split has no seeds; check timestamps (val {task.spec.timestamps['val']}, "
           f"test {task.spec.timestamps['test']}) against the data's time range"
           for s in SPLITS if not (task.frame["split"] == s).any()]
    if kind.is_ranking or task.frame.empty:
        return out
    labels = task.frame["label"]
    if kind is TaskType.BINARY and (labels == 1).all():
        out.append(f"task '{name}': every label is 1, so the SQL yields only positives: an inner JOIN of the events "
                   f"keeps only the entities that had one; select the entities at each cutoff and LEFT JOIN the "
                   f"events, so the ones without an event get label 0")
        return out
    if labels.nunique() == 1:
        out.append(f"task '{name}': the label is always {labels.iloc[0]!r}: nothing to learn")
        return out
    for s in SPLITS:
        split = task.split(s)["label"]
        if split.nunique() == 1:
            out.append(f"task '{name}': in the {s} split the label is always {split.iloc[0]!r}")
    return out


def task_report(task: Task, db: Database | None = None) -> str:
    """The task in one line, then its ``split_stats`` as a table; given ``db``, the last label window's close
    beside the last event of the tables the task reads."""
    spec = task.spec
    parts = [str(spec.kind), str(spec.task_type), f"entity table {spec.entity_table}"]
    if spec.destination_table:
        parts.append(f"destination table {spec.destination_table}, eval_k {spec.eval_k}")
    if spec.window:
        parts.append(f"window {spec.window}")
    parts.append(f"metrics {', '.join(spec.metrics)}")
    stats = split_stats(task).to_string(index=False)
    last = last_event(db, tables_read(spec, db)) if db is not None and len(task.frame) else None
    ends = "" if last is None else (f"\nlast cutoff {task.frame['cutoff'].max()}, its label known at "
                                    f"{task.frame['label_known_at'].max()}; last event of the tables it reads: "
                                    f"{last.time} ({last.table})")
    return f"task {spec.name}: {'; '.join(parts)}\n{stats}{ends}"


def tables_read(spec, db: Database) -> list[str]:
    """The tables a task's labels are read from: those its SQL names (DuckDB's parser says which), else its
    table of links or its entity table's own rows; every table where the SQL cannot be parsed."""
    if not spec.sql:
        return [spec.link_table or spec.entity_table]
    try:
        named = {n.lower() for n in duckdb.get_table_names(spec.query_sql)}
    except duckdb.Error:
        return db.schema.table_names
    return [n for n in db.schema.table_names if n.lower() in named]  # DuckDB's names are case-insensitive


def late_label_warnings(task: Task, db: Database) -> list[str]:
    """Seeds whose label window closes after the last event of the tables the task reads: an event after the
    data's end cannot be seen, so their labels may be incomplete (a churn label says "churned" where the data
    just stops; a yearly table's off-season is only quiet)."""
    last = last_event(db, tables_read(task.spec, db))
    if last is None or task.frame.empty:
        return []
    late = task.frame[task.frame["label_known_at"] > last.time]
    if late.empty:
        return []
    per_split = ", ".join(f"{int((late['split'] == s).sum())} {s}" for s in SPLITS if (late["split"] == s).any())
    return [f"task '{task.spec.name}': {len(late)} seeds ({per_split}; cutoffs {late['cutoff'].min()} .. "
            f"{late['cutoff'].max()}) have a label window that closes after the last event of the tables it reads "
            f"({last.time}, {last.table}): their labels may be incomplete, since nothing after it can be seen; "
            f"timestamps.end sets where test cutoffs' windows stop"]


def refuse_nothing_to_learn(task: Task, train: pd.DataFrame) -> None:
    """Stop before training when the seeds a run trains on cannot teach anything: none at all, or a label
    that never changes (every model would fit a constant and the metrics be undefined)."""
    name, kind = task.spec.name, task.spec.task_type
    if train.empty:
        raise TaskError(f"task '{name}': the train split has no seeds; nothing to learn (check timestamps and "
                        f"fourdb validate)")
    if kind.is_ranking:
        return
    labels = train["label"].dropna()
    if labels.nunique() <= 1:
        value = labels.iloc[0] if len(labels) else None
        raise TaskError(f"task '{name}': in the train split ({len(train)} seeds) the label is always {value!r}; "
                        f"nothing to learn (fourdb validate {task.spec.dataset or 'FOLDER'} shows the splits)")
