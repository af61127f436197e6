"""Aggregate leaderboard records into boards: mean +- std over seeds, ranks, average ranks, plots.

A board row is one *setting*: a model with its inputs and config (``config_hash``), its seeds
aggregated. Rows are compared only within one *protocol* (the same dataset parameters, e.g. the
synthetic database's size) and one training *budget* (``budget_label``). Every run is scored on the
whole test split. Boards may be read from several roots side by side; rows of two roots are never pooled.
Records made against an earlier version of a task file are kept in the jsonl but not shown.
A setting with a record made from uncommitted code changes (``git_dirty``) is marked ``*``.

Average ranks, per board family (classification, regression, recommendation) and budget, follow one rule
(``RANK_RULE``):

* the tasks are the family's tables on the dataset's default parameters, without sanity tasks
  (``sanity: true`` in the task file, e.g. a planted leak that must stay at chance);
* a method (a model on one kind of input, its best setting on each task) is ranked only if it ran
  every one of those tasks, so all ranked methods are compared on the same tasks;
* on each task the ranked methods are ranked among themselves (1 best, ties share the better rank),
  and a method's average rank is the mean of its ranks over the tasks;
* methods that ran only some of the tasks are listed below, not ranked ("ran only N of the M tasks").
"""
from __future__ import annotations

import io
import math
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.errors import FourdbError
from fourdb.experiment.inputs import board_name
from fourdb.leaderboard.curves import plot_text
from fourdb.leaderboard.schema import budget_label, protocol_label, same_splits, setting
from fourdb.leaderboard.store import ROOT_FIELD, graph_names, leaderboard_roots, load_all, record_spec, root_label
from fourdb.leaderboard.verify import COMMITTED, VERIFIED, certify_verdict, status
from fourdb.metrics import higher_is_better
from fourdb.tasks.types import TaskType
from fourdb.untrusted import inside_output, markdown_text, plain_file_name, safe_text
from fourdb.utils import atomic_write_bytes, atomic_write_text

RANK_RULE = ("Average rank, per family and training budget: over the family's tasks on each dataset's default "
             "parameters at that budget, sanity tasks left out. A method (a model on one kind of input, its best "
             "setting on each task; a run on a graph two constructions build alike, as r2n and r2ne on a database "
             "without link tables, counts for both) is ranked "
             "only if it ran every one of those tasks; on each task the ranked methods are ranked among "
             "themselves (1 best, ties share the better rank) and the ranks are averaged. Methods that ran only "
             "some of the tasks are listed below the table, not ranked.")
DIRTY_NOTE = "made with uncommitted code changes"
VERIFIED_NOTE = ("`verified` says whose numbers a row shows: `yes`, fourdb recomputed every seed's test metrics at submit "
                 "from the predictions file in its run folder (or scored the external CSV itself); `committed`, the "
                 "boards committed with fourdb, made by `leaderboards/produce.py` from the commit named, whose run "
                 "folders are not kept, so not recomputed; `no`, the record's own claim, not checked. `certify` says "
                 "`passed` only where certify's own log in the run folder was checked (or the row is committed); "
                 "a claim of passing without it shows as `unverified`.")
CELL_LIMIT = 10_000  # a table cell may list many names (a method's ranks on every task)

BOARDS = tuple(dict.fromkeys(t.family for t in TaskType))  # classification, regression, recommendation

DUCKDB_SQL = ("SELECT dataset, task, model, avg(metrics.test.auroc) AS auroc "
              "FROM read_json_auto('leaderboards/*/*.jsonl') GROUP BY ALL ORDER BY ALL")


def inputs_label(inputs: dict) -> str:
    """What a model read: its feature set, or its graph and sampler, or 'external'."""
    if inputs.get("external"):
        return "external"
    parts = []
    if "features" in inputs:
        parts.append(str(inputs["features"]))
    if "graph" in inputs:
        parts.append(f"graph {inputs['graph']}")
    sampler = inputs.get("sampler") or {}
    if sampler:
        fanouts = sampler.get("fanouts")
        fanouts = "" if fanouts is None else str(list(fanouts) if isinstance(fanouts, (list, tuple)) else fanouts)
        # the sampler's choice is its ``name`` (records before it was named so say ``strategy``)
        parts.append(f"{sampler.get('name', sampler.get('strategy', '?'))} sampler {fanouts}".strip())
    engine = inputs.get("engine") or {}
    if engine:  # how batches are made and inference is run; its speed knobs stay out of the label
        parts.append(" ".join(str(x) for x in (engine.get("name"), "engine") if x))
        if engine.get("inference"):
            parts.append(f"{engine['inference']} inference")
    rest = {k: v for k, v in inputs.items() if k not in ("features", "graph", "sampler", "engine")}
    parts.extend(f"{k}={v}" for k, v in sorted(rest.items()))
    return ", ".join(parts) or "-"


def _mean_std(values) -> tuple[float, float]:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


def fmt_mean_std(mean: float, std: float, digits: int = 4) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if not math.isnan(std) else f"{mean:.{digits}f} (1 seed)"


def budget_order(record: dict) -> tuple:
    """Budgets in order: every seed ("all") first, then most training seeds first."""
    config = record.get("config") or {}
    return tuple((config.get(k) is not None, -(config.get(k) or 0)) for k in ("max_train_seeds", "max_val_seeds"))


def epochs_cell(records: list[dict]) -> str:
    """Epochs the seeds trained, of the most allowed, and the early-stopping patience; '-' for a model
    that fits without the epoch trainer (GBDT's own early stopping is in its params)."""
    ran = [len(r["history"]) for r in records if r.get("history")]
    if not ran:
        return "-"
    trainer = (records[0].get("config") or {}).get("trainer") or {}
    span = f"{min(ran)}" if min(ran) == max(ran) else f"{min(ran)}-{max(ran)}"
    patience = trainer.get("patience")
    return f"{span} of {trainer.get('epochs', '?')}" + (f", patience {patience}" if patience is not None else "")


def certify_cell(records: list[dict]) -> str:
    """``fourdb certify``'s verdict over the seeds: passed, FAILED, unverified (a pass claimed without certify's
    own output) or not run, with counts where they differ."""
    return _counted(Counter(map(certify_verdict, records)), ("FAILED", "passed", "unverified", "not run"))


def verified_cell(records: list[dict]) -> str:
    """Whose numbers the seeds are (``verify.status``): yes, committed or no, with counts where they differ."""
    return _counted(Counter(map(status, records)), (VERIFIED, COMMITTED, "no"))


def trusted(cell: str) -> bool:
    """A row shown as fourdb's own numbers: every seed recomputed, or every seed of the committed boards."""
    return cell in (VERIFIED, COMMITTED)


def _counted(counts: Counter, order: tuple[str, ...]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{v} {counts[v]}" for v in order if counts[v])


def commit_cell(records: list[dict]) -> str:
    commits = dict.fromkeys((r.get("git_commit") or "")[:7] for r in records)
    return ", ".join(c or "unknown" for c in commits)


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in config.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def setting_cells(settings: list[dict]) -> list[str]:
    """Per setting, the config values that set it apart from the others (``settings``: each one's flat config)."""
    keys = dict.fromkeys(k for c in settings for k in c)
    differ = [k for k in keys if len({repr(c.get(k, "-")) for c in settings}) > 1]
    return [", ".join(f"{k}={c.get(k, '-')}" for k in differ) for c in settings]


def aggregate(records: list[dict]) -> list[dict]:
    """Board tables of one (dataset, task): one per protocol and training budget, each a frame of ranked settings.

    Returns dicts with dataset, task, task_type, metric, protocol, budget, spec_hash, stale (records of an
    earlier task version, its SQL or its splits, not shown), sanity (the task file says so), records (those shown) and frame.
    Records read from several roots (``ROOT_FIELD``) are never pooled across roots; a ``root`` column says
    where each row comes from.
    """
    if not records:
        return []
    first = records[0]
    dataset, task = first["dataset"], first["task"]
    current = _spec_hash(first)
    shown = [r for r in records if _spec_hash(r) in (None, r["task_spec_hash"])]
    # per protocol and root, the newest record's splits stand for today's task; records scored on other splits
    # are of an earlier version (another protocol is another database, with splits of its own)
    newest: dict[tuple, dict] = {}
    for r in shown:
        key = (protocol_label(r), r.get(ROOT_FIELD, ""))
        if not r.get("external") and (r.get("submitted_at") or "") >= (newest.get(key, {}).get("submitted_at") or ""):
            newest[key] = r
    shown = [r for r in shown if same_splits(r, newest.get((protocol_label(r), r.get(ROOT_FIELD, "")), r))]
    stale = len(records) - len(shown)
    roots = any(ROOT_FIELD in r for r in records)
    groups: dict[tuple, list[dict]] = {}
    for r in shown:
        key = (protocol_label(r), budget_label(r), r.get(ROOT_FIELD, ""), r["model"], inputs_label(r["inputs"]),
               r["config_hash"])
        groups.setdefault(key, []).append(r)
    tables: dict[tuple[str, str], list[dict]] = {}
    shown_records: dict[tuple[str, str], list[dict]] = {}
    metric = first["metric"]
    others: dict[str, None] = {}  # the task's other metrics, in order
    for (protocol, budget, root, model, inputs, chash), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        shown_records.setdefault((protocol, budget), []).extend(rs)
        metric_names = list(dict.fromkeys(k for r in rs for k in r["metrics"].get("test", {})))
        dirty = any(r.get("git_dirty") is True for r in rs)
        row = {"model": model + ("*" if dirty else ""), "inputs": inputs, "root": root, "seeds": len(rs)}
        row["_test_mean"], row["_test_std"] = _mean_std(r["metrics"]["test"].get(metric) for r in rs)
        row["_val_mean"], row["_val_std"] = _mean_std((r["metrics"].get("val") or {}).get(metric) for r in rs)
        row[f"test {metric}"] = fmt_mean_std(row["_test_mean"], row["_test_std"])
        row[f"val {metric}"] = fmt_mean_std(row["_val_mean"], row["_val_std"])
        for m in metric_names:
            if m != metric:
                others.setdefault(m, None)
                row[f"test {m}"] = fmt_mean_std(*_mean_std(r["metrics"]["test"].get(m) for r in rs))
        row["epochs"] = epochs_cell(rs)
        walls = [r["wall_seconds"] for r in rs if r.get("wall_seconds") is not None]
        row["time (s)"] = f"{np.mean(walls):.1f}" if walls else "-"
        row["test rows"] = int(rs[0]["num_seeds"]["test"])
        train, available = rs[0]["num_seeds"].get("train"), (rs[0].get("num_seeds_available") or {}).get("train")
        row["train rows"] = "-" if train is None else f"{train}/{available}" if available not in (None, train) \
            else str(train)
        row["verified"] = verified_cell(rs)
        row["certify"] = certify_cell(rs)
        row["commit"] = commit_cell(rs)
        row["config"] = chash[:8]
        # the methods the row stands for: on a database where r2ne builds r2n's graph, a row is both
        kinds = [f"graph {g}" for g in graph_names(rs[0])] or [board_name(rs[0]["inputs"])]
        row["_methods"] = [f"{model} ({k})" + (f" [{root}]" if root else "") for k in kinds]
        row["_label"], row["_root"] = (model, inputs, root), root
        row["_setting"] = _flat(setting(rs[0]))
        row["_dirty"] = dirty
        row["_seed_list"] = [r["seed"] for r in rs]
        row["_train_seeds"] = rs[0]["num_seeds"].get("train") or 0
        row["_test_values"] = [r["metrics"]["test"].get(metric) for r in rs]
        tables.setdefault((protocol, budget), []).append(row)
    out = []
    ascending = not higher_is_better(metric)
    sanity = _is_sanity(first)
    for protocol, budget in sorted(tables, key=lambda k: (k[0] != "", k[0], budget_order(shown_records[k][0]))):
        frame = pd.DataFrame(tables[(protocol, budget)])
        # one label with several settings: each row says what sets it apart (epochs, params, engine, ...)
        frame["setting"] = ""
        for _, part in frame.groupby("_label", sort=False):
            if len(part) > 1:
                frame.loc[part.index, "setting"] = setting_cells(list(part["_setting"]))
        floor = best_floor(frame, shown_records[(protocol, budget)], metric)
        frame["floor"] = ""
        if floor is not None:
            trivial = frame["inputs"] == TRIVIAL_INPUTS
            beats = frame["_test_mean"] < floor[1] if ascending else frame["_test_mean"] > floor[1]
            frame.loc[~trivial & ~beats, "floor"] = "below floor"
        frame.insert(0, "rank", frame["_test_mean"].rank(ascending=ascending, method="min").astype(int))
        frame = frame.sort_values(["rank", "model", "inputs", "root", "config"], kind="stable").reset_index(drop=True)
        extra = [f"test {m}" for m in others if f"test {m}" in frame.columns]
        order = ["rank", "model", "inputs", *(["root"] if roots else []),
                 *(["setting"] if frame["setting"].any() else []), "seeds", f"test {metric}", f"val {metric}", *extra,
                 *(["floor"] if frame["floor"].any() else []), "epochs", "time (s)", "train rows", "test rows",
                 "verified", "certify", "commit", "config"]
        frame = frame[order + [c for c in frame.columns if c.startswith("_")]]
        out.append({"dataset": dataset, "task": task, "task_type": first["task_type"], "metric": metric,
                    "protocol": protocol, "budget": budget, "spec_hash": current, "stale": stale, "sanity": sanity,
                    "records": shown_records[(protocol, budget)], "frame": frame, "floor": floor})
    return out


TRIVIAL_INPUTS = "labels"  # the trivial baselines' input: the training labels alone (fourdb.models.trivial)


def best_floor(frame: pd.DataFrame, records: list[dict], metric: str) -> tuple[str, float] | None:
    """The best trivial baseline of a board: its rows, and the ones every run records beside its model
    (``trivial`` in a record), as (name, mean test metric); None where there are none."""
    scores = {row["model"]: row["_test_mean"] for _, row in frame[frame["inputs"] == TRIVIAL_INPUTS].iterrows()}
    recorded: dict[str, list[float]] = {}
    for r in records:
        for name, m in (r.get("trivial") or {}).items():
            if (m.get("test") or {}).get(metric) is not None:
                recorded.setdefault(name, []).append(m["test"][metric])
    for name, values in recorded.items():
        scores.setdefault(name, float(np.mean(values)))
    scores = {k: v for k, v in scores.items() if np.isfinite(v)}
    if not scores:
        return None
    return (max if higher_is_better(metric) else min)(scores.items(), key=lambda kv: kv[1])


def _spec_hash(record: dict) -> str | None:
    try:
        return record_spec(record).spec_hash
    except FourdbError:  # a board whose task file is gone is still shown, unchecked
        return None


def _is_sanity(record: dict) -> bool:
    try:
        return bool(record_spec(record).sanity)
    except FourdbError:  # a board whose task file is gone counts as an ordinary task
        return False


def visible(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame.columns if not c.startswith("_")]]


@dataclass
class Ranking:
    """A board family's average ranks (see the module docstring for the rule)."""

    tasks: list[str]  # the tasks every ranked method ran
    frame: pd.DataFrame  # ranked methods: method, average rank, ranks (per task)
    unranked: dict[str, list[str]] = field(default_factory=dict)  # method -> the tasks it ran
    left_out: list[str] = field(default_factory=list)  # sanity tasks and tables on other dataset parameters

    def unranked_lines(self) -> list[str]:
        m = len(self.tasks)
        return [f"{method}: not ranked: ran only {len(ran)} of the {m} tasks (not "
                f"{', '.join(t for t in self.tasks if t not in ran)})"
                for method, ran in sorted(self.unranked.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def table_name(t: dict) -> str:
    """A board's name, as text: the renderer that shows it escapes it."""
    return f"{t['dataset']}/{t['task']}" + (f" [{t['protocol']}]" if t["protocol"] else "")


def average_ranks(tables: list[dict]) -> dict[tuple[str, str], Ranking]:
    """Per board family (classification, regression, recommendation) and training budget: average ranks over
    the tasks all ranked methods ran. Runs of another budget are another ranking, never averaged in."""
    out = {}
    by_budget = sorted(tables, key=lambda t: budget_order(t["records"][0]))
    for board, budget in dict.fromkeys((b, t["budget"]) for b in BOARDS for t in by_budget
                                       if TaskType(t["task_type"]).family == b):
        family = [t for t in tables if TaskType(t["task_type"]).family == board and t["budget"] == budget]
        counted = [t for t in family if not t.get("sanity") and not t["protocol"]]
        left_out = [table_name(t) + (" (sanity task)" if t.get("sanity") else "") for t in family
                    if t.get("sanity") or t["protocol"]]
        # method -> task -> (its best setting's mean test metric, that setting made from uncommitted code, its
        # verified cell)
        best: dict[str, dict[str, tuple[float, bool, str]]] = {}
        for t in counted:
            sign = -1.0 if higher_is_better(t["metric"]) else 1.0  # smaller is better after the sign
            for _, row in t["frame"].iterrows():
                for method in row["_methods"]:
                    have = best.setdefault(method, {}).get(table_name(t))
                    if have is None or sign * row["_test_mean"] < sign * have[0]:
                        best[method][table_name(t)] = (row["_test_mean"], bool(row["_dirty"]), row["verified"])
        tasks = [table_name(t) for t in counted]
        ranked = sorted(m for m, done in best.items() if len(done) == len(tasks))
        ranks: dict[str, dict[str, int]] = {m: {} for m in ranked}
        for t in counted:
            name = table_name(t)
            values = pd.Series([best[m][name][0] for m in ranked], index=ranked, dtype=float)
            for m, r in values.rank(ascending=not higher_is_better(t["metric"]), method="min").items():
                ranks[m][name] = int(r)
        rows = [{"method": m + ("*" if any(dirty for _, dirty, _ in best[m].values()) else ""),
                 "average rank": float(np.mean(list(ranks[m].values()))),
                 "ranks": ", ".join(f"{k}: {v}" for k, v in sorted(ranks[m].items())),
                 "verified": _rank_verified([cell for _, _, cell in best[m].values()])} for m in ranked]
        frame = pd.DataFrame(rows, columns=["method", "average rank", "ranks", "verified"])
        frame = frame.sort_values(["average rank", "method"]).reset_index(drop=True)
        frame["average rank"] = frame["average rank"].map(lambda x: f"{x:.2f}")
        unranked = {m: sorted(done) for m, done in best.items() if m not in ranks}
        out[(board, budget)] = Ranking(tasks, frame, unranked, left_out)
    return out



def _rank_verified(cells: list[str]) -> str:
    """A method's verified cell over the rows its ranks come from: one value where they agree, else ``no``
    unless every row is trusted."""
    if len(set(cells)) == 1:
        return cells[0]
    return "yes, committed" if all(map(trusted, cells)) else "no"


def markdown_table(frame: pd.DataFrame) -> str:
    """Every cell as text: nothing from a record becomes markup, a link, HTML or another row."""
    def cell(v):
        return markdown_text(v, CELL_LIMIT)

    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _slug(*parts: str) -> str:
    import re

    return "__".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p).strip("-").lstrip(".") for p in parts if p)


def _plot(plots: Path, name: str, data: bytes, written: set) -> str:
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

    frame = t["frame"].iloc[::-1]
    labels = [plot_text(f"{m} ({i})" + (f" [{r}]" if r else "")) + ("" if trusted(v) else " (unverified)")
              for m, i, r, v in zip(frame["model"], frame["inputs"], frame["_root"], frame["verified"])]
    counts = Counter(labels)
    labels = [textwrap.fill(f"{lab} #{c}" if counts[lab] > 1 else lab, 38, subsequent_indent="  ")
              for lab, c in zip(labels, frame["config"])]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.6 * len(frame)))
    y = np.arange(len(frame))
    ax.barh(y, frame["_test_mean"], xerr=frame["_test_std"].fillna(0), color="#4c72b0", alpha=0.8, capsize=3)
    for yi, values in zip(y, frame["_test_values"]):
        v = [x for x in values if x is not None]
        ax.scatter(v, [yi] * len(v), color="black", s=10, zorder=3)
    ax.set_yticks(y, labels, fontsize=8)
    arrow = "higher is better" if higher_is_better(t["metric"]) else "lower is better"
    ax.set_xlabel(f"test {t['metric']} ({arrow}); bar: mean, line: ± std, dots: seeds")
    ax.set_title(_heading(t, plot_text))
    if t["metric"] in ("auroc", "accuracy", "macro_f1", "average_precision"):
        lo = np.nanmin([x for v in frame["_test_values"] for x in v if x is not None] + [0.5])
        ax.set_xlim(max(0.0, lo - 0.05), 1.0)
    data = _png(fig)
    plt.close(fig)
    return data


def plot_ranks(board: str, budget: str, frame: pd.DataFrame) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = frame.iloc[::-1]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.6 * len(frame)))
    ax.barh(np.arange(len(frame)), frame["average rank"].astype(float), color="#55a868")
    labels = [plot_text(m) + ("" if trusted(v) else " (unverified)") for m, v in zip(frame["method"], frame["verified"])]
    ax.set_yticks(np.arange(len(frame)), [textwrap.fill(m, 38, subsequent_indent="  ") for m in labels], fontsize=8)
    ax.set_xlabel("average rank over tasks (lower is better)")
    ax.set_title(f"{board}: average rank ({budget})")
    data = _png(fig)
    plt.close(fig)
    return data


def _heading(t: dict, text=markdown_text) -> str:
    """The board's title, each name through ``text`` (markdown_text, safe_text or plot_text, as shown)."""
    return (f"{text(t['dataset'])} / {text(t['task'])}" + (f" [{text(t['protocol'])}]" if t["protocol"] else "")
            + f" ({t['budget']})")


def _note(t: dict, text=markdown_text) -> str:
    arrow = "higher is better" if higher_is_better(t["metric"]) else "lower is better"
    note = (f"{t['task_type']}; ranked by mean test {t['metric']} ({arrow}); mean ± sample std over seeds; "
            f"task spec hash `{t['spec_hash']}`")
    if t.get("floor"):
        note += (f"; floor: the best trivial baseline, {text(t['floor'][0])}, at {t['floor'][1]:.4f}: a model that does "
                 f"not beat it is marked `below floor`")
    if t.get("sanity"):
        note += "; a sanity task, left out of the average ranks"
    if t["stale"]:
        note += f"; {t['stale']} record(s) made against an earlier version of this task (its SQL, or splits other than the newest record's) are not shown"
    return note


def code_versions(records: list[dict]) -> str:
    """The git commits records were made from, with counts, e.g. "`bd25a2c` (40 records, 3 with
    uncommitted changes)"; a record without ``git_dirty`` (an older one) is not counted as dirty."""
    counts = Counter((r.get("git_commit") or "")[:7] for r in records)
    dirty = Counter((r.get("git_commit") or "")[:7] for r in records if r.get("git_dirty") is True)
    parts = []
    for commit, n in sorted(counts.items(), key=lambda kv: (not kv[0], -kv[1], kv[0])):  # unknown last
        label = f"`{commit}`" if commit else "unknown commit"
        extra = f", {dirty[commit]} with uncommitted changes" if dirty[commit] else ""
        parts.append(f"{label} ({n} record{'s' if n != 1 else ''}{extra})")
    return ", ".join(parts)


def _names(names: list[str]) -> str:
    return ", ".join(markdown_text(n) for n in names)


def _footnote(any_dirty: bool, markdown: bool) -> list[str]:
    """The footnote for names marked ``*`` ("\\*" in markdown, where "* " starts a list)."""
    if not any_dirty:
        return []
    return [("\\* " if markdown else "* ") + DIRTY_NOTE, ""]


def all_tables(roots=None) -> list[dict]:
    tables = []
    for (_, _), records in sorted(load_all(roots).items()):
        tables.extend(aggregate(records))
    return tables


def render(root=None) -> Path:
    """Write README.md and plots/*.png into ``root``, or the first of several roots, from the boards under
    all of them."""
    roots = leaderboard_roots(root)
    root = roots[0]
    tables = all_tables(roots)
    ranks = average_ranks(tables)
    plots = root / "plots"
    records = [r for t in tables for r in t["records"]]
    lines = [
        "# fourdb leaderboards", "",
        "Written by `fourdb leaderboard render` from the records in `<dataset>/<task>.jsonl`; do not edit by hand.",
        "Each row is one setting (model, inputs, config) with its seeds aggregated: mean ± sample std of the",
        "test metric, rank 1 best. A heading names the training budget, the training and validation seeds runs",
        "were capped at (\"all\" uncapped); runs of another budget are another board and another average rank.",
        "A heading with [parameters] marks runs on non-default dataset parameters, ranked only among themselves.",
        "`setting` says what sets apart rows of one model and inputs; `epochs` the epochs the seeds trained, of",
        "the most allowed, and the early-stopping patience; `time (s)` the mean wall time of one run (load,",
        "features or graph, fit, evaluate); `train rows` how many training rows it used of those the task has;",
        "`certify` the verdict of `fourdb certify` (passed, FAILED, unverified or not run); `commit` the code the",
        f"records were made from. A model marked \\* has a record {DIRTY_NOTE}. Add results with",
        "`fourdb leaderboard submit RUN_DIR...` (see the project README).", "",
        *textwrap.wrap(VERIFIED_NOTE, 110), "",
        RANK_RULE, "",
    ]
    if len(roots) > 1:
        lines += [f"Boards read from {', '.join(markdown_text(root_label(r)) for r in roots)}; `root` says where each row "
                  "comes from, and a method on another root is another method.", ""]
    if records:
        lines += [f"Records from code version(s): {code_versions(records)}.", ""]
    written = set()
    for (board, budget), ranking in ranks.items():
        over = f"Over {len(ranking.tasks)} task(s): {_names(ranking.tasks)}." if ranking.tasks else \
            "No task on default dataset parameters to average over."
        lines += [f"## {board.capitalize()}: average rank ({budget})", "",
                  over + (f" Left out: {_names(ranking.left_out)}." if ranking.left_out else ""), ""]
        if len(ranking.frame):
            lines += [markdown_table(ranking.frame), ""]
            name = _plot(plots, f"{board}_average_rank__{_slug(budget)}.png", plot_ranks(board, budget, ranking.frame),
                         written)
            lines += [f"![{board} average rank](plots/{name})", ""]
        elif ranking.tasks:
            lines += ["No method ran all of them.", ""]
        if ranking.unranked:
            lines += [f"- {markdown_text(line, CELL_LIMIT)}" for line in ranking.unranked_lines()] + [""]
        lines += _footnote(ranking.frame["method"].str.endswith("*").any(), markdown=True)
    if not tables:
        lines += ["No results yet.", ""]
    for t in tables:
        lines += [f"## {_heading(t)}", "", _note(t), "", markdown_table(visible(t["frame"])), ""]
        lines += _footnote(t["frame"]["_dirty"].any(), markdown=True)
        name = _plot(plots, _slug(t["dataset"], t["task"], t["protocol"], t["budget"]) + ".png", plot_table(t), written)
        lines += [f"![{_heading(t)}](plots/{name})", ""]
    lines += curves_section(tables, plots, written)
    lines += [
        "## Query the records", "",
        "Every line of every `*.jsonl` is one run record (see `fourdb/leaderboard/schema.py`). With DuckDB,",
        "from the repository root:", "",
        "```bash", f'duckdb -c "{DUCKDB_SQL}"', "```", "",
        "```python", "import duckdb",
        f'print(duckdb.sql("{DUCKDB_SQL}"))', "```", "",
    ]
    if plots.exists():
        for old in plots.glob("*.png"):
            if old.name not in written:
                old.unlink()
    out = root / "README.md"
    atomic_write_text(out, "\n".join(lines))
    return out


def curves_section(tables: list[dict], plots: Path, written: set) -> list[str]:
    """Learning curves (plots/curve__<dataset>__<task>.png) and, per family, the tasks whose order of methods
    changes with the training budget."""
    from fourdb.leaderboard.curves import plot_curve, task_curves

    curves = task_curves(tables, markdown_text)
    if not curves:
        return []
    lines = ["## Learning curves", "",
             "Each method (its best setting by validation) on every budget it ran, at the training seeds it used: "
             "test mean ± std over seeds. Where two methods swap places between two budgets that both ran them, "
             "the order is listed per budget (best first). A task whose training split is no larger than a budget's "
             "cap has no run of its own on that budget: its full-data run is that point.", ""]
    for family in BOARDS:
        mine = {k: c for k, c in curves.items() if TaskType(c["task_type"]).family == family}
        if not mine:
            continue
        lines += [f"### {family.capitalize()}", ""]
        for (dataset, task), c in sorted(mine.items()):
            lines.append(f"- {markdown_text(dataset)}/{markdown_text(task)}: " + ("; ".join(c["changes"]) if c["changes"] else
                                                      "the same order on every budget"))
        lines.append("")
        for (dataset, task), c in sorted(mine.items()):
            title = plot_text(f"{dataset}/{task}: learning curves")
            name = _plot(plots, f"curve__{_slug(dataset, task)}.png", plot_curve(c["points"], title, c["metric"]), written)
            lines += [f"![{markdown_text(dataset)}/{markdown_text(task)} learning curves](plots/{name})", ""]
    return lines


def show(dataset: str, task: str, root=None) -> str:
    """One board as text for the terminal, from one root or several."""
    from fourdb.leaderboard.boards import board_path

    roots = leaderboard_roots(root)
    records = [r for rs in load_all(roots, (dataset, task)).values() for r in rs]
    if not records:
        raise FourdbError(f"no results for {safe_text(dataset)}/{safe_text(task)} (no records in "
                          f"{', '.join(str(board_path(r, dataset, task)) for r in roots)})")
    blocks = []
    for t in aggregate(records):
        # every cell one printable line: no control character from a record reaches the terminal
        frame = visible(t["frame"]).map(lambda v: safe_text(v, CELL_LIMIT) if isinstance(v, str) else v)
        frame.columns = [safe_text(c) for c in frame.columns]
        blocks.append("\n".join([_heading(t, safe_text), _note(t, safe_text), "", frame.to_string(index=False),
                                  *_footnote(t["frame"]["_dirty"].any(), markdown=False)]).rstrip())
    return "\n\n".join(blocks) if blocks else \
        f"{safe_text(dataset)}/{safe_text(task)}: all records are of an earlier task version"
