"""``fourdb run trainer=ddp trainer.nproc=N``: start the ranks with torchrun and wait for the record.

The ``fourdb run`` process composes the config as usual. When ``trainer.nproc`` asks for more than one
process (or ``auto``, and the cost model recommends more than one) and the model is a neural one, it
does not train itself: it runs ``python -m torch.distributed.run --standalone --nproc-per-node N
--max-restarts R -m fourdb.cli run <the same overrides>``, pinned to its own output folder, so every
rank (and every restart of the group) works in that folder. Rank 0 writes the one run record there;
this process reads it back and prints it like any run (a sweep's summary and Optuna see it too).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fourdb.engine import ddp
from fourdb.errors import FourdbError

log = logging.getLogger("fourdb")
# keys this launcher sets for the ranks (the user's values for them are replaced)
PINNED = ("trainer.nproc", "hydra.run.dir", "hydra.output_subdir", "hydra.job.name")
LAUNCHED_ENV = "FOURDB_LAUNCHED"  # set for ranks this launcher started (it prints their record itself)


def requested_nproc(cfg: DictConfig):
    value = cfg.trainer.get("nproc", 1) if cfg.get("trainer") is not None else 1
    if value in (None, "auto"):
        return "auto" if value == "auto" else 1
    try:
        return int(value)
    except (TypeError, ValueError):
        raise FourdbError(f"trainer.nproc must be a number of processes or 'auto', got '{value}'") from None


def is_neural(cfg: DictConfig) -> bool:
    from fourdb.models import MODELS, NeuralModel

    cls = MODELS.get(cfg.model.name)
    return cls is not None and issubclass(cls, NeuralModel)


def needs_launch(cfg: DictConfig) -> bool:
    """True in the ``fourdb run`` process of a run that should train on several processes."""
    if ddp.in_torchrun():
        return False
    n = requested_nproc(cfg)
    if n == 1:
        return False
    if not is_neural(cfg):
        log.info("model %s is not a neural model: it trains in one process (trainer.nproc=%s ignored)",
                 cfg.model.name, n)
        return False
    return True


def _quote(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def torchrun_command(overrides: list[str], out_dir: str, nproc: int, max_restarts: int,
                     extra: list[str] = ()) -> list[str]:
    keep = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in PINNED
            and o.lstrip("+~").split("=", 1)[0] not in {e.split("=", 1)[0] for e in extra}]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--monitor-interval=1", "-m", "fourdb.cli", "run", *keep, *extra,
            f"trainer.nproc={nproc}", f"hydra.run.dir={_quote(out_dir)}", "hydra.output_subdir=null",
            "hydra.job.name=rank${oc.env:RANK,0}"]


def launch(cfg: DictConfig, out_dir: str, overrides: list[str]) -> dict:
    """Train on ``trainer.nproc`` processes under torchrun; return the run record rank 0 wrote."""
    n, extra, env = requested_nproc(cfg), [], dict(os.environ)
    if n == "auto":
        from fourdb.engine.parallel import PLAN_ENV, recommend

        plan = recommend(cfg, out_dir)
        n = plan.nproc
        extra = [f"engine.workers={plan.workers}"] if cfg.get("engine") is not None else []
        env[PLAN_ENV] = json.dumps(plan.to_dict())  # rank 0 puts it in the run record
        if n == 1:
            from fourdb.run import run_experiment

            cfg = cfg.copy()
            OmegaConf.set_struct(cfg, False)
            cfg.trainer.nproc = 1
            if extra:
                cfg.engine.workers = plan.workers
            os.environ[PLAN_ENV] = env[PLAN_ENV]
            try:
                return run_experiment(cfg, out_dir)
            finally:
                os.environ.pop(PLAN_ENV, None)
    max_restarts = int(cfg.trainer.get("max_restarts", 0) or 0)
    cmd = torchrun_command(overrides, out_dir, n, max_restarts, extra)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
    env.setdefault("DGLBACKEND", "pytorch")
    env[LAUNCHED_ENV] = "1"
    log.info("starting %d ranks with torchrun (max restarts %d) in %s", n, max_restarts, out_dir)
    record_path = Path(out_dir) / "record.json"
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0 or not record_path.exists():
        raise FourdbError(f"the {n}-process run failed (torchrun exit status {proc.returncode}); "
                          f"rank logs are in {out_dir}")
    return json.loads(record_path.read_text())


def quiet_other_ranks() -> None:
    """Ranks other than 0 log warnings only (rank 0 speaks for the run)."""
    if ddp.in_torchrun() and int(os.environ.get("RANK", 0)) != 0:
        logging.getLogger("fourdb").setLevel(logging.WARNING)


def exit_rank() -> None:
    """End a rank whose work is done (its record is written, every collective is over) without tearing
    down the process group: gloo's ``destroy_process_group`` (and the group's destructor at interpreter
    exit) can hang once a peer has gone."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
