"""Board files: where a board of (dataset, task) lives under a root, and reading one, each line validated as at
submit. Below ``store`` (locked writes) and ``verify`` (which reads the committed boards to say which records
are theirs)."""
from __future__ import annotations

import re
from pathlib import Path

from fourdb.leaderboard.schema import RecordError, validate_record
from fourdb.untrusted import load_json, read_text

COMMITTED_ROOT = Path(__file__).resolve().parents[2] / "leaderboards"  # in a source checkout of fourdb


def file_name(name: str) -> str:
    """A dataset or task name as a plain file name: no separator, no leading dot (so never '..')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).lstrip(".") or "_"


def board_path(root: str | Path, dataset: str, task: str) -> Path:
    return Path(root) / file_name(dataset) / f"{file_name(task)}.jsonl"


def board_paths(root: str | Path) -> list[Path]:
    return sorted(Path(root).glob("*/*.jsonl"))


def read_board(path: str | Path) -> list[dict]:
    """All records of one board file (empty if it does not exist yet), each line validated as at submit."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for i, line in enumerate(read_text(path, "json").splitlines(), 1):
        if line.strip():
            records.append(validate_record(load_json(line, f"{path}:{i}", RecordError), f"{path}:{i}"))
    return records
