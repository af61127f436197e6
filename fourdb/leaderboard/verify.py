"""A record is checked, not believed: what submit recomputes, the stamp it leaves, and what a board shows.

At submit, a run folder's record is checked against the folder itself:

* its ``predictions`` must name a file inside the run folder (no path, no link out), whose sha256 the record
  then carries;
* the test metrics are recomputed from that file against the task's own test labels, materialized as for an
  external submission (``fourdb.leaderboard.external.materialize``), and must match the record's within
  ``REL_TOLERANCE``; a mismatch is refused; so are the bootstrap replicates of the board's metric
  (``test_bootstrap``), which a record without them gains; a record with nothing to recompute them from keeps
  none;
* ``certify: passed`` counts only where certify's own log line (``certify: passed (N cutoff groups x ..., M
  predictions compared)``, in the run's ``*.log``) is in the folder and states the record's checks.

A record so checked gets a ``checked`` stamp, sealed with an HMAC under a key only this user's fourdb holds
(``fourdb.utils.seal``): a stamp copied onto another record, or a board line edited after submit, no longer
verifies. A record without predictions is accepted unverified. Every board surface shows each row's ``verified`` status:

* ``yes``: the test metrics were recomputed by fourdb at submit (or scored by fourdb, for an external CSV);
* ``committed``: a record of the boards committed with fourdb (``leaderboards/`` of this checkout), made by
  ``leaderboards/produce.py`` from the commit it names; its run folder is not kept, so it is not recomputed;
* ``no``: neither; the numbers are the record's own claim.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np

from fourdb.errors import FourdbError
from fourdb.leaderboard.schema import RecordError
from fourdb.leaderboard.stamp import STAMP, sealed, stamp
from fourdb.untrusted import plain_file_name, reading, safe_text

BOOTSTRAP = "test_bootstrap"  # a record's replicates of its test metric (fourdb.metrics.bootstrap_record)
STATUS = "_verified"    # in memory only (as shown): VERIFIED, COMMITTED or UNVERIFIED
VERIFIED, COMMITTED, UNVERIFIED = "yes", "committed", "no"
REL_TOLERANCE = 1e-5    # float32 predictions summed in another order differ in the 7th digit
ABS_TOLERANCE = 1e-7
MAX_LOG_BYTES = 64 * 2**20
CERTIFY_LINE = re.compile(r"certify: (passed|FAILED) \((\d+) cutoff groups x [a-z/]+, (\d+) predictions compared\)")


# ------------------------------------------------------------------------------------------ what is shown

@functools.lru_cache(maxsize=64)
def _committed_lines(dataset: str, task: str) -> frozenset:
    """Hashes of the records on this checkout's committed board of (dataset, task), its archive included."""
    from fourdb.leaderboard.boards import COMMITTED_ROOT, board_path, read_board

    out = set()
    for root in (COMMITTED_ROOT, COMMITTED_ROOT / "archive"):
        try:
            out.update(_line_hash(r) for r in read_board(board_path(root, dataset, task)))
        except FourdbError:  # a committed board this fourdb cannot read vouches for nothing
            pass
    return frozenset(out)


def _line_hash(record: dict) -> str:
    plain = {k: v for k, v in record.items() if not k.startswith("_")}
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()


def status(record: dict) -> str:
    """How a board shows ``record``: VERIFIED, COMMITTED or UNVERIFIED (``load_all`` sets it once per record
    as read; a record as stored is judged here)."""
    if record.get(STATUS) is not None:
        return record[STATUS]
    if _line_hash(record) in _committed_lines(record["dataset"], record["task"]):
        return COMMITTED
    return VERIFIED if sealed(record) else UNVERIFIED


def certify_verdict(record: dict) -> str:
    """certify's verdict as a board shows it: ``passed`` only where certify's own output was checked (or the
    record is one of the committed boards'); a claim of passing without it is ``unverified``."""
    verdict = record.get("certify")
    if not isinstance(verdict, dict):
        return "not run"
    if not verdict.get("passed"):
        return "FAILED"
    shown = status(record)
    if shown == COMMITTED or shown == VERIFIED and (record.get(STAMP) or {}).get("certify") is True:
        return "passed"
    return "unverified"


# -------------------------------------------------------------------------------------------- the checks

def run_file(folder: str | Path, name, where: str, noun: str = "predictions") -> Path:
    """The file ``name`` a record names in its run folder: a plain file name, a regular file, inside the folder
    once links are followed. Anything else is refused in one line."""
    try:
        plain_file_name(name, where, noun)
    except FourdbError:
        raise RecordError(f"{where}: {noun} {safe_text(name, 80)!r} must name a file in the run folder (no path); "
                          f"not allowed") from None
    folder = Path(folder)
    path = folder / name
    if path.exists() and folder.resolve() not in path.resolve().parents:
        raise RecordError(f"{where}: {noun} {safe_text(name, 80)!r} links outside the run folder {folder}; not allowed")
    if not path.is_file():
        raise RecordError(f"{where}: {noun} file {safe_text(name, 80)!r} is not in the run folder {folder} (the "
                          f"record's metrics are checked against it)")
    return path


def check_run(record: dict, where: str, folder: str | Path | None) -> dict:
    """``record`` as submit stores it: stamped where its run folder lets fourdb recompute its test metrics, or
    where it already carries this machine's seal (an external CSV fourdb scored); otherwise without a stamp
    (unverified). A predictions file that does not reproduce the record's metrics is refused."""
    if folder is None or "predictions" not in record:
        if sealed(record):
            return record
        # nothing to recompute from: its claims stay unchecked, and replicates it claims are not kept at all
        return {k: v for k, v in record.items() if k not in (STAMP, BOOTSTRAP)}
    record = {k: v for k, v in record.items() if k != STAMP}
    path = run_file(folder, record["predictions"], where)
    with reading(path):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if record.get("predictions_sha256", digest) != digest:
        raise RecordError(f"{where}: predictions_sha256 does not match {path.name} (sha256 {digest}); not accepted")
    replicates = recompute(record, path, where)
    return stamp({**record, "predictions_sha256": digest, BOOTSTRAP: replicates}, metrics="recomputed",
                 certify=certify_logged(folder, record.get("certify")))


def recompute(record: dict, path: Path, where: str) -> dict:
    """Score the predictions file against the task's test labels; refuse the record unless every test metric
    it states, and its bootstrap replicates if it states them, are what the file gives. Returns the replicates
    the file gives (a record without them gains them)."""
    from fourdb.leaderboard.external import materialize, replicates, score
    from fourdb.leaderboard.schema import task_source

    params = ((record.get("config") or {}).get("dataset") or {}).get("params") or {}
    db, task, test = materialize(task_source(record)[0], record["task"], params)
    predictions = run_predictions(path, db, task, test, where)
    got = score(task, test, predictions)
    for name, claimed in record["metrics"]["test"].items():
        if name not in got:
            raise RecordError(f"{where}: metrics.test.{name} is not a metric of task {record['task']} "
                              f"({', '.join(got)}); not accepted")
        if not _same(claimed, got[name]):
            raise RecordError(f"{where}: metrics.test.{name} is {claimed}, but {path.name} scores {got[name]:.6g} "
                              f"against the task's test labels; not accepted")
    recomputed = replicates(task, test, predictions)
    claimed = record.get(BOOTSTRAP)
    if claimed is not None:
        _same_replicates(claimed, recomputed, f"{where}: {BOOTSTRAP}", path.name)
    return recomputed


def _same_replicates(claimed: dict, got: dict, where: str, name: str) -> None:
    """Refuse claimed bootstrap replicates other than those ``got`` from the predictions file (metric, seed,
    count, and each value within the metrics' tolerance)."""
    for key in ("metric", "seed"):
        if claimed.get(key) != got[key]:
            raise RecordError(f"{where}.{key} is {safe_text(repr(claimed.get(key)), 40)}, but the test set's is "
                              f"{got[key]!r}; not accepted")
    if len(claimed["replicates"]) != len(got["replicates"]):
        raise RecordError(f"{where} holds {len(claimed['replicates'])} replicates, but {len(got['replicates'])} are "
                          f"made; not accepted")
    for i, (a, b) in enumerate(zip(claimed["replicates"], got["replicates"])):
        if not _same(a, float("nan") if b is None else b):
            raise RecordError(f"{where}.replicates[{i}] is {a}, but {name} gives {b}; not accepted")


def _same(claimed, got: float) -> bool:
    if claimed is None or (isinstance(claimed, float) and math.isnan(claimed)):
        return math.isnan(got)
    return not math.isnan(got) and math.isclose(claimed, got, rel_tol=REL_TOLERANCE, abs_tol=ABS_TOLERANCE)


def run_predictions(path: Path, db, task, test, where: str):
    """A run's predictions file as the scores ``fourdb.metrics`` reads, aligned to ``test``'s rows: the file must
    hold each test key once and nothing else, its row count checked before its data is read."""
    import pandas as pd
    import pyarrow.parquet as pq

    from fourdb.leaderboard.external import prediction_keys

    name = f"{where}: {path.name}"
    with reading(name):
        rows = pq.ParquetFile(path).metadata.num_rows
        if rows != len(test):
            raise RecordError(f"{name}: {rows} rows, but the task has {len(test)} test rows; not accepted")
        frame = pd.read_parquet(path, columns=["entity", "cutoff", "prediction"])
        keys = prediction_keys(frame["entity"], pd.to_datetime(frame["cutoff"]).astype("datetime64[ns]"))
        want = prediction_keys(test["entity"], pd.to_datetime(test["cutoff"]).astype("datetime64[ns]"))
        order = keys.get_indexer(want) if keys.is_unique else np.full(len(want), -1)
        if (order < 0).any():
            raise RecordError(f"{name}: does not hold each test key (entity, cutoff) of the task once; not accepted")
        cells = frame["prediction"].to_numpy()[order]
        spec = task.spec
        if spec.task_type.is_ranking:
            dst = db.schema.table(spec.destination_table)
            index = pd.Index(db.tables[dst.name][dst.primary_key].to_numpy())
            ranked = [index.get_indexer(list(c)) for c in cells]
            if any((r < 0).any() for r in ranked):
                raise RecordError(f"{name}: predicts a destination that is not a key of '{dst.name}'; not accepted")
            width = max([len(r) for r in ranked] + [spec.eval_k or 0])
            scores = np.full((len(ranked), width), -1, dtype=np.int64)
            for i, r in enumerate(ranked):
                scores[i, :len(r)] = r
            return scores
        if spec.task_type.per_class:
            return np.stack([np.asarray(c, dtype=float) for c in cells])
        return np.asarray(cells, dtype=float)


def certify_logged(folder: str | Path, verdict) -> bool | None:
    """Whether certify's own log line in the run folder states ``verdict`` (its result, cutoff groups and
    predictions compared); None where the record has no verdict."""
    if not isinstance(verdict, dict):
        return None
    checks = verdict.get("checks") or []
    want = ("passed" if verdict.get("passed") else "FAILED", len({str(c.get("cutoff")) for c in checks}),
            sum(c["seeds"] for c in checks))
    for log in sorted(Path(folder).glob("*.log")):
        if log.is_symlink() or not log.is_file() or log.stat().st_size > MAX_LOG_BYTES:
            continue
        with reading(log):
            text = log.read_bytes().decode("utf-8", errors="replace")
        if any((m[0], int(m[1]), int(m[2])) == want for m in CERTIFY_LINE.findall(text)):
            return True
    return False

