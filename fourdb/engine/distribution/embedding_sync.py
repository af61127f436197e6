"""Data-parallel sync of learned row vectors, in a hot and a cold tier (FEC).

A recommendation model that learns a vector per destination row (``fourdb.contracts.RowEmbeddings``:
ContextGNN, and the two towers and idgnn with ``id_embeddings``) reads a few rows of its table per step,
and a few popular rows in nearly every step. ``DistributedDataParallel`` all-reduces every parameter's
whole gradient: for such a table, mostly zeros. ``trainer.embedding_sync`` says how its gradient travels:

* ``dense``: DDP all-reduces the whole table with the rest of the model;
* ``sparse``: each rank sends only the rows it read (an all-gather of their indices, then of their
  gradients), and every rank adds up what all ranks sent into the rows any of them read;
* ``tiered`` (FEC): the hot rows are all-reduced densely, the rest exchanged sparsely. The hot tier is
  chosen once, from how often each row was read in the first ``PROFILE_STEPS`` steps (on all ranks): a
  row goes there when sending it sparsely would cost more bytes, on average, than its share of a dense
  all-reduce (``trainer.embedding_hot_rows: auto``), or the given number of most-read rows.

The three give the same gradient, so the same training: every rank divides its gradient by the number
of ranks and the ranks' shares are added, as DDP does, and a row no rank read is zero everywhere (with
two ranks bit for bit, as a sum of two terms has one order; with more, up to the order of the sum).

A step's rows are known from its batch (the sampler threads put them in it, ahead of the step), so their
indices are exchanged while backward computes; only the gradients wait for backward.

Bytes are counted as each rank sends them under ring collectives (what NCCL and gloo's ring algorithms
do): an all-reduce of m bytes sends 2 (W - 1) / W m, an all-gather of m bytes from each rank (W - 1) m.
"""
from __future__ import annotations

import time

import torch

from fourdb.contracts import RowEmbeddings
from fourdb.errors import SettingError, did_you_mean

MODES = ("dense", "sparse", "tiered")
PROFILE_STEPS = 10  # steps whose reads choose the hot tier
INDEX_BYTES = 8  # an int64 row index


def all_reduce_bytes(nbytes: float, world: int) -> float:
    return 2 * (world - 1) / world * nbytes


def all_gather_bytes(nbytes: float, world: int) -> float:
    return (world - 1) * nbytes


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise SettingError(f"unknown trainer.embedding_sync '{mode}'{did_you_mean(mode, MODES)} "
                           f"(choose from {', '.join(MODES)})")
    return mode


def check_hot_rows(hot_rows) -> int | str:
    if hot_rows != "auto" and (isinstance(hot_rows, bool) or not isinstance(hot_rows, int) or hot_rows < 0):
        raise SettingError(f"trainer.embedding_hot_rows must be 'auto' or a number of rows, not {hot_rows!r}")
    return hot_rows


def hot_threshold(dim_bytes: int, world: int) -> float:
    """The share of rank-steps reading a row above which a dense all-reduce of it sends fewer bytes than
    the sparse exchange: each reading rank sends its index and vector to W - 1 ranks."""
    return all_reduce_bytes(dim_bytes, world) / ((world - 1) * (dim_bytes + INDEX_BYTES))


def expected_bytes(share: torch.Tensor, row_bytes: int, world: int) -> dict[str, float]:
    """Bytes each rank sends per step under each sync, by the ring counts above, for a table whose rows are
    read by a rank's step with the probabilities ``share`` (padding to the busiest rank left out)."""
    sparse = share * (world - 1) * (row_bytes + INDEX_BYTES)
    dense = all_reduce_bytes(row_bytes, world)
    hot = share > hot_threshold(row_bytes, world)
    return {"dense": dense * len(share), "sparse": float(sparse.sum()),
            "tiered": float(dense * hot.sum() + sparse[~hot].sum())}


class _Table:
    """One table's tiers and the exchange under way."""

    def __init__(self, table: RowEmbeddings):
        self.table = table
        rows = table.weight.shape[0]
        self.hot = torch.zeros(rows, dtype=torch.bool, device=table.weight.device)
        self.counts = torch.zeros(rows, device=table.weight.device)  # steps that read each row, while profiling
        self.share = None  # then: the share of rank-steps that read each row
        self.cold = self.sizes = self.indices = self.work = None

    @property
    def row_bytes(self) -> int:
        w = self.table.weight
        return w.shape[1] * w.element_size()


class EmbeddingSync:
    """Called by the trainer around each step's backward: ``after_forward`` then ``after_backward``."""

    def __init__(self, tables: list[RowEmbeddings], mode: str, hot_rows, world: int):
        import torch.distributed as dist

        self.mode, self.hot_rows, self.world = check_mode(mode), check_hot_rows(hot_rows), world
        self.tables = [_Table(t) for t in tables]
        # a group of its own: its exchanges run beside DDP's all-reduces during backward
        self.group = dist.new_group() if mode != "dense" else None
        for t in self.tables:
            t.table.reads = []
            if self.group is not None:  # DDP makes the ranks' first weights equal, but not of what it leaves out
                dist.broadcast(t.table.weight.data, 0, group=self.group)
        self.steps, self.bytes, self.read_rows, self.cold_rows, self.seconds = 0, 0.0, 0, 0, 0.0
        self.profiled = mode != "tiered"

    def ignored(self, module: torch.nn.Module) -> list[str]:
        """Names of the parameters DDP leaves to this sync (none under ``dense``)."""
        if self.mode == "dense":
            return []
        weights = {id(t.table.weight) for t in self.tables}
        return [name for name, p in module.named_parameters() if id(p) in weights]

    def after_forward(self) -> None:
        """The rows this step read: count them, and start exchanging the cold ones' indices."""
        import torch.distributed as dist

        start = time.perf_counter()
        for t in self.tables:
            reads = t.table.reads
            rows = torch.cat(reads).unique() if reads else torch.zeros(0, dtype=torch.int64, device=t.hot.device)
            reads.clear()
            self.read_rows += len(rows)
            if self.mode == "dense":
                self.bytes += all_reduce_bytes(t.table.weight.numel() * t.table.weight.element_size(), self.world)
                continue
            if not self.profiled:
                t.counts[rows] += 1
            t.cold = rows[~t.hot[rows]]
            self.cold_rows += len(t.cold)
            sizes = [torch.zeros(1, dtype=torch.int64, device=rows.device) for _ in range(self.world)]
            dist.all_gather(sizes, torch.tensor([len(t.cold)], device=rows.device), group=self.group)
            t.sizes = [int(s) for s in sizes]
            width = max(t.sizes)
            padded = torch.full((width,), -1, dtype=torch.int64, device=rows.device)
            padded[:len(t.cold)] = t.cold
            t.indices = [torch.empty_like(padded) for _ in range(self.world)]
            t.work = dist.all_gather(t.indices, padded, group=self.group, async_op=True)
            self.bytes += all_gather_bytes(INDEX_BYTES, self.world) + all_gather_bytes(width * INDEX_BYTES, self.world)
        self.seconds += time.perf_counter() - start

    def after_backward(self) -> None:
        """Every rank's gradient becomes the mean of the ranks' (DDP's result): hot rows all-reduced, cold
        rows gathered and added up."""
        import torch.distributed as dist

        start = time.perf_counter()
        self.steps += 1
        for t in self.tables:
            if self.mode == "dense":
                continue
            weight = t.table.weight
            if weight.grad is None:  # this rank's batch read none of it
                weight.grad = torch.zeros_like(weight)
            grad = weight.grad
            hot = t.hot.nonzero().view(-1)
            if len(hot):
                part = grad[hot] / self.world
                dist.all_reduce(part, group=self.group)
                grad[hot] = part
                self.bytes += all_reduce_bytes(part.numel() * part.element_size(), self.world)
            width = max(t.sizes)
            mine = torch.zeros((width, grad.shape[1]), dtype=grad.dtype, device=grad.device)
            mine[:len(t.cold)] = grad[t.cold] / self.world
            values = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(values, mine, group=self.group)
            self.bytes += all_gather_bytes(mine.numel() * mine.element_size(), self.world)
            t.work.wait()
            rows = [idx[:n] for idx, n in zip(t.indices, t.sizes)]
            grad[torch.cat(rows)] = 0
            for r, (idx, n) in enumerate(zip(rows, t.sizes)):  # rank order: one order of the sum everywhere
                grad.index_add_(0, idx, values[r][:n])
            t.cold = t.sizes = t.indices = t.work = None
        if not self.profiled and self.steps >= PROFILE_STEPS:
            self.choose_hot()
        self.seconds += time.perf_counter() - start

    def choose_hot(self) -> None:
        """The hot tier, the same on every rank: from the reads of all ranks in the profiled steps."""
        import torch.distributed as dist

        self.profiled = True
        for t in self.tables:
            dist.all_reduce(t.counts, group=self.group)
            self.bytes += all_reduce_bytes(t.counts.numel() * t.counts.element_size(), self.world)
            t.share = share = t.counts / (self.steps * self.world)
            if self.hot_rows == "auto":
                t.hot = share > hot_threshold(t.row_bytes, self.world)
            else:  # the most-read rows (ties: the lower row), of those read at all
                order = torch.argsort(-share, stable=True)[:self.hot_rows]
                t.hot = torch.zeros_like(t.hot)
                t.hot[order[share[order] > 0]] = True
            t.counts = None

    def report(self) -> dict:
        """What the sync did, per training step on this rank, beside what a dense all-reduce would send."""
        steps = max(self.steps, 1)
        dense = sum(all_reduce_bytes(t.table.weight.numel() * t.table.weight.element_size(), self.world)
                    for t in self.tables)
        return {"mode": self.mode, "world": self.world, "steps": self.steps,
                "rows": sum(len(t.hot) for t in self.tables), "hot_rows": sum(int(t.hot.sum()) for t in self.tables),
                "bytes_per_step": round(self.bytes / steps, 1), "dense_bytes_per_step": round(dense, 1),
                "rows_read_per_step": round(self.read_rows / steps, 1),
                "cold_rows_per_step": round(self.cold_rows / steps, 1),
                "sync_ms_per_step": round(1e3 * self.seconds / steps, 3)}


def embedding_tables(module: torch.nn.Module) -> list[RowEmbeddings]:
    """The module's tables of learned row vectors (its ``RowEmbeddings`` submodules)."""
    return [m for m in module.modules() if isinstance(m, RowEmbeddings)]
