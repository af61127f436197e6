"""A run's test predictions (``predictions.parquet`` in its folder) as another benchmark's prediction table.

``relbench``: a RelBench 3 prediction table (CSV): the task's key columns (entity, cutoff; named as
``fourdb export-dataset`` names them) and the prediction column (P(label = 1) for binary tasks, the value
for regression, for recommendation a JSON list of the destinations predicted), keys mapped to RelBench's
positions as the exported dataset has them. ``relbench.submit.evaluate_task`` scores it against a dataset
folder holding the same test rows: one ``fourdb export-dataset`` wrote, or the RelBench folder a
database was imported from.

A position is never passed off as a key: where RelBench's positions differ from the database's own keys
(every database not imported from RelBench), a ``db_<column>`` column beside each renumbered one holds the
database's keys, and the export says so; RelBench's evaluator reads only its own columns.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.errors import FourdbError
from fourdb.export.keys import positions
from fourdb.export.tasks import column_names
from fourdb.rdb.fingerprint import database_fingerprint
from fourdb.experiment.prepare import prepare_run
from fourdb.tasks import TaskType
from fourdb.untrusted import read_json, reading
from fourdb.utils import atomic_output

FORMATS = ("relbench",)


def export_predictions(run_dir: str | Path, out: str | Path, fmt: str = "relbench") -> list[str]:
    """Write the run's test predictions to ``out``; returns what was done, a line each."""
    if fmt not in FORMATS:
        raise FourdbError(f"unknown export format '{fmt}' (choose from {', '.join(FORMATS)})")
    from fourdb.leaderboard.schema import validate_record
    from fourdb.leaderboard.verify import run_file

    run = Path(run_dir)
    if not (run / "record.json").is_file():
        raise FourdbError(f"{run_dir}: no record.json, so not a run folder")
    # the record is data: checked in full (its dataset parameters bounded) before it names anything to build
    record = validate_record(read_json(run / "record.json"), str(run / "record.json"))
    if "predictions" not in record:
        raise FourdbError(f"{run_dir}: no predictions.parquet (test predictions); runs save them beside their "
                          f"record.json, so run it again")
    path = run_file(run, record["predictions"], str(run / "record.json"))  # inside the run folder, or refused
    if not _relbench_evaluates(record.get("task_type")):
        raise FourdbError(f"{run_dir}: a {record['task_type']} task, and RelBench has no evaluator for those")
    run = prepare_run(record["config"], until="database")  # the task and database the run read, as it read them
    spec, db = run.spec, run.db
    if spec.spec_hash != record.get("task_spec_hash"):
        raise FourdbError(f"{run_dir}: task '{spec.name}' has changed since the run, so its test rows may have too")
    if database_fingerprint(db) != record.get("database_fingerprint"):
        raise FourdbError(f"{run_dir}: database '{record['dataset']}' has changed since the run")
    with reading(path):
        preds = pd.read_parquet(path, columns=["entity", "cutoff", "prediction"])
    if preds.duplicated(["entity", "cutoff"]).any() or len(preds) != record["num_seeds"]["test"]:
        raise FourdbError(f"{path}: expected {record['num_seeds']['test']} test rows, each once; "
                          f"got {len(preds)} ({int(preds.duplicated(['entity', 'cutoff']).sum())} repeated)")
    table, notes = relbench_table(spec, db.schema, positions(db), preds, path)
    with atomic_output(out) as tmp:
        table.to_csv(tmp, index=False)
    lines = [f"wrote {out}: {len(table)} test predictions of {record['dataset']}/{spec.name} "
             f"({', '.join(table.columns)})", *notes]
    if spec.kind.has_cutoff_grid and spec.rule != "relbench":
        lines.append(f"note: task '{spec.name}' lays out its cutoffs by fourdb's rule; its RelBench version "
                     f"(fourdb export-dataset) has RelBench's, so this file scores against it only where both "
                     f"give the same test rows")
    return lines


def relbench_table(spec, schema, pos, preds: pd.DataFrame, path) -> tuple[pd.DataFrame, list[str]]:
    """The prediction table of ``preds`` (a run's entity, cutoff, prediction) and what to say about it.

    RelBench's keys are row positions (``Positions``). Where a table's positions are not the database's own
    keys, the table also holds the database's keys (``db_<column>``) beside the positions, so that the
    predictions join back onto the database; RelBench's evaluator reads only its key and prediction columns."""
    names = column_names(spec, schema)
    entity = pos.of(spec.entity_table, preds["entity"])
    if (entity < 0).any():
        bad = preds["entity"][entity < 0].iloc[0]
        raise FourdbError(f"{path}: entity {bad!r} is not a key of table '{spec.entity_table}'")
    table = pd.DataFrame({names["entity"]: entity,
                          names["cutoff"]: pd.to_datetime(preds["cutoff"]).astype("datetime64[ns]")})
    own = {}  # RelBench's column -> (its table, the database's keys), where they differ
    if pos.renumbered(spec.entity_table):
        own[names["entity"]] = (spec.entity_table, preds["entity"].to_numpy())
    if spec.task_type.is_ranking:
        top = [np.asarray(keys)[:spec.eval_k] for keys in preds["prediction"]]
        table[names["label"]] = [json.dumps(pos.of(spec.destination_table, keys).tolist()) for keys in top]
        if pos.renumbered(spec.destination_table):
            own[names["label"]] = (spec.destination_table, [json.dumps(keys.tolist()) for keys in top])
    else:
        table[names["label"]] = preds["prediction"].to_numpy(dtype=float)
    notes = [_prediction_note(spec, names["label"])]
    for column, (of, keys) in own.items():
        beside = _own_key_column(column, table.columns)
        table[beside] = keys
        notes.append(f"note: RelBench numbers the rows of table {of} 0..n-1 (fourdb export-dataset numbers them "
                     f"so): {column} holds those positions, {beside} the database's own keys; join on {beside}")
    if not own:
        notes.append(f"note: {names['entity']} holds the database's own keys (they are RelBench's positions already)")
    return table.sort_values([names["cutoff"], names["entity"]], kind="stable"), notes


def _own_key_column(column: str, taken) -> str:
    """Where the database's own keys go beside RelBench's ``column``: ``db_<column>``, not a name in ``taken``."""
    name = f"db_{column}"
    while name in taken:
        name = f"db_{name}"
    return name


def _prediction_note(spec, column: str) -> str:
    what = "a JSON list of the destinations ranked" if spec.task_type.is_ranking else \
        "P(label = 1)" if spec.task_type.is_classification else "the predicted value"
    named = "the RelBench task names it" if spec.output or spec.kind.label_is_column else \
        "the task's target_col in fourdb export-dataset's manifest"
    return f"note: the prediction column is {column} ({what}), as {named}"


def _relbench_evaluates(task_type) -> bool:
    try:
        return TaskType(task_type).relbench_evaluates
    except ValueError:  # not a task type: the record is refused where it is read as one
        return True
