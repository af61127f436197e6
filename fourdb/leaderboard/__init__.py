"""Leaderboards: validated run records in ``<root>/<dataset>/<task>.jsonl``, rendered to tables and plots.

* ``schema``: the record schema and its validation.
* ``store``: locked, atomic appends (``submit_records``, ``submit_run_dirs``), reading boards.
* ``external``: prediction files from models built elsewhere, scored by fourdb.
* ``render``: mean ± std over seeds, ranks, average ranks, README.md and plots; ``show`` one board.
"""
from fourdb.leaderboard.schema import SCHEMA_VERSIONS, RecordError, config_hash, validate_record
from fourdb.leaderboard.store import (
    board_path,
    leaderboard_root,
    load_all,
    read_board,
    submit_records,
    submit_run_dirs,
)

__all__ = ["SCHEMA_VERSIONS", "RecordError", "board_path", "config_hash", "leaderboard_root", "load_all",
           "read_board", "submit_records", "submit_run_dirs", "validate_record"]
