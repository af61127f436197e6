"""Built-in databases, one registry.

Each entry builds a database folder (parquet + schema.yaml) into the cache once; ``load_dataset``
then loads it through the same validated path as a user's own folder. A dataset is one module of this
package that registers its builder (``@register_dataset(...)``); the registry finds it itself.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from filelock import FileLock

from fourdb.errors import FourdbError, refuse_unknown
from fourdb.rdb import Database
from fourdb.rdb.schema import did_you_mean
from fourdb.registry import Registry
from fourdb.utils import atomic_output, cache_root, stable_hash


@dataclass
class DatasetEntry:
    name: str
    build: Callable[..., None]  # build(out_dir: Path, **params) writes parquet files + schema.yaml
    description: str
    defaults: dict
    # what a parameter from a record may ask for, (low, high) each: submit, show and render build the dataset a
    # record names, so a record states its work within these; a parameter without a bound keeps its default
    bounds: dict = field(default_factory=dict)


# Bump when what every builder writes changes (a builder's own code is in the key already, see code_hash)
BUILD_VERSION = 1
DATASETS: Registry[DatasetEntry] = Registry("dataset", package="fourdb.datasets")


def register_dataset(name: str, description: str, bounds: dict | None = None, **defaults):
    def wrap(fn):
        DATASETS.register(name, DatasetEntry(name, fn, description, defaults, bounds or {}))
        return fn

    return wrap


def dataset_folder(name: str, **params) -> Path:
    """Folder of a built-in dataset, building it on first use (atomically, under a lock)."""
    if name not in DATASETS:
        raise dataset_error(name)
    entry = DATASETS.get(name)
    params = {**entry.defaults, **{k: v for k, v in params.items() if v is not None}}
    refuse_unknown(f"dataset '{name}'", params, entry.defaults, noun="parameter")
    root = cache_root() / "datasets"
    out = root / f"{name}-{stable_hash(name, params, BUILD_VERSION, code_hash(entry))}"
    if (out / "schema.yaml").exists():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not (out / "schema.yaml").exists():
            with atomic_output(out, folder=True) as tmp:
                entry.build(tmp, **params)
    return out


def code_hash(entry: DatasetEntry) -> str:
    """A hash of the builder's module source: a changed generator never loads a folder an older one cached."""
    return stable_hash(inspect.getsource(sys.modules[entry.build.__module__]))


def dataset_error(name: str) -> FourdbError:
    """Why ``name`` is neither a built-in dataset nor a database folder, in one line."""
    path = Path(name)
    if path.is_dir():
        return FourdbError(f"dataset '{name}': no schema.yaml in that folder, so it is not a database folder "
                           f"(fourdb import converts a SQLite or DuckDB file, a 4DBInfer or a RelBench folder)")
    if path.exists():
        return FourdbError(f"dataset '{name}': a file, not a database folder "
                           f"(fourdb import {name} --out DIR converts a SQLite or DuckDB file)")
    return FourdbError(f"dataset '{name}': no such database folder, and not a built-in dataset"
                       f"{did_you_mean(name, DATASETS)} (built-in: {', '.join(sorted(DATASETS))})")


def load_dataset(name_or_path: str, allow_outside_paths: bool = False, **params) -> Database:
    """A built-in dataset by name, or a database folder by path (whose sources stay inside it unless the user
    passes ``allow_outside_paths``)."""
    path = Path(str(name_or_path))
    if name_or_path not in DATASETS and path.exists():
        return Database.load(path, allow_outside_paths)
    return Database.load(dataset_folder(str(name_or_path), **params))

