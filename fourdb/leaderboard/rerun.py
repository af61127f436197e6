"""``fourdb rerun``: a record run again from its own config, and whether its metrics repeat.

A record is data. It is read and checked as a board line is (``validate_record``); its config becomes a run
config with every string kept as text (``literal_config``: a ``${oc.env:...}`` in it is never resolved) and
with only the settings fourdb's config groups hold (``check_settings``); then it runs through
``run_checked``, the one path ``fourdb run`` trains by. Its metrics are set beside the record's, every
validation and test metric the record holds, under one rule:

- bitwise-equal floats where the record names this machine's kind of CPU (its model name and the
  instruction set torch's kernels use on it, ``hardware.cpu`` and ``hardware.cpu_capability``; for a neural
  model, no GPU on either side): the same code, data and seed on the same kind of CPU compute the same
  floats;
- else within a relative tolerance (``math.isclose``): ``TREE_RTOL`` for a model that is not a neural one,
  ``NEURAL_RTOL`` for a neural one. A record made before records named their CPU is of unknown CPU kind.

The code is not part of the record: the rerun runs today's checkout, and ``code_notes`` says where that
differs from the record's commit (and its ``code.patch``), packages, task file and database.
"""
from __future__ import annotations

import copy
import hashlib
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from fourdb.errors import FourdbError
from fourdb.leaderboard.schema import RecordError, finite, validate_record
from fourdb.untrusted import load_json, read_json, read_text, safe_text

# Trees and trivial baselines compute in float64 and fit deterministically given the seed; on another CPU
# only a summation order may differ (round-off near 1e-15), so 1e-4 passes that and fails a changed fit.
TREE_RTOL = 1e-4
# A neural model trains in float32 on several threads: on another instruction set its kernels round
# differently from the first step, the difference grows with every epoch and may move the early-stopping
# epoch (measured: 2e-3 on a test AUROC near 0.85, tests/test_leaderboard.py). 2% bounds that and stays
# below the spread between seeds on the boards (lahman salary: sage's test MAE 0.57 to 0.61 over 3 seeds).
NEURAL_RTOL = 2e-2
CPU_KIND = ("cpu", "cpu_capability")  # hardware's keys that name the kind of CPU
SPLITS_COMPARED = ("val", "test")  # validation chooses and test reports: both must repeat
CODE_PATCH = "code.patch"  # what fourdb.experiment.run writes beside a dirty run's record
# settings older records name otherwise, as the boards read them: (group, old key) -> today's key
RENAMED = {("graph", "kind"): "name", ("sampler", "strategy"): "name"}


@dataclass
class Source:
    """A record to rerun, where it was read (``path`` or ``board:line``) and the run folder it lies in."""
    record: dict
    where: str
    folder: Path | None = None  # a record.json's folder: its code.patch; None for a board line


def read_source(text: str, line: int | None = None) -> Source:
    """The record that ``text`` names: a record file, a run folder (its record.json) or a board file with a
    1-based line (``board.jsonl:12`` or ``line``); checked as a board line is, in one line if it is not one."""
    path, line = _split_line(text, line)
    if not path.exists():
        raise RecordError(f"{safe_text(text)}: no such record file, run folder or board")
    if path.is_dir():
        if line is not None:
            raise RecordError(f"{safe_text(path)}: a run folder, not a board; a line selects a record of a board file")
        if not (path / "record.json").is_file():
            raise RecordError(f"{safe_text(path)}: no record.json in it (is it a run folder?)")
        path = path / "record.json"
    if line is not None:
        return Source(_board_line(path, line), f"{safe_text(path)}:{line}")
    if path.suffix == ".jsonl":
        raise RecordError(f"{safe_text(path)}: a board holds one record a line; name one as {safe_text(path)}:N "
                          f"or with --line N")
    where = safe_text(path)
    return Source(validate_record(read_json(path, where, RecordError), where), where, path.parent)


def _split_line(text: str, line: int | None) -> tuple[Path, int | None]:
    """``board.jsonl:12`` -> (board.jsonl, 12); a path that exists as given is that path (a ``:`` in a name)."""
    match = re.fullmatch(r"(.+):(\d+)", text)
    if Path(text).exists() or not match:
        return Path(text), line
    if line is not None and line != int(match[2]):
        raise RecordError(f"{safe_text(text)}: line {match[2]} and --line {line} name two records; give one")
    return Path(match[1]), int(match[2])


def _board_line(path: Path, line: int) -> dict:
    where = f"{safe_text(path)}:{line}"
    if path.is_file() and path.suffix == ".json":
        raise RecordError(f"{where}: a record file, not a board (.jsonl); it has no lines to select")
    lines = read_text(path, "json", safe_text(path)).splitlines()
    if not 1 <= line <= len(lines):
        raise RecordError(f"{where}: no such line (lines are numbered from 1; the file has {len(lines)})")
    if not lines[line - 1].strip():
        raise RecordError(f"{where}: an empty line, not a record")
    return validate_record(load_json(lines[line - 1], where, RecordError), where)


def rerun_config(record: dict, allow_outside_paths: bool = False):
    """The record's resolved config as a run config: its strings as text, never interpolations; a key that
    is not a setting of fourdb's config groups is refused in one line, as ``fourdb run`` refuses it. A record
    names its task, never a file: a task file's path in its config gives way to the record's task name, found
    as the boards find it (docs/trust.md); and a database folder may name sources outside itself only where the
    command line allows it (``allow_outside_paths``), never because a record says so."""
    from omegaconf import OmegaConf

    from fourdb.experiment.launch import needs_launch
    from fourdb.experiment.prepare import literal_config
    from fourdb.experiment.settings import check_settings

    if record.get("external"):
        raise RecordError("an external submission: its model ran outside fourdb, so there is nothing to rerun")
    config = copy.deepcopy(record["config"])
    for (group, old), new in RENAMED.items():
        settings = config.get(group)
        if isinstance(settings, dict) and old in settings and new not in settings:
            settings[new] = settings.pop(old)
    if isinstance(config.get("task"), str) and config["task"] != record["task"] and _a_path(config["task"]):
        config["task"] = record["task"]
    dataset = config.get("dataset") if isinstance(config.get("dataset"), dict) else {}
    if dataset.get("allow_outside_paths") and not allow_outside_paths:
        raise RecordError("the record's config sets dataset.allow_outside_paths: an opt-in of the command line, "
                          "never of a record; give --allow-outside-paths to let its database folder name sources "
                          "outside it")
    cfg = OmegaConf.create(literal_config(config))
    check_settings(cfg)
    if needs_launch(cfg):
        raise FourdbError(f"the record trained on several processes (trainer.nproc={cfg.trainer.nproc}); "
                          "fourdb rerun runs one-process records: run it with fourdb run and the record's settings")
    return cfg


def _a_path(task: str) -> bool:
    return task.endswith((".yaml", ".yml")) or any(c in task for c in "/\\")


def rerun_record(cfg, out_dir: str | Path) -> dict:
    """Run a record's config (``rerun_config``) again into ``out_dir``: its record.json, predictions and, from
    dirty code, the code's patch, as ``fourdb run`` writes them; the new record (NaN as null, as on a board)."""
    from fourdb.experiment.prepare import clear_launch
    from fourdb.experiment.run import run_checked

    clear_launch(out_dir)
    return finite(run_checked(cfg, out_dir))


# ----------------------------------------------------------------------------------------- the comparison

@dataclass
class Row:
    split: str
    metric: str
    recorded: float | None
    rerun: float | None
    missing: bool = False  # the rerun has no such metric
    repeats: bool = False


@dataclass
class Verdict:
    rows: list[Row]
    rtol: float | None  # None: bitwise equal asked for
    why: str  # which rule, and why that one
    repeats: bool = field(init=False)

    def __post_init__(self):
        self.repeats = all(r.repeats for r in self.rows)

    def line(self) -> str:
        """The one-line verdict."""
        if self.repeats:
            how = "exactly: every metric bitwise equal" if self.rtol is None else \
                f"within relative {self.rtol:g}: largest relative difference {self.largest():.3g}"
            return f"repeats {how} ({self.why})"
        bad = next(r for r in self.rows if not r.repeats)
        got = "missing" if bad.missing else _number(bad.rerun)
        rule = "bitwise equal" if self.rtol is None else f"within relative {self.rtol:g}"
        return (f"does NOT repeat: {bad.split} {bad.metric} recorded {_number(bad.recorded)}, rerun {got}; the "
                f"rule is {rule} ({self.why})")

    def largest(self) -> float:
        return max((relative(r.recorded, r.rerun) for r in self.rows if not r.missing), default=0.0)


def rule(recorded: dict, here: dict, neural: bool) -> tuple[float | None, str]:
    """(None for bitwise equal, else the relative tolerance) between a record's ``hardware`` and the
    rerun's, and the reason in words."""
    rtol = NEURAL_RTOL if neural else TREE_RTOL
    kind = f"{'a neural' if neural else 'not a neural'} model: relative {rtol:g}"
    gpus = [hw.get("gpu") for hw in (recorded, here) if hw.get("gpu")]
    if neural and gpus:  # a GPU's kernels promise no order of summation from one run to the next
        return rtol, f"a GPU on one side ({safe_text(gpus[0], 60)}), {kind}"
    if not recorded.get("cpu"):
        return rtol, f"unknown CPU kind: the record does not name its CPU, {kind}"
    theirs, ours = ([safe_text(hw.get(k), 60) for k in CPU_KIND] for hw in (recorded, here))
    if theirs == ours:
        return None, f"the same CPU kind: {', '.join(ours)}"
    return rtol, f"another CPU kind: the record's {', '.join(theirs)}, here {', '.join(ours)}, {kind}"


def compare(record: dict, again: dict, neural: bool) -> Verdict:
    """Every validation and test metric of ``record`` beside the rerun's, judged by ``rule``."""
    rtol, why = rule(record.get("hardware") or {}, again.get("hardware") or {}, neural)
    rows = []
    for split in SPLITS_COMPARED:
        ours = (again.get("metrics") or {}).get(split) or {}
        for metric, value in ((record["metrics"].get(split)) or {}).items():
            row = Row(split, metric, value, ours.get(metric), missing=metric not in ours)
            row.repeats = not row.missing and same(value, row.rerun, rtol)
            rows.append(row)
    return Verdict(rows, rtol, why)


def same(a, b, rtol: float | None) -> bool:
    """Whether two metric values repeat: bitwise-equal doubles (``rtol`` None), or ``math.isclose``. A metric
    undefined on a split (null: AUROC of one class) repeats only as null."""
    if a is None or b is None:
        return a is None and b is None
    if rtol is None:
        return struct.pack("<d", float(a)) == struct.pack("<d", float(b))
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=1e-12)


def relative(a, b) -> float:
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    scale = max(abs(float(a)), abs(float(b)))
    return abs(float(b) - float(a)) / scale if scale else 0.0


def _number(value) -> str:
    return "null" if value is None else repr(float(value))


def table(verdict: Verdict) -> str:
    """The record's metrics and the rerun's side by side, full precision, with the difference."""
    lines = [f"{'split':<6}{'metric':<14}{'record':<24}{'rerun':<24}difference"]
    for r in verdict.rows:
        if r.missing:
            diff, got = "(not in the rerun)", "-"
        else:
            got = _number(r.rerun)
            diff = "0 (bitwise)" if same(r.recorded, r.rerun, None) else (
                "-" if r.recorded is None or r.rerun is None else f"{float(r.rerun) - float(r.recorded):+.3g} "
                f"(relative {relative(r.recorded, r.rerun):.2g})")
        lines.append(f"{r.split:<6}{safe_text(r.metric, 13):<14}{_number(r.recorded):<24}{got:<24}{diff}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the code

def code_notes(record: dict, again: dict, folder: Path | None) -> tuple[bool, list[str]]:
    """Whether the rerun ran the record's code (its commit, and no uncommitted changes or the same ones), and
    lines saying where the code, packages, task or database differ from the record's and how to check out
    the record's code."""
    theirs, ours = record.get("git_commit"), again.get("git_commit")
    if not theirs:
        return False, ["code: the record names no git commit, so the code that made it is unknown",
                       *_other_notes(record, again)]
    changes = _changes(record), _changes(again)
    same_code = bool(ours and ours.startswith(theirs)) and changes[0] == changes[1] and changes[0] is not None
    if same_code:
        notes = [f"code: the same: commit {theirs[:12]}, "
                 f"{'the same uncommitted changes (code.patch sha256)' if changes[0] else 'no uncommitted changes'}"]
    else:
        here = f"commit {ours[:12]}" if ours else "code outside a git checkout"
        notes = [f"code: NOT the same, so the comparison is not of one code: the record's is commit {theirs[:12]}"
                 f"{_described(record)}, this rerun's {here}{_described(again)}; to rerun the record's own code, "
                 f"check it out (git checkout {theirs}{', then git apply its code.patch' if record.get('git_dirty') else ''})"
                 f" and rerun it there (with fourdb run and the record's config where that commit has no rerun)"]
    if record.get("git_dirty") and not same_code:
        notes.append(_patch_note(record, folder))
    return same_code, notes + _other_notes(record, again)


def _changes(record: dict):
    """A record's uncommitted changes: "" for none, the sha256 of their patch, or None where unknown."""
    if record.get("git_dirty") is False:
        return ""
    return record.get("code_patch_sha256") if record.get("git_dirty") else None


def _described(record: dict) -> str:
    dirty = record.get("git_dirty")
    return " with uncommitted changes" if dirty else "" if dirty is False else " (uncommitted changes unknown)"


def _patch_note(record: dict, folder: Path | None) -> str:
    """Where the uncommitted changes of a dirty record's code are (its run folder's code.patch), if at hand."""
    patch = folder / CODE_PATCH if folder is not None else None
    if patch is None or not patch.is_file() or patch.is_symlink():
        return ("code: the record's code had uncommitted changes and no code.patch of them is at hand (a board "
                "line keeps none; its run folder would): that code cannot be rebuilt exactly")
    patch = patch.absolute()  # git apply runs at the checkout's top, wherever this was read from
    digest = hashlib.sha256()
    with open(patch, "rb") as f:  # in blocks: a run folder's file may be any size
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != record.get("code_patch_sha256"):
        return (f"code: the record's code had uncommitted changes; {safe_text(patch)} is not the patch its run "
                f"wrote (its sha256 is not the record's code_patch_sha256)")
    return (f"code: the record's code had uncommitted changes, kept in {safe_text(patch)} (sha256 as recorded): "
            f"after git checkout {record['git_commit']}, git apply {safe_text(patch)} rebuilds it")


def _other_notes(record: dict, again: dict) -> list[str]:
    """Packages, the task file, the database and the seed counts where the rerun's differ from the record's."""
    notes = []
    packages = record.get("packages") or {}
    moved = [f"{safe_text(p, 40)} {safe_text(v, 40)} -> {safe_text((again.get('packages') or {}).get(p), 40)}"
             for p, v in packages.items() if v != (again.get("packages") or {}).get(p, v)]
    if moved:
        notes.append(f"packages: not the record's: {', '.join(moved)}")
    if record["task_spec_hash"] != again.get("task_spec_hash"):
        notes.append(f"task: the task file is not the one the record ran (spec hash {safe_text(record['task_spec_hash'], 20)}"
                     f" -> {again.get('task_spec_hash')})")
    theirs, ours = record.get("database_fingerprint"), again.get("database_fingerprint")
    if theirs and ours and theirs != ours:
        notes.append(f"database: not the record's (fingerprint {safe_text(theirs, 20)} -> {ours})")
    if record["num_seeds"] != again.get("num_seeds"):
        notes.append(f"seeds: the record scored {record['num_seeds']}, the rerun {again.get('num_seeds')}")
    return notes
