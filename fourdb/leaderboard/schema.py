"""The result-record schema: what a leaderboard line must hold, checked with one-line errors.

A record is the ``record.json`` a run writes (``fourdb.experiment.run.run_experiment``), or the record fourdb
builds itself from an external prediction file; both are a ``fourdb.experiment.record.RunRecord``, whose
fields this module's table (``FIELDS``) is. ``RECORD_VERSION`` is the one record version this code reads;
a record of any other version is refused rather than guessed at.

On submission a record gains ``config_hash`` (its config without the seed and display-only keys, so
the seeds of one setting share it) and ``submitted_at``.
"""
from __future__ import annotations

import math
import re
from numbers import Real
from pathlib import Path

from fourdb.contracts import REGIMES, SUPERVISED
from fourdb.defaults import SEARCH
from fourdb.errors import FourdbError
from fourdb.experiment.record import BOOL, FIELDS, INT, NONE, NUMBER, RECORD_VERSION, of_type
from fourdb.tasks.splits import SPLITS
from fourdb.tasks.types import TASK_TYPES, TaskType
from fourdb.untrusted import MAX_NESTING, check_name, nesting, plain_file_name, safe_text
from fourdb.utils import stable_hash

# config keys that change nothing about the result, left out of the config hash (a model's search space: what a
# sweep may try; runs leave it out of their records, and a record that has it hashes as one without)
CONFIG_IGNORED = ("seed", "trainer.progress", "certify", f"model.{SEARCH}")


class RecordError(FourdbError):
    """A result record (or an external prediction file) does not meet the schema."""


HEX = re.compile(r"^[0-9a-f]{7,64}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")

def _type_name(types: tuple[type, ...]) -> str:
    names = {Real: "number", str: "string", int: "integer", dict: "object", bool: "boolean", list: "list",
             type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def validate_record(record, where: str = "record") -> dict:
    """Return ``record`` if it meets the schema; else raise RecordError naming the first problem."""
    if not isinstance(record, dict):
        raise RecordError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    version = record.get("record_version")
    if version is not None and of_type(version, INT) and version != RECORD_VERSION:
        raise RecordError(f"{where}: record_version {version} is not supported (this fourdb reads "
                          f"{RECORD_VERSION})")
    for name, (types, required) in FIELDS.items():
        if name not in record:
            if required:
                raise RecordError(f"{where}: missing field '{name}'")
            continue
        if not of_type(record[name], types):
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

    if record.get("regime", SUPERVISED) not in REGIMES:
        raise RecordError(f"{where}: regime must be one of {', '.join(REGIMES)}, got {safe_text(record['regime'], 60)!r}")
    if record["metric"] not in METRICS:
        raise RecordError(f"{where}: unknown metric '{record['metric']}' (known: {', '.join(METRICS)})")
    metrics = record["metrics"]
    for split, values in metrics.items():
        if split not in SPLITS:
            raise RecordError(f"{where}: metrics has unknown split '{split}' (expected train, val, test)")
        if not isinstance(values, dict):
            raise RecordError(f"{where}: metrics.{split} must be an object of metric -> number")
        _metric_values(values, where, f"metrics.{split}")
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
    if not of_type(record["num_seeds"].get("test"), INT):
        raise RecordError(f"{where}: num_seeds.test (the number of test rows evaluated) must be an integer")
    _check_parts(record, where)
    return record


def _fail(where: str, path: str, message: str):
    raise RecordError(f"{where}: {path} {message}")


def _text(value, where: str, path: str) -> str:
    """A name that is shown and looked up: text without control characters, 1 to 255 characters."""
    try:
        return check_name(value, where, path)
    except FourdbError as e:
        raise RecordError(str(e)) from None


def _number(value, where: str, path: str, null: bool = False, low: float | None = None) -> None:
    if value is None and null:
        return
    if not of_type(value, NUMBER) or not math.isfinite(value) or (low is not None and value < low):
        bound = f" of at least {low:g}" if low is not None else ""
        _fail(where, path, f"must be a finite number{bound}{' or null' if null else ''}, got {safe_text(repr(value), 60)}")


def _object(value, where: str, path: str) -> dict:
    if not isinstance(value, dict):
        _fail(where, path, f"must be an object, got {type(value).__name__}")
    return value


def _plain(value, where: str, path: str) -> None:
    """Plain JSON data (what inputs and configs hold): text keys, scalars, lists and objects."""
    stack = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    _fail(where, at, f"has a key that is not text ({safe_text(repr(k), 40)})")
                stack.append((v, f"{at}.{k}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
        elif not (item is None or isinstance(item, (str, bool, int, float))):
            _fail(where, at, f"must be plain data, got {type(item).__name__}")


def _names(value, where: str, path: str) -> None:
    """Plain data whose keys and text values are names (a record's inputs: they are shown on every board)."""
    _plain(value, where, path)
    stack = [(value, path)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                _text(k, where, f"{at} key")
                stack.append((v, f"{at}.{k}"))
        elif isinstance(item, (list, tuple)):
            stack.extend((v, at) for v in item)
        elif isinstance(item, str):
            _text(item, where, at)


def _metric_values(values, where: str, path: str) -> None:
    from fourdb.metrics import METRICS

    for k, v in _object(values, where, path).items():
        if k not in METRICS:
            _fail(where, f"{path}.{_text(k, where, path + ' key')}", "is not a metric fourdb computes")
        if not of_type(v, NUMBER + NONE):  # null (or NaN, stored as null): undefined there, e.g. AUROC of one class
            _fail(where, f"{path}.{k}", f"must be a number, got {safe_text(repr(v), 40)}")


def _check_parts(record: dict, where: str) -> None:
    """Every nested field a board reads, typed: nothing accepted can break a later render or make later work."""
    if nesting(record) > MAX_NESTING:
        raise RecordError(f"{where}: nested deeper than {MAX_NESTING} levels")
    for name in ("dataset", "task", "task_spec_hash", "model", "metric", "task_type"):
        _text(record[name], where, f"field '{name}'")
    _names(record["inputs"], where, "inputs")
    for name in ("seed", "record_version"):
        if abs(record[name]) > 2**63 - 1:
            _fail(where, name, "is out of range")
    for name in ("num_seeds", "num_seeds_available"):
        for split, n in (record.get(name) or {}).items():
            if split not in SPLITS or not of_type(n, INT) or n < 0:
                _fail(where, f"{name}.{safe_text(split, 40)}", f"must be a count of seeds of train, val or test, "
                      f"got {safe_text(repr(n), 40)}")
    for name in ("wall_seconds", "peak_memory_mb", "fit_seconds"):
        if name in record:
            _number(record[name], where, name, null=True, low=0)
    for split, values in (record.get("trivial") or {}).items():
        _text(split, where, "trivial key")
        for s, v in _object(values, where, f"trivial.{split}").items():
            if s not in SPLITS:
                _fail(where, f"trivial.{split}", f"has unknown split {safe_text(repr(s), 40)}")
            _metric_values(v, where, f"trivial.{split}.{s}")
    for i, h in enumerate(record.get("history") or []):
        _object(h, where, f"history[{i}]")
    if "test_bootstrap" in record:
        _check_bootstrap(record["test_bootstrap"], where)
    certify = record.get("certify")
    if certify is not None:
        if not of_type(certify.get("passed"), BOOL):
            _fail(where, "certify.passed", "must be true or false")
        if not isinstance(certify.get("checks", []), list):
            _fail(where, "certify.checks", "must be a list")
        for i, c in enumerate(certify.get("checks", [])):
            if not of_type(_object(c, where, f"certify.checks[{i}]").get("seeds"), INT):
                _fail(where, f"certify.checks[{i}].seeds", "must be an integer")
    commit = record["git_commit"]
    if commit is not None and not HEX.match(commit):
        _fail(where, "git_commit", f"must be a git commit (7 to 64 hex digits), got {safe_text(repr(commit), 60)}")
    if "predictions_sha256" in record and not SHA256.match(record["predictions_sha256"]):
        _fail(where, "predictions_sha256", "must be 64 hex digits")
    if "predictions" in record:
        try:
            plain_file_name(record["predictions"], where, "predictions")
        except FourdbError:
            raise RecordError(f"{where}: predictions {safe_text(record['predictions'], 60)!r} must name a file in "
                              f"the run folder (no path); not allowed") from None
    for name in ("packages", "hardware", "config", "engine", "distributed", "parallel_auto", "checked"):
        if record.get(name) is not None:
            _plain(record[name], where, name)
    _check_config(record, where)


def _check_bootstrap(value, where: str) -> None:
    """``test_bootstrap``: a metric fourdb computes, the resampling seed, and at most
    ``MAX_BOOTSTRAP_REPLICATES`` replicates, each a finite number or null (undefined on its resample)."""
    from fourdb.metrics import MAX_BOOTSTRAP_REPLICATES, METRICS

    _object(value, where, "test_bootstrap")
    extra = sorted(set(value) - {"metric", "seed", "replicates"})
    if extra:
        _fail(where, "test_bootstrap", f"has unknown key {safe_text(repr(extra[0]), 40)} (metric, seed, replicates)")
    if not isinstance(value.get("metric"), str) or value["metric"] not in METRICS:
        _fail(where, "test_bootstrap.metric", f"must be a metric fourdb computes, got "
              f"{safe_text(repr(value.get('metric')), 40)}")
    seed = value.get("seed")
    if not of_type(seed, INT) or not 0 <= seed < 2**63:
        _fail(where, "test_bootstrap.seed", f"must be a non-negative integer, got {safe_text(repr(seed), 40)}")
    replicates = value.get("replicates")
    if not isinstance(replicates, list) or len(replicates) > MAX_BOOTSTRAP_REPLICATES:
        _fail(where, "test_bootstrap.replicates", f"must be a list of at most {MAX_BOOTSTRAP_REPLICATES} numbers")
    for i, v in enumerate(replicates):
        _number(v, where, f"test_bootstrap.replicates[{i}]", null=True)


def _check_config(record: dict, where: str) -> None:
    """The config keys boards read: the budget, the trainer's epochs, the dataset and its parameters."""
    config = record["config"]
    for name in ("max_train_seeds", "max_val_seeds"):
        value = config.get(name)
        if value is not None and (not of_type(value, INT) or value < 1):
            _fail(where, f"config.{name}", f"must be a positive integer or null, got {safe_text(repr(value), 40)}")
    trainer = config.get("trainer")
    if trainer is not None:
        for name in ("epochs", "patience"):
            _number(_object(trainer, where, "config.trainer").get(name), where, f"config.trainer.{name}", null=True)
    if config.get("certify") is not None:
        _object(config["certify"], where, "config.certify")
    dataset = _object(config.get("dataset", {}), where, "config.dataset")
    for name in ("name", "path"):
        if dataset.get(name) is not None and not isinstance(dataset[name], str):
            _fail(where, f"config.dataset.{name}", "must be text")
    params = _object(dataset.get("params") or {}, where, "config.dataset.params")
    _names({k: v for k, v in params.items() if not isinstance(v, (int, float)) or isinstance(v, bool)}, where,
           "config.dataset.params")
    _names(list(params), where, "config.dataset.params key")
    source = task_source(record)[0]
    from fourdb.datasets import DATASETS

    if source in DATASETS:
        check_params(source, params, where)


def check_params(dataset: str, params: dict, where: str) -> None:
    """Refuse built-in dataset parameters past the bounds the dataset registers (or, without a bound, other
    than the default), before anything builds the dataset they name."""
    from fourdb.datasets import DATASETS

    entry = DATASETS.get(dataset)
    defaults = entry.defaults
    for key, value in params.items():
        at = f"config.dataset.params.{key}"
        if key not in defaults:
            _fail(where, at, f"is not a parameter of dataset '{dataset}' (it has {', '.join(defaults) or 'none'})")
        if value is None or value == defaults[key] and type(value) is type(defaults[key]):
            continue
        if key not in entry.bounds:
            _fail(where, at, f"must keep its default ({defaults[key]!r}): fourdb states no bound for it")
        low, high = entry.bounds[key]
        integral = isinstance(low, int) and isinstance(high, int)
        if not of_type(value, INT if integral else NUMBER) or not math.isfinite(value) or not low <= value <= high:
            _fail(where, at, f"must be {'an integer' if integral else 'a number'} from {low:g} to {high:g} (the bound "
                  f"on what a record may make fourdb build), got {safe_text(repr(value), 40)}")


def task_source(record: dict) -> tuple[str, str]:
    """(dataset, task) to find a record's task by, from the record alone: a database folder by the absolute
    path its run recorded, else the built-in dataset's name; the task by its name, in that folder's tasks/
    (held inside the folder) or the built-in tasks. Not the record's dataset name as a folder: where the
    command runs must not matter; and never a file path of the record's choosing."""
    dataset = (record.get("config") or {}).get("dataset")
    path = dataset.get("path") if isinstance(dataset, dict) else None
    return (path if isinstance(path, str) and Path(path).is_absolute() else record["dataset"]), record["task"]


def finite(value):
    """NaN and infinities are not JSON: store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


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
