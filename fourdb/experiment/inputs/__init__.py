"""A run's inputs: the seed subsample, then what its model's input kind builds from it.

An input kind is one module in this package: an ``InputKind`` registered with ``INPUT_KINDS.register``. It
builds the inputs a model of its kind reads, names them for the run record and the boards, and says in the
run's log which columns it reads. A model names its kind (``Model.input_kind``: the registered name, as
models sit below this layer); nothing outside this package compares kind names.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from fourdb.registry import Registry
from fourdb.tasks import Task
from fourdb.tasks.checks import refuse_nothing_to_learn
from fourdb.tasks.splits import SPLITS
from fourdb.utils import atomic_write_text

log = logging.getLogger("fourdb")


class InputKind:
    name = "kind"
    scored_beside_trivial = True  # its runs are scored beside the trivial baselines (not so the baselines' own)
    trains_on_graph = False  # its model trains through the graph engine (what ``fourdb plan`` prices)

    def __repr__(self) -> str:
        return f"InputKind({self.name!r})"

    def build(self, cfg: DictConfig, db, task: Task, splits: dict):
        """The inputs a model of this kind reads: of ``db``'s rows, for the seeds of ``splits``."""
        raise NotImplementedError

    def label(self, cfg: DictConfig, db) -> dict:
        """How the run record (and so every board) names the inputs."""
        raise NotImplementedError

    def prepare(self, cfg: DictConfig, db, task: Task, splits: dict, out_dir=None, ctx=None,
                share: bool = False) -> tuple:
        """The inputs, their label and the shared-inputs note (None: nothing shared between processes)."""
        return self.build(cfg, db, task, splits), self.label(cfg, db), None

    def column_view(self, cfg: DictConfig) -> str | None:
        """The column report (``fourdb.describe``) of what it reads; None: it reads no column."""
        return None

    def log_columns(self, cfg: DictConfig, db, task: Task, data, out_dir=None) -> None:
        """Say in the run's log, in brief, which columns of each table the model reads and which it drops, and
        why; every column's line goes to ``out_dir/columns.tsv``."""
        view = self.column_view(cfg)
        if view is None:
            log.info("columns: the model reads no column, only the task's %s", self.reads_instead)
        else:
            log_view(cfg, db, task, view, self.encoders(data), out_dir)

    reads_instead = "training labels"  # what a kind that reads no column reads, for the log

    def encoders(self, data) -> dict | None:
        """The column encoders already fitted in ``data`` (the graph's), so the log reports what was read."""
        return None

    def board_name(self, inputs: dict) -> str | None:
        """The kind of input alone, from a record's ``inputs`` (boards rank methods per kind); None: not
        this kind's. Runs name their feature set under ``features``."""
        return str(inputs["features"]) if "features" in inputs else None


INPUT_KINDS: Registry[InputKind] = Registry("input kind", package="fourdb.experiment.inputs")


def kind_of(model) -> InputKind:
    """The input kind a model reads (it names it: ``Model.input_kind``)."""
    return INPUT_KINDS.get(model.input_kind)


def board_name(inputs: dict) -> str:
    """The kind of input alone (a feature set, a graph construction, or 'external'), for average ranks."""
    if inputs.get("external"):
        return "external"
    names = (kind.board_name(inputs) for _, kind in INPUT_KINDS.items())
    return next(n for n in names if n is not None)


COLUMNS_FILE = "columns.tsv"  # in the run folder: the column report in full, a line per column


def log_view(cfg: DictConfig, db, task: Task, view: str, encoders: dict | None = None, out_dir=None) -> None:
    """The log lines of column view ``view`` (a feature set's or the graph's) of a run of ``cfg``, and the
    report in full in ``out_dir`` (where given)."""
    from fourdb.describe import VIEWS, column_report, log_lines, report_frame

    if view not in VIEWS:
        log.info("columns: no column report for feature set '%s'", view)
        return
    features = OmegaConf.to_container(cfg.features, resolve=True)
    params = {k: v for k, v in features.items() if k in VIEWS[view].settings}
    uses = column_report(db, task, (view,), cfg.graph.name, encoders=encoders, **params)
    path = None
    if out_dir is not None:
        path = Path(out_dir) / COLUMNS_FILE
        atomic_write_text(path, report_frame(uses).to_csv(sep="\t", index=False))
    for line in log_lines(uses, str(path) if path else None):
        log.info("%s", line)


def feature_params(cfg: DictConfig) -> dict:
    """The run's feature set's parameters (its conf group but the name)."""
    return {k: v for k, v in OmegaConf.to_container(cfg.features, resolve=True).items() if k != "name"}


def train_val_labels(splits: dict) -> dict:
    return {s: splits[s]["label"].to_numpy() for s in ("train", "val")}


def subsample(task: Task, max_train: int | None, max_val: int | None, sample_seed: int = 0) -> dict[str, pd.DataFrame]:
    """Per-split seed frames, training and validation capped where the config asks; says so in the log.

    The subsample does not depend on the run's seed, so every seed and every model of a board trains
    and stops on the same rows (and a DFS cache made for one serves all). The test split is never
    capped: every result, including an external submission, is scored on all of it.
    """
    out = {}
    for split in SPLITS:
        frame = task.split(split)
        cap = {"train": max_train, "val": max_val}.get(split)
        if cap and len(frame) > cap:
            log.info("subsampling %s seeds: %d of %d (config max_%s_seeds)", split, cap, len(frame), split)
            frame = frame.sample(n=cap, random_state=sample_seed).sort_values(["cutoff", "node"]).reset_index(drop=True)
        out[split] = frame
    refuse_nothing_to_learn(task, out["train"])
    return out
