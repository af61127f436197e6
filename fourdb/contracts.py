"""The contracts between stages, written down: what the trainer pulls batches from, what a sampler
returns, what layer-wise inference needs of a module, what a fitted model reports.

They sit below every stage (no fourdb imports), so a stage implements one without depending on the
stage that consumes it: ``GraphSource`` (engine) and ``TableSource`` (models) are ``DataSource``s the
trainer (train) pulls from; ``TemporalSampler`` is a ``Sampler``; ``HeteroGNN`` is a ``LayerwiseModule``;
``IdEmbeddings`` (models) are ``RowEmbeddings`` the embedding sync (engine) exchanges.
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

import numpy as np


class DataSource:
    """What the trainer pulls from: training batches ``(inputs, labels)``, evaluation batches ``inputs``.

    The first four methods are required. The rest have defaults that do nothing, and a source that can
    do more overrides them: ``shardable`` sources make only one data-parallel rank's share of each
    batch; ``prepare`` sees the model before training (to profile it); ``infer`` computes all of a
    split's outputs at once (layer-wise inference) instead of batch by batch; ``report`` says what the
    source did, for the run record.
    """

    shardable = False

    def labels(self, split: str) -> np.ndarray:
        """Labels of ``train`` or ``val``; test labels are never handed to training code."""
        raise NotImplementedError

    def num_train_batches(self) -> int:
        raise NotImplementedError

    def train_batches(self, rng: np.random.Generator) -> Iterator[tuple[Any, Any]]:
        """One epoch of ``(inputs, labels)``, its order drawn from ``rng``."""
        raise NotImplementedError

    def batches(self, split: str) -> Iterator[Any]:
        """Model inputs of ``split`` in order, the same every time."""
        raise NotImplementedError

    def shard(self, rank: int, world: int) -> None:
        raise TypeError(f"{type(self).__name__} cannot make one rank's share of a batch")

    def prepare(self, module, device, epochs: int | None = None) -> None:
        pass

    def infer(self, module, split: str, device):
        """All raw outputs of ``split`` at once, or None to evaluate ``batches(split)`` one by one."""
        return None

    def timed_batches(self, rng: np.random.Generator, n: int) -> tuple[list, float]:
        """The first ``n`` training inputs and the median seconds it took to make one (0: made in
        advance), for cost models."""
        made = []
        for inputs, _ in self.train_batches(rng):
            made.append(inputs)
            if len(made) >= n:
                break
        return made, 0.0

    def report(self) -> dict | None:
        return None


@runtime_checkable
class Sampler(Protocol):
    """Draws the sampled neighbourhood of seeds, each as of its own cutoff (int64 nanoseconds)."""

    fanouts: list[int]
    id_etypes: frozenset  # edge types whose sampled edges carry their ids (``dgl.EID``)

    def sample(self, seed_type: str, seeds, cutoffs, rng: np.random.Generator,
               hidden_etypes: frozenset = frozenset(), isolate: bool = False):
        """A batch: ``blocks`` (input layer first), ``input_nodes`` and ``input_cutoffs`` per type,
        ``seed_type`` and ``num_seeds``; with ``isolate`` a tree per seed and ``input_groups`` per type."""

    def config(self) -> dict:
        """What fixes the samples it draws (for cache keys)."""

    def with_fanouts(self, fanouts: list[int]) -> "Sampler":
        ...

    def to(self, device) -> "Sampler":
        ...


@runtime_checkable
class LayerwiseModule(Protocol):
    """A GNN that layer-wise inference can run one layer at a time, exactly as its forward does."""

    seed_type: str
    num_layers: int

    def encode(self, feats: dict) -> dict:
        """Input features per table -> initial states."""

    def layer(self, i: int, block, h: dict) -> dict:
        """One message-passing step: source states of ``block`` -> its destination states."""

    def readout(self, h: dict, num_seeds: int):
        """Outputs of the first ``num_seeds`` rows of the seed table."""


@runtime_checkable
class RowEmbeddings(Protocol):
    """A table of learned vectors of which a training step reads a few rows (a vector per destination row):
    a data-parallel run exchanges its gradient row by row (``fourdb.engine.distribution.embedding_sync``), not whole."""

    weight: Any  # torch.nn.Parameter [rows, dim]
    reads: list | None  # set to a list, every training forward appends the rows it read (a tensor); None: not kept


# How a record's model learned the target database, as RelBench 3's ``in_context`` flag: ``supervised`` fits
# parameters on its training split; ``in-context`` takes no gradient step on it (a pretrained model reading
# labelled rows as context). Boards never rank the two together.
SUPERVISED, IN_CONTEXT = "supervised", "in-context"
REGIMES = (SUPERVISED, IN_CONTEXT)


class Report(dict):
    """What a fitted model tells the run record: its ``history`` per epoch and what its ``engine`` did."""

    def __init__(self, history: list | None = None, engine: dict | None = None):
        super().__init__(history=history or [], engine=engine)
