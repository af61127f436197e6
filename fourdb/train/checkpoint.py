"""Training checkpoints for elastic restart (EDL's idea): resume mid-epoch with the same result.

A checkpoint is everything the trainer's next step depends on: the model and optimizer states, the
position (epoch, batches done in it, global step), the numpy generator's state at the start of that
epoch (the epoch's batch plan is drawn from it up front, so it can be drawn again and the done batches
skipped), every rank's torch random state as of the checkpoint (dropout), the epoch's losses so far,
early stopping (best score, best state, bad epochs), the history and the label scaling. It is written
by rank 0 (the ranks of a data-parallel run hold the same model) to ``<run folder>/checkpoint.pt``
through a temp file and a rename, so a kill at any moment leaves the previous checkpoint whole.

A checkpoint carries a key (a hash of the run's config); one made by another config is not resumed.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import torch

from fourdb.utils import atomic_write_bytes

log = logging.getLogger("fourdb")
FILENAME = "checkpoint.pt"
VERSION = 1


def path_in(folder: str | Path) -> Path:
    return Path(folder) / FILENAME


def save(folder: str | Path, state: dict) -> Path:
    buf = io.BytesIO()
    torch.save({"version": VERSION, **state}, buf)
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
        state = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain values: runs nothing
    except Exception as err:  # a checkpoint is written atomically; anything unreadable is not ours
        log.warning("checkpoint %s is unreadable (%s); starting afresh", path, err)
        return None
    if state.get("version") != VERSION or state.get("key") != key:
        log.warning("checkpoint %s was made by another config; starting afresh", path)
        return None
    return state
