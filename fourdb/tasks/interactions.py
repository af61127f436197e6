"""What a recommendation model may know at a cutoff: the links of earlier windows, and which
destinations exist.

A recommendation task's SQL gives, per source and cutoff, the destinations it links to in the window
after the cutoff. Read at every cutoff of the task from the database (``past_links``), these windows
form a history of links, each known when its window closes; a seed at cutoff t sees only the links
known by t. Popularity, a source's own past destinations and the pair
features of the rankers are all read off this history, vectorized per distinct cutoff (no loop per
source). A destination row newer than the cutoff does not exist yet and is never recommended.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from fourdb.rdb import Database
from fourdb.tasks import Task
from fourdb.tasks.materialize import past_links
from fourdb.utils import NS_PER_DAY, to_epoch_ns

CHUNK = 4096  # seeds scored at once: a [CHUNK, destinations] score matrix
# the birth of a destination row that exists at every cutoff: the time to_epoch_ns gives a missing one (the
# same value as columns.MISSING_TIME and graph.build.ALWAYS, both a layer above tasks)
ALWAYS = np.iinfo(np.int64).min


@dataclass
class Interactions:
    src: np.ndarray  # source row of each known link
    dst: np.ndarray  # destination row
    known: np.ndarray  # int64 ns: when the link became known
    n_dst: int
    dst_born: np.ndarray  # int64 ns per destination row; ALWAYS: always there
    window: int  # ns: the task's label window ("recent" popularity counts the last one)
    # per destination row, its primary key and its foreign keys' values (column -> values): what names a
    # row, and the rows it belongs to, across two builds of a database whose row numbers differ (a model
    # that learns an embedding per destination, and per parent row, finds its rows by them)
    dst_ids: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_task(cls, task: Task, db: Database) -> "Interactions":
        links = past_links(task, db)
        counts = links["dst"].map(len).to_numpy()
        src = np.repeat(links["node"].to_numpy(), counts)
        dst = np.concatenate([*links["dst"].to_numpy(), np.zeros(0, np.int64)])
        known = np.repeat(to_epoch_ns(links["known"]), counts)
        table = db.schema.table(task.spec.destination_table)
        n_dst = len(db.tables[table.name])
        born = to_epoch_ns(db.tables[table.name][table.time_column]) if table.time_column else \
            np.full(n_dst, ALWAYS, np.int64)
        frame = db.tables[table.name]
        ids = {table.primary_key or "": frame[table.primary_key].to_numpy() if table.primary_key else np.arange(n_dst),
               **{fk.name: frame[fk.name].to_numpy() for fk in table.foreign_keys}}
        order = np.argsort(known, kind="stable")
        return cls(src[order].astype(np.int64), dst[order].astype(np.int64), known[order], n_dst, born,
                   int(pd.Timedelta(task.spec.window).value), ids)

    # -- as of one cutoff --------------------------------------------------------------------------
    def exists(self, cutoff: int) -> np.ndarray:
        """Destinations that exist at ``cutoff`` (bool per destination row)."""
        return (self.dst_born == ALWAYS) | (self.dst_born <= cutoff)

    def popularity(self, cutoff: int) -> tuple[np.ndarray, np.ndarray]:
        """(links per destination in the last window known by ``cutoff``, links ever known by it)."""
        upto = np.searchsorted(self.known, cutoff, side="right")
        total = np.bincount(self.dst[:upto], minlength=self.n_dst).astype(np.float64)
        recent_from = np.searchsorted(self.known, cutoff - self.window, side="right")
        recent = np.bincount(self.dst[recent_from:upto], minlength=self.n_dst).astype(np.float64)
        return recent, total

    def popularity_score(self, cutoff: int) -> np.ndarray:
        """Recent popularity first, all-time popularity breaking its ties."""
        recent, total = self.popularity(cutoff)
        return recent * (total.max() + 1) + total

    def history(self, sources: np.ndarray, cutoff: int) -> sp.csr_matrix:
        """[len(sources), destinations]: how often each source linked to each destination, known by ``cutoff``."""
        upto = np.searchsorted(self.known, cutoff, side="right")
        src, dst = self.src[:upto], self.dst[:upto]
        row_of = np.full(int(max(src.max(initial=-1), sources.max(initial=-1))) + 1, -1, np.int64)
        row_of[sources] = np.arange(len(sources))
        rows = row_of[src] if len(src) else np.zeros(0, np.int64)
        keep = rows >= 0
        return sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], dst[keep])),
                             shape=(len(sources), self.n_dst))

    def last_seen(self, sources: np.ndarray, cutoff: int) -> sp.csr_matrix:
        """[len(sources), destinations]: days from each source's latest known link to a destination to
        ``cutoff``, plus one (0: never linked)."""
        upto = np.searchsorted(self.known, cutoff, side="right")
        src, dst, known = self.src[:upto], self.dst[:upto], self.known[:upto]
        row_of = np.full(int(max(src.max(initial=-1), sources.max(initial=-1))) + 1, -1, np.int64)
        row_of[sources] = np.arange(len(sources))
        rows = row_of[src] if len(src) else np.zeros(0, np.int64)
        keep = rows >= 0
        days = 1.0 + (cutoff - known[keep]) / NS_PER_DAY
        m = sp.csr_matrix((len(sources), self.n_dst))
        if keep.any():  # the smallest age per pair: scipy sums duplicates, so keep the latest link only
            order = np.lexsort((-known[keep], dst[keep], rows[keep]))
            r, d, a = rows[keep][order], dst[keep][order], days[order]
            first = np.r_[True, (r[1:] != r[:-1]) | (d[1:] != d[:-1])]
            m = sp.csr_matrix((a[first], (r[first], d[first])), shape=(len(sources), self.n_dst))
        return m

    # -- ranking -----------------------------------------------------------------------------------
    def rank(self, sources: np.ndarray, cutoffs: np.ndarray, k: int, score, allowed=None) -> np.ndarray:
        """[n, k] destination rows per (source, cutoff), best first, by ``score(sources, cutoff) -> [n,
        destinations]`` per distinct cutoff; destinations that do not exist yet are never ranked, nor
        any outside a seed's ``allowed`` rows where given (shipped candidates)."""
        out = np.full((len(sources), k), -1, np.int64)
        for t in np.unique(cutoffs):
            at = np.flatnonzero(cutoffs == t)
            absent = torch.from_numpy(~self.exists(int(t)))
            for start in range(0, len(at), CHUNK):
                rows = at[start:start + CHUNK]
                s = torch.from_numpy(np.array(score(sources[rows], int(t)), dtype=np.float64))  # a copy: scores may be read-only
                s = s.masked_fill(absent[None, :], -np.inf)
                if allowed is not None:
                    s = s.masked_fill(~only(allowed[rows], self.n_dst), -np.inf)
                top = torch.topk(s, min(k, s.shape[1]), dim=1)
                ids = top.indices.numpy()
                ids[~np.isfinite(top.values.numpy())] = -1  # fewer existing destinations than k
                out[rows, :ids.shape[1]] = ids
        return out



def only(allowed, n_dst: int) -> torch.Tensor:
    """[len(allowed), n_dst] bool: True at each seed's allowed destination rows."""
    mask = torch.zeros((len(allowed), n_dst), dtype=torch.bool)
    sizes = [len(a) for a in allowed]
    if sum(sizes):
        mask[torch.from_numpy(np.repeat(np.arange(len(allowed)), sizes)),
             torch.from_numpy(np.concatenate([np.asarray(a, np.int64) for a in allowed]))] = True
    return mask


def repeat_score(inter: Interactions):
    """A source's own past destinations first (by how often), then the popular ones."""
    def score(sources, cutoff):
        pop = inter.popularity_score(cutoff)
        return inter.history(sources, cutoff).toarray() * (pop.max() + 1) + pop[None, :]

    return score


@dataclass
class RecData:
    """The inputs of a recommendation run: seeds (source rows and cutoffs) per split, the training and
    validation destination lists, the link history, the cut-off ``k``; and, for a model that ranks
    candidates, their pair features (``pairs``: one row per (seed, candidate), ``candidates`` [n, c])."""

    interactions: Interactions
    seeds: dict[str, np.ndarray]
    cutoffs: dict[str, np.ndarray]  # int64 ns
    labels: dict[str, np.ndarray]  # train and val: an array of destination rows per seed
    k: int
    destination: str  # the destination table
    pairs: object = None  # fourdb.features.TableData over (seed, candidate) rows
    candidates: dict[str, np.ndarray] | None = None
    graph: object = None  # fourdb.engine.sampling.data.GraphData, for the GNNs
    # per split, the destination rows each seed ranks (a task's shipped candidates); absent: every one
    allowed: dict[str, np.ndarray] = field(default_factory=dict)

    def width(self, split: str) -> int:
        """How many destinations a prediction for ``split`` lists: ``k``, or every shipped candidate."""
        if split not in self.allowed:
            return self.k
        return max([len(a) for a in self.allowed[split]], default=1)


def rec_data(db: Database, task: Task, splits: dict) -> RecData:
    allowed = {s: f["candidates"].to_numpy() for s, f in splits.items() if s != "train" and "candidates" in f.columns}
    return RecData(Interactions.from_task(task, db), {s: f["node"].to_numpy() for s, f in splits.items()},
                   {s: to_epoch_ns(f["cutoff"]) for s, f in splits.items()},
                   {s: splits[s]["label"].to_numpy() for s in ("train", "val")}, int(task.spec.eval_k),
                   task.spec.destination_table, allowed=allowed)
