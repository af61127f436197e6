"""Submissions from models built outside fourdb: a CSV of test predictions, scored by fourdb itself.

The file has one row per test key ``(entity, cutoff)`` of the task's test split, as fourdb
materializes it (``fourdb leaderboard template`` writes those keys), and either a ``prediction``
column (P(label = 1) for binary tasks, the value for regression) or, for multiclass tasks, one
column ``class_<i>`` per class holding its probability (classes in sorted order of the label values).
fourdb checks the file strictly, reads the test labels itself and computes the task's metrics.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.contracts import SUPERVISED
from fourdb.experiment.record import RECORD_VERSION, RunRecord, environment
from fourdb.leaderboard.schema import RecordError
from fourdb.untrusted import check_bytes
from fourdb.utils import atomic_write_text

KEY = ["entity", "cutoff"]
PROB_TOLERANCE = 1e-3  # multiclass rows must sum to 1 within this


def resolved_params(dataset: str, params: dict | None) -> dict:
    from fourdb.datasets import DATASETS

    defaults = DATASETS.get(dataset).defaults if dataset in DATASETS else {}
    return {**defaults, **(params or {})}


def load_test_split(dataset: str, task: str, params: dict | None = None):
    """(task, test frame) as fourdb materializes them."""
    _, t, test = materialize(dataset, task, params)
    return t, test


def materialize(dataset: str, task: str, params: dict | None = None):
    """(database, task, test frame) as fourdb materializes them, to score predictions against; the last few
    are kept, as the seeds of one setting are checked one after another."""
    return _materialized(dataset, task, json.dumps(params or {}, sort_keys=True, default=str))


@functools.lru_cache(maxsize=2)
def _materialized(dataset: str, task: str, params: str):
    from fourdb.datasets import DATASETS, load_dataset
    from fourdb.leaderboard.schema import check_params
    from fourdb.tasks import load_task

    if dataset in DATASETS:  # a record's parameters make no more work than their stated bounds
        check_params(dataset, json.loads(params), f"dataset {dataset}")
    db = load_dataset(dataset, **json.loads(params))
    t = load_task(db, dataset, task)
    return db, t, t.split("test")


def score(task, test: pd.DataFrame, predictions) -> dict:
    """The task's metrics of ``predictions`` (aligned to ``test``'s rows) against its test labels."""
    from fourdb.metrics import evaluate

    return evaluate(task.spec.metrics, test["label"].to_numpy(), predictions, task.split("train")["label"].to_numpy())


def replicates(task, test: pd.DataFrame, predictions) -> dict:
    """A record's ``test_bootstrap``: the task's board metric on the test set's resamples, the same for every
    model scored on this test set (``fourdb.metrics.bootstrap_record``)."""
    from fourdb.metrics import bootstrap_record

    return bootstrap_record(task.spec.metric, test["label"].to_numpy(), predictions, task.spec.spec_hash,
                            task.split("train")["label"].to_numpy())


def prediction_columns(task) -> list[str]:
    return task.spec.task_type.prediction_columns(task.num_classes)


def _format_cutoff(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values).dt.strftime("%Y-%m-%d %H:%M:%S")


def write_template(dataset: str, task: str, out: str | Path, params: dict | None = None) -> int:
    """Write the test keys with empty prediction columns; returns the number of rows."""
    t, test = load_test_split(dataset, task, params)
    frame = pd.DataFrame({"entity": test["entity"].to_numpy(), "cutoff": _format_cutoff(test["cutoff"])})
    for col in prediction_columns(t):
        frame[col] = ""
    atomic_write_text(out, frame.to_csv(index=False))
    return len(frame)


def prediction_keys(entity: pd.Series, cutoff: pd.Series) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([entity.astype(str).to_numpy(), cutoff.astype("int64").to_numpy()],
                                     names=KEY)


def _show(key) -> str:
    return f"entity={key[0]}, cutoff={pd.Timestamp(key[1])}"


def read_predictions(path: str | Path, task, test: pd.DataFrame) -> np.ndarray:
    """Predictions aligned to ``test``'s rows; RecordError on the first problem, naming the line."""
    path = Path(path)
    name = path.name
    cols = prediction_columns(task)
    expected = KEY + cols
    try:
        check_bytes(4 * path.stat().st_size, name, "the CSV read as a frame")  # text in a frame: ~4x its bytes
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise RecordError(f"{path}: no such prediction file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise RecordError(f"{name}: not a readable CSV file ({str(e).splitlines()[0]})") from None
    for col in expected:
        if col not in df.columns:
            raise RecordError(f"{name}: missing column '{col}' (expected columns {', '.join(expected)}; "
                              f"got {', '.join(map(str, df.columns))})")
    for col in df.columns:
        if col not in expected:
            raise RecordError(f"{name}: unexpected column '{col}' (expected columns {', '.join(expected)})")
    line = pd.Series(np.arange(len(df)) + 2, index=df.index)  # file line numbers (line 1 is the header)
    blank = df["entity"].str.strip() == ""
    if blank.any():
        raise RecordError(f"{name}: line {line[blank].iloc[0]}: empty entity")
    cutoff = pd.to_datetime(df["cutoff"], errors="coerce", format="ISO8601", utc=True).dt.tz_localize(None)
    if cutoff.isna().any():
        first = cutoff.isna().idxmax()
        raise RecordError(f"{name}: line {line[first]}: cutoff {df['cutoff'][first]!r} is not a timestamp")
    keys = prediction_keys(df["entity"].str.strip(), cutoff.astype("datetime64[ns]"))
    dup = keys.duplicated(keep=False)
    if dup.any():
        at = np.flatnonzero(dup)
        same = at[keys[at] == keys[at[0]]]
        raise RecordError(f"{name}: duplicate key ({_show(keys[at[0]])}) at lines "
                          f"{', '.join(str(line.iloc[i]) for i in same[:5])}")
    want = prediction_keys(test["entity"], pd.to_datetime(test["cutoff"]).astype("datetime64[ns]"))
    extra = ~keys.isin(want)
    if extra.any():
        first = int(np.flatnonzero(extra)[0])
        raise RecordError(f"{name}: {int(extra.sum())} rows are not test keys of the task "
                          f"(first: line {line.iloc[first]}, {_show(keys[first])})")
    missing = want.difference(keys, sort=False)
    if len(missing):
        raise RecordError(f"{name}: {len(missing)} of {len(want)} test keys have no prediction "
                          f"(first: {_show(missing[0])}); `fourdb leaderboard template` writes them all")
    values = np.empty((len(df), len(cols)))
    for j, col in enumerate(cols):
        v = pd.to_numeric(df[col].str.strip(), errors="coerce")
        bad = v.isna() | ~np.isfinite(v.fillna(0))
        if bad.any():
            first = bad.idxmax()
            value = df[col][first].strip()
            raise RecordError(f"{name}: line {line[first]}: {col} is {repr(value) if value else 'empty'}, "
                              f"not a finite number")
        values[:, j] = v.to_numpy(dtype=float)
    if task.spec.task_type.is_classification:
        out = (values < 0) | (values > 1)
        if out.any():
            i, j = np.argwhere(out)[0]
            raise RecordError(f"{name}: line {line.iloc[i]}: {cols[j]} {values[i, j]:g} is outside [0, 1] "
                              f"(a probability)")
    if task.spec.task_type.per_class:
        off = np.abs(values.sum(1) - 1) > PROB_TOLERANCE
        if off.any():
            i = int(np.flatnonzero(off)[0])
            raise RecordError(f"{name}: line {line.iloc[i]}: class probabilities sum to {values[i].sum():g}, not 1")
    order = keys.get_indexer(want)
    aligned = values[order]
    return aligned[:, 0] if len(cols) == 1 else aligned


def external_record(path: str | Path, method: str, dataset: str, task: str, seed: int = 0,
                    params: dict | None = None, regime: str = SUPERVISED) -> dict:
    """Check a prediction file and score it against the test labels; returns a run record. Its ``regime`` is the
    submitter's statement (the model ran elsewhere): boards rank it among records of that regime only."""
    from fourdb.datasets import DATASETS
    from fourdb.leaderboard.stamp import stamp
    from fourdb.rdb.fingerprint import database_fingerprint

    if not method or not method.strip():
        raise RecordError("--method: give the method a name")
    db, t, test = materialize(dataset, task, params)
    predictions = read_predictions(path, t, test)
    metrics = score(t, test, predictions)
    n = int(len(test))
    # a database folder is named by its folder and found again by its absolute path, as a run records it
    folder = Path(dataset).resolve() if dataset not in DATASETS and Path(dataset).is_dir() else None
    where = {"name": folder.name, "path": str(folder)} if folder else {"name": dataset}
    record = RunRecord(
        record_version=RECORD_VERSION,
        dataset=where["name"], task=t.spec.name, task_spec_hash=t.spec.spec_hash,
        database_fingerprint=database_fingerprint(db), task_type=t.spec.task_type, metric=t.spec.metric,
        model=method.strip(), inputs={"external": True}, seed=int(seed),
        metrics={"test": metrics}, test_bootstrap=replicates(t, test, predictions),
        num_seeds={"test": n}, num_seeds_available={"test": n},
        wall_seconds=None, peak_memory_mb=None,
        config={"dataset": {**where, "params": resolved_params(dataset, params)}, "task": task,
                "model": {"name": method.strip()}, "external": True, "seed": int(seed)},
        external=True,
        regime=regime,
        predictions_sha256=hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        **environment(trained=False),  # where the predictions were scored (the model itself ran elsewhere)
    )
    return stamp(record.to_dict(), metrics="scored")  # scored by fourdb here: verified
