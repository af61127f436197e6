"""What fourdb lets input do: SQL from a file runs as one query that sees only the database's tables, and a
path from a file stays inside its folder.

Task SQL (and a RelBench manifest's, and a row task's label and filter expressions) is written by whoever
made the task file, so it is run as data: it is parsed first and refused unless it is a single query
(SELECT, WITH, VALUES), then run on a DuckDB instance of its own that holds only the database's tables and
the relations fourdb registers for it (``cutoffs``, ``timestamps``). That instance cannot reach the file
system (no file readers or writers, no ATTACH, no extensions), does not see Python variables, and its
configuration is locked before the task's SQL runs, so the SQL cannot turn any of this back on.

Its work is bounded too: a query stops after ``FOURDB_QUERY_SECONDS``, DuckDB holds at most its memory limit
and spills at most ``FOURDB_SPILL``, and a result is counted and sized inside DuckDB before it becomes a
frame, refused past the memory bound (``fourdb.untrusted``).
"""
from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import duckdb
import pandas as pd

from fourdb.errors import UntrustedInputError
from fourdb.untrusted import LimitError, QUERY_SECONDS, SPILL, check_bytes, memory_budget, query_seconds

QUERY_STATEMENTS = {duckdb.StatementType.SELECT}
RESULT = '"__fourdb_result"'  # the temp table a query's result is built in before it becomes a frame
RESULT_SHARE = 0.5  # of the memory bound: the frame a result becomes sits beside the database's tables


def result_budget() -> int:
    return int(memory_budget() * RESULT_SHARE)


def _first(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


_WIDTHS = {"BOOLEAN": 1, "TINYINT": 1, "UTINYINT": 1, "SMALLINT": 2, "USMALLINT": 2, "INTEGER": 4, "UINTEGER": 4,
           "BIGINT": 8, "UBIGINT": 8, "HUGEINT": 16, "UHUGEINT": 16, "FLOAT": 4, "DOUBLE": 8, "DATE": 8,
           "TIME": 8, "TIMESTAMP": 8, "TIMESTAMP_S": 8, "TIMESTAMP_MS": 8, "TIMESTAMP_NS": 8,
           "TIMESTAMP WITH TIME ZONE": 8, "INTERVAL": 16, "UUID": 16}


def _fixed_width(duckdb_type: str) -> int:
    """Bytes a value of this type takes in a frame; 0 for a type whose size is its content (text, lists)."""
    if duckdb_type.startswith("DECIMAL"):
        return 8
    return _WIDTHS.get(duckdb_type, 0)


def quote_ident(name: str) -> str:
    """A name as a SQL identifier, whatever characters it holds."""
    return '"' + str(name).replace('"', '""') + '"'


def check_query(sql: str, where: str) -> None:
    """Refuse, before anything runs, SQL that is not exactly one query; a syntax error is left to the run,
    which reports it as the SQL failing."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return
    if not statements:
        raise UntrustedInputError(f"{where}: the SQL holds no query")
    kinds = [s.type.name for s in statements]
    if len(statements) > 1:
        raise UntrustedInputError(f"{where}: the SQL must be one query, but holds {len(statements)} statements "
                                  f"({', '.join(kinds)}); not allowed")
    if statements[0].type not in QUERY_STATEMENTS:
        raise UntrustedInputError(f"{where}: the SQL must be a query (SELECT or WITH), not {kinds[0]}; not allowed")


class SQLSandbox:
    """A DuckDB instance that holds ``tables`` (in place, not copied) and nothing else, where SQL from a file
    can read them and cannot touch files, extensions, Python objects or settings."""

    def __init__(self, tables: dict[str, pd.DataFrame], settings: dict | None = None):
        from fourdb.utils import duckdb_connect

        self.con = duckdb_connect()  # external access already off: see duckdb_connect
        for name, value in (settings or {}).items():  # fourdb's own (benchmarks), before the lock
            self.con.execute(f"SET {name} = {value!r}" if isinstance(value, str) else f"SET {name} = {value}")
        self.tables = tables
        for name, df in tables.items():
            self.con.register(name, df)
        self.con.execute("SET lock_configuration = true")

    def query(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
        """The result of one query, with ``relations`` registered beside the tables while it runs. SQL that
        is not one query, or that reaches for a file or a setting, raises ``UntrustedInputError`` naming
        ``where``; work past a bound (time, memory, spill, the result's size) raises ``LimitError``; any other
        DuckDB error is raised as it is (a broken query is the caller's to word)."""
        return self._run(sql, where, relations, lambda: self._bounded_frame(sql, where))

    def columns(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None = None) -> list[str]:
        """The columns one query returns, bound against the tables without running it (as ``query`` refuses)."""
        return self._run(sql, where, relations, lambda: list(self.con.sql(sql).columns))

    def _bounded_frame(self, sql: str, where: str) -> pd.DataFrame:
        return bounded_frame(self.con, sql, where)

    def _run(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None, run):
        check_query(sql, where)
        relations = relations or {}
        for name, df in relations.items():
            self.con.register(name, df)
        try:
            with bounded(self.con, where):
                return run()
        except (duckdb.PermissionException, duckdb.InvalidInputException) as e:
            text = _first(e)
            if isinstance(e, duckdb.InvalidInputException) and "configuration" not in text:
                raise
            raise UntrustedInputError(f"{where}: the SQL may only read the database's tables; not allowed: "
                                      f"{text}") from None
        finally:
            for name in relations:
                self.con.unregister(name)
                if name in self.tables:  # a table named like a relation (cutoffs) is the table again
                    self.con.register(name, self.tables[name])

    def close(self) -> None:
        self.con.close()


@contextlib.contextmanager
def bounded(con, where: str):
    """Run DuckDB work on ``con`` inside this block under the input bounds: interrupted after
    ``FOURDB_QUERY_SECONDS``, and DuckDB's memory or spill limit reached, as one ``LimitError`` naming
    ``where``. (DuckDB checks for the interrupt between chunks of work, so a stop comes within seconds.)"""
    seconds = query_seconds()
    running = threading.Event()
    running.set()
    timer = threading.Timer(seconds, lambda: running.is_set() and con.interrupt())
    timer.daemon = True
    timer.start()
    try:
        yield
    except duckdb.InterruptException:
        raise LimitError(f"{where}: the query ran past {seconds:g} s and was stopped "
                         f"({QUERY_SECONDS.env} raises the bound)") from None
    except duckdb.Error as e:
        text = _first(e)
        if "max_temp_directory_size" in text or "offload" in text:
            raise LimitError(f"{where}: the query needs more memory than DuckDB's limit and more disk to spill "
                             f"to than the spill bound ({text}; {SPILL.env} or FOURDB_DUCKDB_MEMORY raise "
                             f"them)") from None
        if isinstance(e, duckdb.OutOfMemoryException):
            raise LimitError(f"{where}: the query needs more memory than DuckDB's limit ({text}; "
                             f"FOURDB_DUCKDB_MEMORY raises it)") from None
        raise
    finally:
        running.clear()
        timer.cancel()
        timer.join()  # no thread of ours outlives the query (one still alive at exit aborts the process)


def bounded_frame(con, sql: str, where: str, budget: int | None = None) -> pd.DataFrame:
    """The result of ``sql`` on ``con`` as a frame, built in DuckDB first (under its memory and spill limits),
    counted and sized there, and turned into a frame only if that fits ``budget`` (default: half the memory
    bound): DuckDB's limit does not cover the frame, and a query can return billions of rows or a gigabyte a
    string. Run it inside ``bounded`` for the time limit."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {RESULT} AS {sql}")
    try:
        types = [row[:2] for row in con.execute(f"DESCRIBE {RESULT}").fetchall()]
        size = [f"count(*) * {sum(_fixed_width(t) for _, t in types) + 8}"]
        size += [f"coalesce(sum(strlen(CAST({quote_ident(c)} AS VARCHAR))), 0) + count({quote_ident(c)}) * 57"
                 for c, t in types if _fixed_width(t) == 0]
        rows, nbytes = con.execute(f"SELECT count(*), {' + '.join(size)} FROM {RESULT}").fetchone()
        check_bytes(nbytes, where, f"the result ({rows:,} rows)", result_budget() if budget is None else budget)
        return con.execute(f"SELECT * FROM {RESULT}").df()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {RESULT}")


def inside_folder(folder: str | Path, relative: str, where: str, allow_outside: bool = False) -> Path:
    """``relative`` resolved in ``folder``, refused in one line if it leaves the folder: an absolute path, a
    ``..`` out of it, or a symbolic link (anywhere on the way) that points out of it. ``allow_outside`` is the
    user's own opt-in from the command line, never a key of the folder's files."""
    folder = Path(folder)
    path = folder / relative
    if allow_outside:
        return path
    root = folder.resolve()
    target = path.resolve()
    if os.path.isabs(relative) or (target != root and root not in target.parents):
        raise UntrustedInputError(
            f"{where}: '{relative}' is outside the folder {folder} (a database folder reads only its own files; "
            f"--allow-outside-paths, or dataset.allow_outside_paths=true for a run, lets it)")
    return path


def refuse_links_out(folder: str | Path, allow_outside: bool = False) -> None:
    """Refuse a folder any of whose files or subfolders is a symbolic link out of it (the first one named), so
    that an importer that lists the folder reads nothing else."""
    if allow_outside:
        return
    root = Path(folder).resolve()
    for parent, dirs, files in os.walk(root):  # links are not followed: each is checked, not entered
        for name in sorted(dirs + files):
            entry = Path(parent) / name
            if entry.is_symlink():
                inside_folder(root, str(entry.relative_to(root)), f"{folder}: link")
