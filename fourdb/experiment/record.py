"""The run record: what one run (or one scored external prediction file) tells the leaderboard.

``RunRecord`` is the one statement of its fields, their types and which are required: the run
(``fourdb.experiment.run``) and the external-prediction path (``fourdb.leaderboard.external``) build one,
and the validator (``fourdb.leaderboard.schema``) checks a record read from disk against its field table.
A record is written as JSON in the fields' order, leaving out the optional fields a record does not hold,
so the files are the same, key by key, as before the class existed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from numbers import Real

RECORD_VERSION = 1  # the one version this code writes and reads; a record of another version is refused

NUMBER = (Real,)
STR = (str,)
INT = (int,)
DICT = (dict,)
BOOL = (bool,)
LIST = (list,)
NONE = (type(None),)


class _HexDigestCheck(type):
    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


# text of 64 lowercase hex digits (a sha256): ``isinstance`` says whether a value is one, so the field table
# and the validator built from it check the form as they check a type
SHA256_HEX = (_HexDigestCheck("64 hex digits", (), {}),)
UNSET = object()  # an optional field the record does not hold (None is a value some fields hold)


def _field(types: tuple[type, ...], required: bool = False):
    return field(default=UNSET, metadata={"types": types, "required": required})


@dataclass(kw_only=True)
class RunRecord:
    record_version: int = _field(INT, True)
    dataset: str = _field(STR, True)
    task: str = _field(STR, True)
    task_spec_hash: str = _field(STR, True)
    database_fingerprint: str = _field(STR)  # fourdb.rdb.fingerprint: the database's content
    task_type: str = _field(STR, True)
    metric: str = _field(STR, True)
    model: str = _field(STR, True)
    inputs: dict = _field(DICT, True)  # how its input kind names what the model read
    seed: int = _field(INT, True)
    metrics: dict = _field(DICT, True)
    # the board's metric on resamples of the test rows, paired across models (fourdb.metrics.bootstrap_record):
    # {"metric": name, "seed": int, "replicates": [number or null, ...]}
    test_bootstrap: dict = _field(DICT)
    trivial: dict = _field(DICT)  # each trivial baseline's metrics on the run's seeds (the floor)
    regime: str = _field(STR)  # fourdb.contracts.REGIMES; absent: supervised (records made before it was stated)
    num_seeds: dict = _field(DICT, True)
    num_seeds_available: dict = _field(DICT)
    fit_seconds: float | None = _field(NUMBER + NONE)
    wall_seconds: float | None = _field(NUMBER + NONE, True)  # None only for external submissions
    peak_memory_mb: float | None = _field(NUMBER + NONE, True)  # None only for external submissions
    nproc: int = _field(INT)
    history: list = _field(LIST)
    engine: dict | None = _field(DICT + NONE)
    config: dict = _field(DICT, True)
    external: bool = _field(BOOL)
    predictions_sha256: str = _field(STR)
    packages: dict = _field(DICT, True)
    git_commit: str | None = _field(STR + NONE, True)
    git_dirty: bool | None = _field(BOOL + NONE)  # the code differed from git_commit; None: not a checkout
    code_patch_sha256: str = _field(SHA256_HEX)  # dirty code only: sha256 of code.patch in the run folder
    hardware: dict = _field(DICT, True)
    certify: dict = _field(DICT)  # fourdb certify's verdict: passed, checks
    distributed: dict = _field(DICT)
    parallel_auto: dict = _field(DICT)
    predictions: str = _field(STR)  # the run folder's test predictions file
    config_hash: str = _field(STR)  # set on submission
    submitted_at: str = _field(STR)  # set on submission
    checked: dict = _field(DICT)  # what submit recomputed (fourdb.leaderboard.verify), sealed

    def __post_init__(self):
        missing = [f.name for f in fields(self) if f.metadata["required"] and getattr(self, f.name) is UNSET]
        if missing:
            raise TypeError(f"a run record needs {', '.join(missing)}")

    def to_dict(self) -> dict:
        """The record as written: its fields in order, those it does not hold left out."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not UNSET}


# name -> (allowed types, required): the validator's table, required fields first
FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    f.name: (f.metadata["types"], f.metadata["required"])
    for f in sorted(fields(RunRecord), key=lambda f: not f.metadata["required"])}

RUN_PACKAGES = ("fourdb", "torch", "dgl", "duckdb", "pandas", "numpy", "scikit-learn", "lightgbm")
SCORING_PACKAGES = ("fourdb", "duckdb", "pandas", "numpy", "scikit-learn")


def environment(trained: bool = True) -> dict:
    """Where a record's numbers were computed (``packages``, ``git_commit``, ``git_dirty``, ``hardware``): a
    run's packages and GPU, or, for an external submission (``trained=False``: the model ran elsewhere), those
    that scored its predictions."""
    from fourdb.utils import environment as where

    if not trained:
        return where(SCORING_PACKAGES)
    import torch

    return where(RUN_PACKAGES, gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


def of_type(value, types: type | tuple[type, ...]) -> bool:
    """YAML's and JSON's view of types (a record's fields, a setting's value): a bool is not a number, though
    Python makes True an int; an int is a float too."""
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types + (int,) if float in types else types)
