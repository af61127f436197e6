"""Leaderboards: validated run records in ``<root>/<dataset>/<task>.jsonl``, rendered to tables and plots.

* ``schema``: the record schema and its validation.
* ``boards``: where a board's file lives, and reading one.
* ``store``: locked, atomic appends (``submit_records``, ``submit_run_dirs``), reading roots of boards.
* ``verify`` and ``stamp``: a record checked against its run folder, and the seal of what was checked.
* ``external``: prediction files from models built elsewhere, scored by fourdb.
* ``render``: mean ± std over seeds, ranks, average ranks, README.md and plots; ``show`` one board.
"""
from fourdb.leaderboard.schema import RECORD_VERSION, RecordError, config_hash, validate_record
from fourdb.leaderboard.boards import board_path, read_board
from fourdb.leaderboard.store import leaderboard_root, load_all, submit_records, submit_run_dirs

__all__ = ["RECORD_VERSION", "RecordError", "board_path", "config_hash", "leaderboard_root", "load_all",
           "read_board", "submit_records", "submit_run_dirs", "validate_record"]
