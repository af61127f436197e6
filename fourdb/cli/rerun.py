"""``fourdb rerun RECORD``: run a record again (a record.json, a run folder, or one line of a board) into a
fresh run folder and say whether its metrics repeat (``fourdb.leaderboard.rerun``). Exit status 0 when they
do, 1 when they do not, 2 on an error (one line)."""
from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from pathlib import Path

from fourdb.errors import FourdbError
from fourdb.untrusted import safe_text
from fourdb.utils import BesideBar, atomic_write_text

RERUN_ROOT = Path("outputs") / "rerun"


def rerun(args) -> int:
    from fourdb.experiment.launch import is_neural
    from fourdb.leaderboard.rerun import code_notes, compare, read_source, rerun_config, rerun_record, table

    source = read_source(args.record, args.line)
    record = source.record
    cfg = rerun_config(record, args.allow_outside_paths)  # a bad record is refused before any folder is made
    out = run_folder(args.out, record)
    print(f"rerun of {source.where}: {safe_text(record['dataset'])}/{safe_text(record['task'])}, model "
          f"{safe_text(record['model'])} on {_inputs(record['inputs'])}, seed {record['seed']}", flush=True)
    print(f"run folder: {out}", flush=True)
    with log_to(out / "rerun.log"):
        again = rerun_record(cfg, out)
    verdict = compare(record, again, is_neural(cfg))
    same_code, notes = code_notes(record, again, source.folder)
    print("\n".join([*notes, table(verdict)]))
    caveat = "" if same_code else " (on other code than the record's, see code: above)"
    print(f"verdict: {verdict.line()}{caveat}", flush=True)
    report = {"record": source.where, "run_folder": str(out), "repeats": verdict.repeats, "rule": {
        "bitwise": verdict.rtol is None, "relative_tolerance": verdict.rtol, "why": verdict.why},
        "same_code": same_code, "notes": notes, "verdict": verdict.line(),
        "metrics": [vars(r) for r in verdict.rows]}
    atomic_write_text(out / "rerun.json", json.dumps(report, indent=2))
    return 0 if verdict.repeats else 1


def _inputs(inputs: dict) -> str:
    """A record's inputs in a few words: features=dfs, or graph=r2n."""
    named = [f"{k}={v}" for k, v in inputs.items() if isinstance(v, str)]
    return safe_text(", ".join(named) or "its inputs", 120)


def run_folder(out: str | None, record: dict) -> Path:
    """``--out``, which must not exist or be empty; else a new folder under outputs/rerun/ named by the time,
    the record's dataset, task, model (each as a plain file name) and seed."""
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise FourdbError(f"--out {safe_text(out)}: exists and is not an empty folder; a rerun writes a fresh "
                              f"run folder")
        path.mkdir(parents=True, exist_ok=True)
        return path
    from fourdb.leaderboard.boards import file_name

    stem = (f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{file_name(record['dataset'])}_{file_name(record['task'])}_"
            f"{file_name(record['model'])}_s{record['seed']}")
    RERUN_ROOT.mkdir(parents=True, exist_ok=True)
    for n in range(1000):  # two reruns started in one second get folders of their own
        path = RERUN_ROOT / (stem if n == 0 else f"{stem}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FourdbError(f"{RERUN_ROOT}: no free folder name for {stem}; give --out")


@contextlib.contextmanager
def log_to(path: Path):
    """The run's log on stderr and in its run folder, as ``fourdb run`` writes it (Hydra's job log there);
    certify's log line in it is what ``leaderboard submit`` checks a certified record by."""
    fmt = logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S")
    handlers = [logging.StreamHandler(sys.stderr), logging.FileHandler(path)]
    handlers[0].addFilter(BesideBar())  # progress lines a bar shows on the terminal go to the file alone
    root, level = logging.getLogger(), logging.getLogger().level
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(level)
        for h in handlers:
            root.removeHandler(h)
            h.close()
