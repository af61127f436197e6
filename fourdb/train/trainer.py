"""One trainer for every neural model: epochs, loss by task type, early stopping on the task metric.

A model hands the trainer a torch module and a data source; the source yields training batches
``(inputs, labels)`` and evaluation batches ``inputs`` per split. Test labels never reach the
trainer: it only ever asks the source for training and validation labels.

Inside a torchrun worker (``trainer.nproc > 1``, see fourdb/engine/distribution/ddp.py) the same loop trains data-
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
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from fourdb.defaults import defaults_from
from fourdb.engine.distribution import ddp
from fourdb.engine.distribution.embedding_sync import EmbeddingSync, check_hot_rows, check_mode, embedding_tables
from fourdb.engine.planning.timing import to_device
from fourdb.train import checkpoint
from fourdb.metrics import compute, higher_is_better
from fourdb.tasks.types import TaskType, regression_objective
from fourdb.utils import ProgressLog, progress as progress_bar, resolve_device

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


@dataclass
class TrainState:
    """Where training stands: with the model, the optimizer and the random states, all a checkpoint holds,
    so that a resumed run goes on as an unbroken one would."""
    epoch: int = 0  # the epoch under way (after an epoch: the next one)
    step: int = 0  # batches of that epoch done
    global_step: int = 0
    epoch_rng: dict | None = None  # the numpy generator at the epoch's start: its batch plan is drawn again from it
    losses: list[float] = field(default_factory=list)  # the epoch's so far
    finished: bool = False  # training stopped (early, or after the last epoch)
    history: list[dict] = field(default_factory=list)
    best: float = -math.inf  # the best validation score, signed so that higher is better
    best_state: dict | None = None  # the model's weights at that score
    bad_epochs: int = 0  # epochs since it
    y_mean: float = 0.0  # the label scaling (regression)
    y_std: float = 1.0

    def to_checkpoint(self, key: str | None, module: torch.nn.Module, opt: torch.optim.Optimizer,
                      torch_rng: list[dict], world: int) -> dict:
        """The checkpoint's fields: this state's, the config's key, the model and optimizer states and every
        rank's torch random state."""
        return {"key": key, "model": module.state_dict(), "optimizer": opt.state_dict(), "torch_rng": torch_rng,
                "world": world, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_checkpoint(cls, saved: dict) -> "TrainState":
        state = cls(**{f.name: saved[f.name] for f in fields(cls)})
        state.losses, state.history = list(state.losses), list(state.history)
        return state


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
        state, resume_rng = self._resume(module, opt, rng, ctx)
        y_val = source.labels("val")
        # the run's log: where training is, and how long it may still take (patience may stop it sooner)
        epochs = ProgressLog("epochs", self.cfg.epochs, state.epoch, "epoch") if ctx.main else None
        for epoch in range(state.epoch, 0 if state.finished else self.cfg.epochs):
            start = time.perf_counter()
            resume_rng = self._train_epoch(module, net, opt, source, rng, state, epoch, resume_rng, sharded)
            val_score = compute(self.metric, y_val, self.predict(module, source, "val"), source.labels("train"))
            self.history.append({"epoch": epoch + 1, "loss": float(np.mean(state.losses)) if state.losses else float("nan"),
                                 f"val_{self.metric}": val_score, "seconds": time.perf_counter() - start})
            signed = val_score if higher_is_better(self.metric) else -val_score
            if signed > state.best:
                state.best, state.best_state, state.bad_epochs = signed, copy.deepcopy(module.state_dict()), 0
            else:
                state.bad_epochs += 1
            if epochs is not None:
                epochs.update(1, f"loss {self.history[-1]['loss']:.4g}, val {self.metric} {val_score:.4g}; "
                                 f"{state.bad_epochs} of patience {self.cfg.patience} without improving")
            stop = state.bad_epochs >= self.cfg.patience
            state.epoch, state.step, state.losses = epoch + 1, 0, []
            state.epoch_rng = copy.deepcopy(rng.bit_generator.state)
            state.finished = stop or epoch + 1 == self.cfg.epochs
            if self._checkpoint_every:
                self._save(module, opt, state)
            if stop:
                break
        if epochs is not None:
            epochs.close()
        if state.best_state is not None:
            module.load_state_dict(state.best_state)
        if state.finished and state.bad_epochs == 0 and state.epoch == self.cfg.epochs and ctx.main:
            log.warning("training stopped at its cap of %d epochs while validation was still improving (boards mark "
                        "such a run 'cut short'); raise trainer.epochs so that patience stops it", self.cfg.epochs)
        return module

    @property
    def _checkpoint_every(self) -> int:
        return self.cfg.checkpoint_every if self.cfg.checkpoint_dir else 0

    def _resume(self, module: torch.nn.Module, opt: torch.optim.Optimizer, rng: np.random.Generator,
                ctx: ddp.Context) -> tuple[TrainState, dict | None]:
        """A fresh state, or the run folder's checkpoint loaded into ``module``, ``opt`` and ``rng``, and this
        rank's torch random state to go on with (None: fresh)."""
        saved = checkpoint.load(self.cfg.checkpoint_dir, self.cfg.checkpoint_key)
        if saved is None:
            return TrainState(history=self.history, y_mean=self.y_mean, y_std=self.y_std), None
        module.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        rng.bit_generator.state = saved["epoch_rng"]
        state = TrainState.from_checkpoint(saved)
        self.history, self.y_mean, self.y_std = state.history, state.y_mean, state.y_std
        states = saved["torch_rng"]
        log.info("resuming from %s: epoch %d, %d batch(es) done in it, step %d%s",
                 checkpoint.path_in(self.cfg.checkpoint_dir), state.epoch + 1, state.step, state.global_step,
                 " (training had finished)" if state.finished else "")
        return state, states[ctx.rank] if ctx.rank < len(states) else states[0]

    def _train_epoch(self, module: torch.nn.Module, net: torch.nn.Module, opt: torch.optim.Optimizer, source,
                     rng: np.random.Generator, state: TrainState, epoch: int, resume_rng: dict | None,
                     sharded: bool) -> dict | None:
        """One epoch's batches of ``net`` (``module``, wrapped for DDP), those done before the checkpoint
        resumed from (``state.step``) skipped. Returns the torch random state still to restore before the
        next batch runs (None once restored)."""
        ctx = ddp.context()
        net.train()
        state.epoch, state.epoch_rng = epoch, copy.deepcopy(rng.bit_generator.state)  # the epoch's plan is drawn from it up front
        skip = state.step
        steps = source.num_train_batches()
        if self.cfg.max_steps_per_epoch:
            steps = min(steps, self.cfg.max_steps_per_epoch)
        bar = progress_bar(total=steps, initial=skip, desc=f"epoch {epoch + 1}/{self.cfg.epochs}", leave=False,
                           enabled=ctx.main, bar=self.cfg.progress, unit="batch")
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
            state.losses.append(self._step(net, opt, inputs, y).item())
            state.global_step += 1
            state.step = step + 1
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(state.losses[-50:]):.4f}")
            if self._checkpoint_every and state.global_step % self._checkpoint_every == 0:
                self._save(module, opt, state)
        bar.close()
        return resume_rng

    def _step(self, net: torch.nn.Module, opt: torch.optim.Optimizer, inputs, y: torch.Tensor) -> torch.Tensor:
        """One optimizer step on a batch; its loss."""
        ctx = ddp.context()
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
        return loss

    def _save(self, module: torch.nn.Module, opt: torch.optim.Optimizer, state: TrainState) -> None:
        ctx = ddp.context()
        torch_rng = ddp.all_gather(_rng_state(self.device))  # every rank's, for dropout after a resume
        if ctx.main:
            checkpoint.save(self.cfg.checkpoint_dir, state.to_checkpoint(
                self.cfg.checkpoint_key, module, opt, torch_rng, ctx.world))

    @torch.no_grad()
    def predict(self, module: torch.nn.Module, source, split: str) -> np.ndarray:
        module.eval()
        module.to(self.device)
        out = source.infer(module, split, self.device)
        ctx = ddp.context()
        if out is not None:  # the source computed all outputs at once (layer-wise inference)
            scores = self._scores(out)
        elif not ctx.distributed:
            batches = progress_bar(source.batches(split), bar=self.cfg.progress, desc=f"predicting {split}", leave=False,
                                   unit="batch")
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
