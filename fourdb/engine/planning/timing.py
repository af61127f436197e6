"""What the cost models (``engine=auto`` and ``trainer.nproc=auto``) measure and estimate, in one place:
moving a batch to the device, timing a model's training steps, the bytes of one stored feature row, and
the memory a batch holds and a training step takes."""
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


def with_threads(n: int, fn):
    """``fn()`` on ``n`` intra-op threads, the setting restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def median_seconds(times: list[float]) -> float:
    """The median, leaving out the first measurement (one-off warm-up) when there are more."""
    return float(np.median(times[1:] if len(times) > 1 else times)) if times else 0.0


def measure_steps(module: torch.nn.Module, device, inputs: list, opt: torch.optim.Optimizer | None = None) -> float:
    """Median seconds of a training step on each batch of ``inputs`` (``step_times``)."""
    return median_seconds(step_times(module, device, inputs, opt))


def step_times(module: torch.nn.Module, device, inputs: list, opt: torch.optim.Optimizer | None = None) -> list[float]:
    """Seconds of a training step (forward, backward and, given one, the optimizer's step) on each batch
    of ``inputs``. The random state and the buffers (state a model keeps across batches) are restored
    afterwards, and without an optimizer the parameters and their gradients are left as they were, so
    the run it profiles is unchanged."""
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
    return times


@torch.no_grad()
def forward_times(module: torch.nn.Module, device, inputs: list) -> list[float]:
    """Seconds of an evaluation forward pass (eval mode, no gradients) on each batch of ``inputs``."""
    device = torch.device(device)
    was_training = module.training
    module.eval()
    times = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for x in inputs:
            t = time.perf_counter()
            module(*to_device(x, device))
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    module.train(was_training)
    return times


def row_bytes(features: dict) -> float:
    """Mean bytes of one stored feature row over the tables (float32 numbers, int64 codes, a slot)."""
    return float(np.mean([f.numeric.shape[1] * 4 + f.categorical.shape[1] * 8 + 8 for f in features.values()]))


def rss_mb() -> float:
    """This process's resident memory now, in MB (0 without psutil)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover
        return 0.0
    return psutil.Process().memory_info().rss / 2 ** 20


def maxrss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports KB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakRSS:
    """``with PeakRSS() as p: ...``: ``p.growth_mb`` is the highest resident memory seen inside, over that at
    the start, polled on a thread (every ``interval`` s) since a step frees its activations before it returns."""

    def __init__(self, interval: float = 0.002):
        self.interval, self.growth_mb = interval, 0.0

    def __enter__(self):
        import threading

        self.start = self.peak = rss_mb()
        self._stop = threading.Event()

        def poll():
            while not self._stop.wait(self.interval):
                self.peak = max(self.peak, rss_mb())

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
        self.growth_mb = self.peak - self.start
        return False


def batch_mb(inputs) -> float:
    """Megabytes one made batch holds: its blocks' edge and node ids and its tensors, wherever the model's
    inputs hold them (a GNN's ``(blocks, feats)``; a recommendation model's towers, trees and context)."""
    ids, tensor_bytes = 0, 0
    stack = [inputs]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif torch.is_tensor(x):
            tensor_bytes += x.numel() * x.element_size()
        elif hasattr(x, "canonical_etypes"):  # a DGL block: src, dst and edge id per edge, an id per node
            ids += sum(x.num_edges(et) * 3 for et in x.canonical_etypes)
            ids += sum(x.num_src_nodes(nt) for nt in x.srctypes)
    return (8 * ids + tensor_bytes) / 2 ** 20
