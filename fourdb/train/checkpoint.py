"""Training checkpoints for elastic restart (EDL's idea): resume mid-epoch with the same result.

A checkpoint is everything the trainer's next step depends on: the model and optimizer states, the
position (epoch, batches done in it, global step), the numpy generator's state at the start of that
epoch (the epoch's batch plan is drawn from it up front, so it can be drawn again and the done batches
skipped), every rank's torch random state as of the checkpoint (dropout), the epoch's losses so far,
early stopping (best score, best state, bad epochs), the history and the label scaling. It is written
by rank 0 (the ranks of a data-parallel run hold the same model) to ``<run folder>/checkpoint.npz``
through a temp file and a rename, so a kill at any moment leaves the previous checkpoint whole.

A checkpoint carries a key (a hash of the run's config); one made by another config is not resumed.

A checkpoint is a run folder's file, and a run folder can come from elsewhere, so it holds no pickle: its
tensors are arrays of an ``.npz`` read with pickling off, and everything else (numbers, strings, lists,
dicts, the generators' states) is one JSON document beside them. Reading it builds tensors and plain
values and cannot run code; torch's own weights-only reader is not that on the torch this project pins.
"""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import torch

from fourdb.untrusted import check_zip_members, load_json
from fourdb.utils import atomic_write_bytes

log = logging.getLogger("fourdb")
FILENAME = "checkpoint.npz"
VERSION = 2  # 1: a torch pickle, no longer read


def path_in(folder: str | Path) -> Path:
    return Path(folder) / FILENAME


def save(folder: str | Path, state: dict) -> Path:
    arrays: list[np.ndarray] = []
    meta = json.dumps(_to_plain({"version": VERSION, **state}, arrays))
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta.encode(), dtype=np.uint8), **{f"t{i}": a for i, a in enumerate(arrays)})
    path = path_in(folder)
    atomic_write_bytes(path, buf.getvalue())
    return path


def load(folder: str | Path | None, key: str | None) -> dict | None:
    """The checkpoint in ``folder`` if there is one made by this config, else None."""
    if folder is None:
        return None
    path = path_in(folder)
    if not path.exists():
        return None
    try:
        state = read(path)
    except Exception as err:  # noqa: BLE001 - written atomically by fourdb; anything unreadable is not ours
        log.warning("checkpoint %s is unreadable (%s); starting afresh", path, str(err).splitlines()[0][:200])
        return None
    if state.get("version") != VERSION or state.get("key") != key:
        log.warning("checkpoint %s was made by another config; starting afresh", path)
        return None
    return state


def read(path: str | Path) -> dict:
    """A checkpoint file's state: tensors and plain values (raises if it is not one)."""
    check_zip_members(path)  # a run folder can come from elsewhere: nothing inflates past the memory bound
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    state = _from_plain(load_json(arrays.pop("__meta__").tobytes().decode(), str(path)), arrays)
    if not isinstance(state, dict):
        raise ValueError("not a mapping")
    return state


def _to_plain(obj, arrays: list):
    """``obj`` as JSON values: a tensor becomes a reference to its array, a tuple and a dict whose keys are not
    all strings (an optimizer's state, keyed by parameter number) are tagged so that they come back as such."""
    if isinstance(obj, torch.Tensor):
        arrays.append(obj.detach().cpu().numpy())
        return {"__tensor__": len(arrays) - 1}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__map__": {k: _to_plain(v, arrays) for k, v in obj.items()}}
        return {"__pairs__": [[_to_plain(k, arrays), _to_plain(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_to_plain(v, arrays) for v in obj]
        return {"__tuple__": items} if isinstance(obj, tuple) else items
    if isinstance(obj, (np.generic,)):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"a checkpoint holds tensors and plain values, not {type(obj).__name__}")


def _from_plain(obj, arrays: dict):
    if isinstance(obj, list):
        return [_from_plain(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return torch.from_numpy(arrays[f"t{int(obj['__tensor__'])}"].copy())
    if "__map__" in obj:
        return {k: _from_plain(v, arrays) for k, v in obj["__map__"].items()}
    if "__pairs__" in obj:
        return {_from_plain(k, arrays): _from_plain(v, arrays) for k, v in obj["__pairs__"]}
    if "__tuple__" in obj:
        return tuple(_from_plain(v, arrays) for v in obj["__tuple__"])
    raise ValueError(f"unknown entry {sorted(obj)[:3]}")
