"""The result-record schema: what a leaderboard line must hold, checked with one-line errors.

A record is the ``record.json`` a run writes (``fourdb.run.run_experiment``), or the record fourdb
builds itself from an external prediction file. ``SCHEMA_VERSIONS`` lists the record versions this
code can read; a record of any other version is refused rather than guessed at.

On submission a record gains ``config_hash`` (its config without the seed and display-only keys, so
the seeds of one setting share it) and ``submitted_at``.
"""
from __future__ import annotations

import math
from numbers import Real

from fourdb.errors import FourdbError
from fourdb.tasks.types import TASK_TYPES, TaskType
from fourdb.utils import stable_hash

SCHEMA_VERSIONS = (1,)
# config keys that change nothing about the result, left out of the config hash
CONFIG_IGNORED = ("seed", "trainer.progress", "certify")


class RecordError(FourdbError):
    """A result record (or an external prediction file) does not meet the schema."""


NUMBER = (Real,)
STR = (str,)
INT = (int,)
DICT = (dict,)
BOOL = (bool,)
NONE = (type(None),)

# name -> (allowed types, required)
FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "record_version": (INT, True),
    "dataset": (STR, True),
    "task": (STR, True),
    "task_spec_hash": (STR, True),
    "task_type": (STR, True),
    "metric": (STR, True),
    "model": (STR, True),
    "inputs": (DICT, True),
    "seed": (INT, True),
    "metrics": (DICT, True),
    "num_seeds": (DICT, True),
    "wall_seconds": (NUMBER + NONE, True),      # None only for external submissions
    "peak_memory_mb": (NUMBER + NONE, True),    # None only for external submissions
    "config": (DICT, True),
    "packages": (DICT, True),
    "git_commit": (STR + NONE, True),
    "hardware": (DICT, True),
    # optional
    "git_dirty": (BOOL + NONE, False),          # the code differed from git_commit (fourdb.utils.git_state); None: not a checkout
    "database_fingerprint": (STR, False),       # fourdb.rdb.fingerprint: the database's content
    "external": (BOOL, False),
    "num_seeds_available": (DICT, False),
    "fit_seconds": (NUMBER + NONE, False),
    "history": ((list,), False),
    "predictions_sha256": (STR, False),
    "predictions": (STR, False),  # the run folder's test predictions file
    "config_hash": (STR, False),
    "submitted_at": (STR, False),
}


def _type_name(types: tuple[type, ...]) -> str:
    names = {Real: "number", str: "string", int: "integer", dict: "object", bool: "boolean", list: "list",
             type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _is(value, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:  # True is an int in Python, not in a record
        return False
    return isinstance(value, types)


def validate_record(record, where: str = "record") -> dict:
    """Return ``record`` if it meets the schema; else raise RecordError naming the first problem."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    version = record.get("record_version")
    if version is not None and _is(version, INT) and version not in SCHEMA_VERSIONS:
        raise RecordError(f"{where}: record_version {version} is not supported (this fourdb reads "
                          f"{', '.join(map(str, SCHEMA_VERSIONS))})")
    for name, (types, required) in FIELDS.items():
        if name not in record:
            if required:
                raise RecordError(f"{where}: missing field '{name}'")
            continue
        if not _is(record[name], types):
            raise RecordError(f"{where}: field '{name}' must be {_type_name(types)}, "
                              f"got {type(record[name]).__name__} {record[name]!r:.60}")
    for name in ("dataset", "task", "task_spec_hash", "model", "metric"):
        if not record[name].strip():
            raise RecordError(f"{where}: field '{name}' is empty")
    for name in ("dataset", "task"):  # a record names its task, it does not point at files to read
        value = record[name]
        if value in (".", "..") or any(c in value for c in "/\\\0") or value.endswith((".yaml", ".yml")):
            raise RecordError(f"{where}: field '{name}' must be a name, not a path ({value!r:.60}); not allowed")
    try:
        TaskType(record["task_type"])
    except ValueError:
        raise RecordError(f"{where}: task_type must be one of {', '.join(TASK_TYPES)}, got "
                          f"'{record['task_type']}'") from None
    from fourdb.metrics import METRICS

    if record["metric"] not in METRICS:
        raise RecordError(f"{where}: unknown metric '{record['metric']}' (known: {', '.join(METRICS)})")
    metrics = record["metrics"]
    for split, values in metrics.items():
        if split not in ("train", "val", "test"):
            raise RecordError(f"{where}: metrics has unknown split '{split}' (expected train, val, test)")
        if not isinstance(values, dict):
            raise RecordError(f"{where}: metrics.{split} must be an object of metric -> number")
        for k, v in values.items():
            if not _is(v, NUMBER + NONE):  # null: undefined on that split (e.g. AUROC of one class)
                raise RecordError(f"{where}: metrics.{split}.{k} must be a number, got {v!r:.40}")
    test = metrics.get("test")
    if not test or record["metric"] not in test:
        raise RecordError(f"{where}: metrics.test.{record['metric']} is missing (the metric the board ranks by)")
    if test[record["metric"]] is None or not math.isfinite(test[record["metric"]]):
        raise RecordError(f"{where}: metrics.test.{record['metric']} is {test[record['metric']]}, not a finite number")
    if not record.get("external"):
        for name in ("wall_seconds", "peak_memory_mb"):
            if record[name] is None:
                raise RecordError(f"{where}: field '{name}' is null (allowed only for external submissions)")
    if record["wall_seconds"] is not None and record["wall_seconds"] < 0:
        raise RecordError(f"{where}: wall_seconds is negative ({record['wall_seconds']})")
    if not _is(record["num_seeds"].get("test"), INT):
        raise RecordError(f"{where}: num_seeds.test (the number of test rows evaluated) must be an integer")
    return record


def _drop(config: dict, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(leaf, None)


def setting(record: dict) -> dict:
    """The record's config as one setting: without the seed and display-only keys, its graph as built."""
    import copy

    config = copy.deepcopy(record["config"])
    for key in CONFIG_IGNORED:
        _drop(config, key)
    graph = (record.get("inputs") or {}).get("graph")
    if graph and isinstance(config.get("graph"), dict):
        # the graph built, not the one asked for (built_graph); older records say graph.kind for graph.name
        config["graph"] = {**{k: v for k, v in config["graph"].items() if k != "kind"}, "name": graph}
    return config


def config_hash(record: dict) -> str:
    """Hash of the record's ``setting``: the seeds of one setting share it."""
    return stable_hash(setting(record))


def budget_label(record: dict) -> str:
    """The training budget of a run, part of its board's identity: training and validation seeds ('all' unset;
    an external model's is unknown, so counted as all)."""
    config = record.get("config") or {}
    train, val = (config.get(k) for k in ("max_train_seeds", "max_val_seeds"))
    return f"train {'all' if train is None else train} / val {'all' if val is None else val} seeds"


def same_splits(record: dict, reference: dict) -> bool:
    """Whether two records were scored on the same task splits: equal seed counts in every split both state.
    A change to how a task is made can move seeds across splits without changing its SQL (its spec hash)."""
    a, b = record.get("num_seeds_available") or {}, reference.get("num_seeds_available") or {}
    return all(a[s] == b[s] for s in a.keys() & b.keys())


def record_key(record: dict) -> tuple:
    """Two records with the same key are the same run: a second submission is refused."""
    return (record["dataset"], record["task"], record["model"], stable_hash(record["inputs"]), record["seed"],
            record.get("config_hash") or config_hash(record))


def protocol_label(record: dict) -> str:
    """Dataset parameters that differ from the dataset's defaults ('' on the defaults)."""
    from fourdb.datasets import DATASETS

    config = record.get("config") or {}
    params = (config.get("dataset") or {}).get("params") or {}
    defaults = DATASETS.get(record["dataset"]).defaults if record["dataset"] in DATASETS else {}
    parts = [f"{k}={v}" for k, v in sorted(params.items()) if k not in defaults or defaults[k] != v]
    return ", ".join(parts)


def describe_key(record: dict) -> str:
    return (f"{record['dataset']}/{record['task']} model={record['model']} seed={record['seed']} "
            f"config={record.get('config_hash') or config_hash(record)}")
