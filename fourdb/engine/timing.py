"""What the cost models (``engine=auto`` and ``trainer.nproc=auto``) measure and estimate, in one place:
moving a batch to the device, timing a model's training steps, and the bytes of one stored feature row."""
from __future__ import annotations

import time

import numpy as np
import torch


def to_device(inputs, device):
    """A batch (tuples, lists and dicts of tensors, DGL blocks) on ``device``."""
    if isinstance(inputs, dict):
        return {k: to_device(v, device) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(to_device(v, device) for v in inputs)
    return inputs.to(device) if hasattr(inputs, "to") else inputs


def median_seconds(times: list[float]) -> float:
    """The median, leaving out the first measurement (one-off warm-up) when there are more."""
    return float(np.median(times[1:] if len(times) > 1 else times)) if times else 0.0


def measure_steps(module: torch.nn.Module, device, inputs: list, opt: torch.optim.Optimizer | None = None) -> float:
    """Median seconds of a training step (forward, backward and, given one, the optimizer's step) on
    each batch of ``inputs``. The random state and the buffers (state a model keeps across batches) are
    restored afterwards, and without an optimizer the parameters and their gradients are left as they
    were, so the run it profiles is unchanged."""
    device = torch.device(device)
    was_training = module.training
    module.train()
    grads = [p.grad for p in module.parameters()]
    buffers = [b.detach().clone() for b in module.buffers()]
    times = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for x in inputs:
            t = time.perf_counter()
            if opt is not None:
                opt.zero_grad()
            out = module(*to_device(x, device)).float()
            out[torch.isfinite(out)].pow(2).mean().backward()  # a ranking model marks what it cannot rank -inf
            if opt is not None:
                opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    if opt is None:
        for p, g in zip(module.parameters(), grads):
            p.grad = g
    with torch.no_grad():
        for b, saved in zip(module.buffers(), buffers):
            b.copy_(saved)
    module.train(was_training)
    return median_seconds(times)


def row_bytes(features: dict) -> float:
    """Mean bytes of one stored feature row over the tables (float32 numbers, int64 codes, a slot)."""
    return float(np.mean([f.numeric.shape[1] * 4 + f.categorical.shape[1] * 8 + 8 for f in features.values()]))
