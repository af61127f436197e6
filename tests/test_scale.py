"""What lets 100M rows fit on one machine, checked on small data: every memory saving keeps the values.

The sizes themselves are measured by ``make bench-scale`` (benchmarks/bench_scale.py); these tests check
that each saving gives the same answer as the plain way it replaces.
"""
import importlib
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fourdb import columns
from fourdb.columns import TableEncoder
from fourdb.datasets import load_dataset
from fourdb.errors import FourdbError
from fourdb.graph import build_graph
from fourdb.rdb import Database
from fourdb.rdb.database import RowLookup
from fourdb.rdb.database import _coerce_column
from fourdb.utils import duckdb_connect
from tests.test_validation import load_error, write_db


@pytest.mark.parametrize("keys", [np.arange(5, 25), np.arange(0, 60, 3), np.array([3, 9, 4, 20, 1]),
                                  np.array([10, 11, 13, 1000])])
def test_row_lookup_answers_as_a_hash_index_does(keys):
    """Dense ascending integer keys take an array; any other keys a hash index: the answers are the same,
    -1 for a value that is missing, unknown, below or above every key."""
    values = [pd.Series(np.r_[keys[::-1], keys.min() - 1, keys.max() + 1, 7, 12]),
              pd.Series([keys[0], None, keys[-1]], dtype="Int64"), pd.Series([float(keys[1]), np.nan])]
    lookup = RowLookup(pd.Series(keys))
    assert (lookup.table is not None) == bool((np.diff(keys) > 0).all() and np.ptp(keys) + 1 <= 2 * len(keys))
    for v in values:
        np.testing.assert_array_equal(lookup(v), pd.Index(keys).get_indexer(v))


def test_chunked_encoding_equals_encoding_at_once(monkeypatch):
    """Encoding a table a chunk of rows at a time gives exactly the arrays of encoding it at once."""
    db = load_dataset("synthetic", size=60)
    table, df = db.schema.table("purchases"), db.tables["purchases"]
    enc = TableEncoder(table).fit(df, until="2020-10-01")
    whole = enc.transform(df)
    monkeypatch.setattr(columns, "CHUNK_ROWS", 97)
    for cutoffs in (None, np.full(len(df), pd.Timestamp("2020-10-01").value)):
        chunked, plain = enc.transform(df, cutoffs=cutoffs), enc._transform(df, frozenset(), cutoffs)
        for name in ("numeric", "categorical", "datetimes"):
            np.testing.assert_array_equal(getattr(chunked, name), getattr(plain, name))
            assert getattr(chunked, name).dtype == getattr(plain, name).dtype
        assert chunked.numeric_names == plain.numeric_names and chunked.datetime_names == plain.datetime_names
    np.testing.assert_array_equal(whole.numeric, enc.transform(df).numeric)


def test_the_graph_shares_the_database_times_and_stores_int32_ids():
    """A graph keeps one copy of each time column (the database's), stores int32 ids, and still gives
    int64 edge lists whose times are the rows' own."""
    db = load_dataset("synthetic", size=60)
    g = build_graph(db, "r2ne")
    purchased = db.tables["purchases"]["purchased_at"].to_numpy()
    link = ("users", "purchases", "items")
    assert g.g.idtype.itemsize == 4
    src, dst, t = g.edges(link)
    assert src.dtype == dst.dtype == np.int64
    np.testing.assert_array_equal(t, purchased.view(np.int64))
    assert np.shares_memory(t, purchased) and np.shares_memory(g.edge_features[link].datetimes, purchased)
    assert np.shares_memory(g.node_time("audits"), db.tables["audits"]["audited_at"].to_numpy())
    users = db.tables["users"]["user_id"].to_numpy()
    np.testing.assert_array_equal(users[src], db.tables["purchases"]["user_id"].to_numpy())


def test_a_shuffled_duplicate_key_is_still_refused(tmp_path, fmt="parquet"):
    """Ascending keys are checked in one pass; any other order is hashed, so a duplicate is never missed."""
    message = load_error(write_db(tmp_path, fmt, data={"users": {"user_id": [3, 1, 3]},
                                                       "orders": {"user_id": [1, 3, 3, 1]}}))
    assert "duplicate primary key 3" in message


def test_parquet_columns_load_as_a_whole_file_read_does(tmp_path):
    """Reading a parquet source a column at a time gives the values a whole-file read gave: nullable
    integers, time zones, categories and strings included (a nullable integer column with no null
    becomes plain int64)."""
    folder = write_db(tmp_path, "parquet")
    users = pd.DataFrame({"user_id": pd.array([1, 2, 3], dtype="Int64"),
                          "signup_at": pd.to_datetime(["2021-01-01 10:00+02:00", "2021-02-01 00:00+00:00",
                                                       "2021-03-01 00:00+00:00"],
                                                      utc=True),
                          "country": pd.Categorical(["fr", None, "fr"])})
    users.to_parquet(folder / "users.parquet", index=False)
    db = Database.load(folder)
    for table in db.schema.tables:  # the same frames as coercing a whole-file pandas read
        whole = pd.read_parquet(folder / table.source)
        for c in table.columns:
            expected = _coerce_column(table, c.name, c.dtype, whole[c.name])
            got = db.tables[table.name][c.name]
            pd.testing.assert_series_equal(got, expected, check_names=False, check_dtype=False)
            # the one difference: a nullable integer column holding no null is plain int64
            assert got.dtype == expected.dtype or (expected.dtype == "Int64" and got.dtype == np.int64)
    loaded = db.tables["users"]
    assert loaded["user_id"].tolist() == [1, 2, 3]
    assert loaded["signup_at"].dtype == "datetime64[ns]" and loaded["signup_at"].iloc[0] == pd.Timestamp("2021-01-01 08:00")
    assert loaded["country"].tolist() == ["fr", None, "fr"]
    assert db.sql("SELECT count(*) AS n FROM orders o JOIN users u USING (user_id)")["n"].iloc[0] == 4


def test_a_column_the_reader_cannot_decode_is_one_line(tmp_path):
    folder = write_db(tmp_path, "parquet")
    (folder / "orders.parquet").write_bytes(b"PAR1 not really parquet PAR1")
    assert "source 'orders.parquet': cannot read" in load_error(folder)


def test_duckdb_gets_a_memory_limit_and_a_spill_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FOURDB_CACHE", str(tmp_path))
    monkeypatch.setenv("FOURDB_DUCKDB_MEMORY", "1GB")
    con = duckdb_connect()
    limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit.replace(" ", "") in ("1.0GiB", "953.6MiB", "1GB", "1.0GB")
    spill = Path(con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
    assert spill.parent == tmp_path / "duckdb_spill" and spill.name.startswith(f"{os.getpid()}-")
    monkeypatch.setenv("FOURDB_DUCKDB_MEMORY", "plenty")
    with pytest.raises(FourdbError, match="FOURDB_DUCKDB_MEMORY='plenty'"):
        duckdb_connect()


def test_a_gpu_that_dgl_cannot_use_is_not_chosen(monkeypatch):
    """torch may see a GPU while the installed DGL has no CUDA (the package registry's build): ``auto``
    then trains and samples on the CPU, and an explicit ``cuda`` is one clear error, not a failure in
    every batch."""
    import torch

    from fourdb.engine.distribution import ddp
    from fourdb.engine.planning import parallel
    from fourdb.engine.config import EngineConfig
    from fourdb.train.trainer import TrainerConfig
    from fourdb.utils import gpu_unusable

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    gpu_unusable.cache_clear()
    try:
        import dgl

        monkeypatch.setattr(dgl.DGLGraph, "to", lambda self, device: (_ for _ in ()).throw(
            dgl.DGLError("Device API cuda is not enabled. Please install the cuda version of dgl.")))
        assert "cannot use CUDA" in gpu_unusable()
        assert TrainerConfig(device="auto").torch_device().type == "cpu"
        assert EngineConfig(device="auto").sampler_device() == "cpu"
        assert ddp.resolve_backend("auto") == "gloo" and parallel.machine()[1] == 0
        with pytest.raises(FourdbError, match="cannot use CUDA"):
            TrainerConfig(device="cuda").torch_device()
    finally:
        gpu_unusable.cache_clear()


@pytest.mark.parametrize("case", ["plain", "missing cutoff", "huge rows", "every pair once", "every pair, one twice"])
def test_seeds_are_ordered_as_a_lexsort_orders_them(case):
    m = importlib.import_module("fourdb.tasks.materialize")  # the module (the package exports its function)
    rng = np.random.default_rng(3)
    n = 5000
    rank = rng.integers(0, 3, n).astype(np.int64)
    week = rng.integers(0, 9, n)
    node = rng.integers(0, 200, n)
    if case.startswith("every pair"):  # most (row, cutoff) pairs, each once: ordered in an array over the key
        pair = rng.permutation(9 * 600)[:n]
        week, node = pair // 600, pair % 600
        rank = (week // 3).astype(np.int64)  # the split follows the cutoff, as a task's does
        if case == "every pair, one twice":  # a repeat: the stable sort instead
            week[7], node[7], rank[7] = week[3], node[3], rank[3]
    cutoff = pd.Series(np.datetime64("2020-01-01", "ns") + week * np.timedelta64(7, "D"))
    if case == "missing cutoff":
        cutoff[rng.choice(n, 40, replace=False)] = pd.NaT
    if case == "huge rows":  # the one integer key would overflow: the lexsort itself
        node[0] = 2 ** 61
    key = m._seed_key(cutoff, node, rank)
    dense = key is not None and m._in_key_order(*key) is not None
    assert dense == (case == "every pair once")
    order = m._seed_order(rank, cutoff, node)
    assert (order == np.lexsort((node, cutoff.to_numpy(), rank))).all()
    frame = pd.DataFrame({"entity": node, "node": node, "cutoff": cutoff})
    assert m._has_duplicate_seeds(frame) == bool(frame.duplicated(["entity", "cutoff"]).any())
