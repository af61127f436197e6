"""Certify a trained run leak-free on its own database: the future cannot change a prediction.

For a few cutoff groups of the test split (all test seeds that share a cutoff t, up to a cap) the
inputs are rebuilt from the database with every row newer than t deleted (``delete``) and, separately,
with those rows kept but their values shuffled among themselves (``scramble``), and the trained model
predicts again. Time is law exactly when the predictions are unchanged: identical for trees, equal up to
float round-off for neural models. Everything is rebuilt, so every path is checked at once: encoders
(fitted on rows known by the start of validation, which precedes t), single-table features, DFS, the
graph, the sampler and layer-wise inference. Where a prediction differs, the first input that differs
is named: a feature column, a sampled edge type at a hop, or a table's node or edge features.

A row-column task's seed row is itself newer than its cutoff (its label is known later): it stays,
with its hidden columns blanked (``delete``) or shuffled (``scramble``) and its time moved to just after
the cutoff, so only what the task declares known at the cutoff is left as it was.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from fourdb.features import TableData
from fourdb.tasks.interactions import RecData
from fourdb.models import NeuralModel
from fourdb.rdb import Database
from fourdb.tasks import Task

log = logging.getLogger("fourdb")
MODES = ("delete", "scramble")
ATOL, RTOL = 1e-5, 1e-4  # float round-off of a neural model run over other row numbers


@dataclass
class Cut:
    """A database as of a cutoff, and where its rows were in the original (per table)."""

    db: Database
    rows: dict[str, np.ndarray]  # table -> original row number of each row


def cut_at(db: Database, task: Task, cutoff, seeds: np.ndarray, mode: str, rng: np.random.Generator) -> Cut:
    """``db`` with the rows newer than ``cutoff`` deleted or scrambled; ``seeds`` (rows of the seed table of
    a row-column task) stay, showing only their known columns."""
    cutoff = pd.Timestamp(cutoff)
    row_task = task.spec.kind.seed_row_after_cutoff
    tables, rows = {}, {}
    for t in db.schema.tables:
        df = db.tables[t.name]
        future = np.zeros(len(df), bool) if t.time_column is None else (df[t.time_column] > cutoff).to_numpy()
        keep_seed = np.zeros(len(df), bool)
        if row_task and t.name == task.spec.entity_table:
            keep_seed[seeds] = True
        if mode == "delete":
            keep = ~future | keep_seed
            out = df[keep].reset_index(drop=True)
            rows[t.name] = np.flatnonzero(keep)
            if keep_seed.any():
                out = _blank_hidden(out, t, task, keep_seed[keep], cutoff)
        else:
            out, rows[t.name] = df.copy(), np.arange(len(df))
            pk = t.primary_key
            where = np.flatnonzero(future)
            for col in df.columns:
                if col == pk or len(where) < 2:
                    continue
                if keep_seed.any() and col not in task.hidden_columns:
                    # a seed row's known columns stay its own; the others' are shuffled among themselves
                    movable = where[~keep_seed[where]]
                else:
                    movable = where
                values = out[col].copy()
                values.iloc[movable] = values.iloc[rng.permutation(movable)].to_numpy()
                out[col] = values
            if keep_seed.any() and t.time_column in task.hidden_columns:
                out.loc[keep_seed, t.time_column] = cutoff + pd.Timedelta(1, "ns")
        tables[t.name] = out
    return Cut(Database(db.schema, tables, folder=None, notes=db.notes), rows)


def _blank_hidden(df: pd.DataFrame, table, task: Task, seed_rows: np.ndarray, cutoff) -> pd.DataFrame:
    df = df.copy()
    for col in task.hidden_columns:
        if col == table.time_column:  # all that is known of it: after the cutoff
            df.loc[seed_rows, col] = cutoff + pd.Timedelta(1, "ns")
        elif pd.api.types.is_datetime64_any_dtype(df[col]):
            df.loc[seed_rows, col] = pd.NaT
        else:
            df[col] = df[col].astype(object) if not pd.api.types.is_float_dtype(df[col]) else df[col]
            df.loc[seed_rows, col] = None
    return df


def _renumber(splits: dict, table: str, cut: Cut) -> dict:
    """Seed frames with ``node`` pointing at the same rows of the cut database."""
    new = np.full(int(cut.rows[table].max()) + 1 if len(cut.rows[table]) else 0, -1, np.int64)
    new[cut.rows[table]] = np.arange(len(cut.rows[table]))
    out = {}
    for s, f in splits.items():
        nodes = new[f["node"].to_numpy()]
        if (nodes < 0).any():
            raise AssertionError(f"certify: a {s} seed's entity row is newer than the cut; materialize drops those")
        out[s] = f.assign(node=nodes)
    return out


def certify(build_inputs, model, db: Database, task: Task, splits: dict, groups: int = 3, max_seeds: int = 200,
            seed: int = 0) -> dict:
    """Certify ``model`` (fitted) on ``groups`` test cutoffs; ``build_inputs(db, splits)`` rebuilds its inputs."""
    test = splits["test"]
    cutoffs = np.sort(test["cutoff"].unique())
    picks = cutoffs[np.unique(np.linspace(0, len(cutoffs) - 1, min(groups, len(cutoffs))).round().astype(int))]
    rng = np.random.default_rng(seed)
    table = task.spec.entity_table
    exact = not isinstance(model, NeuralModel)  # trees give the same bits; networks round differently
    checks, first = [], None
    for t in picks:
        group = test[test["cutoff"] == t]
        if len(group) > max_seeds:
            group = group.sample(n=max_seeds, random_state=seed).sort_values("node")
        group = group.reset_index(drop=True)
        sub = {"train": splits["train"], "val": splits["val"], "test": group}
        base_inputs = build_inputs(db, sub)
        base = np.asarray(model.predict(base_inputs, "test"))
        for mode in MODES:
            cut = cut_at(db, task, t, group["node"].to_numpy(), mode, rng)
            inputs = build_inputs(cut.db, _renumber(sub, table, cut))
            pred = np.asarray(model.predict(inputs, "test"))
            if task.spec.destination_table:  # ranked destination rows: compared as the original rows they are
                dest = cut.rows[task.spec.destination_table]
                pred = np.where(pred >= 0, dest[np.maximum(pred, 0)], -1)
            same = np.array_equal(base, pred) if exact else np.allclose(base, pred, atol=ATOL, rtol=RTOL)
            check = {"cutoff": str(pd.Timestamp(t)), "mode": mode, "seeds": len(group), "identical": bool(same),
                     "max_abs_diff": float(np.max(np.abs(base - pred))) if len(base) else 0.0}
            if not same:
                check["first_difference"] = first_difference(base_inputs, inputs, cut)
                first = first or check
                log.warning("certify: predictions at %s change when rows after it are %sd: %s", check["cutoff"],
                            "delete" if mode == "delete" else "scramble", check["first_difference"])
            checks.append(check)
    passed = all(c["identical"] for c in checks)
    out = {"passed": passed, "checks": checks}
    if first is not None:
        out["first_failure"] = first
    log.info("certify: %s (%d cutoff groups x %s, %d predictions compared)", "passed" if passed else "FAILED",
             len(picks), "/".join(MODES), sum(c["seeds"] for c in checks))
    return out


def first_difference(a, b, cut: Cut) -> str:
    """The first input that differs between two builds of the same test seeds."""
    if isinstance(a, RecData):  # a recommender reads its graph or its candidate pairs' features
        a, b = (a.graph, b.graph) if a.graph is not None else (a.pairs, b.pairs)
    if isinstance(a, TableData):  # table features: columns by name
        fa, fb = a.features["test"], b.features["test"]
        for names, x, y in ((fa.numeric_names, fa.numeric, fb.numeric), (fa.categorical_names, fa.categorical,
                                                                           fb.categorical)):
            for j, name in enumerate(names):
                if not np.array_equal(x[:, j], y[:, j]):
                    return f"feature '{name}'"
        return "model output (no feature differs)"
    return _graph_difference(a, b, cut)


def _graph_difference(a, b, cut: Cut) -> str:
    """Sample the test seeds in both graphs alike and compare hop by hop, in original row numbers."""
    from fourdb.engine.sampling.data import add_edge_features, node_inputs

    sampled = []
    for data, rows in ((a, None), (b, cut.rows)):
        batch = data.sampler.sample(data.seed_type, data.seeds["test"], data.cutoffs["test"],
                                    np.random.default_rng(0), data.hidden_etypes)
        nodes = {t: n.cpu().numpy() for t, n in batch.input_nodes.items()}
        orig = {t: n if rows is None else rows[t][n] for t, n in nodes.items()}
        sampled.append((data, batch, nodes, orig))
    (da, ba, na, oa), (db_, bb, nb, ob) = sampled
    for hop, (x, y) in enumerate(zip(ba.blocks, bb.blocks)):
        for et in x.canonical_etypes:
            ex, ey = (_edge_set(blk, et, o) for blk, o in ((x, oa), (y, ob)))
            if ex != ey:
                return f"sampled edge type {et} at hop {hop + 1} ({len(ex)} vs {len(ey)} edges)"
    cuts_a = {t: c.cpu().numpy() for t, c in ba.input_cutoffs.items()}
    cuts_b = {t: c.cpu().numpy() for t, c in bb.input_cutoffs.items()}
    for t in na:
        fa = node_inputs(da, t, na[t], cuts_a[t], ba.num_seeds if t == da.seed_type else 0)
        fb = node_inputs(db_, t, nb[t], cuts_b[t], bb.num_seeds if t == db_.seed_type else 0)
        differ = {k for k in fa if not torch.equal(fa[k], fb[k])}
        if differ:  # the row keys name rows for models that keep state across batches (engine/data.py)
            return f"{'node features' if differ & {'num', 'cat'} else 'row keys'} of table '{t}'"
    add_edge_features(da, ba.blocks, cuts_a)
    add_edge_features(db_, bb.blocks, cuts_b)
    for x, y in zip(ba.blocks, bb.blocks):
        for et in da.graph.edge_features:
            if not all(torch.equal(x.edges[et].data[k], y.edges[et].data[k]) for k in ("num", "cat")):
                return f"edge features of {et}"
    return "model output (no sampled edge or input feature differs)"


def _edge_set(block, et, orig) -> list:
    s, d = (v.cpu().numpy() for v in block.edges(etype=et))
    return sorted(zip(orig[et[0]][s].tolist(), orig[et[2]][d].tolist()))
