"""One trainer for every neural model: epochs, loss by task type, early stopping on the task metric.

A model hands the trainer a torch module and a data source; the source yields training batches
``(inputs, labels)`` and evaluation batches ``inputs`` per split. Test labels never reach the
trainer: it only ever asks the source for training and validation labels.

Inside a torchrun worker (``trainer.nproc > 1``, see fourdb/engine/ddp.py) the same loop trains data-
parallel: the module is wrapped in ``DistributedDataParallel``, each rank trains on its shard of every
global batch (a source with ``shard(rank, world)`` samples only its shard; any other source's batches
are sliced), and evaluation outputs are gathered from all ranks. With ``checkpoint_every`` the trainer
writes a checkpoint every that many steps and at each epoch's end, and resumes from the run folder's
checkpoint when there is one (fourdb/train/checkpoint.py), with the same result as an unbroken run.
"""
from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from fourdb.defaults import defaults_from
from fourdb.engine.distribution import ddp
from fourdb.engine.distribution.embedding_sync import EmbeddingSync, check_hot_rows, check_mode, embedding_tables
from fourdb.engine.planning.timing import to_device
from fourdb.train import checkpoint
from fourdb.metrics import compute, higher_is_better
from fourdb.tasks.types import TaskType, regression_objective
from fourdb.utils import progress as progress_bar, resolve_device

log = logging.getLogger("fourdb")


@dataclass
@defaults_from("trainer")  # conf/trainer/default.yaml states these defaults, and why
class TrainerConfig:
    epochs: int
    lr: float
    weight_decay: float
    patience: int
    batch_size: int
    max_steps_per_epoch: int | None
    device: str
    progress: bool
    # one process; conf/trainer/ddp.yaml says what each means and what a data-parallel run sets instead
    nproc: int | str = 1
    backend: str | None = None  # a process group's backend: one process has none
    checkpoint_every: int = 0
    max_restarts: int = 0
    embedding_sync: str | None = None  # learned row vectors: None, all-reduced by DDP with the rest
    embedding_hot_rows: int | str = "auto"  # conf/trainer/ddp.yaml says what both mean
    checkpoint_dir: str | None = None  # set by the runner: the run's output folder
    checkpoint_key: str | None = None  # set by the runner: a hash of the run's config
    objective: str | None = None  # set by the runner from the objective group: regression's loss
    SET_BY_RUNNER = ("checkpoint_dir", "checkpoint_key", "objective")  # not settings of the trainer group

    def __post_init__(self):
        if self.embedding_sync is not None:
            check_mode(self.embedding_sync)
        check_hot_rows(self.embedding_hot_rows)

    def trainer(self, info, seed: int = 0) -> "Trainer":
        """The trainer that fits a model of task ``info`` (``fourdb.models.TaskInfo``) with this config."""
        return Trainer(self, info.task_type, info.metric, seed)

    def torch_device(self) -> torch.device:
        return torch.device(resolve_device(self.device))


class Trainer:
    def __init__(self, cfg: TrainerConfig, task_type: TaskType, metric: str, seed: int = 0):
        self.cfg, self.task_type, self.metric, self.seed = cfg, TaskType(task_type), metric, seed
        self.device = cfg.torch_device()
        self.y_mean, self.y_std = 0.0, 1.0
        self.history: list[dict] = []
        self.sync: EmbeddingSync | None = None  # a data-parallel run's exchange of learned row vectors

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.task_type.loss(out, y, (self.y_mean, self.y_std), regression_objective(self.cfg.objective, self.metric))

    def _scores(self, out: torch.Tensor) -> np.ndarray:
        return self.task_type.scores(out, (self.y_mean, self.y_std))

    def fit(self, module: torch.nn.Module, source) -> torch.nn.Module:
        ctx = ddp.context()
        if ctx.distributed and self.device.type == "cuda":
            self.device = torch.device("cuda", ctx.local_rank)
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        if self.task_type.is_regression:  # outputs are scaled to the training labels
            self.y_mean, self.y_std = self.task_type.label_scale(source.labels("train"))
        module.to(self.device)
        sharded = ctx.distributed and source.shardable
        if sharded:  # the source samples only this rank's share of every batch
            source.shard(ctx.rank, ctx.world)
        source.prepare(module, self.device, epochs=self.cfg.epochs)  # e.g. engine=auto profiles the model
        tables = embedding_tables(module) if ctx.distributed and self.cfg.embedding_sync else []
        if tables:  # their gradients travel as trainer.embedding_sync says, the rest with DDP
            self.sync = EmbeddingSync(tables, self.cfg.embedding_sync, self.cfg.embedding_hot_rows, ctx.world)
        net = ddp.wrap(module, self.device, self.sync.ignored(module) if self.sync else ()) if ctx.distributed else module
        opt = torch.optim.AdamW(module.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        higher = higher_is_better(self.metric)
        best, best_state, bad_epochs = -math.inf, None, 0
        first_epoch, skip, global_step, losses, finished, resume_rng = 0, 0, 0, [], False, None
        saved = checkpoint.load(self.cfg.checkpoint_dir, self.cfg.checkpoint_key)
        if saved is not None:
            module.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            rng.bit_generator.state = saved["epoch_rng"]
            first_epoch, skip, global_step = saved["epoch"], saved["step"], saved["global_step"]
            losses, finished, self.history = list(saved["losses"]), saved["finished"], list(saved["history"])
            best, best_state, bad_epochs = saved["best"], saved["best_state"], saved["bad_epochs"]
            self.y_mean, self.y_std = saved["y_mean"], saved["y_std"]
            states = saved["torch_rng"]
            resume_rng = states[ctx.rank] if ctx.rank < len(states) else states[0]
            log.info("resuming from %s: epoch %d, %d batch(es) done in it, step %d%s",
                     checkpoint.path_in(self.cfg.checkpoint_dir), first_epoch + 1, skip, global_step,
                     " (training had finished)" if finished else "")
        y_val = source.labels("val")

        def save(epoch: int, step: int, epoch_rng: dict, done: bool = False) -> None:
            states = ddp.all_gather(_rng_state(self.device))  # every rank's, for dropout after a resume
            if ctx.main:
                checkpoint.save(self.cfg.checkpoint_dir, {
                    "key": self.cfg.checkpoint_key, "model": module.state_dict(), "optimizer": opt.state_dict(),
                    "epoch": epoch, "step": step, "global_step": global_step, "epoch_rng": epoch_rng,
                    "torch_rng": states, "losses": list(losses), "finished": done, "history": self.history,
                    "best": best, "best_state": best_state, "bad_epochs": bad_epochs, "world": ctx.world,
                    "y_mean": self.y_mean, "y_std": self.y_std})

        every = self.cfg.checkpoint_every if self.cfg.checkpoint_dir else 0
        for epoch in range(first_epoch, 0 if finished else self.cfg.epochs):
            net.train()
            epoch_rng = copy.deepcopy(rng.bit_generator.state)  # the epoch's plan is drawn from it up front
            start = time.perf_counter()
            steps = source.num_train_batches()
            if self.cfg.max_steps_per_epoch:
                steps = min(steps, self.cfg.max_steps_per_epoch)
            bar = progress_bar(total=steps, initial=skip, desc=f"epoch {epoch + 1}/{self.cfg.epochs}", leave=False,
                               enabled=self.cfg.progress and ctx.main)
            for step, (inputs, y) in enumerate(source.train_batches(rng)):
                if step >= steps:
                    break
                if step < skip:  # done before the checkpoint this run resumed from
                    continue
                if resume_rng is not None:
                    _set_rng_state(resume_rng, self.device)
                    resume_rng = None
                if ctx.distributed and not sharded:
                    if len(y) < ctx.world:  # every rank sees the same global batch, so all skip it
                        continue
                    inputs, y = ddp.shard_batch(inputs, y, ctx.rank, ctx.world)
                opt.zero_grad()
                out = net(*to_device(inputs, self.device))
                if self.sync:
                    self.sync.after_forward()
                loss = self._loss(out, y.to(self.device))
                if ctx.distributed:  # DDP averages over ranks: weight by this shard's share of the global batch
                    (loss * (len(y) * ctx.world / ddp.all_sum(len(y), self.device))).backward()
                else:
                    loss.backward()
                if self.sync:
                    self.sync.after_backward()
                opt.step()
                losses.append(loss.item())
                global_step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
                if every and global_step % every == 0:
                    save(epoch, step + 1, epoch_rng)
            bar.close()
            skip = 0
            val_score = compute(self.metric, y_val, self.predict(module, source, "val"), source.labels("train"))
            self.history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
                                 f"val_{self.metric}": val_score, "seconds": time.perf_counter() - start})
            losses = []
            signed = val_score if higher else -val_score
            if signed > best:
                best, best_state, bad_epochs = signed, copy.deepcopy(module.state_dict()), 0
            else:
                bad_epochs += 1
            stop = bad_epochs >= self.cfg.patience
            if every:
                save(epoch + 1, 0, copy.deepcopy(rng.bit_generator.state), done=stop or epoch + 1 == self.cfg.epochs)
            if stop:
                break
        if best_state is not None:
            module.load_state_dict(best_state)
        return module

    @torch.no_grad()
    def predict(self, module: torch.nn.Module, source, split: str) -> np.ndarray:
        module.eval()
        module.to(self.device)
        out = source.infer(module, split, self.device)
        ctx = ddp.context()
        if out is not None:  # the source computed all outputs at once (layer-wise inference)
            scores = self._scores(out)
        elif not ctx.distributed:
            batches = progress_bar(source.batches(split), self.cfg.progress, desc=f"predicting {split}", leave=False)
            scores = np.concatenate([self._scores(module(*to_device(inputs, self.device))) for inputs in batches])
        else:  # rank r predicts batches r, r + world, ...; every rank gets all of them back, in order
            if source.shardable:
                own = source.batches(split)  # a sharded source yields only this rank's batches
            else:
                own = (b for k, b in enumerate(source.batches(split)) if k % ctx.world == ctx.rank)
            parts = ddp.all_gather([self._scores(module(*to_device(inputs, self.device))) for inputs in own])
            count = sum(len(p) for p in parts)
            scores = np.concatenate([parts[k % ctx.world][k // ctx.world] for k in range(count)])
        module.train()
        return scores


def _rng_state(device) -> dict:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
