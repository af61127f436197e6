"""Learning curves: a task's methods across training budgets, and where their order changes.

A point is one method (a model on one kind of input) on one budget's board of the task (default dataset
parameters), at the training seeds its runs used: the best setting by mean validation metric, its test
mean ± std over seeds and its 95% interval (``fourdb.leaderboard.render.uncertainty``). Validation chooses, test
reports: the order of methods on a budget is by that validation mean too. Methods on fewer than two budgets make
no curve. A curve is of supervised runs: models that learn in context train on no budget.
"""
from __future__ import annotations

import pandas as pd

from fourdb.contracts import SUPERVISED
from fourdb.metrics import higher_is_better
from fourdb.untrusted import safe_text


def plot_text(value, limit: int = 200) -> str:
    """Text from a record as a plot label: one line, and a ``$`` shown as itself (matplotlib would read what
    lies between two as mathtext, and stop on what it cannot parse)."""
    return safe_text(value, limit).replace("$", r"\$")


def curve_points(tables: list[dict]) -> pd.DataFrame:
    """One row per (method, budget) of one task's board tables: train seeds, validation mean (what chose the
    setting and orders the methods), test mean and std, seeds."""
    rows = []
    for t in tables:
        if t["protocol"] or t.get("regime", SUPERVISED) != SUPERVISED:
            continue
        ascending = not higher_is_better(t["metric"])
        # per method (a row's first), its setting of best mean validation metric (missing: last)
        by_method: dict[str, list[int]] = {}
        for i, summary in enumerate(t["summaries"]):
            by_method.setdefault(summary.methods[0], []).append(i)
        for method, at in by_method.items():
            val = pd.Series([t["summaries"][i].val_mean for i in at], index=at, dtype=float)
            i = val.sort_values(ascending=ascending, na_position="last").index[0]
            best = t["summaries"][i]
            interval = best.interval
            rows.append({"method": method, "budget": t["budget"], "train_seeds": int(best.train_seeds),
                         "val_mean": best.val_mean, "test_mean": best.test_mean, "test_std": best.test_std,
                         "test_low": interval.low if interval else float("nan"),
                         "test_high": interval.high if interval else float("nan"), "seeds": int(t["frame"]["seeds"][i]),
                         "trusted": t["frame"]["verified"][i] in ("yes", "committed")})
    points = pd.DataFrame(rows, columns=["method", "budget", "train_seeds", "val_mean", "test_mean", "test_std",
                                         "test_low", "test_high", "seeds", "trusted"])
    on = points.groupby("method")["budget"].transform("nunique") if len(points) else pd.Series(dtype=int)
    return points[on >= 2].sort_values(["method", "train_seeds"]).reset_index(drop=True)


def order_changes(points: pd.DataFrame, metric: str, text=str) -> list[str]:
    """Per budget, its curve methods (each through ``text``, as shown) best first by validation, when two methods swap places
    between two budgets that both ran them (so a budget run for only some of the methods cannot hide a swap
    between the others)."""
    from itertools import combinations

    if points.empty:
        return []
    budgets = points.groupby("budget")["train_seeds"].max().sort_values().index
    orders = {b: list(points[points["budget"] == b].sort_values("val_mean", ascending=not higher_is_better(metric))
                      ["method"]) for b in budgets}
    rank = {b: {m: i for i, m in enumerate(o)} for b, o in orders.items()}
    swapped = any((rank[x][m] < rank[x][n]) != (rank[y][m] < rank[y][n])
                  for x, y in combinations(budgets, 2) for m, n in combinations(rank[x].keys() & rank[y].keys(), 2))
    return [f"{b}: {' > '.join(map(text, o))}" for b, o in orders.items()] if swapped else []


def plot_curve(points: pd.DataFrame, title: str, metric: str) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for method, part in points.groupby("method"):
        reach = [(part["test_mean"] - part["test_low"]).fillna(0).clip(lower=0),
                 (part["test_high"] - part["test_mean"]).fillna(0).clip(lower=0)]
        ax.errorbar(part["train_seeds"], part["test_mean"], yerr=reach, marker="o", capsize=3,
                    label=plot_text(method) + ("" if (part["seeds"] > 1).all() else " (some points 1 seed)")
                    + ("" if part["trusted"].all() else " (unverified)"))
    ax.set_xscale("log")
    arrow = "higher is better" if higher_is_better(metric) else "lower is better"
    ax.set_xlabel("training seeds (log)")
    ax.set_ylabel(f"test {metric} ({arrow}); mean and 95% interval")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def task_curves(tables: list[dict], text=str) -> dict[tuple[str, str], dict]:
    """Per (dataset, task) with a curve: its points, its metric, family and the order changes (names through
    ``text``)."""
    by_task: dict[tuple[str, str], list[dict]] = {}
    for t in tables:
        by_task.setdefault((t["dataset"], t["task"]), []).append(t)
    out = {}
    for key, ts in by_task.items():
        points = curve_points(ts)
        if len(points):
            out[key] = {"points": points, "metric": ts[0]["metric"], "task_type": ts[0]["task_type"],
                        "changes": order_changes(points, ts[0]["metric"], text)}
    return out
