"""The fair tuning protocol: every model declares a search space centred on its defaults (conf/model/<name>.yaml
`search:`), which no run records; `hparams_search=optuna` searches it; and `produce.py --tune` gives each cell
the same trials, chooses on validation alone, resumes, and runs the chosen setting."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "leaderboards"))
import tuning  # noqa: E402

# nothing to tune: constants from the training labels, an entity's own past labels, the link history
TRIVIAL = {"zero", "mean", "median", "prior", "entity_mean", "entity_median", "popularity", "repeat"}


def yaml_models() -> list[str]:
    """The registered models chosen by `model=<name>` (pair_ranker wraps a tabular model and has no YAML)."""
    from fourdb.models import MODELS

    return [name for name in MODELS.names() if (REPO / "conf" / "model" / f"{name}.yaml").exists()]


def test_every_registered_model_but_the_wrapper_has_a_yaml():
    from fourdb.models import MODELS

    assert set(MODELS.names()) - set(yaml_models()) == {"pair_ranker"}


@pytest.mark.parametrize("name", yaml_models())
def test_every_model_declares_a_search_space_holding_its_defaults(name):
    """Empty for the trivial and history baselines; otherwise ranges and choices, each around a setting the run
    reads, with today's default inside (a `++` setting the YAML leaves unset: every choice is one the model takes)."""
    from fourdb.defaults import SEARCH, model_params, option
    from fourdb.models import check_params
    from fourdb.train.trainer import TrainerConfig

    assert SEARCH in option("model", name), f"conf/model/{name}.yaml declares no search space"
    space = tuning.space_of(f"{name}:x")
    assert (not space) == (name in TRIVIAL), name
    dists = tuning.distributions(space)
    defaults = {"model": {"params": model_params(name)}, "trainer": option("trainer")}
    for key, dist in dists.items():
        group, *rest = tuning.config_path(key).split(".")
        assert group in ("model", "trainer"), key
        if group == "trainer":
            assert rest[0] in TrainerConfig.__dataclass_fields__, key
        default = tuning.value_at(defaults, key)
        if default is None:  # not given in the YAML: added by the trials that set it
            assert key.startswith("++"), f"{name}: {key} names no default; `++` adds a parameter the YAML leaves unset"
            for choice in dist.choices:
                check_params(name, {**model_params(name), rest[-1]: choice})
        else:
            assert tuning.inside(default, dist), f"{name}: the default {key}={default} lies outside {space[key]}"


def test_the_search_space_changes_no_recorded_config_hash_or_checkpoint_key():
    """A record's config and config hash, and a run's checkpoint key, are those of the run without a space, so the
    committed records keep their hashes and group with new runs of the same setting."""
    from omegaconf import OmegaConf

    from fourdb.experiment.prepare import checkpoint_key
    from fourdb.experiment.run import recorded_config
    from fourdb.leaderboard.schema import config_hash

    cfg = config("experiment=lahman-salary", "model=lightgbm", "features=dfs")
    assert "search" in cfg.model
    other = copy.deepcopy(cfg)
    OmegaConf.set_struct(other, False)
    other.model.search = {"model.params.num_leaves": "choice(7, 255)"}
    bare = copy.deepcopy(cfg)
    OmegaConf.set_struct(bare, False)
    del bare.model["search"]
    assert recorded_config(cfg) == recorded_config(other) == recorded_config(bare)
    assert "search" not in recorded_config(cfg)["model"]
    assert checkpoint_key(cfg) == checkpoint_key(other) == checkpoint_key(bare)
    record = {"config": recorded_config(cfg), "inputs": {"features": "dfs"}}
    with_space = copy.deepcopy(record)
    with_space["config"]["model"]["search"] = dict(cfg.model.search)
    assert config_hash(with_space) == config_hash(record)


def test_a_committed_record_composes_to_its_config_and_hash_today():
    """A board record made before spaces existed: today's composition of its choices (and the epoch cap it ran
    under) records its config, hash for hash."""
    from fourdb.experiment.run import recorded_config
    from fourdb.leaderboard.schema import config_hash

    board = [json.loads(line) for line in (REPO / "leaderboards" / "lahman" / "salary.jsonl").read_text().splitlines()]
    r = next(r for r in board if r["model"] == "lightgbm" and r["config"]["max_train_seeds"] == 5000
             and r["config"]["features"]["name"] == "dfs")
    c = r["config"]
    composed = config("experiment=lahman-salary", "model=lightgbm", "features=dfs", f"graph={c['graph']['name']}",
                      f"seed={r['seed']}", "max_train_seeds=5000", "max_val_seeds=3000",
                      f"engine={c['engine']['name']}", f"trainer.epochs={c['trainer']['epochs']}",
                      "trainer.progress=false")
    assert recorded_config(composed) == c
    assert config_hash({**r, "config": recorded_config(composed)}) == r["config_hash"]


def test_optuna_searches_the_models_own_space(tmp_path):
    """`hparams_search=optuna` with nothing else searches gbdt's own space (its learning rate, leaves, columns),
    not a neural model's lr, hidden size and dropout; the runs' settings differ and record no space."""
    sweep = tmp_path / "sweep"
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", "-m", "experiment=synthetic-taste", "model=gbdt",
                        "hparams_search=optuna", "hydra.sweeper.n_trials=2", "dataset.params.size=150",
                        "max_train_seeds=200", "trainer.progress=false", f"hydra.sweep.dir={sweep}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    records = [json.loads(f.read_text()) for f in sorted(sweep.glob("*/record.json"))]
    assert len(records) == 2
    params = [r["config"]["model"]["params"] for r in records]
    assert params[0] != params[1]
    for key in tuning.space_of("gbdt:dfs"):
        assert all(tuning.value_at(r["config"], key) is not None for r in records)
    assert "trainer.lr=" not in p.stdout + p.stderr
    assert all("search" not in r["config"]["model"] for r in records)


def fake_run(calls: list, val, interrupt_at: int | None = None):
    """A stand-in for `fourdb run`: writes the record of the run its arguments ask for (seed, budget, the trial's
    overrides), with the validation metric ``val(params)`` and a test metric that disagrees with it; at call
    ``interrupt_at`` the pass is stopped after the run wrote its record, before the tuning file took its line."""
    def run(args, log, timeout_s, env):
        calls.append(args)
        overrides = dict(a.split("=", 1) for a in args if "=" in a)
        params = {tuning.config_path(k).split(".")[-1]: yaml.safe_load(v) for k, v in overrides.items()
                  if tuning.config_path(k).startswith("model.params.")}
        folder = Path(overrides["hydra.run.dir"])
        folder.mkdir(parents=True)
        record = {"model": "gbdt", "seed": int(overrides["seed"]), "inputs": {"features": "dfs"}, "metric": "auroc",
                  "metrics": {"val": {"auroc": val(params)}, "test": {"auroc": 1 - val(params)}},
                  "config": {"model": {"name": "gbdt", "params": params}, "max_train_seeds": 5000,
                             "max_val_seeds": 3000},
                  "git_commit": "0" * 40, "git_dirty": False, "wall_seconds": 1.0}
        (folder / "record.json").write_text(json.dumps(record))
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        return 0
    return run


BUDGET = {"max_train_seeds": 5000, "max_val_seeds": 3000}
CELL = "gbdt:dfs"


def study(monkeypatch, root: Path, val, interrupt_at=None) -> list:
    """Runs the cell's study on synthetic-taste (auroc: higher is better) under ``root``; the runs it made."""
    calls = []
    monkeypatch.setattr(tuning, "TUNING", root / "tuning")
    monkeypatch.setattr(tuning, "RUNS", root / "runs")
    monkeypatch.setattr(tuning, "run_command", fake_run(calls, val, interrupt_at))
    tuning.run_study("synthetic-taste", CELL, ["experiment=synthetic-taste", "model=gbdt"], BUDGET, {}, 60)
    return calls


def trial_lines(root: Path) -> list[dict]:
    lines = [json.loads(x) for x in (root / "tuning" / "synthetic" / "taste.jsonl").read_text().splitlines()]
    return [x for x in lines if x["kind"] == "trial"]


def by_leaves(params):  # 63 leaves is best on validation, and worst on test
    return params["max_leaf_nodes"] / 100 + params["learning_rate"] / 10


def test_tuning_runs_the_defaults_first_and_chooses_on_validation_alone(tmp_path, monkeypatch):
    calls = study(monkeypatch, tmp_path, by_leaves)
    assert len(calls) == tuning.TUNE_TRIALS
    assert all("seed=0" in args and "max_train_seeds=5000" in args for args in calls)
    trials = trial_lines(tmp_path)
    assert [t["trial"] for t in trials] == list(range(tuning.TUNE_TRIALS))
    assert trials[0]["setting"] == tuning.default_setting("synthetic-taste", CELL)  # the defaults, enqueued
    assert len({json.dumps(t["setting"], sort_keys=True) for t in trials}) == tuning.TUNE_TRIALS
    assert all(t["config_hash"] and t["git_commit"] and t["seconds"] is not None for t in trials)
    best = max(trials, key=lambda t: t["val"])
    chosen = tuning.chosen_line("synthetic-taste", CELL)
    assert chosen["trial"] == best["trial"] and chosen["setting"] == best["setting"] and chosen["trials"] == 8
    assert "test" not in (tmp_path / "tuning" / "synthetic" / "taste.jsonl").read_text()
    assert tuning.chosen_overrides("synthetic-taste", CELL) == tuning.setting_overrides(best["setting"])
    assert study(monkeypatch, tmp_path, by_leaves) == []  # complete: a rerun runs nothing


def test_the_choice_is_the_validation_best_trial_whatever_test_says():
    trials = [{"trial": 0, "val": 0.70, "test": 0.95}, {"trial": 1, "val": 0.80, "test": 0.50},
              {"trial": 2, "val": 0.80, "test": 0.99}, {"trial": 3, "val": None, "test": 1.0}]
    assert tuning.choose(trials, higher=True)["trial"] == 1  # a tie goes to the earlier trial
    assert tuning.choose(trials, higher=False)["trial"] == 0
    no_test = [{k: v for k, v in t.items() if k != "test"} for t in trials]
    assert tuning.choose(no_test, higher=True)["trial"] == 1
    assert tuning.choose([{"trial": 0, "val": None}], higher=True) is None


def test_records_without_test_metrics_tune_alike(tmp_path, monkeypatch):
    """The tuning step never reads a test metric: records that have none give the same trials and choice."""
    calls = []
    run = fake_run(calls, by_leaves)

    def without_test(args, log, timeout_s, env):
        run(args, log, timeout_s, env)
        path = Path(dict(a.split("=", 1) for a in args if "=" in a)["hydra.run.dir"]) / "record.json"
        record = json.loads(path.read_text())
        del record["metrics"]["test"]
        path.write_text(json.dumps(record))
        return 0

    study(monkeypatch, tmp_path / "a", by_leaves)
    monkeypatch.setattr(tuning, "TUNING", tmp_path / "b" / "tuning")
    monkeypatch.setattr(tuning, "RUNS", tmp_path / "b" / "runs")
    monkeypatch.setattr(tuning, "run_command", without_test)
    tuning.run_study("synthetic-taste", CELL, ["experiment=synthetic-taste", "model=gbdt"], BUDGET, {}, 60)
    drop = ("seconds",)
    assert [{k: v for k, v in t.items() if k not in drop} for t in trial_lines(tmp_path / "a")] == \
        [{k: v for k, v in t.items() if k not in drop} for t in trial_lines(tmp_path / "b")]


def test_a_study_stopped_mid_way_resumes_with_the_trials_it_would_have_drawn(tmp_path, monkeypatch):
    whole = study(monkeypatch, tmp_path / "whole", by_leaves)
    with pytest.raises(KeyboardInterrupt):  # stopped after trial 4's run wrote its record, before its line
        study(monkeypatch, tmp_path / "stopped", by_leaves, interrupt_at=5)
    assert len(trial_lines(tmp_path / "stopped")) == 4
    resumed = study(monkeypatch, tmp_path / "stopped", by_leaves)
    assert len(resumed) == 3  # trial 4's finished run is taken as it is; 5, 6 and 7 run
    timeless = [[{k: v for k, v in t.items() if k != "seconds"} for t in trial_lines(tmp_path / run)]
                for run in ("stopped", "whole")]
    assert timeless[0] == timeless[1]
    same = [[x.replace(str(tmp_path / "stopped"), str(tmp_path / "whole")) for x in args] for args in resumed]
    assert same == whole[5:]


@pytest.mark.parametrize("fails", [1, 2])
def test_a_failed_trial_is_run_again_once_on_the_next_pass(tmp_path, monkeypatch, fails):
    """A run that fails (the machine, or a checkout half-written by someone at work on it) is recorded without a
    metric, and the study chooses nothing until the next pass has run it again; failing twice, it counts as a
    trial without a metric and the study chooses among the others."""
    calls, tries = [], []
    ok = fake_run(calls, by_leaves)

    def flaky(args, log, timeout_s, env):
        if any(a.endswith("/trial_5") for a in args) and len(tries) < fails:
            tries.append(args)
            return 2
        return ok(args, log, timeout_s, env)

    monkeypatch.setattr(tuning, "TUNING", tmp_path / "tuning")
    monkeypatch.setattr(tuning, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(tuning, "run_command", flaky)
    again = lambda: tuning.run_study("synthetic-taste", CELL, ["model=gbdt"], BUDGET, {}, 60)  # noqa: E731
    assert again() is None and tuning.chosen_line("synthetic-taste", CELL) is None
    assert "1 failed, to run again" in tuning.tuned_note("synthetic-taste", CELL, BUDGET)
    assert tuning.missing_trials("synthetic-taste", CELL, BUDGET) == 1
    chosen = again()
    assert chosen is not None and chosen["failed"] == fails - 1
    [retried] = [t for t in trial_lines(tmp_path) if t["trial"] == 5][1:]
    assert (retried["val"] is None) == (fails == 2)
    assert len(calls) == 8 - (fails == 2) and again() == chosen  # settled: the next pass runs nothing


def test_the_chosen_setting_reaches_the_cells_runs_and_only_its_seeds_count(tmp_path, monkeypatch):
    """The board holds seeds 0-2 of the defaults; once tuned, the cell's pass runs all three seeds again with the
    chosen setting's overrides, and its seeds are those of the chosen setting."""
    import importlib.util

    study(monkeypatch, tmp_path, by_leaves)
    chosen = tuning.chosen_setting("synthetic-taste", CELL)
    assert chosen != tuning.default_setting("synthetic-taste", CELL)
    spec = importlib.util.spec_from_file_location("produce", REPO / "leaderboards" / "produce.py")
    produce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(produce)
    assert produce.tuning is tuning
    board = tmp_path / "leaderboards" / "synthetic" / "taste.jsonl"
    board.parent.mkdir(parents=True)
    defaults = tuning.default_setting("synthetic-taste", CELL)
    params = {tuning.config_path(k).split(".")[-1]: v for k, v in defaults.items()}
    board.write_text("".join(json.dumps({"model": "gbdt", "seed": s, "inputs": {"features": "dfs"},
                                         "config": {"model": {"name": "gbdt", "params": params}, **BUDGET}}) + "\n"
                             for s in (0, 1, 2)))
    monkeypatch.setattr(produce, "ROOT", tmp_path)
    monkeypatch.setattr(produce, "stale", lambda r, c: False)
    assert produce.done_seeds("synthetic-taste", CELL, BUDGET) == set()
    assert len(produce.cell_runs("synthetic-taste", CELL, BUDGET, setting={})) == 3
    ran = []

    def run_logged(args, log, timeout_s, env):  # fails at once, as a run that wrote no record
        ran.append(args)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("stopped\n")
        return 1

    monkeypatch.setattr(produce, "run_logged", run_logged)
    produce.run_cell("synthetic-taste", CELL, BUDGET, 1, 60)
    [args] = ran
    assert "seed=0,1,2" in args
    assert all(o in args for o in tuning.setting_overrides(chosen))


def test_matrix_says_per_cell_whether_it_is_tuned_and_with_how_many_trials(tmp_path, monkeypatch):
    study(monkeypatch, tmp_path, by_leaves)
    text = "\n".join(tuning.matrix_lines({"synthetic-taste": ["mean:labels", CELL, "lightgbm:dfs"]}, BUDGET))
    assert "| synthetic-taste | mean:labels | 0 trials: nothing to tune |" in text
    assert f"| synthetic-taste | {CELL} | tuned, 8 trials; chosen trial" in text
    assert "| synthetic-taste | lightgbm:dfs | not tuned (defaults on the board) |" in text
