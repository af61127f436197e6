"""What input can make fourdb do, bounded: the limits every piece of input-driven work runs under, the one
place input files are parsed, names kept as text, and text from records made safe to show.

A database folder, a task file, a manifest, a SQLite/DuckDB file or a leaderboard record is data written by
someone else. Everything here turns what such data could do (run for hours, fill memory or disk, end in a
traceback, become a path, become markup or a terminal command) into one line that names the input and the
bound (docs/trust.md lists every bound, its default and how to change it).
"""
from __future__ import annotations

import contextlib
import html
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from fourdb.errors import FourdbError, UntrustedInputError


class LimitError(FourdbError):
    """Input asked for more work than a bound allows (time, memory, disk, count)."""


# ---------------------------------------------------------------------------------------------- the bounds

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}


def parse_size(text: str, where: str) -> int:
    """``8GB``, ``512MiB``, ``1e9`` or a plain byte count, as bytes."""
    m = _SIZE.match(str(text))
    if m is None or m.group(2) is not None and m.group(2).upper() not in _UNITS:
        try:
            return int(float(text))
        except ValueError:
            raise FourdbError(f"{where}={text!r} is not a size (e.g. 8GB, 512MB)") from None
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").upper()])


@dataclass(frozen=True)
class Bound:
    """One limit: its environment variable and the default that applies without it."""
    env: str
    what: str

    def raw(self) -> str | None:
        value = os.environ.get(self.env)
        return value if value not in (None, "") else None


QUERY_SECONDS = Bound("FOURDB_QUERY_SECONDS", "seconds one query from a task or manifest may run")
MEMORY = Bound("FOURDB_MEMORY", "memory the work one input causes may hold")
SPILL = Bound("FOURDB_SPILL", "disk a query may spill to")
MAX_CUTOFFS = Bound("FOURDB_MAX_CUTOFFS", "cutoffs a task may make per split")

DEFAULT_QUERY_SECONDS = 1800.0
MEMORY_SHARE = 0.5  # of what this process may use: the rest is fourdb's own (torch, the database's frames)
DEFAULT_MAX_CUTOFFS = 10_000
MAX_SPILL_BYTES = 8 * 10**9
SPILL_SHARE = 0.25  # of the disk's free space
MAX_FILE_BYTES = {"yaml": 16 * 2**20, "json": 256 * 2**20}  # a schema, task, manifest or record is text
MAX_NESTING = 64  # how deep a YAML or JSON document from a file may nest


def query_seconds() -> float:
    raw = QUERY_SECONDS.raw()
    if raw is None:
        return DEFAULT_QUERY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1
    if not value > 0:
        raise FourdbError(f"{QUERY_SECONDS.env}={raw!r} is not a positive number of seconds")
    return value


def memory_available() -> int:
    """What this process may use: the machine's memory, less where a cgroup (its own or one above it) or a
    resource limit caps it."""
    import resource

    import psutil

    limits = [psutil.virtual_memory().total, *cgroup_memory_limits()]
    for which in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)):
        if which is not None:
            soft = resource.getrlimit(which)[0]
            if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
                limits.append(soft)
    return int(min(limits))


def cgroup_memory_limits() -> list[int]:
    """The memory limits of this process's cgroup and every cgroup above it (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``): a process group run under a limit sees it here, not in the machine's total."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = Path("/sys/fs/cgroup"), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            try:
                text = (folder / name).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit() and int(text) < 2**60:
                found.append(int(text))
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return found


def memory_budget() -> int:
    """Bytes the work one input causes may hold (a query's result, a decompressed member, a string):
    ``FOURDB_MEMORY``, else half of what this process may use."""
    raw = MEMORY.raw()
    if raw is not None:
        value = parse_size(raw, MEMORY.env)
        if value <= 0:
            raise FourdbError(f"{MEMORY.env}={raw!r} is not a positive size")
        return value
    return int(memory_available() * MEMORY_SHARE)


def spill_budget(folder: str | Path) -> int:
    """Bytes a query may spill under ``folder``: ``FOURDB_SPILL``, else a quarter of the disk's free space (at
    most 8 GB)."""
    import shutil

    raw = SPILL.raw()
    if raw is not None:
        return parse_size(raw, SPILL.env)
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return int(min(shutil.disk_usage(probe).free * SPILL_SHARE, MAX_SPILL_BYTES))


def max_cutoffs() -> int:
    raw = MAX_CUTOFFS.raw()
    if raw is None:
        return DEFAULT_MAX_CUTOFFS
    if not raw.isdigit() or int(raw) < 1:
        raise FourdbError(f"{MAX_CUTOFFS.env}={raw!r} is not a positive whole number")
    return int(raw)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def check_bytes(size: float, where: str, what: str, budget: int | None = None) -> None:
    """Refuse, before it is built, ``what`` of ``size`` bytes past the memory budget."""
    budget = memory_budget() if budget is None else budget
    if size > budget:
        raise LimitError(f"{where}: {what} would take {human_bytes(size)}, over the memory bound of "
                         f"{human_bytes(budget)} ({MEMORY.env} raises it)")


# ------------------------------------------------------------------------------------------ parsing files

def _library_errors() -> tuple[type[BaseException], ...]:
    """The errors the parsing libraries raise on a malformed file: each becomes one line naming the file."""
    import sqlite3
    import zipfile
    import zlib

    import yaml

    errors: list[type[BaseException]] = [yaml.YAMLError, json.JSONDecodeError, UnicodeError, sqlite3.Error,
                                         zipfile.BadZipFile, zlib.error, EOFError, RecursionError, OverflowError,
                                         MemoryError, OSError, ValueError, KeyError, TypeError, IndexError]
    for module, name in (("pyarrow", "ArrowException"), ("duckdb", "Error")):
        try:
            errors.append(getattr(__import__(module), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    message = text[0] if text else ""
    if isinstance(error, MemoryError):
        message = "out of memory"
    elif isinstance(error, RecursionError):
        message = "nested too deeply"
    return f"{type(error).__name__}: {message[:300]}" if message else type(error).__name__


@contextlib.contextmanager
def reading(where: str | Path, what: str = "cannot read"):
    """Parse a file (or a table of it) inside this block: a library's error on malformed input becomes one
    ``FourdbError`` naming ``where``. fourdb's own errors pass as they are."""
    try:
        yield
    except FourdbError:
        raise
    except _library_errors() as e:
        raise FourdbError(f"{where}: {what} ({first_line(e)})") from None


def read_text(path: str | Path, kind: str, where: str | None = None) -> str:
    """A text file of ``kind`` (yaml, json), refused past its size bound before it is read."""
    path = Path(path)
    where = where or str(path)
    with reading(where):
        size = path.stat().st_size
        if size > MAX_FILE_BYTES[kind]:
            raise LimitError(f"{where}: {human_bytes(size)}, over the {human_bytes(MAX_FILE_BYTES[kind])} a "
                             f"{kind.upper()} file may hold")
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES[kind] + 1)
        return data.decode("utf-8")


def plain_loader(base=None):
    """A YAML loader (``base``: yaml.SafeLoader or a subclass) that refuses aliases: plain data needs
    none, and an alias expands to as many copies as it is referenced (a 2 KB file can name gigabytes)."""
    import yaml

    base = base or yaml.SafeLoader

    class PlainLoader(base):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "an alias (*name) is not allowed: input files "
                                                  "are plain data", mark)
            self._depth = getattr(self, "_depth", 0) + 1
            try:
                if self._depth > MAX_NESTING:
                    raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_NESTING} levels",
                                                      self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return PlainLoader


def load_yaml(text: str, where: str, loader=None, error: type[FourdbError] = FourdbError):
    """YAML from a file as plain data: no aliases, no tags beyond the safe ones, nesting bounded."""
    import yaml

    if len(text) > MAX_FILE_BYTES["yaml"]:
        raise LimitError(f"{where}: over the {human_bytes(MAX_FILE_BYTES['yaml'])} a YAML file may hold")
    try:
        return yaml.load(text, Loader=plain_loader(loader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise error(f"{where}: not valid YAML ({at}{getattr(e, 'problem', None) or type(e).__name__})") from None
    except (RecursionError, MemoryError) as e:
        raise error(f"{where}: not valid YAML ({first_line(e)})") from None


def read_yaml(path: str | Path, where: str | None = None, loader=None, error: type[FourdbError] = FourdbError):
    return load_yaml(read_text(path, "yaml", where), where or str(path), loader, error)


def nesting(value, limit: int = MAX_NESTING) -> int:
    """How deep ``value`` nests (counted up to ``limit + 1``), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def load_json(text: str | bytes, where: str, error: type[FourdbError] = FourdbError):
    """JSON from a file or a line of one: valid, finite in size and nested at most ``MAX_NESTING`` deep."""
    if len(text) > MAX_FILE_BYTES["json"]:
        raise LimitError(f"{where}: over the {human_bytes(MAX_FILE_BYTES['json'])} a JSON document may hold")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (RecursionError, MemoryError, UnicodeError, ValueError) as e:
        raise error(f"{where}: not valid JSON ({first_line(e)})") from None
    if nesting(value) > MAX_NESTING:
        raise error(f"{where}: JSON nested deeper than {MAX_NESTING} levels")
    return value


def read_json(path: str | Path, where: str | None = None, error: type[FourdbError] = FourdbError):
    return load_json(read_text(path, "json", where), where or str(path), error)


def check_zip_members(path: str | Path, where: str | None = None, ratio: int = 200) -> None:
    """Refuse, before anything is inflated, a zip (an ``.npz``) whose members would take more than the memory
    bound, or one member of which would take over a quarter of it at a ratio past ``ratio``:1 (real columns
    seldom compress so well at that size; a bomb does)."""
    import zipfile

    where = where or str(path)
    budget = memory_budget()
    with reading(where), zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    check_bytes(sum(i.file_size for i in infos), where, f"its {len(infos)} members inflated", budget)
    for info in infos:
        if info.file_size > budget / 4 and info.file_size > ratio * max(info.compress_size, 1):
            raise LimitError(f"{where}: member {safe_text(info.filename)!r} inflates "
                             f"{info.file_size / max(info.compress_size, 1):,.0f}:1 to {human_bytes(info.file_size)}, "
                             f"refused as a compression bomb ({MEMORY.env} raises the bound)")


# ---------------------------------------------------------------------------------------- names are text

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
MAX_NAME = 255


def check_name(name, where: str, noun: str = "name") -> str:
    """A name from input (a table, a column, a task): text without NUL or control characters, not empty,
    at most 255 characters. It may hold any other character: SQL quotes it, file names check it."""
    if not isinstance(name, str):
        raise UntrustedInputError(f"{where}: {noun} must be text, got {type(name).__name__}")
    if not name or len(name) > MAX_NAME:
        raise UntrustedInputError(f"{where}: {noun} must be 1 to {MAX_NAME} characters, got {len(name)}")
    bad = _CONTROL.search(name)
    if bad:
        raise UntrustedInputError(f"{where}: {noun} {safe_text(name)!r} holds a control character "
                                  f"(U+{ord(bad.group()):04X}); not allowed")
    return name


def plain_file_name(name, where: str, noun: str = "name") -> str:
    """A name from input that becomes a file name: no separator, not ``.`` or ``..``, no leading dot or dash,
    no NUL or control character. Refused in one line, never turned into a path."""
    check_name(name, where, noun)
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith((".", "-")) or ":" in name:
        raise UntrustedInputError(f"{where}: {noun} {name!r} cannot be a file name (no '/', '\\', ':', leading "
                                  f"'.' or '-'); not allowed")
    return name


def inside_output(folder: str | Path, path: str | Path, where: str) -> Path:
    """``path`` (under ``folder``), refused unless it resolves inside ``folder``: what fourdb writes stays in
    its output folder."""
    root = Path(folder).resolve()
    target = (Path(folder) / path).resolve()
    if target != root and root not in target.parents:
        raise UntrustedInputError(f"{where}: {safe_text(str(path))!r} would be written outside {folder}; "
                                  f"not allowed")
    return Path(folder) / path


# ---------------------------------------------------------------------------------------- text to show

def safe_text(value, limit: int = 200) -> str:
    """Text from input as one printable line: control characters (newlines, ESC sequences, bidi overrides)
    shown as escapes, cut at ``limit`` characters. Safe in a terminal and a log."""
    text = str(value)
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    text = "".join(c if unicodedata.category(c) != "Cf" else f"\\u{ord(c):04x}" for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
# what Markdown or HTML reads as structure: a link or image ([, ]), raw HTML (<, >, &), a table cell's end (|),
# code (`) and the escape itself (\). Emphasis (*, _) only styles text, and a line break never gets through
# (safe_text), so no heading or list can start.
_MARKDOWN = re.compile(r"[\\`\[\]|<>&]")


def markdown_text(value, limit: int = 200) -> str:
    """Text from input inside a Markdown table cell, heading or alt text: one line, every character that
    Markdown or HTML reads as structure escaped, so it shows as the text it is."""
    return _MARKDOWN.sub(lambda m: _ENTITIES.get(m.group(), "\\" + m.group()), safe_text(value, limit))


def html_text(value, limit: int = 200) -> str:
    return html.escape(safe_text(value, limit), quote=True)
