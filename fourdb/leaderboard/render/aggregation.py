"""Board tables from records: a row per setting (its cells and a ``RowSummary``), ranked per protocol, training
budget and regime (supervised or in-context, never ranked together), and the average ranks of a board family (the
rule is in ``fourdb.leaderboard.render``); each row's test interval and marks (``render.uncertainty``, ``marks``)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fourdb.errors import FourdbError
from fourdb.experiment.inputs import board_name
from fourdb.contracts import SUPERVISED
from fourdb.leaderboard.marks import CUT_SHORT, cut_short, fewer_seeds, regime
from fourdb.leaderboard.render.uncertainty import (
    Interval,
    interval_text,
    rank_interval_text,
    rank_intervals,
    row_interval,
    tie_cells,
)
from fourdb.leaderboard.schema import budget_label, protocol_label, same_splits, setting
from fourdb.leaderboard.store import ROOT_FIELD, graph_names, record_spec
from fourdb.leaderboard.verify import BOOTSTRAP, COMMITTED, VERIFIED, certify_verdict, status
from fourdb.metrics import higher_is_better
from fourdb.tasks.types import TaskType
from fourdb.untrusted import markdown_text

BOARDS = tuple(dict.fromkeys(t.family for t in TaskType))  # classification, regression, recommendation


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


@dataclass
class RowSummary:
    """What a board row stands for beyond its cells: the numbers it is ranked, plotted and averaged by."""

    test_mean: float
    test_std: float
    val_mean: float
    val_std: float
    test_values: list  # each seed's test metric (None: not recorded)
    methods: list[str]  # the methods the row stands for in the average ranks
    label: tuple[str, str, str]  # (model, inputs, root): rows of one label differ by their setting
    root: str
    setting: dict  # its flat config, which sets it apart from the label's other rows
    dirty: bool  # made with uncommitted code changes
    seeds: list[int]
    train_seeds: int
    interval: Interval | None = None  # the 95% interval of the test mean (None: one seed, no replicates)


def aggregate(records: list[dict]) -> list[dict]:
    """Board tables of one (dataset, task): one per protocol and training budget, each a frame of ranked settings.

    Returns dicts with dataset, task, task_type, metric, protocol, budget, spec_hash, stale (records of an
    earlier task version, its SQL or its splits, not shown), sanity (the task file says so), records (those
    shown), frame (the cells shown), summaries (a ``RowSummary`` per row of the frame, in its order) and floor.
    Records read from several roots (``ROOT_FIELD``) are never pooled across roots; a ``root`` column says
    where each row comes from.
    """
    if not records:
        return []
    first = records[0]
    shown = _current_records(records)
    roots = any(ROOT_FIELD in r for r in records)
    groups: dict[tuple, list[dict]] = {}
    for r in shown:
        # a regime is a table of its own: a model that learns in context is never ranked beside trained ones
        key = (protocol_label(r), budget_label(r), regime(r), r.get(ROOT_FIELD, ""), r["model"],
               inputs_label(r["inputs"]), r["config_hash"])
        groups.setdefault(key, []).append(r)
    tables: dict[tuple[str, str, str], list[tuple[dict, RowSummary]]] = {}
    shown_records: dict[tuple[str, str, str], list[dict]] = {}
    metric = first["metric"]
    others: dict[str, None] = {}  # the task's other metrics, in order
    for (protocol, budget, way, root, model, inputs, chash), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["seed"])
        shown_records.setdefault((protocol, budget, way), []).extend(rs)
        tables.setdefault((protocol, budget, way), []).append(_row(rs, metric, others, root, model, inputs, chash))
    out = []
    for key in sorted(tables, key=lambda k: (k[0] != "", k[0], budget_order(shown_records[k][0]),
                                             k[2] != SUPERVISED, k[2])):
        rows, summaries = zip(*tables[key])
        frame, summaries, floor = _board_frame(list(rows), list(summaries), shown_records[key], metric, others, roots)
        out.append({"dataset": first["dataset"], "task": first["task"], "task_type": first["task_type"],
                    "metric": metric, "protocol": key[0], "budget": key[1], "regime": key[2],
                    "spec_hash": _spec_hash(first), "stale": len(records) - len(shown), "sanity": _is_sanity(first),
                    "records": shown_records[key], "frame": frame, "summaries": summaries, "floor": floor})
    return out


def _current_records(records: list[dict]) -> list[dict]:
    """The records of today's task: its spec, and per protocol and root, the newest record's splits (records
    scored on other splits are of an earlier version; another protocol is another database, with splits of
    its own)."""
    shown = [r for r in records if _spec_hash(r) in (None, r["task_spec_hash"])]
    newest: dict[tuple, dict] = {}
    for r in shown:
        key = (protocol_label(r), r.get(ROOT_FIELD, ""))
        if not r.get("external") and (r.get("submitted_at") or "") >= (newest.get(key, {}).get("submitted_at") or ""):
            newest[key] = r
    return [r for r in shown if same_splits(r, newest.get((protocol_label(r), r.get(ROOT_FIELD, "")), r))]


def _row(rs: list[dict], metric: str, others: dict[str, None], root: str, model: str, inputs: str,
         chash: str) -> tuple[dict, RowSummary]:
    """One setting's cells over its seeds' records ``rs``, and its summary; the task's other metrics it
    recorded are added to ``others``."""
    metric_names = list(dict.fromkeys(k for r in rs for k in r["metrics"].get("test", {})))
    dirty = any(r.get("git_dirty") is True for r in rs)
    test_mean, test_std = _mean_std(r["metrics"]["test"].get(metric) for r in rs)
    val_mean, val_std = _mean_std((r["metrics"].get("val") or {}).get(metric) for r in rs)
    interval = seeds_interval(rs, metric)
    row = {"model": model + ("*" if dirty else ""), "inputs": inputs, "root": root, "seeds": len(rs),
           f"test {metric}": fmt_mean_std(test_mean, test_std) + interval_text(interval),
           f"val {metric}": fmt_mean_std(val_mean, val_std),
           "marks": "; ".join(m for m in (fewer_seeds(len(rs)), CUT_SHORT if any(map(cut_short, rs)) else "") if m)}
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
    summary = RowSummary(test_mean, test_std, val_mean, val_std, [r["metrics"]["test"].get(metric) for r in rs],
                         [f"{model} ({k})" + (f" [{root}]" if root else "") for k in kinds], (model, inputs, root),
                         root, _flat(setting(rs[0])), dirty, [r["seed"] for r in rs],
                         rs[0]["num_seeds"].get("train") or 0, interval)
    return row, summary


def seeds_interval(rs: list[dict], metric: str) -> Interval | None:
    """The 95% interval of a row's test mean over its seeds' records ``rs``: a record's replicates count where its
    numbers are fourdb's own (recomputed at submit, or the committed boards'), as its test metric is shown."""
    boots = [r.get(BOOTSTRAP) if trusted(status(r)) else None for r in rs]
    return row_interval([r["metrics"]["test"].get(metric) for r in rs], boots, metric)


def _board_frame(rows: list[dict], summaries: list[RowSummary], records: list[dict], metric: str,
                 others: dict[str, None], roots: bool) -> tuple[pd.DataFrame, list[RowSummary], tuple | None]:
    """One board's rows ranked: the frame of cells, the summaries in its order, and the best trivial floor."""
    ascending = not higher_is_better(metric)
    frame = pd.DataFrame(rows)
    # one label with several settings: each row says what sets it apart (epochs, params, engine, ...)
    frame["setting"] = ""
    by_label: dict[tuple, list[int]] = {}
    for i, summary in enumerate(summaries):
        by_label.setdefault(summary.label, []).append(i)
    for at in by_label.values():
        if len(at) > 1:
            frame.loc[at, "setting"] = setting_cells([summaries[i].setting for i in at])
    test_mean = pd.Series([s.test_mean for s in summaries], dtype=float)
    floor = best_floor(frame, test_mean, records, metric)
    frame["floor"] = ""
    if floor is not None:
        trivial = frame["inputs"].isin(TRIVIAL_INPUTS)
        beats = test_mean < floor[1] if ascending else test_mean > floor[1]
        frame.loc[~trivial & ~beats, "floor"] = "below floor"
    # validation chooses, test reports: rows are ranked by their mean validation metric; a row without one
    # (an external submission: test predictions only) is shown last, unranked ("-")
    order = validation_rank(summaries, metric)
    frame.insert(0, "rank", order)
    frame["_order"] = order.fillna(math.inf)
    frame = frame.sort_values(["_order", "model", "inputs", "root", "config"], kind="stable").drop(columns="_order")
    frame["rank"] = [UNRANKED if math.isnan(r) else int(r) for r in frame["rank"]]
    summaries = [summaries[i] for i in frame.index]
    frame = frame.reset_index(drop=True)
    # the leader is the row validation ranks first; test intervals say which rows it does not clearly beat
    frame["tied"] = tie_cells([s.interval for s in summaries], 0 if len(frame) and frame["rank"][0] == 1 else None)
    extra = [f"test {m}" for m in others if f"test {m}" in frame.columns]
    order = ["rank", "model", "inputs", *(["root"] if roots else []),
             *(["setting"] if frame["setting"].any() else []), "seeds", f"test {metric}", "tied", f"val {metric}",
             *extra, *(["floor"] if frame["floor"].any() else []), *(["marks"] if frame["marks"].any() else []),
             "epochs", "time (s)", "train rows", "test rows", "verified", "certify", "commit", "config"]
    return frame[order], summaries, floor


UNRANKED = "-"  # the rank of a row without a validation metric, which nothing can choose


def validation_rank(summaries: list[RowSummary], metric: str) -> pd.Series:
    """Each row's rank by mean validation metric (1 best, ties share the better rank; NaN: no validation)."""
    val = pd.Series([s.val_mean for s in summaries], dtype=float)
    return val.rank(ascending=not higher_is_better(metric), method="min")


def val_better(a: float, b: float, metric: str) -> bool:
    """``a`` is a better validation metric than ``b`` (a NaN never is)."""
    return not math.isnan(a) and (math.isnan(b) or (a > b if higher_is_better(metric) else a < b))


# the floor's inputs: the training labels alone (the trivial baselines, fourdb.models.trivial) and, on a
# recommendation board, the link history alone (popularity and repeat, fourdb.models.popularity)
TRIVIAL_INPUTS = ("labels", "history")


def best_floor(frame: pd.DataFrame, test_mean: pd.Series, records: list[dict], metric: str) -> tuple[str, float] | None:
    """The best trivial baseline of a board: its rows (``test_mean``: each row's mean test metric), and the ones
    every run records beside its model (``trivial`` in a record), as (name, mean test metric); None where there
    are none."""
    scores = {model: mean for model, inputs, mean in zip(frame["model"], frame["inputs"], test_mean)
              if inputs in TRIVIAL_INPUTS}
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


@dataclass
class Ranking:
    """A board family's average ranks (see the module docstring for the rule)."""

    tasks: list[str]  # the tasks every ranked method ran
    frame: pd.DataFrame  # ranked methods: method, average rank, ranks (per task)
    unranked: dict[str, list[str]] = field(default_factory=dict)  # method -> the tasks it ran
    left_out: list[str] = field(default_factory=list)  # sanity tasks and tables on other dataset parameters
    # method as shown -> (average rank by test means, its 95% interval), which plots draw
    test_ranks: dict[str, tuple[float, float, float]] = field(default_factory=dict)

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
    for board, budget in dict.fromkeys((b, ranked_budget(t)) for b in BOARDS for t in by_budget
                                       if TaskType(t["task_type"]).family == b):
        family = [t for t in tables if TaskType(t["task_type"]).family == board and ranked_budget(t) == budget]
        counted = [t for t in family if not t.get("sanity") and not t["protocol"]]
        left_out = [table_name(t) + (" (sanity task)" if t.get("sanity") else "") for t in family
                    if t.get("sanity") or t["protocol"]]
        best = best_settings(counted)
        tasks = [table_name(t) for t in counted]
        ranked = sorted(m for m, done in best.items() if len(done) == len(tasks))
        ranks: dict[str, dict[str, int]] = {m: {} for m in ranked}
        for t in counted:
            name = table_name(t)
            values = pd.Series([best[m][name].val_mean for m in ranked], index=ranked, dtype=float)
            for m, r in values.rank(ascending=not higher_is_better(t["metric"]), method="min").items():
                ranks[m][name] = int(r)
        on_test = _test_ranks(counted, best, ranked)
        rows = [{"method": m + ("*" if any(c.dirty for c in best[m].values()) else ""),
                 "average rank": float(np.mean(list(ranks[m].values()))),
                 "test rank [95% interval]": rank_interval_text(on_test.get(m)),
                 "ranks": ", ".join(f"{k}: {v}" for k, v in sorted(ranks[m].items())),
                 "verified": _rank_verified([c.verified for c in best[m].values()])} for m in ranked]
        frame = pd.DataFrame(rows, columns=["method", "average rank", "test rank [95% interval]", "ranks", "verified"])
        frame = frame.sort_values(["average rank", "method"]).reset_index(drop=True)
        frame["average rank"] = frame["average rank"].map(lambda x: f"{x:.2f}")
        unranked = {m: sorted(done) for m, done in best.items() if m not in ranks}
        test_ranks = {row["method"]: on_test[m] for row, m in zip(rows, ranked) if m in on_test}
        out[(board, budget)] = Ranking(tasks, frame, unranked, left_out, test_ranks)
    return out

def _test_ranks(tables: list[dict], best: dict, methods: list[str]) -> dict[str, tuple[float, float, float]]:
    """Per method, its average rank by its chosen rows' test means over ``tables``, and that rank's 95% interval
    (``uncertainty.rank_intervals``): how firm the order is on test, beside the validation rank."""
    if not methods:
        return {}
    chosen = [(t["metric"], {m: (best[m][table_name(t)].test_mean, best[m][table_name(t)].interval) for m in methods})
              for t in tables]
    return rank_intervals(chosen)


@dataclass
class Chosen:
    """A method's setting on one task, chosen by validation: what the average rank counts of it."""

    val_mean: float
    dirty: bool  # made from uncommitted code
    verified: str  # its verified cell
    test_mean: float = math.nan  # reported beside the rank, never choosing: the test rank's interval
    interval: Interval | None = None


def best_settings(tables: list[dict]) -> dict[str, dict[str, Chosen]]:
    """method -> task -> its setting of best mean validation metric. Validation chooses, test reports: a row
    without a validation metric (an external submission) cannot be chosen, so it is not counted as run."""
    best: dict[str, dict[str, Chosen]] = {}
    for t in tables:
        for verified, summary in zip(t["frame"]["verified"], t["summaries"]):
            if math.isnan(summary.val_mean):
                continue
            for method in summary.methods:
                have = best.setdefault(method, {}).get(table_name(t))
                if have is None or val_better(summary.val_mean, have.val_mean, t["metric"]):
                    best[method][table_name(t)] = Chosen(summary.val_mean, summary.dirty, verified,
                                                         summary.test_mean, summary.interval)
    return best


def _rank_verified(cells: list[str]) -> str:
    """A method's verified cell over the rows its ranks come from: one value where they agree, else ``no``
    unless every row is trusted."""
    if len(set(cells)) == 1:
        return cells[0]
    return "yes, committed" if all(map(trusted, cells)) else "no"


def heading(t: dict, text=markdown_text) -> str:
    """The board's title, each name through ``text`` (markdown_text, safe_text or plot_text, as shown)."""
    return (f"{text(t['dataset'])} / {text(t['task'])}" + (f" [{text(t['protocol'])}]" if t["protocol"] else "")
            + f" ({ranked_budget(t)})")


def ranked_budget(t: dict) -> str:
    """A table's budget as its board's heading and its average ranks name it: the regime beside it, unless
    supervised (so in-context tables are averaged among themselves only)."""
    way = t.get("regime", SUPERVISED)
    return t["budget"] if way == SUPERVISED else f"{t['budget']}; {way}"
