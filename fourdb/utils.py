"""Small helpers shared across stages: atomic writes, stable hashing, time conversion, progress bars."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


@contextlib.contextmanager
def atomic_output(path: str | Path, folder: bool = False):
    """A temp file (or, ``folder=True``, a temp folder) beside ``path`` to write into. When the block ends
    without error it is renamed onto ``path``, replacing what was there; otherwise it is removed. So a
    reader, or a writer killed at any moment, sees the old content or the new, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    else:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        # as ordinary files and folders: mkstemp's are owner-only, and boards and caches are shared
        os.chmod(tmp, (0o777 if folder else 0o666) & ~umask)
        if folder and path.exists():
            shutil.rmtree(path)  # a stale or empty folder in the way
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True) if folder else tmp.unlink()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``atomic_output``, synced to disk before the rename."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def yaml_text(data) -> str:
    """``data`` as YAML, multi-line text (a task's SQL) as a readable ``|`` block. PyYAML keeps a quoted
    string wherever a block could not hold it exactly (a line ending in spaces), so it reads back the same."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=4096)


PROGRESS_ENV = "FOURDB_PROGRESS_SECONDS"  # seconds between logged progress lines (default 30)


def progress(iterable=None, enabled: bool | None = True, bar: bool = True, **kwargs):
    """A long loop's progress: a tqdm bar on stderr where stderr is a terminal, and every ``FOURDB_PROGRESS_SECONDS``
    (30) a line in the log with what is done, the time so far and an estimate of the time left.

    Where stderr is a terminal the lines go to the log's files only (``BesideBar``: the bar shows them there);
    elsewhere (a pipe, a job's log) to every handler, as the bar, redrawn into a file, would be noise.
    ``enabled=False`` silences both; ``None`` and ``True`` mean the same (kept for callers that say which);
    ``bar=False`` leaves out the bar alone (``trainer.progress=false``). A loop shorter than the interval logs
    nothing.
    """
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    on_terminal = kwargs["file"].isatty() and bar
    shown = tqdm(iterable, disable=enabled is False or not on_terminal, **kwargs)
    if enabled is False:
        return shown
    total = kwargs.get("total", len(iterable) if hasattr(iterable, "__len__") else None)
    return LoggedProgress(shown, ProgressLog(kwargs.get("desc") or "progress", total, kwargs.get("initial", 0),
                                             kwargs.get("unit", "it"), beside_bar=on_terminal))


class BesideBar:
    """A logging filter for a terminal's handler: drops the progress lines a bar already shows there."""

    def filter(self, record) -> bool:
        return not getattr(record, "beside_bar", False)


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def plural(unit: str, n: int) -> str:
    """``batch`` -> ``batches``, ``table`` -> ``tables`` (for ``n != 1``)."""
    if n == 1:
        return unit
    return unit + ("es" if unit.endswith(("s", "sh", "tch", "x")) else "s")  # batches, epochs


class ProgressLog:
    """Progress lines in the log (``fourdb`` logger): ``desc: 40/200 (20%), 1.2 min so far, about 4.8 min left``,
    at most one per ``interval`` seconds, the first after one interval, and a last one when the loop ends
    after any was written."""

    def __init__(self, desc: str, total: int | None = None, initial: int = 0, unit: str = "it",
                 interval: float | None = None, beside_bar: bool = False):
        self.desc, self.total, self.n, self.unit, self.beside_bar = desc, total, initial, unit, beside_bar
        self.initial, self.postfix, self.logged = initial, "", 0
        self.interval = float(os.environ.get(PROGRESS_ENV, 30)) if interval is None else interval
        self.start = self.last = time.monotonic()

    def update(self, n: int = 1, postfix: str | None = None) -> None:
        self.n += n
        if postfix is not None:
            self.postfix = postfix
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self.write(self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        done = self.n - self.initial  # this process's share: a resumed loop's earlier items took no time here
        text = f"{self.desc}: {self.n}" + (f"/{self.total} ({100 * self.n / self.total:.0f}%)" if self.total else
                                           f" {plural(self.unit, self.n)}")
        text += f", {duration(elapsed)} so far"
        if self.total and done > 0 and self.n < self.total:
            text += f", about {duration(elapsed / done * (self.total - self.n))} left"
        return text + (f"; {self.postfix}" if self.postfix else "")

    def close(self) -> None:
        if self.logged:  # a loop long enough to be reported is reported finished
            self.write(f"{self.desc}: done, {self.n} {plural(self.unit, self.n)} in "
                       f"{duration(time.monotonic() - self.start)}")
            self.logged = 0

    def write(self, text: str) -> None:
        self.logged += 1
        logging.getLogger("fourdb").info("%s", text, extra={"beside_bar": self.beside_bar})


class LoggedProgress:
    """A tqdm bar (disabled off a terminal) and its ``ProgressLog``, moved together: iterate it, or call
    ``update``, ``set_postfix`` and ``close`` as on a bar."""

    def __init__(self, bar, log: ProgressLog):
        self.bar, self.log = bar, log

    def __iter__(self):
        try:
            for item in self.bar:
                yield item
                self.log.update(1)
        finally:
            self.close()

    def __len__(self):
        return len(self.bar)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self.bar.update(n)
        self.log.update(n)

    def set_postfix(self, **values) -> None:
        self.bar.set_postfix(**values)
        self.log.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.bar.set_postfix_str(text, refresh=refresh)
        self.log.postfix = text

    def close(self) -> None:
        self.bar.close()
        self.log.close()


DUCKDB_MEMORY_SHARE = 0.25  # of the memory this process may use (the machine's, or its cgroup's), DuckDB's own limit unless FOURDB_DUCKDB_MEMORY says


def duckdb_connect(database: str = ":memory:", read_only: bool = False):
    """``duckdb.connect`` whose own progress bar for long queries draws only on a terminal, and whose
    queries stay within a memory limit, spilling to disk beyond it.

    DuckDB's own default takes 80% of the machine beside the tables fourdb holds, and its allocator
    keeps freed memory; at 100M rows that alone outgrew the machine. The limit is
    ``FOURDB_DUCKDB_MEMORY`` (DuckDB's syntax, e.g. ``8GB``) or a quarter of the memory this process may use
    (half of ``FOURDB_MEMORY`` where that is set),
    spilling under ``<cache>/duckdb_spill`` at most ``FOURDB_SPILL`` (``spill_budget``); freed memory goes back
    to the system.

    Every fourdb connection works on frames it registers, so none may reach the file system: external
    access (file readers and writers, ATTACH, COPY, extensions) is off once the spill folder is set, and
    cannot be turned back on; Python variables are not scanned by name. A database file given as
    ``database`` is opened with external access off from the start, so nothing stored in it (a view, a
    default) can read another file.
    """
    import duckdb

    from fourdb.errors import FourdbError
    from fourdb.untrusted import memory_available, memory_budget, spill_budget

    closed = {"python_enable_replacements": False, "autoinstall_known_extensions": False,
              "autoload_known_extensions": False}
    if database != ":memory:":
        closed["enable_external_access"] = False
    con = duckdb.connect(database, read_only=read_only, config=closed)
    try:
        con.execute(f"SET enable_progress_bar = {str(sys.stdout.isatty()).lower()}")
    except duckdb.Error:  # in Jupyter without ipywidgets DuckDB refuses to touch the setting; keep its default
        pass
    own = min(memory_available() * DUCKDB_MEMORY_SHARE, memory_budget() * 0.5)
    limit = os.environ.get("FOURDB_DUCKDB_MEMORY") or f"{int(own) >> 20}MB"
    try:
        con.execute(f"SET memory_limit = '{limit}'")
    except duckdb.Error as e:
        raise FourdbError(f"FOURDB_DUCKDB_MEMORY={limit!r} is not a DuckDB memory size (e.g. 8GB): {e}") from None
    for setting in ("allocator_background_threads = true", "allocator_flush_threshold = '16MB'",
                    "allocator_bulk_deallocation_flush_threshold = '16MB'"):
        con.execute(f"SET {setting}")
    if database == ":memory:":
        spill = spill_folder()
        con.execute(f"SET temp_directory = '{str(spill).replace(chr(39), chr(39) * 2)}'")
        con.execute(f"SET max_temp_directory_size = '{spill_budget(spill) >> 20}MiB'")
        con.execute("SET enable_external_access = false")
    return con


_SPILLS = iter(range(1 << 62))


def spill_folder() -> Path:
    """A spill folder of this connection's own, ``<cache>/duckdb_spill/<pid>-<n>``: DuckDB removes it when the
    connection closes, and the folders of processes that no longer run (a query killed while it spilled) are
    removed here, so spill never outlives its query for long."""
    root = cache_root().resolve() / "duckdb_spill"
    root.mkdir(parents=True, exist_ok=True)  # DuckDB makes the last folder only
    if root.is_dir():
        import psutil

        for entry in root.iterdir():
            pid = entry.name.split("-", 1)[0]
            if entry.is_dir() and pid.isdigit() and not psutil.pid_exists(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
    return root / f"{os.getpid()}-{next(_SPILLS)}"


KEY_ENV = "FOURDB_KEYS"


def key_folder() -> Path:
    """Where this user's fourdb keys live: ``FOURDB_KEYS``, else ``$XDG_DATA_HOME/fourdb`` (``~/.local/share``):
    one place whatever folder fourdb runs from, so what it sealed in one folder verifies in another."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "fourdb"


def seal(data: bytes, purpose: str) -> str:
    """An HMAC of ``data`` under this user's key for ``purpose`` (made on first use, owner-only): what only
    fourdb on this machine can have written, e.g. a record it checked or graph inputs it pickled for its ranks."""
    import hmac
    import secrets
    import time

    path = key_folder() / f"{purpose}.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        except FileExistsError:  # another process made it first
            pass
    for _ in range(100):  # the process that creates it may not have written it yet
        key = path.read_bytes()
        if len(key) == 32:
            return hmac.new(key, data, hashlib.sha256).hexdigest()
        time.sleep(0.05)
    from fourdb.errors import FourdbError

    raise FourdbError(f"{path}: not a fourdb key (delete it to make a new one; what it sealed then no longer "
                      f"verifies)")


def stable_hash(*parts, length: int = 16) -> str:
    """Hash of JSON-serialisable parts; used to key caches by their inputs and config."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


NS_PER_DAY = 86400 * 10**9


def positions_in_runs(sizes) -> np.ndarray:
    """Each item's position in its run (0, 1, ...), for runs of ``sizes`` items laid end to end."""
    sizes = np.asarray(sizes, np.int64)
    return np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)


def naive_utc(s: pd.Series) -> pd.Series:
    """Datetimes with a time zone as naive UTC; naive ones as they are."""
    return s.dt.tz_convert("UTC").dt.tz_localize(None) if getattr(s.dt, "tz", None) is not None else s


def to_epoch_ns(values) -> np.ndarray:
    """Datetimes to int64 nanoseconds since 1970, the data's full resolution (a row 1 us after a cutoff
    stays after it); missing values become INT64 min ("always known")."""
    s = naive_utc(pd.to_datetime(pd.Series(values), errors="coerce"))
    out = s.astype("datetime64[ns]").to_numpy().view(np.int64).copy()
    out[s.isna().to_numpy()] = np.iinfo(np.int64).min
    return out


def cache_root() -> Path:
    return Path(os.environ.get("FOURDB_CACHE", Path.cwd() / ".fourdb_cache"))


# the code a result depends on: a new file here that is not committed makes a record's commit not the code that ran
SOURCE_FOLDERS = ("fourdb", "conf", "tasks")


def git_state(folder: str | Path) -> tuple[str | None, bool | None]:
    """(HEAD commit, whether the code differs from it) of the checkout holding ``folder``; (None, None) outside one.

    Code differs when a tracked file outside ``leaderboards/`` changed, or a file under ``SOURCE_FOLDERS``
    is untracked and not ignored (a model added as a new file).
    """
    import subprocess

    def git(*args):
        try:
            p = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "HEAD") or None
    if commit is None:
        return None, None
    # leaderboards/ holds results, not code: runs that submit as they go would otherwise mark the next ones dirty
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)leaderboards")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", *(f":(top){d}" for d in SOURCE_FOLDERS))
    if changed is None or untracked is None:
        return commit, None
    return commit, bool(changed or untracked)


def code_patch(folder: str | Path) -> bytes | None:
    """The code's difference from HEAD in the checkout holding ``folder``, as a patch ``git apply`` takes at
    the checkout's top: ``git diff HEAD`` of the tracked files outside ``leaderboards/`` and each untracked,
    not ignored file under ``SOURCE_FOLDERS`` as a new file. Reads the checkout only (the index is left as
    it is); None outside a checkout or when git fails, b"" when the code is HEAD's."""
    import subprocess

    def git(*args, cwd=folder, ok=(0,)):
        try:
            p = subprocess.run(["git", "-c", "core.quotepath=off", *args], cwd=cwd, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout if p.returncode in ok else None

    top = git("rev-parse", "--show-toplevel")
    if not top:
        return None
    top = top.decode().strip()
    plain = ("--binary", "--no-color", "--no-ext-diff", "--src-prefix=a/", "--dst-prefix=b/")
    tracked = git("diff", "HEAD", *plain, "--", ":(top)", ":(top,exclude)leaderboards", cwd=top)
    untracked = git("ls-files", "-z", "--others", "--exclude-standard", "--",
                    *(f":(top){d}" for d in SOURCE_FOLDERS), cwd=top)
    if tracked is None or untracked is None:
        return None
    parts = [tracked]
    for name in sorted(n for n in untracked.decode().split("\0") if n):
        added = git("diff", "--no-index", *plain, "--", "/dev/null", name, cwd=top, ok=(0, 1))
        if added is None:
            return None
        parts.append(added)
    return b"".join(parts)


def environment(packages: tuple[str, ...], gpu: str | None = None) -> dict:
    """Package versions, git commit (and whether the code differs from it, see ``git_state``) and hardware, as
    a record of where a result was computed. ``git_dirty`` is None outside a git checkout."""
    import os
    import platform
    from importlib import metadata

    def version(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    commit, dirty = git_state(Path(__file__).parent)
    return {"packages": {p: version(p) for p in packages}, "git_commit": commit, "git_dirty": dirty,
            "hardware": {"platform": platform.platform(), "cpus": os.cpu_count(), **cpu_kind(), "gpu": gpu}}


def cpu_kind() -> dict:
    """The CPU's model name and the instruction set torch's kernels use on it (e.g. AVX512): a neural model
    trained on another rounds differently from its first step, so its metrics repeat exactly only on the same
    kind of CPU."""
    import platform

    name = None
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except (ImportError, AttributeError):
        capability = None
    return {"cpu": name or platform.processor() or None, "cpu_capability": capability}


@functools.lru_cache(maxsize=None)
def gpu_unusable() -> str | None:
    """Why graphs cannot go to the GPU here, or None when they can. torch may see a GPU while the DGL
    installed (the package registry's build) has no CUDA; blocks moved there would fail every batch."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import dgl

        dgl.graph(([0], [0])).to("cuda")
    except Exception as e:  # noqa: BLE001 - DGL's own error says what is missing
        return (f"the installed DGL cannot use CUDA ({str(e).splitlines()[0][:100]}); install DGL's CUDA "
                f"build for torch {torch.__version__}")
    return None


def resolve_device(device: str) -> str:
    """``auto``: cuda where graphs can go there, else cpu. ``cuda`` where they cannot: one clear error."""
    from fourdb.errors import FourdbError

    if device == "auto":
        return "cpu" if gpu_unusable() else "cuda"
    if str(device).startswith("cuda") and gpu_unusable():
        raise FourdbError(f"device {device!r} asked for, but {gpu_unusable()}")
    return device
