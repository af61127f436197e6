"""``fourdb run trainer=ddp trainer.nproc=N``: start the ranks with torchrun and wait for the record;
``trainer.nproc=auto``: profile the run first and let the cost model (``fourdb.engine.planning.parallel``) pick N.

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

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fourdb.engine.distribution import ddp
from fourdb.engine.planning.cost import Line
from fourdb.engine.planning.parallel import ParallelPlan, Profile, choose_nproc, machine
from fourdb.engine.planning.timing import measure_steps, with_threads
from fourdb.errors import FourdbError
from fourdb.experiment.prepare import clear_launch, hydra_text, prepare_run, trainer_config, write_launch

log = logging.getLogger("fourdb")
# keys this launcher sets for the ranks (the user's values for them are replaced)
PINNED = ("trainer.nproc", "hydra.run.dir", "hydra.output_subdir", "hydra.job.name")


def requested_nproc(cfg: DictConfig):
    value = trainer_config(cfg).nproc
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
    return hydra_text(str(value))  # a path is text: never split, unquoted or resolved by Hydra


def torchrun_command(overrides: list[str], out_dir: str, nproc: int, max_restarts: int,
                     extra: list[str] = ()) -> list[str]:
    keep = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] not in PINNED
            and o.lstrip("+~").split("=", 1)[0] not in {e.split("=", 1)[0] for e in extra}]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--monitor-interval=1", "-m", "fourdb.cli", "run", *keep, *extra,
            f"trainer.nproc={nproc}", f"hydra.run.dir={_quote(out_dir)}", "hydra.output_subdir=null",
            "hydra.job.name=rank${oc.env:RANK,0}"]


def launch(cfg: DictConfig, out_dir: str, overrides: list[str], run_here) -> dict:
    """Train on ``trainer.nproc`` processes under torchrun; return the run record rank 0 wrote.
    ``run_here(cfg, out_dir)`` runs it in this process instead, when ``auto`` picks one rank."""
    n, extra, plan, env = requested_nproc(cfg), [], None, dict(os.environ)
    if n == "auto":
        plan = recommend(cfg, out_dir)
        n = plan.nproc
        extra = [f"engine.workers={plan.workers}"] if cfg.get("engine") is not None else []
    write_launch(out_dir, n, plan.to_dict() if plan is not None else None)  # read by the ranks, or by run_here
    if n == 1:
        cfg = cfg.copy()
        OmegaConf.set_struct(cfg, False)
        cfg.trainer.nproc = 1
        if extra:
            cfg.engine.workers = plan.workers
        try:
            return run_here(cfg, out_dir)
        finally:
            clear_launch(out_dir)
    max_restarts = trainer_config(cfg).max_restarts
    cmd = torchrun_command(overrides, out_dir, n, max_restarts, extra)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // n)))
    env.setdefault("DGLBACKEND", "pytorch")
    log.info("starting %d ranks with torchrun (max restarts %d) in %s", n, max_restarts, out_dir)
    record_path = Path(out_dir) / "record.json"
    try:
        proc = subprocess.run(cmd, env=env)
    finally:
        clear_launch(out_dir)  # the note was for the ranks; the record holds the plan
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


# ------------------------------------------------------------------------------------------- profile
def profile(model, data, trainer_cfg, batches: int = 4, seed: int = 0) -> Profile:
    """Time ``batches`` training steps of size B and B/2 on this process, on a model of its own.

    ``model`` is the whole step after the batch is made: forward, loss, backward and the optimizer's
    step, each timed on batches fresh from the sampler (DGL builds a block's sparse formats on first use,
    as in training), on one thread and on the threads training gives it: the cores its sampler thread
    leaves (fourdb/engine/feeding/pipeline.py), all of them for a model without one. Never on more: on a busy
    machine oversubscribed intra-op threads wait on each other at every operation, and a step timed so
    was 50 times what training took.
    """
    device = trainer_cfg.torch_device()
    module = model.build(data).to(device)
    opt = torch.optim.AdamW(module.parameters(), lr=trainer_cfg.lr)
    B = trainer_cfg.batch_size
    half = max(1, B // 2)
    samples, models, models_1t, threads = {}, {}, {}, torch.get_num_threads()
    for b in (B, half):
        source = model.make_source(data, type(trainer_cfg)(**{**trainer_cfg.__dict__, "batch_size": b}))

        def make(k):  # the batches, and the seconds to sample and gather one (0 for in-memory tables)
            return source.timed_batches(np.random.default_rng(seed + k), batches + 1)

        made, samples[b] = make(0)
        if b == B and samples[b] > 0 and device.type == "cpu":
            threads = max(1, min(threads, (os.cpu_count() or 1) - 1))
        models[b] = with_threads(threads, lambda: measure_steps(module, device, made, opt))
        if device.type == "cpu" and threads > 1:
            made, _ = make(1)
            models_1t[b] = with_threads(1, lambda: measure_steps(module, device, made, opt))
        else:
            models_1t[b] = models[b]
    full = model.make_source(data, trainer_cfg)
    nb = full.num_train_batches()
    if trainer_cfg.max_steps_per_epoch:
        nb = min(nb, trainer_cfg.max_steps_per_epoch)
    grad_bytes = int(sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad))
    return Profile(B, Line.fit({half: samples[half], B: samples[B]}), Line.fit({half: models[half], B: models[B]}),
                   Line.fit({half: models_1t[half], B: models_1t[B]}), grad_bytes, nb, threads)


def recommend(cfg, out_dir) -> ParallelPlan:
    """Profile this run's model on its data and pick the number of ranks (the graph inputs are built
    into the run's shared folder on the way, so the ranks map them instead of building them)."""
    run = prepare_run(cfg)
    data, _, _ = run.inputs(out_dir, share=True)  # built into the shared folder: the ranks map it
    prof = profile(run.model, data, run.trainer_config(nproc=1), seed=cfg.seed)
    cores, gpus = machine()
    plan = choose_nproc(prof, cores, gpus, _memory_bound())
    log.info("parallel auto: per batch of %d: sample %.1f ms, model %.1f ms (%.1f ms on one thread), "
             "gradients %.1f MB; %s", prof.batch_size, 1e3 * prof.sample_s.at(prof.batch_size),
             1e3 * prof.model_s.at(prof.batch_size), 1e3 * prof.model_1t_s.at(prof.batch_size),
             prof.grad_bytes / 2 ** 20, plan.reason)
    return plan


def _memory_bound() -> int | None:
    """Ranks that fit in memory, each taking what this process holds now (the graph is shared)."""
    try:
        import psutil

        rss = psutil.Process().memory_info().rss
        return max(1, int(0.8 * psutil.virtual_memory().available // max(rss, 1)))
    except ImportError:  # pragma: no cover
        return None
