"""A board's plots: each table's settings as bars (test mean, its 95% interval, each seed) in the board's
validation order, a family's average ranks (with the test rank's interval), written once per name under the boards'
plots folder."""
from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.leaderboard.curves import plot_text
from fourdb.leaderboard.render.aggregation import heading, trusted
from fourdb.leaderboard.render.uncertainty import SEEDS_ONLY
from fourdb.metrics import higher_is_better
from fourdb.untrusted import inside_output, plain_file_name
from fourdb.utils import atomic_write_bytes


def slug(*parts: str) -> str:
    import re

    return "__".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p).strip("-").lstrip(".") for p in parts if p)


def write_plot(plots: Path, name: str, data: bytes, written: set) -> str:
    """Write a plot named from record names: a plain file name, inside the plots folder."""
    plain_file_name(name, "plot", "file name")
    atomic_write_bytes(inside_output(plots, name, "plot"), data)
    written.add(name)
    return name


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def plot_table(t: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from collections import Counter

    frame, summaries = t["frame"].iloc[::-1], t["summaries"][::-1]
    labels = [plot_text(f"{m} ({i})" + (f" [{s.root}]" if s.root else "")) + ("" if trusted(v) else " (unverified)")
              for m, i, s, v in zip(frame["model"], frame["inputs"], summaries, frame["verified"])]
    counts = Counter(labels)
    labels = [textwrap.fill(f"{lab} #{c}" if counts[lab] > 1 else lab, 38, subsequent_indent="  ")
              for lab, c in zip(labels, frame["config"])]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.6 * len(frame)))
    y = np.arange(len(frame))
    means = np.array([s.test_mean for s in summaries], dtype=float)
    # the 95% interval, not the std, is what tells rows apart; a row without one (one seed) has no line
    reach = np.array([[m - s.interval.low, s.interval.high - m] if s.interval else [0, 0]
                      for m, s in zip(means, summaries)], dtype=float).T
    ax.barh(y, means, xerr=np.nan_to_num(reach.clip(min=0)), color="#4c72b0", alpha=0.8, capsize=3)
    for yi, values in zip(y, (s.test_values for s in summaries)):
        v = [x for x in values if x is not None]
        ax.scatter(v, [yi] * len(v), color="black", s=10, zorder=3)
    ax.set_yticks(y, labels, fontsize=8)
    arrow = "higher is better" if higher_is_better(t["metric"]) else "lower is better"
    # the rows keep the board's order, which validation chose: the bars report test, they do not rank
    seeds_only = any(s.interval and s.interval.kind == SEEDS_ONLY for s in summaries)
    ax.set_xlabel(f"test {t['metric']} ({arrow}); bar: mean, line: 95% interval"
                  + (" (some over seeds only)" if seeds_only else "") + ", dots: seeds; ordered by validation")
    ax.set_title(heading(t, plot_text))
    if t["metric"] in ("auroc", "accuracy", "macro_f1", "average_precision"):
        lo = np.nanmin([x for s in summaries for x in s.test_values if x is not None] + [0.5])
        ax.set_xlim(max(0.0, lo - 0.05), 1.0)
    data = _png(fig)
    plt.close(fig)
    return data


def plot_ranks(board: str, budget: str, frame: pd.DataFrame, test_ranks: dict | None = None) -> bytes:
    """Bars: each method's average rank (validation's); where given, ``test_ranks`` (method -> average rank by
    test means, its 95% interval) as a point with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = frame.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.6 * len(frame)))
    ax.barh(np.arange(len(frame)), frame["average rank"].astype(float), color="#55a868", label="average rank")
    on_test = [(i, test_ranks[m]) for i, m in enumerate(frame["method"]) if m in (test_ranks or {})]
    if on_test:
        at, ranks = zip(*on_test)
        mean, low, high = np.array(ranks, dtype=float).T
        ax.errorbar(mean, at, xerr=[mean - low, high - mean], fmt="o", color="black", capsize=3,
                    label="test rank, 95% interval")
        ax.legend(fontsize=7, loc="lower right")
    labels = [plot_text(m) + ("" if trusted(v) else " (unverified)") for m, v in zip(frame["method"], frame["verified"])]
    ax.set_yticks(np.arange(len(frame)), [textwrap.fill(m, 38, subsequent_indent="  ") for m in labels], fontsize=8)
    ax.set_xlabel("average rank over tasks (lower is better)")
    ax.set_title(f"{board}: average rank ({budget})")
    data = _png(fig)
    plt.close(fig)
    return data
