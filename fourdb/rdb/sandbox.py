"""What fourdb lets input do: SQL from a file runs as one query that sees only the database's tables, and a
path from a file stays inside its folder.

Task SQL (and a RelBench manifest's, and a row task's label and filter expressions) is written by whoever
made the task file, so it is run as data: it is parsed first and refused unless it is a single query
(SELECT, WITH, VALUES), then run on a DuckDB instance of its own that holds only the database's tables and
the relations fourdb registers for it (``cutoffs``, ``timestamps``). That instance cannot reach the file
system (no file readers or writers, no ATTACH, no extensions), does not see Python variables, and its
configuration is locked before the task's SQL runs, so the SQL cannot turn any of this back on.
"""
from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd

from fourdb.errors import UntrustedInputError

QUERY_STATEMENTS = {duckdb.StatementType.SELECT}


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
        ``where``; any other DuckDB error is raised as it is (a broken query is the caller's to word)."""
        return self._run(sql, where, relations, lambda: self.con.execute(sql).df())

    def columns(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None = None) -> list[str]:
        """The columns one query returns, bound against the tables without running it (as ``query`` refuses)."""
        return self._run(sql, where, relations, lambda: list(self.con.sql(sql).columns))

    def _run(self, sql: str, where: str, relations: dict[str, pd.DataFrame] | None, run):
        check_query(sql, where)
        relations = relations or {}
        for name, df in relations.items():
            self.con.register(name, df)
        try:
            return run()
        except (duckdb.PermissionException, duckdb.InvalidInputException) as e:
            text = str(e).splitlines()[0]
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
