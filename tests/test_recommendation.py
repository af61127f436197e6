"""The recommendation family end to end: labels, metrics, baselines and the planted tasks.

The browsing database plants next week's views on the shelf a user browses now (two hops away:
user -> view -> product -> shelf), and a leak twin (``next-gifts``: a random product stored one day after
each cutoff). A relational model must beat repeat and popularity on the first by a margin; every model
must score on the second as popularity does, which is chance.
"""
import functools

import numpy as np
import pandas as pd
import pytest
from conftest import config

from fourdb.datasets import load_dataset
from fourdb.features.interactions import Interactions
from fourdb.metrics import compute
from fourdb.models import TaskInfo, create_model
from fourdb.run import run_experiment
from fourdb.tasks import load_task
from test_models import RECOMMENDERS

SIZE = 200
COMMON = ["dataset=browsing", f"dataset.params.size={SIZE}", "graph=r2ne", "sampler=recent", "sampler.fanouts=[5,5]",
          "trainer.progress=false", "trainer.epochs=2", "trainer.batch_size=256", "max_train_seeds=2000"]


@functools.cache
def run(model: str, task: str, features: str = "single_table", *more: str) -> dict:
    return run_experiment(config(*COMMON, f"task={task}", f"model={model}", f"features={features}", *more))["metrics"]


# the leak twin asks only that no model learns anything: a small training budget says as much
LEAK_BUDGET = ("max_train_seeds=600", "max_val_seeds=300", "trainer.epochs=1")


# -- metrics against brute force --------------------------------------------------------------------------

def brute_force(y, s, name):
    k, values = s.shape[1], []
    for true, pred in zip(y, s):
        true = set(true)
        if not true:
            continue
        hits = [p in true for p in pred]
        if name == "map":
            values.append(sum(sum(hits[:i + 1]) / (i + 1) for i in range(k) if hits[i]) / min(len(true), k))
        elif name == "precision":
            values.append(sum(hits) / k)
        elif name == "recall":
            values.append(sum(hits) / len(true))
        elif name == "mrr":
            values.append(next((1 / (i + 1) for i in range(k) if hits[i]), 0.0))
    return float(np.mean(values))


@pytest.mark.parametrize("name", ["map", "precision", "recall", "mrr"])
def test_ranking_metrics_equal_brute_force(name):
    rng = np.random.default_rng(0)
    y = [list(rng.choice(30, rng.integers(0, 6), replace=False)) for _ in range(300)]
    s = np.stack([rng.choice(30, 10, replace=False) for _ in range(300)])
    assert compute(name, y, s) == pytest.approx(brute_force(y, s, name), abs=1e-12)


def test_metrics_equal_relbench_on_the_same_arrays():
    rb = pytest.importorskip("relbench.metrics")
    rng = np.random.default_rng(1)
    y = [list(rng.choice(30, rng.integers(0, 6), replace=False)) for _ in range(300)]
    s = np.stack([rng.choice(30, 10, replace=False) for _ in range(300)])
    isin = np.stack([np.isin(p, t) for t, p in zip(y, s)])
    assert compute("map", y, s) == pytest.approx(rb.map(isin, np.array([len(t) for t in y])), abs=1e-12)
    yb, pb = rng.integers(0, 2, 500), rng.random(500)
    assert compute("roc_auc", yb, pb) == pytest.approx(rb.roc_auc(yb, pb), abs=1e-12)
    yr, pr, train = rng.normal(size=200), rng.normal(size=200), rng.normal(3.0, 2.0, 100)
    nmae = rb.make_nmae(lambda: float(np.std(train, ddof=1)))
    assert compute("nmae", yr, pr, y_train=train) == pytest.approx(nmae(yr, pr), abs=1e-12)


# -- labels and what can be recommended ------------------------------------------------------------------

def test_labels_equal_a_recount_of_the_views():
    db = load_dataset("browsing", size=SIZE)
    task = load_task(db, "browsing", "next-views")
    views, users = db.tables["views"], db.tables["users"].set_index("user_id")
    expected = {}
    for cutoff in task.frame["cutoff"].unique():
        window = views[(views["viewed_at"] > cutoff) & (views["viewed_at"] <= cutoff + pd.Timedelta(days=7))]
        for user, group in window.groupby("user_id"):
            if users.loc[user, "signup_at"] <= cutoff:
                expected[(user, pd.Timestamp(cutoff))] = sorted(set(group["product_id"]))  # product row == key
    got = {(e, pd.Timestamp(c)): sorted(map(int, label))
           for e, c, label in zip(task.frame["entity"], task.frame["cutoff"], task.frame["label"])}
    assert got == expected and len(got) > 1000


def test_destinations_that_do_not_exist_yet_are_never_recommended():
    day = 86_400 * 10**9
    # destination 2 is the most linked, but its row is born after the first cutoff
    inter = Interactions(src=np.array([0, 1, 0, 1, 1]), dst=np.array([2, 2, 2, 0, 1]), known=np.arange(5) * day,
                         n_dst=4, dst_born=np.array([0, 0, 3 * day + 1, np.iinfo(np.int64).min]), window=7 * day)
    top = inter.rank(np.array([0, 0]), np.array([3 * day, 4 * day]), 4, lambda src, t: inter.popularity_score(t)[None, :])
    assert 2 not in top[0] and top[1][0] == 2
    assert set(top[0]) == {0, 1, 3, -1}  # three destinations exist at the first cutoff


def test_a_recommendation_run_ranks_existing_destination_rows(tmp_path):
    record = run_experiment(config(*COMMON, "task=next-views", "model=repeat"), tmp_path)
    preds = pd.read_parquet(tmp_path / "predictions.parquet")
    top = np.stack(preds["prediction"].to_numpy())
    assert top.shape[1] == 10 and (top >= 0).all() and (top < len(load_dataset("browsing", size=SIZE).tables["products"])).all()
    assert (np.sort(top, 1)[:, 1:] != np.sort(top, 1)[:, :-1]).all()  # k distinct destinations
    assert record["task_type"] == "recommendation" and record["metric"] == "map"


# -- the planted tasks ------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", RECOMMENDERS + ["gbdt", "mlp", "sage"])
def test_every_model_is_at_chance_on_the_planted_leak(model):
    """next-gifts: a random product one day after each cutoff. Popularity (no signal) is chance; no model
    may beat it by more than noise, since only the future could tell."""
    chance = run("popularity", "next-gifts")["test"]["map"]
    score = run(model, "next-gifts", "single_table", *LEAK_BUDGET)["test"]["map"]
    assert np.isfinite(score) and score <= chance + 0.02, (model, score, chance)


def test_relational_models_beat_repeat_and_popularity_on_the_planted_task():
    """The tabular ranker on DFS pairs and the GNN's two towers both read the shelf two hops away."""
    pop, rep = run("popularity", "next-views")["test"]["map"], run("repeat", "next-views")["test"]["map"]
    ranker = run("gbdt", "next-views", "dfs")["test"]["map"]
    towers = run("sage", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    print(f"next-views test MAP@10: popularity {pop:.4f}, repeat {rep:.4f}, gbdt on DFS pairs {ranker:.4f}, "
          f"sage two towers {towers:.4f}")
    assert rep >= pop * 1.2 and ranker >= rep * 1.5 and towers >= rep * 1.5, (pop, rep, ranker, towers)


def test_models_that_only_recommend_refuse_other_tasks():
    from fourdb.errors import FourdbError

    for model in RECOMMENDERS:
        with pytest.raises(FourdbError, match=f"model '{model}' does not do binary tasks"):
            create_model(model, TaskInfo("binary", 2, "auroc"))


@pytest.mark.parametrize("change,message", [
    ({"eval_k": None}, r"^t\.yaml: missing 'eval_k'$"),
    ({"destination_table": "prods"}, r"^task 'next-views': table 'prods' is not in the database$"),
    ({"sql": "count(*)"}, r"^task 'next-views': a recommendation SQL must yield a LIST of destination keys"),
    ({"sql": "LIST(DISTINCT v.view_id + 1000000)"}, r"^task 'next-views': no label key is a key of products "
                                                     r"\(e\.g\. \d+\); the LIST must hold products\.product_id values$"),
])
def test_bad_recommendation_task_files_are_one_line(change, message):
    import copy

    from fourdb.errors import TaskError
    from fourdb.tasks import TaskSpec, find_task
    from fourdb.tasks.materialize import materialize

    raw = copy.deepcopy(find_task("browsing", "next-views").raw)
    for key, value in change.items():
        if value is None:
            raw.pop(key)
        elif key == "sql":
            raw["sql"] = raw["sql"].replace("LIST(DISTINCT v.product_id)", value)
        else:
            raw[key] = value
    with pytest.raises(TaskError, match=message) as error:
        materialize(TaskSpec.from_dict(raw, "t.yaml"), load_dataset("browsing", size=SIZE))
    assert "\n" not in str(error.value)
