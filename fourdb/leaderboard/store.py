"""Leaderboard files: ``<root>/<dataset>/<task>.jsonl``, one validated record a line.

Appending takes the board's file lock, re-reads the board, checks the new records against it, then
writes the whole new file to a temp file beside it and renames it over the old one. A reader, or a
submitter killed at any moment, only ever sees the old file or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock

from fourdb.errors import FourdbError
from fourdb.leaderboard.schema import (
    RecordError,
    config_hash,
    describe_key,
    finite,
    protocol_label,
    record_key,
    task_source,
    validate_record,
)
from fourdb.leaderboard.boards import COMMITTED_ROOT, board_path, board_paths, read_board
from fourdb.leaderboard.verify import STATUS, check_run, status
from fourdb.untrusted import read_json
from fourdb.utils import atomic_write_bytes, progress as progress_bar, stable_hash

ROOT_ENV = "FOURDB_LEADERBOARDS"
LOCK_TIMEOUT_S = 300


# read from several roots, a record says which one in this key; in memory only, never written to a board
ROOT_FIELD = "_root"


def leaderboard_root(root: str | Path | None = None) -> Path:
    """``root``, else $FOURDB_LEADERBOARDS, else ./leaderboards."""
    return Path(root or os.environ.get(ROOT_ENV) or "leaderboards")


def committed_root() -> Path:
    """The boards committed with fourdb's source (``leaderboards/`` of the checkout this fourdb runs from)."""
    if not board_paths(COMMITTED_ROOT):
        raise FourdbError(f"no committed boards in {COMMITTED_ROOT}: they come with a source checkout of fourdb")
    return COMMITTED_ROOT


def root_label(root: Path) -> str:
    return "committed" if root.resolve() == COMMITTED_ROOT else str(root)


def leaderboard_roots(roots=None) -> list[Path]:
    """One root or several (None: the default root), each once."""
    roots = [roots] if roots is None or isinstance(roots, (str, Path)) else list(roots) or [None]
    out: dict[Path, Path] = {}
    for r in map(leaderboard_root, roots):
        out.setdefault(r.resolve(), r)
    return list(out.values())


def find_records(paths) -> list[tuple[Path, dict]]:
    """Records from run folders (holding record.json), multirun folders (many), or record files."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            found.append(p)
        elif (p / "record.json").is_file():
            found.append(p / "record.json")
        elif p.is_dir():
            inner = sorted(p.rglob("record.json"))
            if not inner:
                raise RecordError(f"{p}: no record.json in it or below it (is it a run or multirun folder?)")
            found.extend(inner)
        else:
            raise RecordError(f"{p}: no such run folder or record file")
    return [(f, read_json(f, error=RecordError)) for f in found]


_SPECS: dict[tuple[str, str], object] = {}


def record_spec(record: dict):
    """The task file of ``record`` as it is now (a TaskSpec), read once per process."""
    from fourdb.tasks import find_task

    key = task_source(record)
    if key not in _SPECS:
        _SPECS[key] = find_task(*key)
    return _SPECS[key]


_SAME: dict[tuple, list[str]] = {}


def graph_names(record: dict) -> list[str]:
    """The graph constructions that build, on the record's database, the graph its run built (``same_graphs``);
    empty for a run without a graph. Reads the database's schema (a built-in dataset is built once, if not
    cached); for a database no longer at hand, the name its record gives."""
    from fourdb.datasets import dataset_folder
    from fourdb.graph import same_graphs
    from fourdb.rdb import Database, Schema

    graph = record["inputs"].get("graph")
    if not graph:
        return []
    source = task_source(record)[0]
    params = ((record.get("config") or {}).get("dataset") or {}).get("params") or {}
    key = (source, stable_hash(params), graph)
    if key not in _SAME:
        try:
            folder = source if Path(source).is_absolute() else dataset_folder(source, **params)
            _SAME[key] = same_graphs(graph, Database(Schema.load(folder), {}))
        except FourdbError:
            _SAME[key] = [graph]
    return _SAME[key]


def as_built(record: dict) -> dict:
    """``record`` with its graph named as built (``fourdb.graph.built_graph``): records made before runs
    said so name the graph asked for, r2ne where a database without link tables built r2n."""
    names = graph_names(record)
    if not names:
        return record
    record = {**record, "inputs": {**record["inputs"], "graph": names[0]}}
    record["config_hash"] = config_hash(record)
    return record


def database_key(record: dict) -> tuple[str, str]:
    """Records with the same key are read as made on one database: a dataset name and its parameters."""
    return record["dataset"], protocol_label(record)


Databases = dict[tuple[str, str], dict[str, str]]  # database key -> fingerprint -> where it was seen


def same_database(record: dict, where: str, known: Databases, check: bool = True) -> None:
    """Remember ``record``'s database in ``known``; with ``check``, first refuse it if ``known`` holds
    another database under the same name. Records without a fingerprint (older ones) are not compared."""
    fingerprint = record.get("database_fingerprint")
    if not fingerprint:
        return
    key = database_key(record)
    seen = known.setdefault(key, {})
    other = next((f for f in seen if f != fingerprint), None)
    if check and other:
        name = record["dataset"] + (f" [{key[1]}]" if key[1] else "")
        raise RecordError(
            f"{where}: database '{name}' has fingerprint {fingerprint}, but {seen[other]} holds results on "
            f"another database of that name (fingerprint {other}) and the two would be pooled; run it with "
            f"another dataset.name, or submit it to another --root")
    seen.setdefault(fingerprint, where)


def prepare(record: dict, where: str) -> dict:
    """Validate a record for submission and stamp it; refuse one made against another task version."""
    validate_record(record, where)
    try:
        current = record_spec(record).spec_hash
    except FourdbError as e:
        raise RecordError(f"{where}: cannot check the task version: {e}") from None
    if record["task_spec_hash"] != current:
        raise RecordError(
            f"{where}: made against another version of task {record['dataset']}/{record['task']} "
            f"(spec hash {record['task_spec_hash']}, the task file now hashes to {current}); rerun it")
    record = finite(dict(record))
    record.setdefault("external", False)  # every stored line has it, so queries can filter on it
    record["config_hash"] = config_hash(record)
    record.setdefault("submitted_at", datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return record


def _write_board(path: Path, lines: list[str]) -> None:
    """The whole board, written to a temp file beside it and renamed into place."""
    atomic_write_bytes(path, "".join(line + "\n" for line in lines).encode())


@dataclass
class SubmitResult:
    added: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # duplicates, when asked to skip them
    replaced: list[dict] = field(default_factory=list)  # certified records put in their twins' place (in added)
    boards: list[Path] = field(default_factory=list)


def submit_records(records: list[tuple[str, dict]], root: str | Path | None = None, skip_duplicates: bool = False,
                   progress: bool | None = None, replace: bool = False) -> SubmitResult:
    """Validate ``(where, record)`` or ``(where, record, run folder)`` tuples and append them to their boards;
    all or nothing.

    Every record is checked (schema, task version, its test metrics against its run folder's predictions
    where it has one (``verify.check_run``; without one it is stored unverified), duplicates within the
    submission and against the boards, and that its dataset name and parameters stand for the database they
    do on the dataset's boards and in the submission) before any board is written. Boards are locked in a
    fixed order, so concurrent submitters never deadlock and never lose each other's records.
    ``replace``: a record whose ``certify`` verdict passed takes the place of the one on its board with the
    same key (its plain twin); a record on the board met by one without a passed verdict is refused.
    """
    root = leaderboard_root(root)
    result = SubmitResult()
    prepared: dict[Path, list[tuple[str, dict]]] = {}
    seen: dict[tuple, str] = {}
    databases: Databases = {}
    for where, record, *folder in progress_bar(records, progress, desc="validating records", leave=False):
        record = check_run(as_built(prepare(record, str(where))), str(where), folder[0] if folder else None)
        key = record_key(record)
        if key in seen:
            if skip_duplicates:
                result.skipped.append(record)
                continue
            raise RecordError(f"{where}: duplicate of {seen[key]} in this submission ({describe_key(record)})")
        seen[key] = str(where)
        same_database(record, str(where), databases)
        prepared.setdefault(board_path(root, record["dataset"], record["task"]), []).append((str(where), record))
    if not prepared:
        return result
    paths = sorted(prepared)
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for p in paths:
            stack.enter_context(FileLock(str(p) + ".lock", timeout=LOCK_TIMEOUT_S))
        existing = {p: read_board(p) for p in paths}
        # a dataset name is one database across all its tasks' boards, the unlocked ones read as they are
        on_boards: Databases = {}
        for board in sorted({b for p in paths for b in p.parent.glob("*.jsonl")} | set(paths)):
            for r in existing[board] if board in existing else read_board(board):
                same_database(r, str(board), on_boards, check=False)
        new_content: dict[Path, list[str]] = {}
        for p in paths:
            lines = _board_lines(p, existing[p], prepared[p], on_boards, result, skip_duplicates, replace)
            if lines is not None:
                new_content[p] = lines
        for p in progress_bar(list(new_content), progress, desc="writing boards", leave=False):
            for stale in p.parent.glob(f".{p.name}.*.tmp"):  # left by a submitter killed mid-write
                with contextlib.suppress(OSError):
                    stale.unlink()
            _write_board(p, new_content[p])
            result.boards.append(p)
    return result


def certified(record: dict) -> bool:
    """Whether ``fourdb certify``'s verdict on the record passed."""
    return (record.get("certify") or {}).get("passed") is True


def _board_lines(p: Path, existing: list[dict], prepared: list[tuple[str, dict]], on_boards: Databases,
                 result: SubmitResult, skip_duplicates: bool, replace: bool) -> list[str] | None:
    """Board ``p``'s new lines: its records, each submitted one appended, or, with ``replace``, written in its
    certified-over twin's place; None when nothing is added."""
    index = {record_key(as_built(r)): i for i, r in enumerate(existing)}
    lines = [json.dumps(r, default=str, allow_nan=False) for r in existing]
    added = []
    for where, record in prepared:
        key = record_key(record)
        if key in index and replace:
            if not certified(record):
                verdict = "failed" if record.get("certify") else "not run"
                raise RecordError(f"{where}: --replace takes a board record's place only with a certified run "
                                  f"(certify passed); its certify verdict is {verdict}: {describe_key(record)}")
        elif key in index:
            if skip_duplicates:
                result.skipped.append(record)
                continue
            raise RecordError(f"already on the leaderboard {p}: {describe_key(record)} "
                              f"(same dataset, task, model, inputs, seed and config)")
        same_database(record, where, on_boards)
        line = json.dumps(record, default=str, allow_nan=False)
        if key in index:
            lines[index[key]] = line
            result.replaced.append(record)
        else:
            lines.append(line)
        added.append(record)
    result.added.extend(added)
    return lines if added else None


def submit_run_dirs(paths, root=None, skip_duplicates=False, progress=None, replace=False) -> SubmitResult:
    """Submit the records of run folders, each checked against its own folder."""
    return submit_records([(str(f), r, f.parent) for f, r in find_records(paths)], root, skip_duplicates, progress,
                          replace)


def load_all(root=None, board: tuple[str, str] | None = None) -> dict[tuple[str, str], list[dict]]:
    """Every board under ``root`` (one root or several), or only ``board`` (dataset, task): (dataset, task) ->
    records, graphs named as built. Read from several roots, each record names its own in ``ROOT_FIELD``."""
    roots = leaderboard_roots(root)
    boards: dict[tuple[str, str], list[dict]] = {}
    for root in roots:
        for p in [board_path(root, *board)] if board else board_paths(root):
            # verified, committed or not: judged on the line as stored, before its graph is renamed
            records = [as_built({**r, STATUS: status(r)}) for r in read_board(p)]
            if len(roots) > 1:
                records = [{**r, ROOT_FIELD: root_label(root)} for r in records]
            if records:
                boards.setdefault((records[0]["dataset"], records[0]["task"]), []).extend(records)
    return boards
