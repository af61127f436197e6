"""Vectorized helpers of DFS: time order, ASOF positions, exact per-parent prefix scans, and moving
results between DuckDB, Arrow and numpy.

A running aggregate's child rows arrive sorted by (parent, time order); ``asof_positions`` finds each
query's last visible row and ``prefix_scan`` gives the aggregate state after it, never carrying
anything from one parent's rows to the next.
"""
from __future__ import annotations

from enum import Enum
from typing import Callable, NamedTuple

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from fourdb.rdb.schema import Table

NS_PER_DAY = 86400e9


def time_order(df: pd.DataFrame, t: Table, dtype=np.int64) -> np.ndarray:
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
    qid = column_values(table, "qid", np.int64)
    row = np.full(int(qid.max()) + 1 if len(qid) else 0, -1, dtype=np.int64)
    row[qid] = np.arange(len(qid))
    ok = (idx >= 0) & (idx < len(row))
    pos = np.where(ok, row[np.where(ok, idx, 0)] if len(row) else -1, -1)
    return pa.array(pos, mask=pos < 0)


def gather_columns(table: pa.Table, idx: np.ndarray) -> list[pa.Array]:
    """The columns ``c{m}`` at the rows of the wanted qids; category codes as their values, as SQL gives them."""
    pos = _positions(table, idx)
    names = [n for n in table.column_names if n.startswith("c") and n[1:].isdigit()]
    out = []
    for n in names:
        col = table.column(n).take(pos).combine_chunks() if table.num_rows else pa.nulls(len(idx), table.column(n).type)
        out.append(col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col)
    return out


def compose_links(link: pa.Table, idx: np.ndarray) -> np.ndarray:
    """Follow a (qid -> parent qid) link for each position in ``idx``; missing stays -1."""
    qid, pq = column_values(link, "qid", np.int64), column_values(link, "pq", np.int64)
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


def arrow_table(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    rel = con.sql(sql)
    return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()


def column_values(table: pa.Table, name: str, dtype=None) -> np.ndarray:
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


class State(Enum):
    """One running state of a child's rows per parent, read at each query's last visible row."""
    ROWS = "rows so far"
    LAST_TIME = "latest known time"
    FIRST_TIME = "first known time"
    SHIFT = "the group's first known value, which sums are taken from"
    KNOWN = "known values so far"
    SHIFTED_SUM = "sum of (value - shift)"
    SHIFTED_SQUARES = "sum of (value - shift) squared"
    MIN = "minimum"
    MAX = "maximum"
    LAST = "last value"
    DISTINCT = "distinct values so far"
    MODE = "most frequent value"


StateKey = tuple[State, int | None]  # a state and the feature it is of (None: of the rows themselves)


class _Scan(NamedTuple):
    """A grouped running reduction: the pandas scan per group, and the same reduction over a stretch."""
    method: str
    reduce: np.ufunc


SUM, MIN, MAX = _Scan("cumsum", np.add), _Scan("cummin", np.minimum), _Scan("cummax", np.maximum)
_SCANS = (SUM, MIN, MAX)


class PrefixScan:
    """The running states of a child table sorted by (parent, time order), read after row ``positions[j]``
    for each query j (-1: before any row).

    Every scan is exact per group: nothing carries over from one parent's rows to the next. The scans are
    read at the query rows only: the rows are first reduced stretch by stretch, a stretch ending at a
    query row or a group's end, and only those partial results are scanned per group. Each output is made
    as soon as its states are, and the states let go, so the states of all outputs are never held at once.
    """

    def __init__(self, parents: np.ndarray, times: np.ndarray, positions: np.ndarray,
                 outputs: list[tuple[str, int | None]], cutoff: np.ndarray, real=np.float64):
        self.num_rows = n = len(parents)
        self.times, self.cutoff, self.real = times, cutoff, real
        self.group, self.group_start = _segments(parents)
        self.row = np.arange(n)
        self.found = positions >= 0
        self.query_row = np.where(self.found, positions, 0) if n else np.zeros(len(positions), dtype=np.int64)
        self.group_starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]]) if n else np.zeros(0, dtype=np.int64)
        stretch_starts = np.unique(np.r_[self.group_starts, positions[self.found] + 1])
        self.stretch_starts = stretch_starts[stretch_starts < n]
        # the stretch that ends at each query's row
        self.query_stretch = np.searchsorted(self.stretch_starts, self.query_row, side="right") - 1
        self.states: dict[StateKey, tuple | _Categories] = {}
        self.out: dict[str, pa.Array] = {}
        self.waiting = list(enumerate(outputs))
        self.pending: dict[_Scan, dict[StateKey, np.ndarray]] = {scan: {} for scan in _SCANS}

    def run(self, column: Callable, need: dict[int, set[str]], dtypes: dict[int, str]) -> dict[str, pa.Array]:
        """Every output, feature ``i`` read once as ``column(i)`` in the order of ``need``."""
        self.keep((State.ROWS, None), (self.row - self.group_start + 1).astype(np.float64))
        self.keep_times()
        for i, primitives in need.items():
            for scan in _SCANS:
                self.flush(scan, _CHUNK)
            (self.numeric if dtypes[i] == "numeric" else self.category)(i, column, primitives)
        for scan in _SCANS:
            self.flush(scan)
        assert not self.waiting, self.waiting
        return self.out

    def keep(self, key: StateKey, values, missing: np.ndarray | None = None, rows: np.ndarray | None = None) -> None:
        """The state at the wanted rows only (``rows``: the queries' rows); then every output whose states
        are all there."""
        n, found = self.num_rows, self.found
        rows = self.query_row if rows is None else rows
        if isinstance(values, _Categories):
            self.states[key] = _Categories(np.where(found, values.code[self.query_row], -1) if n
                                           else np.full(len(found), -1), values.uniques)
        else:
            v = values[rows] if n else np.zeros(len(found), dtype=values.dtype)
            self.states[key] = (v, ~found if missing is None else ~found | missing[rows] if n else ~found)
        ready = [(m, o) for m, o in self.waiting if all(x in self.states for x in _states_of(*o))]
        if ready:
            for m, (primitive, i) in ready:
                self.out[f"c{m}"] = _running_output(primitive, i, self.states, self.cutoff, self.real)
            self.waiting = [w for w in self.waiting if w not in ready]
            wanted = {x for _, o in self.waiting for x in _states_of(*o)}
            for x in [x for x in self.states if x not in wanted]:
                del self.states[x]

    def keep_times(self) -> None:
        """The latest known time (rows without time sort first, so it is the row's own) and the first."""
        n, times, row = self.num_rows, self.times, self.row
        self.keep((State.LAST_TIME, None), times, np.isnat(times))
        first_timed = np.minimum.reduceat(np.where(~np.isnat(times), row, n), self.group_starts)[self.group] if n else row
        self.keep((State.FIRST_TIME, None), times[np.minimum(first_timed, max(n - 1, 0))] if n else times,
                  row < first_timed)

    def reduce(self, scan: _Scan, key: StateKey, values: np.ndarray) -> None:
        """Reduce a column to its stretches at once: only a row per stretch waits for the grouped scan."""
        self.pending[scan][key] = scan.reduce.reduceat(values, self.stretch_starts) if self.num_rows else values

    def flush(self, scan: _Scan, at_least: int = 1) -> None:
        """Exact per-group scans of the pending columns, a few at a time in one 2-D pass."""
        columns = self.pending[scan]
        if len(columns) < at_least:
            return
        keys = list(columns)
        parts = np.empty((len(self.stretch_starts) if self.num_rows else 0, len(keys)), order="F")  # each column contiguous
        for j, key in enumerate(keys):
            parts[:, j] = columns.pop(key)
        grouped = pd.DataFrame(parts, copy=False).groupby(self.group[self.stretch_starts], sort=False)
        scanned = getattr(grouped, scan.method)().to_numpy()
        for j, key in enumerate(keys):
            v = scanned[:, j]
            self.keep(key, v, None if scan is SUM else np.isinf(v), rows=self.query_stretch)

    # each column's work in a method of its own, so that its row-length temporaries go when it returns
    def numeric(self, i: int, column: Callable, primitives: set[str]) -> None:
        n, row = self.num_rows, self.row
        x = column(i)
        ok = ~np.isnan(x)
        if primitives & {"sum", "mean", "std"}:
            # shift by the group's first known value, so sums of squares keep their precision
            first = np.minimum.reduceat(np.where(ok, row, n), self.group_starts)[self.group] if n else row
            shift = np.where(first < n, x[np.minimum(first, max(n - 1, 0))], 0.0)
            del first
            z = np.where(ok, x - shift, 0.0)
            self.keep((State.SHIFT, i), shift)
            del shift
            self.reduce(SUM, (State.KNOWN, i), ok.astype(np.float64))
            self.reduce(SUM, (State.SHIFTED_SUM, i), z)
            if "std" in primitives:
                self.reduce(SUM, (State.SHIFTED_SQUARES, i), z * z)
        if "min" in primitives:
            self.reduce(MIN, (State.MIN, i), np.where(ok, x, np.inf))
        if "max" in primitives:
            self.reduce(MAX, (State.MAX, i), np.where(ok, x, -np.inf))
        if "last" in primitives:
            self.keep((State.LAST, i), x, ~ok)

    def category(self, i: int, column: Callable, primitives: set[str]) -> None:
        n, row, group = self.num_rows, self.row, self.group
        code, uniques = column(i)
        if "last" in primitives:
            self.keep((State.LAST, i), _Categories(code, uniques))
        if primitives & {"mode", "num_unique"}:
            count = _running_counts(group, code)
            if "num_unique" in primitives:
                self.reduce(SUM, (State.DISTINCT, i), (count == 1).astype(np.float64))
            if "mode" in primitives and n:
                big = n + 1
                best = np.maximum.accumulate(count + group * big) - group * big  # running max count per group
                previous_best = np.where(row > self.group_start, np.r_[0, best[:-1]], 0)
                del best
                leads = count > previous_best  # this value's count beats every earlier count: it leads now
                del previous_best, count
                last_lead = np.maximum.accumulate(np.where(leads, row, -1))
                self.keep((State.MODE, i), _Categories(np.where(last_lead >= self.group_start,
                                                                code[np.maximum(last_lead, 0)], -1), uniques))
            elif "mode" in primitives:
                self.keep((State.MODE, i), _Categories(code, uniques))


def prefix_scan(k: np.ndarray, tl: np.ndarray, column: Callable, need: dict[int, set[str]], dtypes: dict[int, str],
                pos: np.ndarray, outputs: list[tuple[str, int | None]], cutoff: np.ndarray, real=np.float64) -> dict:
    """A running aggregate's ``outputs`` (primitive, feature) for each query j, from the state of a child
    table sorted by (k, time order) after row ``pos[j]`` (-1: before any row): count, shifted sums and
    sums of squares, min, max, last value, number of distinct values, mode, first and last time.
    ``k`` and ``tl`` (the rows' time) are in that order, and ``column(i)`` gives feature ``i`` in it:
    float64 (NaN: missing) or category codes and their dictionary, asked for once each, in the order of
    ``need``; ``cutoff`` is each query's, in ns; ``real``: the type of numeric outputs (see ``PrefixScan``).
    Returns Arrow arrays ``c{m}`` for output m, one entry per query."""
    return PrefixScan(k, tl, pos, outputs, cutoff, real).run(column, need, dtypes)


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


_STATES = {"count": (State.ROWS,), "sum": (State.SHIFTED_SUM, State.KNOWN, State.SHIFT),
           "mean": (State.SHIFTED_SUM, State.KNOWN, State.SHIFT), "std": (State.SHIFTED_SQUARES, State.SHIFTED_SUM, State.KNOWN),
           "min": (State.MIN,), "max": (State.MAX,), "last": (State.LAST,), "mode": (State.MODE,),
           "num_unique": (State.DISTINCT,), "time_since_last": (State.LAST_TIME,), "time_since_first": (State.FIRST_TIME,)}


def _states_of(primitive: str, i: int | None) -> list[StateKey]:
    """The states an output reads, in the order ``_running_output`` takes them."""
    return [(state, None if state in (State.ROWS, State.LAST_TIME, State.FIRST_TIME) else i) for state in _STATES[primitive]]


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
