"""Hostile files given to `fourdb import` and `fourdb validate`: each is made here, small on disk, and run through
the real command. Every one ends in one `error:` line that names the file (and the table or column), exit code 2,
no traceback, within the time bound and well under the memory it asks for, with nothing written outside --out;
the few that are neutralised instead (a virtual table skipped, a file name that reads as a URI) import what the
file holds and nothing else."""
import hashlib
import os
import resource
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECONDS = 20  # FOURDB_QUERY_SECONDS for every command here
WALL = 60  # what a refused command may take, start-up included
PEAK_RSS = 3 * 2**30  # what any command here may hold at its peak
ENV = {"FOURDB_QUERY_SECONDS": str(SECONDS), "FOURDB_MEMORY": "1GB", "DGLBACKEND": "pytorch", "OMP_NUM_THREADS": "1",
       "PYTHONPATH": str(ROOT)}


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def fourdb(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The real command on files under ``tmp_path``; it may write under ``tmp_path/out`` only."""
    before = tree(tmp_path)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fourdb.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, **ENV}, timeout=WALL * 3)
    done.seconds = time.monotonic() - start
    after = tree(tmp_path)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and not k.startswith("out/"))
    assert not changed, f"written outside --out: {changed}"
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak < PEAK_RSS, f"peak memory {peak / 2**30:.1f} GB"
    return done


def refused(done: subprocess.CompletedProcess, *names: str) -> str:
    """The one error line of a refused command, checked: exit code 2, no traceback, within the bound, naming
    every one of ``names``."""
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr + done.stdout
    for name in names:
        assert name in errors[0], errors[0]
    assert done.seconds < WALL, f"took {done.seconds:.0f} s: {errors[0]}"
    return errors[0]


# ---- files ----------------------------------------------------------------------------------------------
def dictionary_bomb(path: Path, rows: int = 2000, value: int = 20_000_000) -> Path:
    """A few KB of parquet whose dictionary page holds one large string that every row refers to."""
    strings = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["x" * value]))
    pq.write_table(pa.table({"id": np.arange(rows), "s": strings}), path, compression="zstd", store_schema=False)
    assert path.stat().st_size < 20_000
    return path


def database_folder(folder: Path, frame_or_file, source: str = "t.parquet", dtypes=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(frame_or_file, pd.DataFrame):
        frame_or_file.to_parquet(folder / source, index=False)
    dtypes = dtypes or {"id": "primary_key", "s": "text"}
    schema = {"name": "hostile", "tables": [{"name": "t", "source": source,
                                             "columns": [{"name": c, "dtype": d} for c, d in dtypes.items()]}]}
    (folder / "schema.yaml").write_text(yaml.safe_dump(schema))
    return folder


def sqlite_file(path: Path, *statements: str, writable_schema: str | None = None) -> Path:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s)
    if writable_schema:  # what no CREATE statement makes: damage written into the catalog itself
        con.execute("PRAGMA writable_schema = ON")
        con.execute(writable_schema)
    con.commit()
    con.close()
    return path


def relbench3_folder(folder: Path, manifest_text: str | None = None, table=None) -> Path:
    (folder / "db").mkdir(parents=True)
    if isinstance(table, Path):
        table.rename(folder / "db" / "t.parquet")
    else:
        pd.DataFrame({"id": [0, 1], "at": pd.to_datetime(["2020-01-01", "2020-02-01"])}).to_parquet(
            folder / "db" / "t.parquet")
    manifest = manifest_text or yaml.safe_dump({"name": "hostile", "val_timestamp": "2020-01-15",
                                                "test_timestamp": "2020-01-20",
                                                "tables": {"t": {"pkey": "id", "time_col": None}}})
    (folder / "manifest.yaml").write_text(manifest)
    return folder


def dbinfer_folder(folder: Path, tables) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metadata.yaml").write_text(yaml.safe_dump({"dataset_name": "hostile", "tables": tables, "tasks": []}))
    return folder


NPZ_TABLE = [{"name": "t", "source": "t.npz", "format": "numpy",
              "columns": [{"name": "id", "dtype": "primary_key"}, {"name": "v", "dtype": "float"}]}]


# ---- parquet ----------------------------------------------------------------------------------------------
def test_parquet_dictionary_bomb_is_refused_before_it_is_decoded(tmp_path):
    folder = database_folder(tmp_path / "db", None, "bomb.parquet")
    dictionary_bomb(folder / "bomb.parquet")
    line = refused(fourdb(tmp_path, "validate", str(folder)), "bomb.parquet", "'s'", "memory bound")
    assert "40.0 GB" in line


def test_parquet_bomb_in_a_relbench_folder_is_refused(tmp_path):
    folder = relbench3_folder(tmp_path / "rb", table=dictionary_bomb(tmp_path / "bomb.parquet"))
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "t.parquet", "memory bound")


def test_corrupt_parquet_and_a_year_9999_timestamp_name_the_file_and_column(tmp_path):
    folder = database_folder(tmp_path / "db", pd.DataFrame({"id": [1, 2], "s": ["a", "b"]}))
    data = (folder / "t.parquet").read_bytes()
    (folder / "t.parquet").write_bytes(data[:40] + b"\0" * 40 + data[80:])
    refused(fourdb(tmp_path, "validate", str(folder)), "t.parquet")

    import datetime

    folder = database_folder(tmp_path / "db2", None, dtypes={"id": "primary_key", "at": "datetime"})
    far = [datetime.datetime(2020, 1, 1), datetime.datetime(9999, 12, 31)]
    pq.write_table(pa.table({"id": [1, 2], "at": pa.array(far, pa.timestamp("us"))}), folder / "t.parquet")
    refused(fourdb(tmp_path, "validate", str(folder)), "t.parquet", "'at'")


def test_nul_byte_in_a_source_is_one_line(tmp_path):
    folder = database_folder(tmp_path / "db", pd.DataFrame({"id": [1, 2], "s": ["a", "b"]}))
    text = (folder / "schema.yaml").read_text().replace("source: t.parquet", 'source: "t\\0.parquet"')
    (folder / "schema.yaml").write_text(text)
    refused(fourdb(tmp_path, "validate", str(folder)), "source")


def test_bounded_reader_gives_what_pandas_gives(tmp_path):
    """The one parquet reader returns exactly pandas' frame for ordinary files (index, categories, nested values,
    nullable strings), and refuses a bomb in a fraction of a second."""
    from fourdb.rdb.files import ParquetSource, read_parquet
    from fourdb.untrusted import LimitError

    frame = pd.DataFrame({"a": [1.0, None, 3.0], "s": ["x", "yy", None], "l": [["a", "b"], None, ["c"]],
                          "b": [b"1", b"22", b"3"], "c": pd.Categorical(["p", "q", "p"]),
                          "t": pd.to_datetime(["2020-01-01", None, "2021-01-01"]),
                          "u": pd.array(["a", None, "c"], dtype="string")}, index=[5, 6, 7])
    frame.to_parquet(tmp_path / "n.parquet")
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "n.parquet", "n"), pd.read_parquet(tmp_path / "n.parquet"))
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "n.parquet", "n", ["s", "c"]),
                                  pd.read_parquet(tmp_path / "n.parquet", columns=["s", "c"]))
    pd.testing.assert_series_equal(ParquetSource(tmp_path / "n.parquet", "n").column("s"),
                                   pq.read_table(tmp_path / "n.parquet", columns=["s"]).column(0).to_pandas())
    pq.write_table(pa.table({"s": ["ab", "abc", "b" * 50]}), tmp_path / "d.parquet", use_dictionary=False,
                   column_encoding={"s": "DELTA_BYTE_ARRAY"})
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "d.parquet", "d"), pd.read_parquet(tmp_path / "d.parquet"))
    os.environ["FOURDB_MEMORY"] = "1GB"
    try:
        start = time.monotonic()
        with pytest.raises(LimitError, match="bomb: decoding column 's'"):
            read_parquet(dictionary_bomb(tmp_path / "bomb.parquet", rows=500, value=10_000_000), "bomb")
        assert time.monotonic() - start < 5
    finally:
        del os.environ["FOURDB_MEMORY"]


# ---- manifests and metadata -------------------------------------------------------------------------------
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def test_yaml_alias_bombs_are_refused(tmp_path):
    folder = relbench3_folder(tmp_path / "rb", "name: *i\n" + ALIAS_BOMB)
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "manifest.yaml", "alias")
    folder = tmp_path / "dbb"
    folder.mkdir()
    (folder / "metadata.yaml").write_text(ALIAS_BOMB + "dataset_name: *i\ntables: []\n")
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "metadata.yaml", "alias")


def test_relbench_metadata_json_nested_deep_is_one_line(tmp_path):
    folder = tmp_path / "old"
    (folder / "db").mkdir(parents=True)
    nested = "[" * 100_000 + "]" * 100_000
    table = pa.table({"id": [0, 1]}).replace_schema_metadata({"pkey_col": '"id"', "time_col": "null",
                                                             "fkey_col_to_pkey_table": nested})
    pq.write_table(table, folder / "db" / "t.parquet")
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "t.parquet")


def test_4dbinfer_wrong_shapes_are_one_line(tmp_path):
    folder = dbinfer_folder(tmp_path / "dbb", {"t": {"source": "t.parquet"}})
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "metadata.yaml", "tables")
    folder = dbinfer_folder(tmp_path / "dbb2", [{"name": "t", "source": "t.parquet", "columns": {"id": "x"}}])
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "metadata.yaml", "columns")


def test_npz_members_that_inflate_past_the_bound_are_refused_before_inflating(tmp_path):
    folder = dbinfer_folder(tmp_path / "dbb", NPZ_TABLE)
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    header["shape"] = (150_000_000,)  # 1.2 GB of float64 zeros: about 5 MB deflated (230:1)
    with zipfile.ZipFile(folder / "t.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("id.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(np.arange(2)))
            f.write(np.arange(2).tobytes())
        with zf.open("v.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(f, header)
            block = bytes(2**24)
            for _ in range(150_000_000 * 8 // len(block)):
                f.write(block)
            f.write(bytes(150_000_000 * 8 % len(block)))
    assert (folder / "t.npz").stat().st_size < 8_000_000
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "t.npz", "v.npy", "memory bound")


def test_npz_array_header_past_the_bound_and_a_truncated_npz_are_one_line(tmp_path):
    folder = dbinfer_folder(tmp_path / "dbb", NPZ_TABLE)
    with zipfile.ZipFile(folder / "t.npz", "w") as zf:  # a header that asks numpy for 8 TB: a few bytes stored
        with zf.open("v.npy", "w") as f:
            header = np.lib.format.header_data_from_array_1_0(np.zeros(1))
            header["shape"] = (10**12,)
            np.lib.format.write_array_header_1_0(f, header)
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "t.npz", "'v'", "memory bound")
    folder = dbinfer_folder(tmp_path / "dbb2", NPZ_TABLE)
    np.savez_compressed(folder / "t.npz", id=np.arange(100), v=np.random.default_rng(0).random(100))
    data = (folder / "t.npz").read_bytes()
    (folder / "t.npz").write_bytes(data[: len(data) // 2])
    refused(fourdb(tmp_path, "import", str(folder), "--out", "out"), "t.npz")


# ---- SQLite ------------------------------------------------------------------------------------------------
ROWS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {n}) "


def test_sqlite_virtual_generated_columns_are_left_out_with_a_note(tmp_path):
    """A VIRTUAL generated column is computed on read by the expression the file holds: a bomb
    (``printf('%.*c', 5e8, 'x')``) and a harmless one alike are left out, their stored columns imported."""
    src = sqlite_file(tmp_path / "gen.db",
                      "CREATE TABLE t (id INTEGER PRIMARY KEY, first TEXT, s TEXT GENERATED ALWAYS AS "
                      "(printf('%.*c', 500000000, 'x')) VIRTUAL, full TEXT GENERATED ALWAYS AS (first || '!') VIRTUAL, "
                      "kept TEXT GENERATED ALWAYS AS (first || '?') STORED)",
                      ROWS.format(n=100) + "INSERT INTO t(id, first) SELECT i, 'n' || i FROM r")
    assert src.stat().st_size < 20_000
    done = fourdb(tmp_path, "import", str(src), "--out", "out")
    assert done.returncode == 0 and done.seconds < 15, done.stderr
    assert "column 's' is a virtual generated column" in done.stdout and "column 'full'" in done.stdout
    columns = pd.read_parquet(next((tmp_path / "out").glob("**/t.parquet"))).columns.tolist()
    assert columns == ["id", "first", "kept"]


def test_sqlite_corrupt_page_and_nul_in_a_table_name_are_one_line(tmp_path):
    src = sqlite_file(tmp_path / "corrupt.db", "CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT)",
                      ROWS.format(n=5000) + "INSERT INTO a SELECT i, 'row ' || i FROM r")
    data = bytearray(src.read_bytes())
    data[3 * 4096: 3 * 4096 + 200] = b"\xff" * 200
    src.write_bytes(bytes(data))
    refused(fourdb(tmp_path, "import", str(src), "--out", "out"), "corrupt.db", "table 'a'")
    src = sqlite_file(tmp_path / "nul.db", "CREATE TABLE a (id INTEGER PRIMARY KEY, v REAL)",
                      "INSERT INTO a VALUES (1, 2.0)",
                      writable_schema="UPDATE sqlite_master SET name = 'a' || char(0) || 'b' WHERE name = 'a'")
    refused(fourdb(tmp_path, "import", str(src), "--out", "out"), "nul.db", "U+0000")


def test_sqlite_virtual_table_of_an_unknown_module_is_skipped_with_a_note(tmp_path):
    src = sqlite_file(tmp_path / "vt.db", "CREATE TABLE a (id INTEGER PRIMARY KEY, v REAL)",
                      "INSERT INTO a VALUES (1, 2.0)", "CREATE VIRTUAL TABLE f USING fts5(x)",
                      writable_schema="UPDATE sqlite_master SET sql = replace(sql, 'fts5', 'nosuchmod') "
                                      "WHERE name = 'f'")
    done = fourdb(tmp_path, "import", str(src), "--out", "out")
    assert done.returncode == 0, done.stderr
    assert "table 'f' is a virtual table" in done.stdout and "  a: 1 rows" in done.stdout


def test_sqlite_file_names_that_read_as_uri_syntax_open_that_file_read_only(tmp_path):
    src = sqlite_file(tmp_path / "shop.db#", "CREATE TABLE items (id INTEGER PRIMARY KEY, v REAL)",
                      "INSERT INTO items VALUES (1, 2.0)")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    done = fourdb(tmp_path, "import", str(src), "--out", "out")
    assert done.returncode == 0 and "items: 1 rows" in done.stdout, done.stderr
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "shop.db#"]

    (tmp_path / "d").mkdir()
    sqlite_file(tmp_path / "d" / "private.db", "CREATE TABLE secret (id INTEGER PRIMARY KEY, v REAL)",
                "INSERT INTO secret VALUES (1, 2.0)")
    src = sqlite_file(tmp_path / "d" / "a%2F..%2Fprivate.db", "CREATE TABLE mine (id INTEGER PRIMARY KEY, v REAL)",
                      "INSERT INTO mine VALUES (1, 2.0)")
    done = fourdb(tmp_path, "import", str(src), "--out", "out/2")
    assert done.returncode == 0 and "mine: 1 rows" in done.stdout and "secret" not in done.stdout, done.stderr


def test_sqlite_table_named_like_sqlite_internals_is_imported(tmp_path):
    src = sqlite_file(tmp_path / "s.db", "CREATE TABLE sqlite1x (id INTEGER PRIMARY KEY, v REAL)",
                      "INSERT INTO sqlite1x VALUES (1, 2.0), (2, 3.0)", "CREATE TABLE sqlitex (k INTEGER, v REAL)",
                      "INSERT INTO sqlitex VALUES (1, 5.0)", "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT)",
                      "INSERT INTO t VALUES (NULL)")
    done = fourdb(tmp_path, "import", str(src), "--out", "out")
    assert done.returncode == 0, done.stderr
    assert "sqlite1x: 2 rows" in done.stdout and "sqlitex: 1 rows" in done.stdout
    assert "sqlite_sequence" not in done.stdout


# ---- DuckDB --------------------------------------------------------------------------------------------------
def test_duckdb_generated_column_bomb_is_refused_by_size(tmp_path):
    con = duckdb.connect(str(tmp_path / "gen.duckdb"))
    con.execute("CREATE TABLE t (id INTEGER, s VARCHAR GENERATED ALWAYS AS (repeat('x', 40000000)))")
    con.execute("INSERT INTO t(id) SELECT range FROM range(1000)")
    con.close()
    refused(fourdb(tmp_path, "import", str(tmp_path / "gen.duckdb"), "--out", "out"), "gen.duckdb", "table 't'",
            "memory bound")


def test_duckdb_table_name_that_injects_sql_is_text(tmp_path):
    name = 't", range(10000000000000) AS "x'
    quoted = '"' + name.replace('"', '""') + '"'
    con = duckdb.connect(str(tmp_path / "inj.duckdb"))
    con.execute(f"CREATE TABLE {quoted} (id INTEGER PRIMARY KEY, v DOUBLE)")
    con.execute(f"INSERT INTO {quoted} VALUES (1, 2.0), (2, 3.0)")
    con.close()
    refused(fourdb(tmp_path, "import", str(tmp_path / "inj.duckdb"), "--out", "out"), "inj.duckdb", "double quote")


def test_a_downloaded_task_name_is_never_a_path(tmp_path, monkeypatch):
    """A RelBench dataset fetched by name lists its own tasks: a task named ``../../x`` is refused before any file
    is placed, inside or outside the staging folder."""
    import types

    import relbench

    from fourdb.errors import UntrustedInputError
    from fourdb.importers.relbench3 import fetch

    (tmp_path / "hub" / "db").mkdir(parents=True)
    (tmp_path / "hub" / "manifest.yaml").write_text("name: x\n")
    (tmp_path / "hub" / "task").mkdir()
    (tmp_path / "hub" / "task" / "train.parquet").write_bytes(b"x")
    ds = types.SimpleNamespace(dataset_dir=tmp_path / "hub", get_task_names=lambda: ["../../escaped"],
                               _resolve_task_dir=lambda name: tmp_path / "hub" / "task")
    monkeypatch.setattr(relbench, "load_dataset", lambda spec: ds)
    (tmp_path / "staging").mkdir()
    with pytest.raises(UntrustedInputError, match="cannot be a file name"):
        fetch("org/repo", tmp_path / "staging")
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.rglob("escaped"))
