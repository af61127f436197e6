"""Aggregate leaderboard records into boards: mean +- std over seeds with the test mean's 95% interval, ranks, ties
with the leader and marks (``render.uncertainty``, ``leaderboard.marks``; ``UNCERTAINTY_NOTE`` says how), average
ranks with an interval, plots.

A board row is one *setting*: a model with its inputs and config (``config_hash``), its seeds
aggregated. Rows are compared only within one *protocol* (the same dataset parameters, e.g. the
synthetic database's size) and one training *budget* (``budget_label``). Every run is scored on the
whole test split. Boards may be read from several roots side by side; rows of two roots are never pooled.
Records made against an earlier version of a task file are kept in the jsonl but not shown.
A setting with a record made from uncommitted code changes (``git_dirty``) is marked ``*``.

Validation chooses, test reports (``SELECTION_RULE``): rows are ranked, and a method's setting is chosen, by
the mean validation metric over seeds; the test metric is shown beside it and never decides anything.

Average ranks, per board family (classification, regression, recommendation) and budget, follow one rule
(``RANK_RULE``):

* the tasks are the family's tables on the dataset's default parameters, without sanity tasks
  (``sanity: true`` in the task file, e.g. a planted leak that must stay at chance);
* a method (a model on one kind of input, its setting of best mean validation metric on each task) is
  ranked only if it ran every one of those tasks, so all ranked methods are compared on the same tasks;
* on each task the ranked methods are ranked among themselves by mean validation metric (1 best, ties
  share the better rank), and a method's average rank is the mean of its ranks over the tasks;
* methods that ran only some of the tasks are listed below, not ranked ("ran only N of the M tasks").
"""
from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pandas as pd

from fourdb.errors import FourdbError
from fourdb.leaderboard.curves import plot_text
from fourdb.leaderboard.marks import CUT_SHORT
from fourdb.leaderboard.render.aggregation import BOARDS, aggregate, average_ranks, heading
from fourdb.leaderboard.render.uncertainty import SEEDS_ONLY_MARK
from fourdb.leaderboard.render.plots import plot_ranks, plot_table, slug, write_plot
from fourdb.leaderboard.store import leaderboard_roots, load_all, root_label
from fourdb.metrics import higher_is_better
from fourdb.tasks.types import TaskType
from fourdb.untrusted import markdown_text, safe_text
from fourdb.utils import atomic_write_text

SELECTION_RULE = ("Validation chooses, test reports: a board's rows are ordered and ranked by mean validation "
                  "metric over seeds, a method's setting (in the average ranks and the learning curves) is its "
                  "validation-best one, and the test metric is shown beside it, never used to choose. A row without "
                  "a validation metric (an external submission) is shown unranked (`-`).")
RANK_RULE = ("Average rank, per family and training budget: over the family's tasks on each dataset's default "
             "parameters at that budget, sanity tasks left out. A method (a model on one kind of input, its "
             "setting of best mean validation metric on each task; a run on a graph two constructions build alike, as r2n and r2ne on a database "
             "without link tables, counts for both) is ranked "
             "only if it ran every one of those tasks; on each task the ranked methods are ranked among "
             "themselves by mean validation metric (1 best, ties share the better rank) and the ranks are averaged. Methods that ran only "
             "some of the tasks are listed below the table, not ranked.")
DIRTY_NOTE = "made with uncommitted code changes"
VERIFIED_NOTE = ("`verified` says whose numbers a row shows: `yes`, fourdb recomputed every seed's test metrics at submit "
                 "from the predictions file in its run folder (or scored the external CSV itself); `committed`, the "
                 "boards committed with fourdb, made by `leaderboards/produce.py` from the commit named, whose run "
                 "folders are not kept, so not recomputed; `no`, the record's own claim, not checked. `certify` says "
                 "`passed` only where certify's own log in the run folder was checked (or the row is committed); "
                 "a claim of passing without it shows as `unverified`.")
UNCERTAINTY_NOTE = ("Which differences are real: `[low, high]` after a test mean ± std is the 95% interval of the row's "
                    "test mean, a two-level bootstrap: each of 200 replicates draws the row's seeds with replacement, "
                    "takes each drawn seed's test metric on one resample of the test rows (the same resamples for every "
                    "model on the task: paired) and averages; the interval is the 2.5th to 97.5th percentile. "
                    f"`{SEEDS_ONLY_MARK}` marks an interval over seeds only, where a seed carries no test-row replicates "
                    "(records made before fourdb stored them, as every committed record, or records it could not "
                    "recompute); a row of one seed without them has none. `tied`: `leader` is the row validation ranks "
                    "first, `tied` a row whose test interval overlaps the leader's (test does not tell the two apart), "
                    "`-` where either has no interval. `marks`: `N of 3 seeds` for a row with fewer seeds than the "
                    f"boards' standard of 3, `{CUT_SHORT}` for a row with a seed whose training ran every epoch allowed and "
                    "was still improving on validation at the last. In the average ranks, `test rank [95% interval]` is "
                    "a method's average rank with its chosen rows ranked by test mean, and its interval over the same "
                    "replicates (each draws every row's mean as its interval does); it reports, validation's average "
                    "rank orders. A regime is its own board and its own average rank: models that learn in context (no "
                    "gradient step on the database; `; in-context` in the heading) are never ranked with trained ones.")
CELL_LIMIT = 10_000  # a table cell may list many names (a method's ranks on every task)

DUCKDB_SQL = ("SELECT dataset, task, model, avg(metrics.test.auroc) AS auroc "
              "FROM read_json_auto('leaderboards/*/*.jsonl') GROUP BY ALL ORDER BY ALL")


def markdown_table(frame: pd.DataFrame) -> str:
    """Every cell as text: nothing from a record becomes markup, a link, HTML or another row."""
    def cell(v):
        return markdown_text(v, CELL_LIMIT)

    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _note(t: dict, text=markdown_text) -> str:
    arrow = "higher is better" if higher_is_better(t["metric"]) else "lower is better"
    note = (f"{t['task_type']}; ranked by mean validation {t['metric']} ({arrow}), test reported beside it; "
            f"mean ± sample std over seeds, [95% interval] of the test mean over seeds and test rows "
            f"({SEEDS_ONLY_MARK}: over seeds only); `tied`: the test interval overlaps the leader's (rank 1); "
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
        "validation and test metrics, rank 1 best by validation. A heading names the training budget, the training",
        "and validation seeds runs were capped at (\"all\" uncapped); runs of another budget are another board and",
        "another average rank.",
        "A heading with [parameters] marks runs on non-default dataset parameters, ranked only among themselves.",
        "`setting` says what sets apart rows of one model and inputs; `epochs` the epochs the seeds trained, of",
        "the most allowed, and the early-stopping patience; `time (s)` the mean wall time of one run (load,",
        "features or graph, fit, evaluate); `train rows` how many training rows it used of those the task has;",
        "`certify` the verdict of `fourdb certify` (passed, FAILED, unverified or not run); `commit` the code the",
        f"records were made from. A model marked \\* has a record {DIRTY_NOTE}. Add results with",
        "`fourdb leaderboard submit RUN_DIR...` (see the project README).", "",
        *textwrap.wrap(SELECTION_RULE, 110), "",
        *textwrap.wrap(VERIFIED_NOTE, 110), "",
        *textwrap.wrap(UNCERTAINTY_NOTE, 110), "",
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
            name = write_plot(plots, f"{board}_average_rank__{slug(budget)}.png",
                              plot_ranks(board, budget, ranking.frame, ranking.test_ranks), written)
            lines += [f"![{board} average rank](plots/{name})", ""]
        elif ranking.tasks:
            lines += ["No method ran all of them.", ""]
        if ranking.unranked:
            lines += [f"- {markdown_text(line, CELL_LIMIT)}" for line in ranking.unranked_lines()] + [""]
        lines += _footnote(ranking.frame["method"].str.endswith("*").any(), markdown=True)
    if not tables:
        lines += ["No results yet.", ""]
    for t in tables:
        lines += [f"## {heading(t)}", "", _note(t), "", markdown_table(t["frame"]), ""]
        lines += _footnote(any(s.dirty for s in t["summaries"]), markdown=True)
        name = write_plot(plots, slug(t["dataset"], t["task"], t["protocol"], t["budget"]) + ".png", plot_table(t), written)
        lines += [f"![{heading(t)}](plots/{name})", ""]
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
             "test mean over seeds with its 95% interval. Where two methods swap places between two budgets that both ran them, "
             "the order is listed per budget (best first by validation). A task whose training split is no larger than a budget's "
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
            name = write_plot(plots, f"curve__{slug(dataset, task)}.png", plot_curve(c["points"], title, c["metric"]), written)
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
        frame = t["frame"].map(lambda v: safe_text(v, CELL_LIMIT) if isinstance(v, str) else v)
        frame.columns = [safe_text(c) for c in frame.columns]
        blocks.append("\n".join([heading(t, safe_text), _note(t, safe_text), "", frame.to_string(index=False),
                                  *_footnote(any(s.dirty for s in t["summaries"]), markdown=False)]).rstrip())
    return "\n\n".join(blocks) if blocks else \
        f"{safe_text(dataset)}/{safe_text(task)}: all records are of an earlier task version"
