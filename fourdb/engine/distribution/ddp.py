"""Data-parallel training on torch.distributed: process group, sharding, gathering, a shared graph.

A run with ``trainer.nproc > 1`` is started by torchrun (``fourdb.experiment.launch``); every rank runs the
same experiment. What differs per rank:

* training: each global batch (the same ``batch_size`` seeds a 1-process run would take, from the same
  permutation) is split into ``nproc`` contiguous shards, and rank ``r`` samples and trains on shard
  ``r`` only; ``DistributedDataParallel`` averages the gradients (the loss is weighted by the shard's
  share of the global batch, so the update equals the 1-process one up to float rounding and
  neighbour sampling, which draws from a per-rank seed);
* evaluation: rank ``r`` predicts the evaluation batches ``k`` with ``k % nproc == r``; the outputs are
  gathered on every rank (so early stopping agrees everywhere) and rank 0 writes the run record.

One copy of the graph per machine (``shared_inputs``): rank 0 builds the graph inputs once and writes
every large array of them (node features, node and edge times, the DGL graph's edge lists and node
data, the sampler's CSC index, the seed features, seeds, cutoffs and labels) as ``.npy`` files, the
rest as a small pickle; every rank then maps the arrays copy-on-write (``mmap_mode="c"``), so they are
pages of one file in the page cache that all ranks share. Not shared: what each rank derives from them
(DGL's lazily built sparse formats, sampled batches, the model, the offline store's hot tier).
"""
from __future__ import annotations

import hmac
import io
import json
import logging
import os
import pickle
import socket
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fourdb.errors import UntrustedInputError
from fourdb.utils import atomic_output, seal

log = logging.getLogger("fourdb")
SHARED_VERSION = 2  # 2: sealed with this machine's key
SHARE_MIN_BYTES = 1 << 16  # arrays at least this large go to mapped files


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def in_torchrun() -> bool:
    """True inside a worker that torchrun (or another launcher setting RANK/WORLD_SIZE) started."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1


def resolve_backend(backend: str = "auto") -> str:
    if backend in (None, "auto"):
        from fourdb.utils import gpu_unusable

        return "gloo" if gpu_unusable() else "nccl"  # the ranks train where their graphs can go
    return backend


def context() -> Context:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Context(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)),
                       dist.get_backend())
    return Context()


def free_port() -> int:
    """A TCP port on the loopback nothing listens on now, for processes started outside torchrun."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(backend: str = "auto") -> Context:
    """Join the process group torchrun set up (no-op outside torchrun or when already joined)."""
    import torch.distributed as dist

    if not in_torchrun():
        return Context()
    if not dist.is_initialized():
        backend = resolve_backend(backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend, timeout=timedelta(minutes=30))
    return context()


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_gather(obj) -> list:
    import torch.distributed as dist

    ctx = context()
    if not ctx.distributed:
        return [obj]
    out = [None] * ctx.world
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj, src: int = 0):
    import torch.distributed as dist

    if not context().distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_sum(value: float | int, device="cpu") -> float:
    import torch.distributed as dist

    if not context().distributed:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item())


def wrap(module: torch.nn.Module, device: torch.device, ignore=()) -> torch.nn.Module:
    """``DistributedDataParallel`` around ``module`` (which stays the one to save and evaluate).

    ``find_unused_parameters``: a sampled subgraph need not reach every table, so a rank's forward pass
    may leave some encoders unused. ``ignore``: names of parameters whose gradients travel another way
    (``fourdb.engine.distribution.embedding_sync``).
    """
    from torch.nn.parallel import DistributedDataParallel

    if ignore:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, list(ignore))

    ids = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)


def shard(idx: np.ndarray, rank: int, world: int) -> np.ndarray:
    """Rank ``rank``'s contiguous share of one global batch."""
    return np.array_split(np.asarray(idx), world)[rank]


def rank_seed(seed: int, rank: int) -> int:
    """A batch's sampling seed for one rank (rank 0 keeps the batch's own seed)."""
    if rank == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), rank]).generate_state(1, np.uint64)[0]) >> 1


def shard_batch(inputs, y: torch.Tensor, rank: int, world: int):
    """Slice a global batch of row-aligned tensors (any source without its own sharding)."""
    n = len(y)
    sizes = [len(p) for p in np.array_split(np.arange(n), world)]
    lo = sum(sizes[:rank])
    hi = lo + sizes[rank]

    def cut(x):
        if isinstance(x, torch.Tensor) and x.dim() and x.shape[0] == n:
            return x[lo:hi]
        if isinstance(x, (list, tuple)):
            return type(x)(cut(v) for v in x)
        if isinstance(x, dict):
            return {k: cut(v) for k, v in x.items()}
        raise TypeError(f"cannot shard a batch element of type {type(x).__name__}; give the data source a "
                        f"shard(rank, world) method")

    return cut(inputs), y[lo:hi]


# ------------------------------------------------------------------------------ one graph per machine
class _Saver(pickle.Pickler):
    def __init__(self, f, folder: Path):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.folder, self.count, self.nbytes = folder, 0, 0

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and not obj.requires_grad \
                and obj.layout == torch.strided and obj.nbytes >= SHARE_MIN_BYTES:
            kind, arr = "torch", obj.contiguous().numpy()
        elif isinstance(obj, np.ndarray) and obj.dtype != object and obj.nbytes >= SHARE_MIN_BYTES:
            kind, arr = "numpy", obj
        else:
            return None
        name = f"a{self.count}.npy"
        self.count += 1
        self.nbytes += arr.nbytes
        np.save(self.folder / name, np.ascontiguousarray(arr))
        return (kind, name)


class _Loader(pickle.Unpickler):
    def __init__(self, f, folder: Path):
        super().__init__(f)
        self.folder = folder

    def persistent_load(self, pid):
        kind, name = pid
        arr = np.load(self.folder / name, mmap_mode="c")  # copy-on-write: shared pages until written
        if kind == "torch":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return torch.from_numpy(arr)
        return arr


def save_shared(obj, folder: str | Path, key: str | None = None) -> dict:
    """Write ``obj`` as mapped arrays plus a small pickle into ``folder`` (atomically: a temp folder
    renamed into place, manifest last); ``key`` names what was built (a hash of its config)."""
    with atomic_output(folder, folder=True) as tmp:
        buf = io.BytesIO()
        saver = _Saver(buf, tmp)
        saver.dump(obj)
        (tmp / "object.pkl").write_bytes(buf.getvalue())
        manifest = {"version": SHARED_VERSION, "key": key, "arrays": saver.count, "array_bytes": saver.nbytes,
                    "pickle_bytes": len(buf.getvalue()), "seal": _seal(buf.getvalue())}
        (tmp / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def shared_manifest(folder: str | Path, key: str | None = None) -> dict | None:
    """The manifest of a complete shared folder built for ``key``, else None."""
    path = Path(folder) / "manifest.json"
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return m if m.get("version") == SHARED_VERSION and m.get("key") == key else None


def load_shared(folder: str | Path):
    """The object ``save_shared`` wrote, unpickled only if this machine's fourdb wrote it: a run folder may come
    from elsewhere, and a pickle there is not to be run."""
    folder = Path(folder)
    data = (folder / "object.pkl").read_bytes()
    manifest = json.loads((folder / "manifest.json").read_text())
    if not hmac.compare_digest(str(manifest.get("seal", "")), _seal(data)):
        raise UntrustedInputError(f"{folder}: shared graph inputs not written by fourdb on this machine; not loaded "
                                  f"(delete the folder to rebuild them)")
    return _Loader(io.BytesIO(data), folder).load()


def _seal(data: bytes) -> str:
    return seal(data, "shared-graph")


def shared_inputs(build: Callable[[], object], folder: str | Path, ctx: Context, key: str | None = None):
    """``build()`` once per machine (rank 0, or an earlier attempt of the same run), mapped by every rank.

    A folder built for another ``key`` is rebuilt. Returns the mapped object and what was shared.
    """
    folder = Path(folder)
    manifest = shared_manifest(folder, key)
    if manifest is None and ctx.main:
        obj = build()
        manifest = save_shared(obj, folder, key)
        del obj
        log.info("shared graph inputs: %d arrays, %.1f MB in %s (mapped by every rank)", manifest["arrays"],
                 manifest["array_bytes"] / 2 ** 20, folder)
    barrier()
    manifest = manifest or shared_manifest(folder, key)
    if manifest is None:
        raise RuntimeError(f"rank {ctx.rank}: no shared graph inputs in {folder}")
    obj = load_shared(folder)
    info = {"folder": str(folder), "arrays": manifest["arrays"], "mapped_mb": round(manifest["array_bytes"] / 2 ** 20, 2),
            "private_pickle_kb": round(manifest["pickle_bytes"] / 1024, 1)}
    return obj, info
