"""Settings: each default is stated once, in conf/; a mistyped setting or model parameter is one line with
a did-you-mean, before any data is read; the boards' runs still compose to the configs they recorded."""
import ast
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import config
from omegaconf import OmegaConf

import fourdb.experiment.prepare
import fourdb.experiment.run
from fourdb.defaults import CONF_DIR, group_default, option
from fourdb.engine.config import EngineConfig
from fourdb.errors import FourdbError, SettingError
from fourdb.leaderboard.schema import config_hash
from fourdb.models import MODELS, TaskInfo, check_params, create_model
from fourdb.experiment.settings import check_settings
from fourdb.train.trainer import TrainerConfig

CONF = Path(CONF_DIR)
ROOT = CONF.parent
MODEL_YAMLS = {p.stem: OmegaConf.to_container(OmegaConf.load(p)) for p in sorted((CONF / "model").glob("*.yaml"))}


def own_settings(group: str, name: str) -> dict:
    """What conf/<group>/<name>.yaml states itself (not what it extends)."""
    raw = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{name}.yaml"))
    return {k: v for k, v in raw.items() if k not in ("defaults", "name")}


def code_defaults(cls) -> dict:
    """The fields that the class body gives a value of its own."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    return {node.target.id: ast.literal_eval(node.value) for node in body
            if isinstance(node, ast.AnnAssign) and node.value is not None}


@pytest.mark.parametrize("group,cls", [("trainer", TrainerConfig), ("engine", EngineConfig)])
def test_every_default_of_a_settings_class_is_stated_once(group, cls):
    """The group's default option states a setting's default (its class reads it from there, so the two
    agree), or the class does, never both; the other options state only what they change."""
    in_code = code_defaults(cls)
    for path in sorted((CONF / group).glob("*.yaml")):
        stated = own_settings(group, path.stem)
        assert set(stated) <= set(cls.__dataclass_fields__), f"{path.name} states a setting {cls.__name__} lacks"
        if path.stem == group_default(group):
            assert not set(stated) & set(in_code), f"stated in {path.name} and in {cls.__name__}"
            continue
        bases = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", [])
        inherited = {**in_code, **{k: v for base in bases for k, v in option(group, base).items()}}
        restated = sorted(k for k, v in stated.items() if k in inherited and inherited[k] == v)
        assert not restated, f"{path.name} restates what it inherits: {restated}"
    default = own_settings(group, group_default(group))
    assert {k: getattr(cls(), k) for k in default} == default


def test_every_model_default_is_stated_once():
    """A conf/model YAML's params are the model's defaults: neither the constructor (or network,
    convolution) that takes one nor a ``params.get(name, default)`` in a model file states it again
    (``get(name, None)``: "not given", as GNN ``layers``, one per sampled hop unless given, is no default)."""
    for name, conf in MODEL_YAMLS.items():
        params = check_params(name, {})
        parameters = MODELS.get(name).parameters(params)
        for key in conf["params"]:
            assert parameters[key].default is inspect.Parameter.empty, f"model '{name}': '{key}' has a default in code"
    stated = {key for conf in MODEL_YAMLS.values() for key in conf["params"]}
    for path in sorted((ROOT / "fourdb" / "models").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in stated
                    and not (isinstance(node.args[1], ast.Constant) and node.args[1].value is None)):
                pytest.fail(f"{path.name}:{node.lineno} falls back to a default for '{node.args[0].value}'")


def test_every_feature_set_default_is_stated_once():
    """A feature set's settings (conf/features/<name>.yaml) have no default in the code that takes them:
    every function taking one says None (\"not given\") and takes the YAML's, so code and CLI compute alike."""
    from fourdb.features.dfs import cached_dfs, check_config, check_where, compute_dfs, dfs_features
    from fourdb.describe import column_report

    for path in sorted((CONF / "features").glob("*.yaml")):
        stated = own_settings("features", path.stem)
        for fn in (compute_dfs, cached_dfs, dfs_features, column_report):
            for key in stated:
                param = inspect.signature(fn).parameters.get(key)
                assert param is None or param.default is None, f"{fn.__name__} states a default for {key}"
    dfs = own_settings("features", "dfs")
    assert check_config(None, None) == (dfs["depth"], tuple(dfs["primitives"]))
    assert check_where(None).__dict__ == {**dfs["where"], "primitives": tuple(dfs["where"]["primitives"])}


def test_gbdt_runs_with_the_max_features_its_yaml_gives():
    """The two used to disagree (0.8 in the YAML, 1.0 in the code): both ways in now take the YAML's."""
    assert config("model=gbdt").model.params.max_features == 0.8
    assert create_model("gbdt", TaskInfo("binary", 2, "auroc")).params["max_features"] == 0.8
    assert TrainerConfig().epochs == config().trainer.epochs and EngineConfig().workers == config().engine.workers


@pytest.mark.parametrize("name", sorted(MODEL_YAMLS))
def test_every_parameter_a_model_yaml_gives_is_accepted(name):
    info = {"recommendation": TaskInfo("recommendation", 0, "map"), "regression": TaskInfo("regression", 0, "mae")}.get(
        MODELS.get(name).task_types[0], TaskInfo("binary", 2, "auroc"))
    assert create_model(name, info, seed=0, **MODEL_YAMLS[name]["params"]).params.items() >= \
        MODEL_YAMLS[name]["params"].items()
    if MODELS.get(name).ranked_by() is not None:  # wrapped for a recommendation task, it takes them too
        create_model(name, TaskInfo("recommendation", 0, "map"), seed=0, **MODEL_YAMLS[name]["params"])
    elif "recommendation" not in MODELS.get(name).task_types:  # nothing wraps it: a one-line refusal naming it
        with pytest.raises(FourdbError, match=f"^model '{name}' does not do recommendation tasks"):
            create_model(name, TaskInfo("recommendation", 0, "map"), seed=0, **MODEL_YAMLS[name]["params"])


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_refuses_a_mistyped_parameter(name):
    cls = MODELS.get(name)
    given = {"inner": "gbdt"} if name == "pair_ranker" else {}
    takes = sorted(set(cls.parameters(check_params(name, given))) - set(given))
    typo = takes[0] + takes[0][-1] if takes else "hidden"  # max_iter -> max_iterr
    info = TaskInfo("recommendation", 0, "map") if "binary" not in cls.task_types else TaskInfo("binary", 2, "auroc")
    with pytest.raises(SettingError) as err:
        create_model(name, info, **given, **{typo: 1})
    message = str(err.value)
    assert "\n" not in message and f"model '{name}' has no parameter '{typo}'" in message, message
    if takes:
        assert "did you mean" in message, message


def test_a_tabular_model_ranking_pairs_names_itself_in_the_error():
    """On a recommendation task gbdt runs inside pair_ranker; the error is still about gbdt."""
    with pytest.raises(SettingError, match=r"^model 'gbdt' has no parameter 'max_iterr' \(did you mean 'max_iter'\?\)"):
        create_model("gbdt", TaskInfo("recommendation", 0, "map"), max_iterr=5)
    with pytest.raises(SettingError, match="model 'two_tower': gnn must be one of gat, hgt, pna, rgcn, sage, not 'gbdt'"):
        create_model("two_tower", TaskInfo("recommendation", 0, "map"), gnn="gbdt")


@pytest.mark.parametrize("overrides,message", [
    (["+trainer.epoch=1"], "trainer has no setting 'epoch' (did you mean 'epochs'?)"),
    (["trainer=ddp", "+trainer.max_restart=2"], "trainer has no setting 'max_restart' (did you mean 'max_restarts'?)"),
    (["trainer.epochs=ten"], "trainer.epochs must be int, not 'ten'"),
    (["trainer.max_steps_per_epoch=0.5"], "trainer.max_steps_per_epoch must be int or null, not 0.5"),
    (["+engine.worker=2"], "engine has no setting 'worker' (did you mean 'workers'?)"),
    (["engine.mode=onlin"], "unknown engine mode 'onlin' (did you mean 'online'?)"),
    (["model=gbdt", "+model.params.max_iterr=5"], "model 'gbdt' has no parameter 'max_iterr' (did you mean 'max_iter'?)"),
    (["model=sage", "+model.params.hiden=32"], "model 'sage' has no parameter 'hiden' (did you mean 'hidden'?)"),
    (["model=popularity", "+model.params.k=5"], "model 'popularity' has no parameter 'k'; it takes none"),
    (["+model.param.max_iter=5"], "model has no setting 'param' (did you mean 'params'?)"),
    (["+sampler.fanout=[5]"], "sampler has no setting 'fanout' (did you mean 'fanouts'?)"),
    (["sampler.fanouts=5"], "sampler.fanouts must be a list of integers, one per GNN layer, not 5"),
    (["sampler.name=uniformm"], "unknown sampling strategy 'uniformm' (did you mean 'uniform'?)"),
    (["features=dfs", "+features.dept=1"], "feature set 'dfs' has no parameter 'dept' (did you mean 'depth'?)"),
    (["+graph.kind=r2n"], "graph has no setting 'kind'"),
    (["graph.name=r2nee"], "unknown graph construction 'r2nee' (did you mean 'r2ne'?)"),
    (["+dataset.params.sizee=150"], "dataset 'synthetic' has no parameter 'sizee' (did you mean 'size'?)"),
    (["+max_train_seed=100"], "the run config has no setting 'max_train_seed' (did you mean 'max_train_seeds'?)"),
    (["+certify.group=2"], "certify has no setting 'group' (did you mean 'groups'?)"),
])
def test_a_mistyped_setting_is_one_line_before_any_data_is_read(overrides, message, monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("the database was read before the settings were checked")

    monkeypatch.setattr(fourdb.experiment.prepare, "load_dataset", no_data)
    monkeypatch.setattr(fourdb.experiment.prepare, "find_task", no_data)
    with pytest.raises(FourdbError) as err:
        fourdb.experiment.run.run_experiment(config("dataset=synthetic", "task=taste", *overrides))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_every_shipped_config_passes_the_check():
    """No false alarm: each experiment with each model, and every option of the groups that have several."""
    for path in sorted((CONF / "experiment").glob("*.yaml")):
        check_settings(config(f"experiment={path.stem}"))
    for name in MODEL_YAMLS:
        check_settings(config("experiment=synthetic-taste", f"model={name}"))
    for extra in (["trainer=ddp", "trainer.nproc=auto"], ["engine=offline"], ["engine=auto"], ["features=dfs"],
                  ["graph=r2n"], ["sampler=uniform"], ["dataset=lahman"], ["certify.enabled=true"]):
        check_settings(config(*extra))


def board_runs() -> list[dict]:
    """One committed record per setting of the synthetic and browsing boards."""
    runs = {}
    for path in sorted((ROOT / "leaderboards").glob("*/*.jsonl")):
        if path.parent.name in ("synthetic", "browsing"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                runs.setdefault(record["config_hash"], record)
    return list(runs.values())


def engine_choices(engine: dict) -> list[str]:
    """The engine a board run chose (produce.py's larger budgets run graph models with engine=auto and a
    memory limit)."""
    limit = engine.get("memory_limit_gb")
    return [f"engine={engine['name']}", *([f"engine.memory_limit_gb={limit}"] if limit is not None else [])]


def epoch_cap(record: dict) -> list[str]:
    """The epoch cap a record was made under (every record states the trainer's settings, used or not). The
    experiments' caps were raised since: a neural run that patience stopped before the old cap is the same run
    under the new one, so its record stays on the board (those cut short at it are made again,
    leaderboards/produce.py --remake-cut-short), as do the records of models the cap does not touch."""
    return [f"trainer.epochs={record['config']['trainer']['epochs']}"]


def test_the_boards_runs_compose_to_the_config_they_recorded():
    """The boards' results depend on the defaults conf/ gives: composing a committed run's choices today
    (and the epoch cap it recorded) gives the config it recorded, hash for hash (so its leaderboard row is
    the same row)."""
    runs = board_runs()
    assert len(runs) >= 20
    for r in runs:
        c = r["config"]
        composed = config(f"experiment={r['dataset']}-{r['task']}", f"model={r['model']}",
                          f"features={c['features']['name']}", f"graph={c['graph']['name']}", f"seed={r['seed']}",
                          *(f"{k}={'null' if c[k] is None else c[k]}" for k in ("max_train_seeds", "max_val_seeds")),
                          *engine_choices(c["engine"]), *epoch_cap(r), "trainer.progress=false",
                          # a certified seed (`produce.py --certify`) was made by `fourdb certify`
                          *(["certify.enabled=true"] if (c.get("certify") or {}).get("enabled") else []))
        recorded = fourdb.experiment.run.recorded_config(composed)  # as a run records it: no search space
        assert recorded == c, (r["dataset"], r["task"], r["model"])
        assert config_hash({"config": recorded}) == r["config_hash"]


def test_fourdb_run_with_a_mistyped_setting_says_so_in_one_line_and_reads_no_data(tmp_path):
    cache = tmp_path / "cache"
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", "dataset=synthetic", "dataset.params.size=150",
                        "task=taste", "+trainer.epoch=1"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "FOURDB_CACHE": str(cache), "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    out = p.stdout + p.stderr
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert p.returncode == 2, out
    assert len(errors) == 1 and "did you mean 'epochs'?" in errors[0], out
    assert "Traceback" not in out and "materializ" not in out.lower(), out
    assert not (cache / "datasets").exists(), "the dataset was built"
    assert seconds < 60, seconds
