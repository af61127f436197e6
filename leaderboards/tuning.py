"""A fair tuning protocol for the committed boards (`produce.py --tune`): validation chooses, test reports.

Untuned, a board ranks each model's YAML defaults as much as the method. So every model declares a search space
in conf/model/<name>.yaml (`search:`, a setting -> Optuna sweeper syntax, centred on its defaults; empty for the
trivial and history baselines, which have nothing to tune), and each task's headline cells get the same study:

- TUNE_TRIALS trials for every model, on one budget, the small one (5,000 training seeds, 3,000 validation
  seeds), each one `fourdb run` with seed 0;
- trial 0 is today's defaults (enqueued), so the search can only match or beat them on validation; the others
  are drawn by Optuna's TPE sampler (STARTUP_TRIALS at random first), each from the trials before it and a
  sampler seeded by its number, so a study stopped mid-way resumes with the very trials it would have drawn;
- a trial's score is its record's validation metric, the only number read from it: the chosen setting is the
  trial with the best one (ties: the earlier trial). No test metric is read, printed or stored here;
- every trial (cell, number, setting, validation metric, seconds, the record's config_hash and commit) is
  appended to leaderboards/tuning/<dataset>/<task>.jsonl, then a `chosen` line once the study is complete; a rerun
  runs only the trials missing. A trial whose run failed is run again once, on the next pass (the machine or the
  checkout may be at fault, not the setting), and the study chooses once every trial has a metric or has failed
  twice. The records themselves stay off the boards (multirun/tuning/).

The cell's board runs then use the chosen setting (3 seeds on the small budget, and the larger budgets' headline
runs): a new setting on the board, where the defaults' runs stay; where trial 0 wins, the chosen setting is the
defaults, whose seeds are on the board already. A study is of one space: a space changed in its YAML starts a
new one (the old lines stay, as history).

Cost (from the committed records' `wall_seconds`, one thread per run as `--jobs 2` runs them): the tasks' 62
tunable headline cells take 3,978 s per run together, so 8 trials are about 8.8 hours of runs (4.5 with
`--jobs 2` on the 2 cores), and the chosen settings' 3 seeds at most 3.3 more; two thirds of it is the
recommendation tasks' two GNNs (idgnn and ContextGNN on browsing: 4 to 10 minutes a run). A setting away from
the defaults may run longer (hidden 128, the ResNet row encoder, a lower learning rate boosting more rounds), so
count on about half as much again: a night or two on this machine with nothing else on its cores. On the 30k
budget a run is up to six times longer, days of trials; so trials run on the small budget, and the choice carries
to the larger budgets.
"""
from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
TUNING = ROOT / "leaderboards" / "tuning"  # the committed trials and choices, one file per task
RUNS = ROOT / "multirun" / "tuning"  # the trials' run folders (records, logs): not committed
TUNE_TRIALS = 8  # per tuned cell, the same for every model
TUNE_SEED = 0  # every trial's run seed: trials differ by their setting alone
STARTUP_TRIALS = 4  # trials (the defaults among them) before TPE models the ones so far
# a trial whose run fails is run again once, on the next pass: a failure of the machine or of the checkout (a module
# half-written by someone at work on it) is not the setting's; failing twice, it counts as a trial without a metric
TRIES = 2


def model_of(cell: str) -> str:
    return cell.split(":")[0]


def space_of(cell: str) -> dict[str, str]:
    """The cell's model's search space (conf/model/<name>.yaml `search:`)."""
    from fourdb.defaults import search_space

    return search_space(model_of(cell))


def distributions(space: dict[str, str]) -> dict:
    """The space as Optuna distributions, parsed as the Hydra Optuna sweeper parses `hydra.sweeper.params`."""
    from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides

    found, fixed = create_params_from_overrides([f"{k}={v}" for k, v in space.items()])
    if fixed:  # a fixed value would make trial 0 differ from the defaults
        raise ValueError(f"a search space holds ranges and choices only, not {sorted(fixed)}")
    return found


def config_path(key: str) -> str:
    """A space's setting as a path in the config (`++model.params.row_encoder`: added where the YAML leaves it
    unset)."""
    return key.lstrip("+~")


def value_at(config: dict, key: str):
    """The setting's value in a (recorded or composed) config; None where the config does not state it."""
    node = config
    for part in config_path(key).split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@functools.cache
def composed(experiment: str, model: str) -> dict:
    """The config a run of ``model`` in the experiment composes today (what the boards' runs record)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fourdb.defaults import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[f"experiment={experiment}", f"model={model}"])
    return OmegaConf.to_container(cfg, resolve=True)


def inside(value, distribution) -> bool:
    """Whether a value lies in a distribution of the space (one of its choices, or within its range)."""
    if hasattr(distribution, "choices"):
        return value in distribution.choices
    return distribution.low <= value <= distribution.high


def default_setting(experiment: str, cell: str) -> dict:
    """Today's defaults of the cell's space: trial 0. A setting the config leaves unset is None (not given: the
    model's own default)."""
    space = space_of(cell)
    config = composed(experiment, model_of(cell))
    setting = {key: value_at(config, key) for key in space}
    dists = distributions(space)
    outside = [f"{k}={v}" for k, v in setting.items() if v is not None and not inside(v, dists[k])]
    if outside:  # the search could not even reach the defaults: the YAML's space is off-centre
        raise ValueError(f"{experiment} {cell}: the defaults {', '.join(outside)} lie outside the model's search space")
    return setting


def of_setting(record: dict, setting: dict) -> bool:
    """Whether a record's config has the setting's values (None: not given)."""
    return all(value_at(record.get("config") or {}, k) == v for k, v in setting.items())


def override_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float: records compare equal
    return str(value)


def setting_overrides(setting: dict) -> list[str]:
    """The setting as command-line overrides (a None is left unset: the defaults' runs do not state it)."""
    return [f"{k}={override_value(v)}" for k, v in setting.items() if v is not None]


def tuning_file(experiment: str) -> Path:
    dataset, task = experiment.split("-", 1)
    return TUNING / dataset / f"{task}.jsonl"


def read_lines(experiment: str) -> list[dict]:
    path = tuning_file(experiment)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def append_line(experiment: str, line: dict) -> None:
    """Adds a line under the file's lock, by writing the whole file anew and renaming it (never half-written)."""
    from filelock import FileLock

    from fourdb.utils import atomic_write_text

    path = tuning_file(experiment)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        text = path.read_text() if path.exists() else ""
        atomic_write_text(path, text + json.dumps(line) + "\n")


def study_trials(lines: list[dict], cell: str, space: dict, budget: dict) -> list[dict]:
    """The cell's trials of this space and budget, in trial order: a trial run again, its last line, with
    ``tries``, how many lines it has."""
    trials, tries = {}, {}
    for t in lines:
        if t.get("kind") == "trial" and t["cell"] == cell and t["space"] == space and t["budget"] == budget:
            trials[t["trial"]], tries[t["trial"]] = t, tries.get(t["trial"], 0) + 1
    return [{**trials[n], "tries": tries[n]} for n in sorted(trials)]


def unsettled(trials: list[dict]) -> list[dict]:
    """The trials that failed and are to be run again (fewer than TRIES tries)."""
    return [t for t in trials if t["val"] is None and t["tries"] < TRIES]


def chosen_line(experiment: str, cell: str) -> dict | None:
    """The cell's last choice of a complete study of its model's space today (None: not tuned, or a trial was run
    again since: the study chooses anew once it is settled)."""
    space = space_of(cell)
    chosen = None
    for line in read_lines(experiment):
        if line.get("cell") == cell and line.get("space") == space:
            chosen = line if line.get("kind") == "chosen" else None
    return chosen


def chosen_setting(experiment: str, cell: str) -> dict:
    """The setting the cell's board runs use: the one its study chose, {} where it has none (the defaults)."""
    line = chosen_line(experiment, cell)
    return dict(line["setting"]) if line else {}


def chosen_overrides(experiment: str, cell: str) -> list[str]:
    return setting_overrides(chosen_setting(experiment, cell))


def next_setting(trials: list[dict], space: dict, higher: bool, number: int) -> dict:
    """Trial ``number``'s setting: TPE over the trials before it, with a sampler seeded by the number, so the
    draw depends on the recorded trials alone (a resumed study draws what an unbroken one would)."""
    import optuna

    dists = distributions(space)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna marks add_trial and create_trial experimental
        study = optuna.create_study(direction="maximize" if higher else "minimize",
                                    sampler=optuna.samplers.TPESampler(seed=number, n_startup_trials=STARTUP_TRIALS))
        for t in trials:
            params = {k: v for k, v in t["setting"].items() if v is not None}
            done = optuna.trial.TrialState.COMPLETE if t["val"] is not None else optuna.trial.TrialState.FAIL
            study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params},
                                                      value=t["val"], state=done))
        trial = study.ask(dists)
    return {k: trial.params.get(k) for k in space}


def choose(trials: list[dict], higher: bool) -> dict | None:
    """The trial with the best validation metric (ties: the earlier one); None where every trial failed."""
    best = None
    for t in trials:
        if t["val"] is not None and (best is None or (t["val"] > best["val"] if higher else t["val"] < best["val"])):
            best = t
    return best


def run_command(args: list[str], log: Path, timeout_s: float, env: dict) -> int | str:
    """A `fourdb run`'s return code (or "timeout"), its output in ``log`` (never printed: it shows test too)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        try:
            return subprocess.run(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s,
                                  start_new_session=True).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def finished_record(folder: Path, setting: dict, budget: dict) -> dict | None:
    """The trial's record where an earlier pass finished its run but not its line (same setting and budget)."""
    path = folder / "record.json"
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    config = record.get("config") or {}
    same = of_setting(record, setting) and all(config.get(k) == v for k, v in budget.items())
    return record if same and record.get("seed") == TUNE_SEED else None


def trial_line(cell: str, number: int, setting: dict, record: dict | None, seconds: float, error: str | None) -> dict:
    """What the tuning file keeps of a trial: of its record, the validation metric, config hash and commit."""
    from fourdb.leaderboard.schema import config_hash

    line = {"kind": "trial", "cell": cell, "trial": number, "setting": setting, "metric": None, "val": None,
            "seconds": round(seconds, 1), "config_hash": None, "git_commit": None, "git_dirty": None, "error": error}
    if record is not None:
        metric = record["metric"]
        line.update(metric=metric, val=record["metrics"]["val"].get(metric), config_hash=config_hash(record),
                    git_commit=record.get("git_commit"), git_dirty=record.get("git_dirty"))
        if line["val"] is None:
            line["error"] = f"the record has no validation {metric}"
    return line


def run_trial(experiment: str, cell: str, number: int, setting: dict, choices: list[str], budget: dict, env: dict,
              timeout_s: float) -> dict:
    """Trial ``number`` of the cell: one run of the setting (seed TUNE_SEED), its line for the tuning file."""
    folder = RUNS / experiment / cell.replace(":", "_") / f"trial_{number}"
    record = finished_record(folder, setting, budget)
    if record is not None:
        return trial_line(cell, number, setting, record, record.get("wall_seconds") or 0.0, None)
    shutil.rmtree(folder, ignore_errors=True)  # a record left by a trial of another setting is not this one's
    args = [sys.executable, "-m", "fourdb.cli", "run", *choices, f"seed={TUNE_SEED}",
            *(f"{k}={'null' if v is None else v}" for k, v in budget.items()), *setting_overrides(setting),
            "trainer.progress=false", f"hydra.run.dir={folder}"]
    start = time.time()
    rc = run_command(args, folder.with_suffix(".log"), timeout_s, env)
    seconds = time.time() - start
    if rc == 0 and (folder / "record.json").exists():
        return trial_line(cell, number, setting, json.loads((folder / "record.json").read_text()), seconds, None)
    error = "timeout" if rc == "timeout" else f"failed (rc {rc}; its log: {folder.name}.log)"
    return trial_line(cell, number, setting, None, seconds, error)


def metric_is_higher(experiment: str) -> bool:
    from fourdb.metrics import higher_is_better
    from fourdb.tasks import find_task

    return higher_is_better(find_task(*experiment.split("-", 1)).metric)


def run_study(experiment: str, cell: str, choices: list[str], budget: dict, env: dict, timeout_s: float) -> dict | None:
    """The cell's failed trials once more, then its missing ones, one at a time, each appended as it ends; then,
    every trial settled, its `chosen` line (returned). None where the space is empty (nothing to tune), a trial
    is to be run again on the next pass, or every trial failed."""
    space = space_of(cell)
    if not space:
        return None
    higher = metric_is_higher(experiment)
    context = {"space": space, "budget": budget, "seed": TUNE_SEED}

    def run(n: int, setting: dict) -> None:
        line = {**run_trial(experiment, cell, n, setting, choices, budget, env, timeout_s), **context}
        append_line(experiment, line)
        shown = f"validation {line['metric']} {line['val']:.4f}" if line["val"] is not None else line["error"]
        print(f"tune {experiment} {cell} trial {n}/{TUNE_TRIALS}: {shown} ({line['seconds']:.0f} s)", flush=True)

    for t in unsettled(study_trials(read_lines(experiment), cell, space, budget)):  # failed on an earlier pass
        run(t["trial"], t["setting"])
    while len(trials := study_trials(read_lines(experiment), cell, space, budget)) < TUNE_TRIALS:
        n = len(trials)
        run(n, default_setting(experiment, cell) if n == 0 else next_setting(trials, space, higher, n))
    if again := unsettled(trials):
        print(f"tune {experiment} {cell}: trial(s) {', '.join(str(t['trial']) for t in again)} failed; the next "
              "--tune runs them again before choosing", flush=True)
        return None
    best = choose(trials[:TUNE_TRIALS], higher)
    if best is None:
        return None
    chosen = {"kind": "chosen", "cell": cell, "trial": best["trial"], "setting": best["setting"],
              "metric": best["metric"], "val": best["val"], "default_val": trials[0]["val"], "trials": TUNE_TRIALS,
              "failed": sum(t["val"] is None for t in trials), **context}
    if chosen_line(experiment, cell) != chosen:
        append_line(experiment, chosen)
    return chosen


def missing_trials(experiment: str, cell: str, budget: dict) -> int:
    """The runs the cell's study still needs: trials not yet run, and failed ones to run again."""
    space = space_of(cell)
    if not space:
        return 0
    trials = study_trials(read_lines(experiment), cell, space, budget)
    return max(0, TUNE_TRIALS - len(trials)) + len(unsettled(trials))


def run_studies(studies: list[tuple[str, str]], choices: Callable[[str, str], list[str]], budget: dict, env: dict,
                timeout_s: float, jobs: int = 1, dry_run: bool = False) -> None:
    """Each (experiment, cell)'s study, ``jobs`` studies at once (each one's trials one after another);
    ``choices(experiment, cell)``: the run's overrides that make the cell (experiment, model, inputs)."""
    todo = [(e, c) for e, c in studies if missing_trials(e, c, budget) or (space_of(c) and not chosen_line(e, c))]
    print(f"{len(todo)} cell(s) to tune, {TUNE_TRIALS} trials each", flush=True)
    if dry_run:
        for e, c in todo:
            print(e, c, f"{missing_trials(e, c, budget)} trial(s) missing")
        return
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda ec: run_study(*ec, choices(*ec), budget, env, timeout_s), todo))


def tuned_note(experiment: str, cell: str, budget: dict) -> str:
    """MATRIX.md's word on a cell's tuning: how many trials, and the choice."""
    space = space_of(cell)
    if not space:
        return "0 trials: nothing to tune"
    trials = study_trials(read_lines(experiment), cell, space, budget)
    line = chosen_line(experiment, cell)
    if line is None:
        again = f", {len(unsettled(trials))} failed, to run again" if unsettled(trials) else ""
        return f"not tuned: {len(trials)} of {TUNE_TRIALS} trials{again} (defaults on the board)" if trials else \
            "not tuned (defaults on the board)"
    setting = ", ".join(setting_overrides(line["setting"])) or "the defaults"
    won = "trial 0, the defaults" if line["trial"] == 0 else f"trial {line['trial']}: {setting}"
    failed = f", {line['failed']} failed twice" if line.get("failed") else ""
    defaults = f", defaults {line['default_val']:.4f}" if line["default_val"] is not None else ""
    return (f"tuned, {line['trials']} trials{failed}; chosen {won} (validation {line['metric']} {line['val']:.4f}"
            f"{defaults})")


def matrix_lines(headline: dict[str, list[str]], budget: dict) -> list[str]:
    """MATRIX.md's tuning section: per task, its headline cells and whether each is tuned, with how many trials."""
    rows = [f"| {e} | {c} | {tuned_note(e, c, budget)} |" for e, cells in headline.items() for c in cells]
    return ["", "## tuning", "",
            f"`produce.py --tune` (leaderboards/tuning.py): each task's headline cells get {TUNE_TRIALS} trials of "
            "their model's search space (`search:` in conf/model/<name>.yaml) on the small budget, seed 0, trial 0 the "
            "defaults; the trial of best validation metric is chosen (test is never read), and the cell's board runs "
            "use it. Trials: leaderboards/tuning/<dataset>/<task>.jsonl.", "",
            "| task | cell | tuning |", "|---|---|---|", *rows]
