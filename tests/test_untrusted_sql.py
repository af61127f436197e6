"""Every piece of work a task's SQL can cause is bounded (docs/trust.md): a query that never ends, returns
billions of rows or gigabyte strings, or spills without end stops in one line naming the task and the bound,
within the time and memory it states, and leaves no spill behind."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fourdb.errors import FourdbError
from fourdb.rdb.sandbox import SQLSandbox
from fourdb.untrusted import LimitError, memory_budget, parse_size
from tests.test_trust import write_shop, write_task

SECONDS = 4  # FOURDB_QUERY_SECONDS in these tests
MEMORY = "2GB"  # FOURDB_MEMORY: what the work of one input may hold (DuckDB gets half)
PEAK_MB = 3000  # the whole fourdb process, database and libraries included

# a driver that runs the CLI and reports its own peak memory (DuckDB's threads are in the process)
DRIVER = """
import resource, sys
from fourdb.cli import main
peak = sys.argv[1]  # fourdb run hands sys.argv to Hydra: read it first
try:
    code = main(sys.argv[2:])
finally:
    with open(peak, "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))
sys.exit(code)
"""

HOSTILE = {
    "never ends": "SELECT count(*) AS user_id FROM range(10000000000000)",
    "recursive": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) AS user_id FROM r",
    "two billion rows": "SELECT range AS user_id, TIMESTAMP '2021-03-01' AS cutoff, 1 AS label FROM range(2000000000)",
    "a gigabyte a row": "SELECT u.user_id, c.cutoff, repeat('x', 1000000000) AS label FROM cutoffs c, users u",
    "hundred megabytes a row": "SELECT range AS user_id, TIMESTAMP '2021-03-01' AS cutoff, "
                               "repeat('x', 100000000) AS label FROM range(200)",
    "cross join spill": "SELECT a.range AS user_id, TIMESTAMP '2021-03-01' AS cutoff, 1 AS label "
                        "FROM range(100000) a, range(100000) b, range(100000) c ORDER BY b.range DESC, a.range",
}


def fourdb(args, cwd: Path, **env) -> tuple[subprocess.CompletedProcess, int, float]:
    """(the finished command, its peak memory in MB, its seconds)."""
    peak = cwd / ".peak"
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", DRIVER, str(peak), *args], cwd=cwd, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore", **env})
    return p, int(peak.read_text()), time.perf_counter() - start


@pytest.mark.parametrize("case", list(HOSTILE))
def test_task_sql_is_bounded_in_time_memory_and_disk(tmp_path, case):
    folder = write_shop(tmp_path / "db")
    write_task(folder, HOSTILE[case], name="hostile")
    cache = tmp_path / "cache"
    p, peak_mb, seconds = fourdb(["validate", str(folder), "--task", "hostile"], tmp_path,
                                 FOURDB_QUERY_SECONDS=str(SECONDS), FOURDB_MEMORY=MEMORY, FOURDB_SPILL="2GB",
                                 FOURDB_CACHE=str(cache))
    errors = [line for line in p.stdout.splitlines() + p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "hostile.yaml" in errors[0], errors[0]
    assert any(word in errors[0] for word in ("FOURDB_QUERY_SECONDS", "FOURDB_MEMORY", "FOURDB_SPILL",
                                              "FOURDB_DUCKDB_MEMORY")), errors[0]
    assert seconds < SECONDS + 60, f"{case}: {seconds:.0f} s"
    assert peak_mb < PEAK_MB, f"{case}: {peak_mb} MB"
    spill = cache / "duckdb_spill"
    assert not spill.exists() or not any(spill.rglob("*.tmp")) and sum(
        f.stat().st_size for f in spill.rglob("*") if f.is_file()) == 0  # no spill left behind


def test_a_good_task_still_runs_under_the_bounds(tmp_path):
    folder = write_shop(tmp_path / "db")
    write_task(folder)
    p, _, _ = fourdb(["validate", str(folder)], tmp_path, FOURDB_QUERY_SECONDS=str(SECONDS), FOURDB_MEMORY=MEMORY,
                     FOURDB_CACHE=str(tmp_path / "cache"))
    assert p.returncode == 0 and "1 of 1 tasks materialize" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


def test_a_result_is_sized_before_it_becomes_a_frame(monkeypatch):
    """Rows times bytes are counted inside DuckDB: a result over the memory bound never reaches pandas."""
    monkeypatch.setenv("FOURDB_MEMORY", "64MB")
    box = SQLSandbox({"t": pd.DataFrame({"a": [1, 2, 3]})})
    assert box.query("SELECT a, 'x' AS s FROM t", "task t, sql")["a"].tolist() == [1, 2, 3]
    with pytest.raises(LimitError, match=r"task t, sql: the result \(1,000,000 rows\) would take .* over the memory "
                                         r"bound of .*FOURDB_MEMORY"):
        box.query("SELECT range AS a, repeat('x', 100) AS s FROM range(1000000)", "task t, sql")
    assert box.query("SELECT count(*) AS n FROM range(1000000)", "task t, sql")["n"].tolist() == [1000000]


def test_a_stopped_query_leaves_the_connection_usable(monkeypatch):
    monkeypatch.setenv("FOURDB_QUERY_SECONDS", "1")
    box = SQLSandbox({"t": pd.DataFrame({"a": [1, 2, 3]})})
    with pytest.raises(LimitError, match="ran past 1 s"):
        box.query("SELECT count(*) FROM range(10000000000000)", "task t, sql")
    assert box.query("SELECT sum(a) AS s FROM t", "task t, sql")["s"].tolist() == [6]


@pytest.mark.parametrize("value, bytes_", [("8GB", 8 * 10**9), ("512MiB", 512 * 2**20), ("1e9", 10**9),
                                           ("100", 100)])
def test_sizes_read_from_the_environment(value, bytes_):
    assert parse_size(value, "FOURDB_MEMORY") == bytes_


@pytest.mark.parametrize("env, value", [("FOURDB_MEMORY", "lots"), ("FOURDB_QUERY_SECONDS", "-3"),
                                        ("FOURDB_QUERY_SECONDS", "soon")])
def test_a_bad_bound_is_one_line(monkeypatch, env, value):
    monkeypatch.setenv(env, value)
    box = SQLSandbox({"t": pd.DataFrame({"a": [1]})}) if env != "FOURDB_MEMORY" else None
    with pytest.raises(FourdbError, match=env):
        box.query("SELECT 1", "t") if box else memory_budget()


def own_memory_cgroup(limit: int):
    """A memory cgroup of this test's own below the one this process runs in (v2 or v1), or None where the
    machine does not let it make one."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, limit_file = Path("/sys/fs/cgroup") / path.lstrip("/"), "memory.max"
        elif "memory" in controllers.split(","):
            base, limit_file = Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.limit_in_bytes"
        else:
            continue
        group = base / f"fourdb-test-{os.getpid()}"
        try:
            group.mkdir()
            (group / limit_file).write_text(str(limit))
            return group
        except OSError:
            if group.exists():
                group.rmdir()
    return None


def test_a_process_group_under_a_memory_limit_is_bounded_by_it(tmp_path):
    """Run under a cgroup of 3 GB (as a machine or a job scheduler would), fourdb reads the limit and sizes its
    bounds to it: hostile task SQL still ends in one line, and the group is never killed for memory."""
    group = own_memory_cgroup(3 * 10**9)
    if group is None:
        pytest.skip("this machine does not let the test make a memory cgroup")
    try:
        for case in ("a gigabyte a row", "never ends"):
            folder = write_shop(tmp_path / case.replace(" ", "-"))
            write_task(folder, HOSTILE[case], name="hostile")
            script = (f"echo $$ > {group / 'cgroup.procs'} && exec {sys.executable} -m fourdb.cli validate "
                      f"{folder} --task hostile")
            p = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                               env={**os.environ, "FOURDB_QUERY_SECONDS": str(SECONDS), "FOURDB_CACHE": str(tmp_path)})
            errors = [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("error:")]
            assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    finally:
        group.rmdir()


@pytest.mark.parametrize("command", ["run", "certify"])
def test_run_and_certify_stop_a_query_that_never_ends(tmp_path, command):
    folder = write_shop(tmp_path / "db")
    write_task(folder, HOSTILE["never ends"], name="hostile")
    p, peak_mb, seconds = fourdb([command, f"dataset={folder}", "task=hostile", "model=gbdt"], tmp_path,
                                 FOURDB_QUERY_SECONDS=str(SECONDS), FOURDB_CACHE=str(tmp_path / "cache"))
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 2 and len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "ran past" in errors[0] and "hostile.yaml" in errors[0] and seconds < SECONDS + 60
    assert not list(tmp_path.glob("outputs/*/record.json"))
