"""The model zoo: every registered model trains through run_experiment on the synthetic shop.

On ``taste`` (binary, planted two hops away) a constant prediction scores AUROC 0.5; every GNN must
reach 0.7, and the tabular models, which on single-table features see only the user's own noise
columns, must run and give finite metrics but stay below the GNNs. On ``purchase-count`` (regression,
kind-A purchases in the next two weeks) every GNN must beat the MAE of predicting the training mean.
With ``features=dfs`` (aggregates over the user's purchases) the tabular models must beat both too.
The graph is r2ne, so every GNN trains with the purchases as featured edges; a planted column that
only the link rows carry shows that the edge features are used.
"""
import functools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import config

from fourdb.defaults import CONF_DIR
from fourdb.errors import FourdbError
from fourdb.features import FEATURES
from fourdb.models import MODELS, TaskInfo, create_model
from fourdb.experiment.run import run_experiment


def conf_models() -> dict[str, type]:
    """Every model with a conf/model YAML: a new model (one .py file plus one YAML) is tested here (and,
    if it only recommends, in test_recommendation.py) without editing either file."""
    names = [yaml.safe_load(p.read_text())["name"] for p in sorted((Path(CONF_DIR) / "model").glob("*.yaml"))]
    return {n: MODELS.get(n) for n in names}


GNNS = [n for n, cls in conf_models().items() if cls.input_kind == "graph" and "binary" in cls.task_types]
TABULAR = [n for n, cls in conf_models().items() if cls.input_kind == "table"]
RECOMMENDERS = [n for n, cls in conf_models().items() if cls.task_types == ("recommendation",)]
TRIVIAL = [n for n, cls in conf_models().items() if cls.input_kind == "labels"]  # tests/test_trivial.py
SIZE = 200
COMMON = ["dataset=synthetic", f"dataset.params.size={SIZE}", "graph=r2ne", "sampler=recent", "sampler.fanouts=[5,5]",
          "trainer.progress=false", "trainer.epochs=3", "trainer.patience=3", "trainer.batch_size=256"]
needs_dfs = pytest.mark.skipif("dfs" not in FEATURES, reason="features=dfs is not registered")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small models on a shared 2-core machine: one intra-op thread is faster than fighting for two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def run(model: str, task: str, features: str = "single_table") -> dict:
    # DFS gives ~55 columns (fttransformer's tokens): fewer training seeds keep the file fast
    fewer = ["max_train_seeds=1200"] if features == "dfs" else []
    return run_experiment(config(*COMMON, f"task={task}", f"model={model}", f"features={features}",
                                 *fewer))["metrics"]


@functools.cache
def mean_predictor_mae(task: str) -> float:
    from fourdb.datasets import load_dataset
    from fourdb.tasks import load_task

    frame = load_task(load_dataset("synthetic", size=SIZE), "synthetic", task).frame
    train, test = frame[frame["split"] == "train"], frame[frame["split"] == "test"]
    return float(np.abs(test["label"] - train["label"].mean()).mean())


def test_every_model_is_tested():
    """Every registered model has its YAML, so the lists above, read from conf/model, hold them all
    (``pair_ranker`` is how a tabular model ranks on a recommendation task: ``create_model`` wraps it)."""
    assert set(MODELS) == set(GNNS) | set(TABULAR) | set(RECOMMENDERS) | set(TRIVIAL) | {"pair_ranker"}
    assert len(GNNS) >= 5 and len(TABULAR) >= 4 and len(RECOMMENDERS) >= 3 and len(TRIVIAL) == 6


@pytest.mark.parametrize("model", GNNS)
def test_gnn_beats_chance_on_planted_relational_task(model):
    auroc = run(model, "taste")["test"]["auroc"]
    assert auroc >= 0.7, (model, auroc)


@pytest.mark.parametrize("model", ["relgt", "musegnn"])
def test_the_fields_newer_graph_models_find_the_planted_signal(model):
    """The relational graph transformer and MuseGNN reach 0.80 test AUROC on taste, two hops away, as
    sage does (the user's own columns give about 0.51)."""
    auroc = run(model, "taste")["test"]["auroc"]
    assert auroc >= 0.80, (model, auroc)


@pytest.mark.parametrize("model", TABULAR)
def test_tabular_model_runs_on_single_table_features(model):
    metrics = run(model, "taste")
    assert all(math.isfinite(v) for split in metrics.values() for v in split.values()), metrics
    assert 0.0 <= metrics["test"]["auroc"] <= 1.0


def test_gnns_beat_single_table_models_on_taste():
    """The label lives two hops away: no model of the user's own columns comes close to a GNN."""
    gnn = min(run(m, "taste")["test"]["auroc"] for m in GNNS)
    tabular = {m: run(m, "taste")["test"]["auroc"] for m in TABULAR}
    assert gnn >= max(tabular.values()) + 0.1, (gnn, tabular)


@pytest.mark.parametrize("model", GNNS)
def test_gnn_beats_mean_predictor_on_regression(model):
    mae, baseline = run(model, "purchase-count")["test"]["mae"], mean_predictor_mae("purchase-count")
    assert mae <= 0.9 * baseline, (model, mae, baseline)


@pytest.mark.parametrize("model", TABULAR)
def test_tabular_model_runs_on_regression(model):
    metrics = run(model, "purchase-count")
    assert all(math.isfinite(v) for split in metrics.values() for v in split.values()), metrics


@needs_dfs
@pytest.mark.parametrize("model", TABULAR)
def test_tabular_model_on_dfs_features_beats_trivial_baselines(model):
    """Aggregates over the user's purchases (e.g. the mode of their items' kind) carry the signal."""
    auroc = run(model, "taste", "dfs")["test"]["auroc"]
    assert auroc >= 0.6, (model, auroc)
    mae, baseline = run(model, "purchase-count", "dfs")["test"]["mae"], mean_predictor_mae("purchase-count")
    assert mae < baseline, (model, mae, baseline)


@functools.cache
def graph_data(kind: str):
    from fourdb.datasets import load_dataset
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task

    db = load_dataset("synthetic", size=150)
    task = load_task(db, "synthetic", "taste")
    return graph_inputs(config("dataset=synthetic", "task=taste", f"graph={kind}", "sampler.fanouts=[4,3]"), db, task,
                        subsample(task, 200, 60, 0))


@pytest.fixture(scope="module")
def small_graph():
    return graph_data("r2ne")


def nodewise(module, data, batch_size: int) -> torch.Tensor:
    """``module``'s outputs for the validation seeds, in batches of ``batch_size``, every neighbour sampled."""
    from fourdb.engine.sampling.source import GraphSource

    source = GraphSource(data, batch_size)
    source.sampler = data.sampler.with_fanouts([-1, -1])
    with torch.no_grad():
        return torch.cat([module(*inputs) for inputs in source.batches("val")])


@pytest.mark.parametrize("model", GNNS)
def test_gnn_layerwise_inference_equals_full_graph_forward(model, small_graph):
    """Each GNN that runs one step per hop exposes encode / layer / readout, so exact layer-wise evaluation
    works for it, with r2ne edge features: it equals the full-graph forward and the node-wise full-fanout
    forward. A model that is not one step per hop (a transformer over each seed's tokens) refuses
    ``engine.inference=layerwise`` in one line, before training."""
    import dataclasses

    from fourdb.contracts import LayerwiseModule
    from fourdb.engine.config import EngineConfig
    from fourdb.engine.feeding.layerwise import layerwise_inference
    from fourdb.errors import SettingError
    from fourdb.train.trainer import TrainerConfig
    from reference import full_graph_forward

    torch.manual_seed(0)
    module = create_model(model, TaskInfo("binary", 2, "auroc")).build(small_graph).eval()
    assert small_graph.graph.kind == "r2ne" and module.edge_encoders is not None
    if not isinstance(module, LayerwiseModule):
        layerwise = dataclasses.replace(small_graph, engine=EngineConfig(inference="layerwise"))
        with pytest.raises(SettingError, match=f"model '{model}' has no layer-wise inference") as err:
            create_model(model, TaskInfo("binary", 2, "auroc")).fit(layerwise, TrainerConfig(progress=False))
        assert "\n" not in str(err.value)
        return
    lw = layerwise_inference(module, small_graph, "val")
    assert torch.allclose(lw, full_graph_forward(module, small_graph, "val"), atol=1e-4)
    full = nodewise(module, small_graph, 40)
    assert torch.allclose(lw, full, atol=1e-4), (lw - full).abs().max()


@pytest.mark.parametrize("model", GNNS)
def test_gnn_output_does_not_depend_on_the_rest_of_its_batch(model, small_graph):
    """The batch-independence rule (docs/add-a-model.md), for every GNN, layer-wise or not: with every
    neighbour sampled, a seed's output is the same in batches of 40, of 7 and all at once."""
    torch.manual_seed(0)
    module = create_model(model, TaskInfo("binary", 2, "auroc")).build(small_graph).eval()
    forty = nodewise(module, small_graph, 40)
    assert forty.std() > 1e-4  # seeds differ: the comparisons below compare something
    for size in (7, len(small_graph.seeds["val"])):
        other = nodewise(module, small_graph, size)
        assert torch.allclose(forty, other, atol=1e-4), (size, (forty - other).abs().max())


def _edge_features(data, change):
    """``data`` with each featured edge type's link-row columns replaced by ``change(numeric, categorical)``."""
    import dataclasses

    from fourdb.columns import EncodedTable

    feats = {et: EncodedTable(*change(f.numeric, f.categorical), f.cardinalities, datetimes=f.datetimes)
             for et, f in data.graph.edge_features.items()}
    return dataclasses.replace(data, graph=dataclasses.replace(data.graph, edge_features=feats))


@pytest.mark.parametrize("model", GNNS)
def test_gnn_output_depends_on_edge_features(model, small_graph):
    """Shuffling the link rows' columns over the edges changes the predictions; r2n has no edge features."""
    from fourdb.contracts import LayerwiseModule
    from fourdb.engine.feeding.layerwise import layerwise_inference

    torch.manual_seed(0)
    module = create_model(model, TaskInfo("binary", 2, "auroc")).build(small_graph).eval()
    perm = np.random.default_rng(0).permutation(len(next(iter(small_graph.graph.edge_features.values())).numeric))
    shuffled = _edge_features(small_graph, lambda num, cat: (num[perm], cat[perm]))
    if isinstance(module, LayerwiseModule):
        def predict(data):
            return layerwise_inference(module, data, "val")
    else:
        def predict(data):
            return nodewise(module, data, 40)
    assert not torch.allclose(predict(small_graph), predict(shuffled), atol=1e-5)
    r2n = graph_data("r2n")
    assert not r2n.graph.edge_features
    assert create_model(model, TaskInfo("binary", 2, "auroc")).build(r2n).edge_encoders is None


def test_gnn_learns_from_a_column_only_link_rows_carry():
    """Planted: items all look alike and the purchase row's quantity says the item's kind (which the
    taste label is about). With its edge features a GNN reads the kind; with them blanked it is blind."""
    from sklearn.metrics import roc_auc_score

    from fourdb.datasets import load_dataset
    from fourdb.rdb import Database
    from fourdb.experiment.inputs.graph import graph_inputs
    from fourdb.experiment.inputs import subsample
    from fourdb.tasks import load_task
    from fourdb.train.trainer import TrainerConfig

    db = load_dataset("synthetic", size=150)
    task = load_task(db, "synthetic", "taste")  # labels from the true kinds
    tables = dict(db.tables)
    kind = tables["items"].set_index("item_id")["kind"]
    tables["purchases"] = tables["purchases"].assign(
        quantity=np.where(tables["purchases"]["item_id"].map(kind) == "A", 1.0, 3.0))
    tables["items"] = tables["items"].assign(kind="A", price=1.0)
    splits = subsample(task, 1500, 300, 0)
    data = graph_inputs(config("dataset=synthetic", "task=taste", "graph=r2ne", "sampler=recent",
                               "sampler.fanouts=[5,5]"), Database(db.schema, tables), task, splits)
    blind = _edge_features(data, lambda num, cat: (np.zeros_like(num), np.zeros_like(cat)))
    y = splits["test"]["label"].to_numpy()
    auroc = {}
    for name, d in (("edge features", data), ("blanked", blind)):
        torch.manual_seed(0)
        model = create_model("sage", TaskInfo("binary", 2, "auroc")).fit(
            d, TrainerConfig(epochs=3, batch_size=256, progress=False))
        auroc[name] = roc_auc_score(y, model.predict(d, "test"))
    assert auroc["edge features"] >= 0.75 and auroc["edge features"] >= auroc["blanked"] + 0.15, auroc


@pytest.mark.parametrize("model", ["mlp", "gat"])
def test_unknown_model_parameter_is_a_clear_error(model):
    """Refused when the model is made, before any input is built (tests/test_config.py: every model)."""
    with pytest.raises(FourdbError, match="no parameter 'hiden' \\(did you mean 'hidden'\\?\\)"):
        create_model(model, TaskInfo("binary", 2, "auroc"), hiden=32)


def test_optuna_direction_follows_the_task_metric():
    from omegaconf import OmegaConf

    from fourdb.cli.run import metric_direction

    synthetic = OmegaConf.create({"name": "synthetic", "path": None})
    assert metric_direction(synthetic, "taste") == "maximize"  # auroc
    assert metric_direction(synthetic, "purchase-count") == "minimize"  # mae
    assert metric_direction(OmegaConf.create({"name": "nycflights13"}), "arrival-delay") == "minimize"


def test_optuna_sweep_runs_trials_and_reports_best(tmp_path):
    import os
    import subprocess
    import sys

    sweep = tmp_path / "sweep"
    p = subprocess.run([sys.executable, "-m", "fourdb.cli", "run", "-m", "experiment=synthetic-taste",
                        "hparams_search=optuna", "hydra.sweeper.n_trials=2", "model=mlp", "dataset.params.size=150",
                        "trainer.epochs=1", "trainer.progress=false", f"hydra.sweep.dir={sweep}"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Directions: ['maximize']" in p.stderr + p.stdout
    assert "Best value" in p.stderr + p.stdout
    assert len(list(sweep.glob("*/record.json"))) == 2


def test_gbdt_predicts_a_block_of_rows_at_a_time_as_it_would_all_at_once(monkeypatch):
    """GBDT predicts a wide split (a recommendation task's pairs) a block of rows at a time, so that its
    float64 copy stays small; the predictions equal one pass over every row."""
    from fourdb.features.base import TableData
    from fourdb.columns import EncodedTable
    from fourdb.models import gbdt

    rng = np.random.default_rng(0)

    def split(n):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        codes = rng.integers(1, 4, (n, 1))
        return EncodedTable(x, codes, [4], ["a", "b", "c"], ["k"]), (x[:, 0] + (codes[:, 0] == 2) > 0.5).astype(np.int64)

    (train, y), (val, yv), (test, _) = split(300), split(100), split(53)
    data = TableData({"train": train, "val": val, "test": test}, {"train": y, "val": yv})
    model = create_model("gbdt", TaskInfo("binary", 2, "auroc"), seed=0, max_iter=20).fit(data)
    whole = model.predict(data, "test")
    monkeypatch.setattr(gbdt, "_BLOCK_ROWS", 10)
    blocks = model.predict(data, "test")
    assert blocks.shape == (53,) and 0.0 < blocks.std()
    np.testing.assert_array_equal(blocks, whole)



def test_lightgbm_splits_category_columns_natively_and_stops_early():
    """The label is planted on two scattered codes (2 and 5 of 8) of a category column: LightGBM reads that
    column as categorical (its splits test code sets, ``==``), the numeric ones as numbers, and stops
    ``patience`` rounds after its best validation AUROC, long before its round budget."""
    from sklearn.metrics import roc_auc_score

    from fourdb.features.base import TableData
    from fourdb.columns import EncodedTable

    rng = np.random.default_rng(0)

    def split(n):
        x = rng.normal(size=(n, 2)).astype(np.float32)
        codes = rng.integers(0, 8, (n, 2))
        y = (np.isin(codes[:, 0], [2, 5]) ^ (rng.random(n) < 0.1)).astype(np.int64)
        return EncodedTable(x, codes, [8, 8], ["a", "b"], ["k", "j"]), y

    (train, y), (val, yv), (test, yt) = split(1500), split(500), split(500)
    data = TableData({"train": train, "val": val, "test": test}, {"train": y, "val": yv})
    model = create_model("lightgbm", TaskInfo("binary", 2, "auroc"), seed=0, n_estimators=500, patience=10).fit(data)
    dump = model.booster.dump_model()
    categorical = {i for i, info in enumerate(dump["feature_infos"].values()) if info["values"]}
    assert categorical == {2, 3}  # numeric columns first, then the category columns

    def splits(node):
        if "split_index" not in node:
            return []
        return [(node["split_feature"], node["decision_type"])] + splits(node["left_child"]) + splits(node["right_child"])

    used = [s for tree in dump["tree_info"] for s in splits(tree["tree_structure"])]
    assert (2, "==") in used and all(kind == "==" for f, kind in used if f in categorical)
    assert all(kind == "<=" for f, kind in used if f not in categorical)
    engine = model.report()["engine"]
    assert engine["early_stopping_metric"] == "auc"
    assert engine["best_round"] < 100 and engine["rounds"] == engine["best_round"] + 10
    assert roc_auc_score(yt, model.predict(data, "test")) > 0.85


@pytest.mark.parametrize("task_type,metric,stops_on", [("multiclass", "accuracy", "multi_error"),
                                                       ("multiclass", "macro_f1", "multi_logloss"),
                                                       ("regression", "mae", "l1"), ("regression", "rmse", "l2")])
def test_lightgbm_predicts_each_task_type_and_stops_on_its_metric(task_type, metric, stops_on):
    """Class probabilities [N, C] in code order, or values [N]; early stopping on the task's metric where
    LightGBM has it (MAE), else the objective's loss."""
    from fourdb.features.base import TableData
    from fourdb.columns import EncodedTable

    rng = np.random.default_rng(1)

    def split(n):
        x = rng.normal(size=(n, 2)).astype(np.float32)
        codes = rng.integers(0, 6, (n, 1))
        y = codes[:, 0] % 3 if task_type == "multiclass" else 3.0 * x[:, 0] + rng.normal(size=n)
        return EncodedTable(x, codes, [6], ["a", "b"], ["k"]), y

    (train, y), (val, yv), (test, yt) = split(900), split(300), split(300)
    data = TableData({"train": train, "val": val, "test": test}, {"train": y, "val": yv})
    model = create_model("lightgbm", TaskInfo(task_type, 3, metric), seed=0).fit(data)
    pred = model.predict(data, "test")
    assert model.report()["engine"]["early_stopping_metric"] == stops_on
    if task_type == "multiclass":
        assert pred.shape == (300, 3) and np.allclose(pred.sum(1), 1) and (pred.argmax(1) == yt).mean() > 0.95
    else:
        assert pred.shape == (300,) and np.abs(pred - yt).mean() < 0.5 * np.abs(yt - y.mean()).mean()
