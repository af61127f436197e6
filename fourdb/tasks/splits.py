"""Splits by time: which split a seed's cutoff falls in, and the one rule that keeps a label out of a later
split's time."""
from __future__ import annotations

import numpy as np
import pandas as pd

from fourdb.errors import TaskError

SPLITS = ("train", "val", "test")


def split_codes(codes) -> pd.Categorical:
    """Split numbers (0 train, 1 val, 2 test) as a categorical over ``SPLITS``: a byte a seed."""
    return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int8), categories=SPLITS)


def by_time(cutoff: pd.Series, val, test, bound_in_earlier: bool = False) -> pd.Categorical:
    """train before ``val``, val before ``test``, test from ``test`` on; with ``bound_in_earlier`` a cutoff
    equal to ``val`` or ``test`` belongs to the split before it."""
    later = cutoff.gt if bound_in_earlier else cutoff.ge
    return split_codes(later(val).to_numpy(np.int8) + later(test).to_numpy(np.int8))


def known_in_time(frame: pd.DataFrame, val, test) -> np.ndarray:
    """Which seeds keep their split: a label belongs to a split only if it is known by the time the next
    split begins (training labels by ``val``, validation labels by ``test``; test labels always)."""
    split, known = frame["split"], frame["label_known_at"]
    return (((split == "train") & (known <= val)) | ((split == "val") & (known <= test)) | (split == "test")).to_numpy()


def check_time_splits(spec, frame: pd.DataFrame) -> None:
    """Refuse seeds whose splits overlap in time: no training label may come from val time or later, and
    every validation cutoff lies in the validation period."""
    val, test = pd.Timestamp(spec.timestamps["val"]), pd.Timestamp(spec.timestamps["test"])
    train, valid = (frame["split"] == "train").to_numpy(), (frame["split"] == "val").to_numpy()
    cutoff = frame["cutoff"]
    # a row asked at its own time may be asked at val itself (RelBench's (.., val] split)
    at_val = spec.kind.asked_at_row_time
    if train.any() and (cutoff[train].max() > val if at_val else cutoff[train].max() >= val) \
            or train.any() and frame["label_known_at"][train].max() > val:
        raise TaskError(f"task '{spec.name}': a training label comes from the validation period")
    if valid.any():
        first, last = cutoff[valid].min(), cutoff[valid].max()
        if not ((first > val and last <= test) if at_val else (first >= val and last < test)):
            raise TaskError(f"task '{spec.name}': validation cutoffs fall outside the validation period")
