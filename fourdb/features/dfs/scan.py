"""Vectorized helpers of DFS: time order, ASOF positions, exact per-parent prefix scans, and moving
results between DuckDB, Arrow and numpy.

A running aggregate's child rows arrive sorted by (parent, time order); ``asof_positions`` finds each
query's last visible row and ``_prefix_scan`` gives the aggregate state after it, never carrying
anything from one parent's rows to the next.
"""
from __future__ import annotations

from typing import Callable

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from fourdb.rdb.schema import Table

NS_PER_DAY = 86400e9


def _time_order(df: pd.DataFrame, t: Table, dtype=np.int64) -> np.ndarray:
    """Each row's rank (from 1) by (time, row number), rows without time first: numbered here rather
    than by a window in SQL, which would sort every column of the table along with the time."""
    # NaT is the smallest time; a table without time is in row order
    if t.time_column is None:
        return np.arange(1, len(df) + 1, dtype=dtype)
    rank = np.empty(len(df), dtype=dtype)
    rank[np.argsort(df[t.time_column].to_numpy(dtype="datetime64[ns]").view(np.int64), kind="stable")] = \
        np.arange(1, len(df) + 1, dtype=dtype)
    return rank


def _positions(table: pa.Table, idx: np.ndarray) -> pa.Array:
    """Row of ``table`` (which has a ``qid`` column) for each wanted qid (-1 or absent: null)."""
    qid = _numpy(table, "qid", np.int64)
    row = np.full(int(qid.max()) + 1 if len(qid) else 0, -1, dtype=np.int64)
    row[qid] = np.arange(len(qid))
    ok = (idx >= 0) & (idx < len(row))
    pos = np.where(ok, row[np.where(ok, idx, 0)] if len(row) else -1, -1)
    return pa.array(pos, mask=pos < 0)


def _gather(table: pa.Table, idx: np.ndarray) -> list[pa.Array]:
    """The columns ``c{m}`` at the rows of the wanted qids; category codes as their values, as SQL gives them."""
    pos = _positions(table, idx)
    names = [n for n in table.column_names if n.startswith("c") and n[1:].isdigit()]
    out = []
    for n in names:
        col = table.column(n).take(pos).combine_chunks() if table.num_rows else pa.nulls(len(idx), table.column(n).type)
        out.append(col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col)
    return out


def _compose(link: pa.Table, idx: np.ndarray) -> np.ndarray:
    """Follow a (qid -> parent qid) link for each position in ``idx``; missing stays -1."""
    qid, pq = _numpy(link, "qid", np.int64), _numpy(link, "pq", np.int64)
    up = np.full(int(qid.max()) + 1 if len(qid) else 0, -1, dtype=np.int64)
    up[qid] = pq
    ok = (idx >= 0) & (idx < len(up))
    return np.where(ok, up[np.where(ok, idx, 0)] if len(up) else -1, -1)


def _segments(k: np.ndarray):
    """Group id, group start and 'previous row in the same group' for rows sorted by group."""
    n = len(k)
    new = np.ones(n, dtype=bool)
    new[1:] = k[1:] != k[:-1]
    gid = np.cumsum(new) - 1
    start = np.flatnonzero(new)[gid]
    return gid, start


def _arrow(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    rel = con.sql(sql)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


def _numpy(table: pa.Table, name: str, dtype=None) -> np.ndarray:
    out = table.column(name).to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype)


def asof_positions(k: np.ndarray, t: np.ndarray, qk: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """For each query (qk, qt), the last row with k == qk and t <= qt among rows sorted by (k, t), or -1."""
    if not len(k) or not len(qk):
        return np.full(len(qk), -1, dtype=np.int64)
    times, rank = np.unique(np.concatenate([t, qt]), return_inverse=True)
    width = len(times) + 1
    base = min(int(k.min()), int(qk.min()))
    rows = (k - base) * width + rank[:len(k)]
    wanted = (qk - base) * width + rank[len(k):]
    pos = np.searchsorted(rows, wanted, side="right") - 1
    ok = pos >= 0
    ok[ok] = k[pos[ok]] == qk[ok]
    return np.where(ok, pos, -1)


_CHUNK = 16  # columns per grouped scan: bounds the scratch memory of a wide child table


def _prefix_scan(k: np.ndarray, tl: np.ndarray, column: Callable, need: dict[int, set[str]], dtypes: dict[int, str],
                 pos: np.ndarray, outputs: list[tuple[str, int | None]], cutoff: np.ndarray, real=np.float64) -> dict:
    """A running aggregate's ``outputs`` (primitive, feature) for each query j, from the state of a child
    table sorted by (k, time order) after row ``pos[j]`` (-1: before any row): count, shifted sums and
    sums of squares, min, max, last value, number of distinct values, mode, first and last time.
    ``k`` and ``tl`` (the rows' time) are in that order, and ``column(i)`` gives feature ``i`` in it:
    float64 (NaN: missing) or category codes and their dictionary, asked for once each, in the order of
    ``need``; ``cutoff`` is each query's, in ns; ``real``: the type of numeric outputs. Every scan is
    exact per group: nothing carries over from one parent's rows to the next. Each output is made as
    soon as its states are, and the states let go, so the states of all outputs are never held at once.
    Returns Arrow arrays ``c{m}`` for output m, one entry per query."""
    n = len(k)
    gid, start = _segments(k)
    idx = np.arange(n)
    hit = pos >= 0
    at = np.where(hit, pos, 0) if n else np.zeros(len(pos), dtype=np.int64)
    states, out = {}, {}
    waiting = list(enumerate(outputs))

    def keep(name, values, missing=None, rows=at):
        """The state at the wanted rows only; then every output whose states are all there."""
        nonlocal waiting
        if isinstance(values, _Categories):
            states[name] = _Categories(np.where(hit, values.code[at], -1) if n else np.full(len(pos), -1),
                                       values.uniques)
        else:
            v = values[rows] if n else np.zeros(len(pos), dtype=values.dtype)
            states[name] = (v, ~hit if missing is None else ~hit | missing[rows] if n else ~hit)
        ready = [(m, o) for m, o in waiting if all(x in states for x in _states_of(*o))]
        if ready:
            for m, (p, i) in ready:
                out[f"c{m}"] = _running_output(p, i, states, cutoff, real)
            waiting = [w for w in waiting if w not in ready]
            wanted = {x for _, o in waiting for x in _states_of(*o)}
            for x in [x for x in states if x not in wanted]:
                del states[x]

    def times() -> None:
        """The latest known time (rows without time sort first, so it is the row's own) and the first."""
        keep("tl", tl, np.isnat(tl))
        first_timed = np.minimum.reduceat(np.where(~np.isnat(tl), idx, n), starts)[gid] if n else idx
        keep("tf", tl[np.minimum(first_timed, max(n - 1, 0))] if n else tl, idx < first_timed)

    keep("n", (idx - start + 1).astype(np.float64))
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if n else np.zeros(0, dtype=np.int64)
    times()
    scans = {"cumsum": {}, "cummin": {}, "cummax": {}}  # column name -> its stretches, scanned per group in 2-D
    # The scans are read at the query rows only: the rows are first reduced stretch by stretch, a stretch
    # ending at a query row or a group's end, and only those partial results are scanned per group.
    cuts = np.unique(np.r_[starts, pos[hit] + 1])
    cuts = cuts[cuts < n]
    stretch = np.searchsorted(cuts, at, side="right") - 1  # the stretch that ends at each query's row

    def scan(how: str, name: str, values: np.ndarray) -> None:
        """Reduce a column to its stretches at once: only a row per stretch waits for the grouped scan."""
        reduce = {"cumsum": np.add, "cummin": np.minimum, "cummax": np.maximum}[how]
        scans[how][name] = reduce.reduceat(values, cuts) if n else values

    def flush(how: str, at_least: int = 1) -> None:
        """Exact per-group scans of the pending columns, a few at a time in one 2-D pass."""
        cols = scans[how]
        if len(cols) < at_least:
            return
        names = list(cols)
        parts = np.empty((len(cuts) if n else 0, len(names)), order="F")  # each column contiguous
        for j, name in enumerate(names):
            parts[:, j] = cols.pop(name)
        scanned = getattr(pd.DataFrame(parts, copy=False).groupby(gid[cuts], sort=False), how)().to_numpy()
        for j, name in enumerate(names):
            v = scanned[:, j]
            keep(name, v, None if how == "cumsum" else np.isinf(v), rows=stretch)

    # each column's work in a function of its own, so that its row-length temporaries go when it returns
    def numeric(i: int, prims: set[str]) -> None:
        x = column(i)
        ok = ~np.isnan(x)
        if prims & {"sum", "mean", "std"}:
            # shift by the group's first known value, so sums of squares keep their precision
            first = np.minimum.reduceat(np.where(ok, idx, n), starts)[gid] if n else idx
            m = np.where(first < n, x[np.minimum(first, max(n - 1, 0))], 0.0)
            del first
            z = np.where(ok, x - m, 0.0)
            keep(f"m{i}", m)
            del m
            scan("cumsum", f"n{i}", ok.astype(np.float64))
            scan("cumsum", f"s{i}", z)
            if "std" in prims:
                scan("cumsum", f"q{i}", z * z)
        if "min" in prims:
            scan("cummin", f"mn{i}", np.where(ok, x, np.inf))
        if "max" in prims:
            scan("cummax", f"mx{i}", np.where(ok, x, -np.inf))
        if "last" in prims:
            keep(f"l{i}", x, ~ok)

    def category(i: int, prims: set[str]) -> None:
        code, uniques = column(i)
        if "last" in prims:
            keep(f"l{i}", _Categories(code, uniques))
        if prims & {"mode", "num_unique"}:
            cnt = _running_counts(gid, code)
            if "num_unique" in prims:
                scan("cumsum", f"u{i}", (cnt == 1).astype(np.float64))
            if "mode" in prims and n:
                big = n + 1
                best = np.maximum.accumulate(cnt + gid * big) - gid * big  # running max count per group
                prev = np.where(idx > start, np.r_[0, best[:-1]], 0)
                del best
                record = cnt > prev  # this value's count beats every earlier count: it leads now
                del prev, cnt
                last_rec = np.maximum.accumulate(np.where(record, idx, -1))
                keep(f"mo{i}", _Categories(np.where(last_rec >= start, code[np.maximum(last_rec, 0)], -1), uniques))
            elif "mode" in prims:
                keep(f"mo{i}", _Categories(code, uniques))

    for i, prims in need.items():
        for how in scans:
            flush(how, _CHUNK)
        (numeric if dtypes[i] == "numeric" else category)(i, prims)
    for how in scans:
        flush(how)
    assert not waiting, waiting
    return out


def _running_counts(gid: np.ndarray, code: np.ndarray) -> np.ndarray:
    """For each row (sorted by group), how many rows of its group so far have its value (0: missing)."""
    n = len(code)
    order = np.lexsort((code, gid))  # stable: a value's rows stay in row order
    sg, sc = gid[order], code[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (sg[1:] != sg[:-1]) | (sc[1:] != sc[:-1])
    del sg, sc
    run_start = np.maximum.accumulate(np.where(new, np.arange(n), 0)) if n else new
    cnt = np.empty(n, dtype=np.int64)
    cnt[order] = np.arange(n) - run_start + 1
    cnt[code < 0] = 0
    return cnt


_STATES = {"count": ("n",), "sum": ("s{i}", "n{i}", "m{i}"), "mean": ("s{i}", "n{i}", "m{i}"),
           "std": ("q{i}", "s{i}", "n{i}"), "min": ("mn{i}",), "max": ("mx{i}",), "last": ("l{i}",),
           "mode": ("mo{i}",), "num_unique": ("u{i}",), "time_since_last": ("tl",), "time_since_first": ("tf",)}


def _states_of(p: str, i: int | None) -> list[str]:
    return [x.format(i=i) for x in _STATES[p]]


def _running_output(p: str, i: int | None, states: dict, cutoff: np.ndarray, real=np.float64):
    """One output from its states (values, missing) at the queries, as a grouped aggregate in SQL gives
    it: an empty group gives 0 for count, sum and num_unique, and missing otherwise. Numeric outputs are
    computed in float64 and given as ``real``."""
    got = [states[x] for x in _states_of(p, i)]
    if isinstance(got[0], _Categories):  # last or mode of a category
        code = got[0].code
        return pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32), mask=code < 0), got[0].uniques)
    (v, missing), *more = got
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if p in ("count", "num_unique"):
            v, missing = np.where(missing, 0.0, v), None
        elif p == "sum":
            (cnt, _), (shift, _) = more
            v, missing = np.where(missing, 0.0, v + cnt * shift), None
        elif p == "mean":
            (cnt, _), (shift, _) = more
            v, missing = v / cnt + shift, missing | ~(cnt > 0)
        elif p == "std":
            (total, _), (cnt, _) = more
            v, missing = np.sqrt(np.maximum((v - total * total / cnt) / (cnt - 1), 0)), missing | ~(cnt > 1)
        elif p in ("time_since_last", "time_since_first"):
            v = (cutoff - v.view(np.int64)) / NS_PER_DAY
        return pa.array(v.astype(real, copy=False), mask=missing)  # min, max, last as they are


class _Categories:
    """Category values as codes into a dictionary (-1: missing), kept as codes until they go to Arrow."""

    def __init__(self, code: np.ndarray, uniques: pa.Array):
        self.code, self.uniques = code, uniques
