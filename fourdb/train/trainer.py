"""One trainer for every neural model: epochs, loss by task type, early stopping on the task metric.

A model hands the trainer a torch module and a data source; the source yields training batches
``(inputs, labels)`` and evaluation batches ``inputs`` per split. Test labels never reach the
trainer: it only ever asks the source for training and validation labels.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from fourdb.train.metrics import HIGHER_IS_BETTER, compute


@dataclass
class TrainerConfig:
    epochs: int = 10
    lr: float = 1e-3
    weight_decay: float = 0.0
    patience: int = 3
    batch_size: int = 512
    max_steps_per_epoch: int | None = None
    device: str = "auto"
    progress: bool = True

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


class Trainer:
    def __init__(self, cfg: TrainerConfig, task_type: str, metric: str, seed: int = 0):
        self.cfg, self.task_type, self.metric, self.seed = cfg, task_type, metric, seed
        self.device = cfg.torch_device()
        self.y_mean, self.y_std = 0.0, 1.0
        self.history: list[dict] = []

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task_type == "binary":
            return F.binary_cross_entropy_with_logits(out.view(-1), y.float())
        if self.task_type == "multiclass":
            return F.cross_entropy(out, y.long())
        return F.mse_loss(out.view(-1), (y.float() - self.y_mean) / self.y_std)

    def _scores(self, out: torch.Tensor) -> np.ndarray:
        if self.task_type == "binary":
            return torch.sigmoid(out.view(-1)).cpu().numpy()
        if self.task_type == "multiclass":
            return torch.softmax(out, -1).cpu().numpy()
        return (out.view(-1) * self.y_std + self.y_mean).cpu().numpy()

    def fit(self, module: torch.nn.Module, source) -> torch.nn.Module:
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        if self.task_type == "regression":
            y = source.labels("train").astype(float)
            self.y_mean, self.y_std = float(y.mean()), float(y.std() or 1.0)
        module.to(self.device)
        if hasattr(source, "prepare"):  # lets a data source profile the model before the first epoch
            source.prepare(module, self.device, epochs=self.cfg.epochs)
        opt = torch.optim.AdamW(module.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        higher = HIGHER_IS_BETTER[self.metric]
        best, best_state, bad_epochs = -math.inf, None, 0
        y_val = source.labels("val")
        for epoch in range(self.cfg.epochs):
            module.train()
            start, losses = time.perf_counter(), []
            steps = source.num_train_batches()
            if self.cfg.max_steps_per_epoch:
                steps = min(steps, self.cfg.max_steps_per_epoch)
            bar = tqdm(total=steps, desc=f"epoch {epoch + 1}/{self.cfg.epochs}", leave=False,
                       disable=not self.cfg.progress)
            for step, (inputs, y) in enumerate(source.train_batches(rng)):
                if step >= steps:
                    break
                opt.zero_grad()
                loss = self._loss(module(*_to(inputs, self.device)), y.to(self.device))
                loss.backward()
                opt.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{np.mean(losses[-50:]):.4f}")
            bar.close()
            val_score = compute(self.metric, y_val, self.predict(module, source, "val"))
            self.history.append({"epoch": epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
                                 f"val_{self.metric}": val_score, "seconds": time.perf_counter() - start})
            signed = val_score if higher else -val_score
            if signed > best:
                best, best_state, bad_epochs = signed, copy.deepcopy(module.state_dict()), 0
            else:
                bad_epochs += 1
                if bad_epochs >= self.cfg.patience:
                    break
        if best_state is not None:
            module.load_state_dict(best_state)
        return module

    @torch.no_grad()
    def predict(self, module: torch.nn.Module, source, split: str) -> np.ndarray:
        module.eval()
        module.to(self.device)
        out = source.infer(module, split, self.device) if hasattr(source, "infer") else None
        if out is not None:  # the source computed all outputs at once (layer-wise inference)
            scores = self._scores(out)
        else:
            scores = np.concatenate([self._scores(module(*_to(inputs, self.device))) for inputs in source.batches(split)])
        module.train()
        return scores


def _to(inputs, device):
    """Move a batch (tuple of tensors, dicts of tensors, DGL blocks) to the device."""
    def move(x):
        if isinstance(x, dict):
            return {k: move(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(move(v) for v in x)
        return x.to(device) if hasattr(x, "to") else x

    return move(inputs)
