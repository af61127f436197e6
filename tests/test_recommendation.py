"""The recommendation family end to end: labels, metrics, baselines and the planted tasks.

The browsing database plants next week's views on the shelf a user browses now (two hops away:
user -> view -> product -> shelf), and a leak twin (``next-gifts``: a random product stored one day after
each cutoff). A relational model must beat repeat and popularity on the first by a margin; every model
must score on the second as popularity does, which is chance.
"""
import functools
from pathlib import Path

import dgl
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import config

from fourdb.datasets import load_dataset
from fourdb.tasks.interactions import Interactions
from fourdb.metrics import compute
from fourdb.models import TaskInfo, create_model
from fourdb.rdb import Database
from fourdb.experiment.run import run_experiment
from fourdb.tasks import find_task, load_task, materialize
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

@pytest.mark.parametrize("model", RECOMMENDERS + ["gbdt", "lightgbm", "mlp", "sage"])
def test_every_model_is_at_chance_on_the_planted_leak(model):
    """next-gifts: a random product one day after each cutoff. Popularity (no signal) is chance; no model
    may beat it by more than noise, since only the future could tell."""
    chance = run("popularity", "next-gifts")["test"]["map"]
    score = run(model, "next-gifts", "single_table", *LEAK_BUDGET)["test"]["map"]
    assert np.isfinite(score) and score <= chance + 0.02, (model, score, chance)


def test_relational_models_beat_repeat_and_popularity_on_the_planted_task():
    """The tabular rankers on DFS pairs, the GNN's two towers and the identity-aware GNN all read the shelf
    two hops away."""
    pop, rep = run("popularity", "next-views")["test"]["map"], run("repeat", "next-views")["test"]["map"]
    gbdt, lightgbm = (run(m, "next-views", "dfs")["test"]["map"] for m in ("gbdt", "lightgbm"))
    towers = run("sage", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    identity = run("idgnn", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    print(f"next-views test MAP@10: popularity {pop:.4f}, repeat {rep:.4f}, gbdt on DFS pairs {gbdt:.4f}, "
          f"lightgbm on DFS pairs {lightgbm:.4f}, sage two towers {towers:.4f}, identity-aware sage {identity:.4f}")
    assert rep >= pop * 1.2 and min(gbdt, lightgbm, towers, identity) >= rep * 1.5, \
        (pop, rep, gbdt, lightgbm, towers, identity)


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


# -- the identity-aware GNN's machinery -------------------------------------------------------------------

@functools.cache
def browsing_graph():
    from fourdb.graph import build_graph

    return build_graph(load_dataset("browsing", size=60), "r2ne")


def test_isolated_trees_are_each_seeds_own_neighbourhood():
    """With ``isolate`` a batch holds, per seed, exactly the (type, row) nodes that sampling the seed alone
    reaches (full fanouts: no randomness), and says which seed reached each."""
    from fourdb.engine.sampling.sampler import TemporalSampler

    graph = browsing_graph()
    sampler = TemporalSampler(graph, [-1, -1])
    t = int(pd.Timestamp("2021-03-01").value)
    seeds, cuts = np.array([0, 0, 1, 2]), np.array([t, t, t, t + 30 * 86_400 * 10**9])
    batch = sampler.sample("users", seeds, cuts, np.random.default_rng(0), isolate=True)
    for i, (seed, cut) in enumerate(zip(seeds, cuts)):
        alone = sampler.sample("users", [seed], [cut], np.random.default_rng(0))
        want = {(ty, int(n)) for ty, nodes in alone.input_nodes.items() for n in nodes}
        got = {(ty, int(n)) for ty, nodes in batch.input_nodes.items()
               for n, g in zip(nodes, batch.input_groups[ty]) if g == i}
        assert got == want and len(want) > 1


def test_both_ways_holds_every_sampled_edge_and_its_reverse_once():
    from fourdb.engine.sampling.links import both_ways
    from fourdb.engine.sampling.sampler import TemporalSampler

    graph = browsing_graph()
    batch = TemporalSampler(graph, [3, 3]).sample("users", np.arange(6), np.full(6, int(pd.Timestamp("2021-03-01").value)),
                                                   np.random.default_rng(1), isolate=True)
    block = both_ways(batch.blocks, graph.reverse, graph.ntypes)
    assert all(block.num_src_nodes(t) == block.num_dst_nodes(t) == batch.blocks[0].num_src_nodes(t) for t in graph.ntypes)
    for et in graph.canonical_etypes:
        want = set()
        for b in batch.blocks:
            for rel, flip in ((et, False), (graph.reverse[et], True)):
                s, d = (x.tolist() for x in b.edges(etype=rel))
                want |= {(d_, s_) if flip else (s_, d_) for s_, d_ in zip(s, d)}
        s, d = (x.tolist() for x in block.edges(etype=et))
        got = list(zip(s, d))
        if et in graph.edge_features:  # a link row per edge: two links of one pair are two edges
            got = list(zip(s, d, block.edges[et].data[dgl.EID].tolist()))
        assert {g[:2] for g in got} == want and len(got) == len(set(got))


def test_identity_ranking_puts_reached_rows_first_then_popular_ones_and_never_unborn():
    """Reached rows by score, then every other existing row by popularity; a row not born by the cutoff is
    left out even when reached."""
    from types import SimpleNamespace

    from fourdb.engine.sampling.links import IdentitySource

    day = 86_400 * 10**9
    inter = Interactions(src=np.array([0, 0, 0, 1]), dst=np.array([3, 3, 1, 3]), known=np.arange(4) * day, n_dst=5,
                         dst_born=np.array([0, 0, 0, 0, 50 * day]), window=7 * day)
    fake = SimpleNamespace(rec=SimpleNamespace(interactions=inter), _popular={})
    fake.popular = lambda t: IdentitySource.popular(fake, t)
    scores = torch.tensor([[0.5, 2.0, 1.0], [0.1, float("-inf"), float("-inf")]])
    index = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 0]])
    group, rows = np.array([0, 0, 0, 1]), np.array([2, 4, 0, 4])  # seed 0 reached rows 2, 4 (unborn), 0
    top = IdentitySource.ranked(fake, scores, index, group, rows, np.array([10 * day, 10 * day]), 4).numpy()
    assert top[0].tolist() == [0, 2, 3, 1]  # 4 is unborn; then popularity: 3 (3 links), 1
    assert top[1][:2].tolist() == [3, 1] and set(top[1][2:]) == {0, 2}  # reached only the unborn 4: popularity


def test_contextgnn_ranks_at_least_as_well_as_the_identity_aware_gnn_and_the_two_towers():
    """next-views: the shelf a user browses is reached by its tree, and the products of that shelf it did
    not reach are what the shallow embeddings learn to rank outside it."""
    towers = run("sage", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    identity = run("idgnn", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    context = run("contextgnn", "next-views", "single_table", "trainer.epochs=4")["test"]["map"]
    print(f"next-views test MAP@10: contextgnn {context:.4f}, idgnn {identity:.4f}, sage two towers {towers:.4f}")
    assert context >= max(identity, towers), (context, identity, towers)


class StubIdentity(torch.nn.Module):
    """What ContextNet reads of the identity-aware GNN: final states and a pair score per reached node."""

    source, destination = "users", "products"

    def __init__(self, seed_states, pair):
        super().__init__()
        self.seed_states, self.pair = seed_states, pair

    def states(self, block, feats, num_seeds):
        return {"users": self.seed_states, "products": torch.zeros(len(self.pair), self.seed_states.shape[1])}

    def pair_scores(self, h):
        return self.pair


def test_contextgnn_scores_reached_rows_pairwise_the_rest_by_embedding_and_never_an_unborn_one():
    """Seed 0's tree reached destinations 1 and 4 (4 is not born yet); the others are scored by the
    tower, where destination 3's embedding points the way of the query. The scores are a mixture: they
    sum to one over the destinations that exist, and the fuse weight moves mass between the two parts."""
    from fourdb.models.contextgnn import ContextNet

    hidden, n = 4, 6
    net = ContextNet(StubIdentity(torch.ones(2, hidden), torch.tensor([0.0, 3.0, -1.0])), [n], hidden, 1.0)
    with torch.no_grad():
        table = net.ids.weight
        table.zero_()
        table[3] = 5.0
        table[5] = 50.0  # destination 5 is not born either: its embedding must not matter
        net.project.weight.copy_(torch.eye(hidden))
        net.project.bias.zero_()
        net.popularity.zero_()
        net.fuse.weight.zero_()
    reached = torch.tensor([[0, 0, 1], [1, 4, 2]])  # seed 1 reached destination 2
    alive = torch.tensor([[True, True, True, True, False, False]])
    prior = torch.zeros(1, n, 2)
    rows = torch.arange(n)[None, :]
    for inside_bias, first in ((4.0, 1), (-4.0, 3)):
        with torch.no_grad():
            net.fuse.bias.copy_(torch.tensor([inside_bias, 0.0]))
        out = net(None, None, reached, 2, torch.tensor([0, 0]), prior, alive, rows)
        assert torch.isinf(out[:, 4:]).all() and (out[:, 4:] < 0).all()  # unborn: reached or not, no score
        assert torch.isfinite(out[:, :4]).all()
        assert torch.allclose(out[:, :4].exp().sum(1), torch.ones(2), atol=1e-5)
        assert int(out[0].argmax()) == first  # inside weighted up: the reached row; down: the tower's best
        outside = out[0, [0, 2, 3]]
        assert int(outside.argmax()) == 2  # destination 3, by its embedding


def test_id_embeddings_find_each_destination_by_key_in_a_database_with_other_row_numbers():
    """A model learns its vectors on one build of the database and scores another (certification cuts it):
    here the products in reverse order and one the model never saw. Every product reaches the rows of its
    own key and of its shelf's; the new one, its block's row for unseen keys and its shelf's."""
    from fourdb.engine.sampling.links import key_rows, key_sizes, key_vocabularies
    from fourdb.models.id_embeddings import IdEmbeddings

    db = load_dataset("browsing", size=60)
    vocab = key_vocabularies(Interactions.from_task(load_task(db, "browsing", "next-views"), db).dst_ids)
    products = db.tables["products"]
    new = pd.DataFrame({"product_id": [products["product_id"].max() + 1], "shelf_id": [0], "price": [1.0]})
    other = Database(db.schema, {**db.tables, "products": pd.concat([products.iloc[::-1], new], ignore_index=True)})
    ids = {name: Interactions.from_task(materialize(find_task("browsing", "next-views"), d), d).dst_ids
           for name, d in (("fitted", db), ("other", other))}
    assert not np.array_equal(ids["fitted"]["product_id"], ids["other"]["product_id"][:len(products)])
    table = IdEmbeddings(key_sizes(vocab), 4)
    vectors = {name: table(key_rows(i, vocab)) for name, i in ids.items()}
    where = {name: pd.Index(i["product_id"]) for name, i in ids.items()}
    same = where["other"].get_indexer(ids["fitted"]["product_id"])
    assert torch.equal(vectors["other"][same], vectors["fitted"])
    rows = key_rows(ids["other"], vocab)[:, where["other"].get_loc(new["product_id"][0])]
    assert rows.tolist() == [len(vocab["product_id"]), len(vocab["product_id"]) + 1 + 0]  # unseen; shelf 0


@functools.cache
def prepared(model: str, *more: str):
    """The untrained model of a next-views run and its inputs."""
    from fourdb.experiment.prepare import prepare_run

    run = prepare_run(config(*COMMON, "task=next-views", f"model={model}", *more))
    return run.model, run.inputs()[0]


@pytest.mark.parametrize("model", ["two_tower", "idgnn"])
def test_id_embeddings_are_opt_in_and_leave_the_model_as_it_was_when_not_given(model):
    """Not given (the YAML does not state it, so the boards' config hashes stay): no table, no rows in the
    batches, the parameters of before. Given: one table, and every destination node carries its rows."""
    from fourdb.engine.distribution.embedding_sync import embedding_tables
    from fourdb.train.trainer import TrainerConfig

    assert "id_embeddings" not in config(*COMMON, "task=next-views", f"model={model}").model.params
    keys = {}
    for on in (False, True):
        m, data = prepared(model, *(["+model.params.id_embeddings=true"] if on else []))
        source, net = m.make_source(data, TrainerConfig(batch_size=32)), m.build(data)
        n = len(data.seeds["train"])
        inputs, _ = source.train_batch(np.arange(n - 32, n), 0)  # late seeds: their trees reach products
        feats = [x for x in inputs if isinstance(x, dict)]
        assert all(("id_rows" in f["products"]) == on for f in feats)
        assert len(embedding_tables(net)) == on
        assert torch.isfinite(net(*inputs)).any()
        keys[on] = set(net.state_dict())
    assert keys[True] - keys[False] == {"ids.weight"} and keys[False] < keys[True]


# -- 4DBInfer retrieval tasks: imported, ranked among the shipped candidates -------------------------------

def write_retrieval(root, users=60, items=40, negatives=9):
    """A 4DBInfer folder with a retrieval task: each user keeps buying from a favourite few items (so a
    user's history tells), and each validation and test purchase ships with ``negatives`` random items."""
    import yaml

    rng = np.random.default_rng(0)
    (root / "data").mkdir(parents=True)
    (root / "next").mkdir()
    favourite = rng.integers(0, items, (users, 3))
    n = 3000
    user = rng.integers(0, users, n)
    item = np.where(rng.random(n) < 0.7, favourite[user, rng.integers(0, 3, n)], rng.integers(0, items, n))
    time = np.datetime64("2022-01-01") + np.sort(rng.integers(0, 300 * 86400, n)).astype("timedelta64[s]")
    pd.DataFrame({"user_id": np.arange(users), "age": rng.integers(18, 70, users).astype(float)}).to_parquet(root / "data/users.pqt")
    pd.DataFrame({"item_id": np.arange(items), "price": rng.random(items)}).to_parquet(root / "data/items.pqt")
    rows = pd.DataFrame({"user_id": user, "item_id": item, "time": time})
    cut = [0, int(n * 0.7), int(n * 0.85), n]
    for split, (lo, hi) in zip(("train", "validation", "test"), zip(cut[:-1], cut[1:])):
        part = rows.iloc[lo:hi].reset_index(drop=True)
        if split != "train":  # 4DBInfer's protocol: a query per row, its true item and random negatives
            neg = part.loc[np.repeat(part.index, negatives)].reset_index(drop=True)
            neg["item_id"] = rng.integers(0, items, len(neg))
            part = pd.concat([part.assign(label=1), neg.assign(label=0)], ignore_index=True)
            part = part.drop_duplicates(["user_id", "time", "item_id"], keep="first")
            part["query_idx"] = part.groupby(["user_id", "time"]).ngroup()
        part.to_parquet(root / f"next/{split}.pqt")
    meta = {"dataset_name": "tinystore", "tables": [
        {"name": "users", "source": "data/users.pqt", "format": "parquet", "time_column": None,
         "columns": [{"name": "user_id", "dtype": "primary_key"}, {"name": "age", "dtype": "float"}]},
        {"name": "items", "source": "data/items.pqt", "format": "parquet", "time_column": None,
         "columns": [{"name": "item_id", "dtype": "primary_key"}, {"name": "price", "dtype": "float"}]}],
        "tasks": [{"name": "next-item", "source": "next/{split}.pqt", "format": "parquet", "time_column": "time",
                   "columns": [{"name": "user_id", "dtype": "foreign_key", "link_to": "users.user_id"},
                               {"name": "item_id", "dtype": "foreign_key", "link_to": "items.item_id"},
                               {"name": "time", "dtype": "datetime"}],
                   "evaluation_metric": "mrr", "target_column": "item_id", "target_table": "purchases",
                   "task_type": "retrieval", "key_prediction_label_column": "label",
                   "key_prediction_query_idx_column": "query_idx"}]}
    (root / "metadata.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return root


@functools.cache
def retrieval_folder(tmp_root: str) -> str:
    from fourdb.importers import import_database

    src = write_retrieval(Path(tmp_root) / "dbb")
    import_database(src, Path(tmp_root) / "db")
    return str(Path(tmp_root) / "db")


def shipped_mrr(folder_4dbinfer, split: str, users, times, ranking) -> float:
    """4DBInfer's MRR from its own files: per query_idx, its candidate rows sorted by score (here: a
    candidate's place in our ranking), the reciprocal rank of the first true one; 0 if none is ranked."""
    rows = pd.read_parquet(Path(folder_4dbinfer) / f"next/{ {'val': 'validation', 'test': 'test'}[split] }.pqt")
    place = {}
    for u, t, r in zip(users, times, ranking):
        for i, item in enumerate(r):
            if item >= 0:
                place[(u, pd.Timestamp(t), item)] = i
    values = []
    for _, q in rows.groupby("query_idx"):
        score = [-place.get((u, pd.Timestamp(t), i), 10**9) for u, t, i in zip(q["user_id"], q["time"], q["item_id"])]
        ordered = q["label"].to_numpy()[np.argsort(score, kind="stable")[::-1]]
        values.append(1.0 / (np.flatnonzero(ordered == 1)[0] + 1))
    return float(np.mean(values))


def test_a_4dbinfer_retrieval_task_imports_as_a_recommendation_task_over_its_candidates(tmp_path):
    folder = retrieval_folder(str(tmp_path))
    spec = find_task(folder, "next-item")
    assert spec.kind.name == "recommendation" and spec.link_table == "task_next_item" and spec.metric == "mrr"
    db = Database.load(folder)
    task = materialize(spec, db)
    shipped = pd.read_parquet(tmp_path / "dbb/next/test.pqt")
    test = task.split("test")
    # every shipped test query, asked 1 ns before its time, ranks exactly its shipped candidates
    assert len(test) == shipped["query_idx"].nunique()
    for (u, t), q in list(shipped.groupby(["user_id", "time"]))[:50]:
        row = test[(test["entity"] == u) & (test["cutoff"] == pd.Timestamp(t) - pd.Timedelta(1, "ns"))].iloc[0]
        assert set(row["candidates"]) == set(q["item_id"]) and set(row["label"]) == set(q.loc[q["label"] == 1, "item_id"])
    # a link is known at its time, and a query is asked 1 ns before: its own link is not known yet
    inter = Interactions.from_task(task, db)
    first = test.iloc[0]
    row = int(pd.Index(db.tables["users"]["user_id"]).get_loc(first["entity"]))
    known_then = inter.dst[(inter.src == row) & (inter.known <= first["cutoff"].value)]
    at_query = inter.dst[(inter.src == row) & (inter.known == first["label_known_at"].value)]
    assert len(at_query) and len(known_then) < ((inter.src == row) & (inter.known <= first["label_known_at"].value)).sum()


@pytest.mark.parametrize("model,more", [("repeat", ()), ("gbdt", ()), ("idgnn", ("graph=r2n", "sampler.fanouts=[10,5]")),
                                        ("contextgnn", ("graph=r2n", "sampler.fanouts=[10,5]")),
                                        ("sage", ("graph=r2n", "sampler.fanouts=[10,5]"))])
def test_the_candidate_protocol_equals_4dbinfers_mrr_from_its_files(tmp_path, model, more):
    """Each model ranks a query's shipped candidates only; the recorded MRR equals 4DBInfer's MRR
    recomputed from the shipped rows (label, query_idx) and the run's predictions."""
    folder = retrieval_folder(str(tmp_path))
    record = run_experiment(config("dataset=folder", f"dataset.path='{folder}'", "task=next-item", f"model={model}",
                                   "trainer.progress=false", "trainer.epochs=2", *more), tmp_path / "run")
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    task = materialize(find_task(folder, "next-item"), Database.load(folder)).split("test")
    items = Database.load(folder).tables["items"]["item_id"].to_numpy()
    assert (preds["entity"].to_numpy() == task["entity"].to_numpy()).all()
    assert all(set(r) == set(items[c]) for r, c in zip(preds["prediction"], task["candidates"]))
    want = shipped_mrr(tmp_path / "dbb", "test", preds["entity"], preds["cutoff"] + pd.Timedelta(1, "ns"),
                       preds["prediction"])
    assert record["metrics"]["test"]["mrr"] == pytest.approx(want, abs=1e-12)
    if model == "repeat":  # a user's favourites: far better than a random order of 10 candidates (0.29)
        assert want > 0.45


def test_a_pair_table_filled_a_block_at_a_time_is_its_parts_rows_side_by_side(monkeypatch):
    """A pair table is filled in place, a few pairs at a time (here 7): each pair's row is its seed's row,
    its candidate's row and its own history row, as gathering and concatenating them gives, with the columns
    each part keeps."""
    from fourdb.features import pairs
    from fourdb.columns import EncodedTable

    rng = np.random.default_rng(0)

    def table(rows, numeric, categorical, name):
        return EncodedTable(rng.normal(size=(rows, numeric)).astype(np.float32), rng.integers(0, 9, (rows, categorical)),
                            [9] * categorical, [f"{name}{i}" for i in range(numeric)],
                            [f"{name}c{i}" for i in range(categorical)])

    source, dest, history = table(30, 4, 2, "s"), table(12, 3, 0, "d"), table(50, 5, 1, "h")
    keep = [(np.array([1, 0, 1, 1], bool), np.array([1, 1], bool)), (np.ones(3, bool), np.zeros(0, bool)),
            (np.array([0, 1, 1, 1, 1], bool), np.array([1], bool))]
    seed, where = rng.integers(0, 30, 50), rng.integers(0, 12, 50)
    monkeypatch.setattr(pairs, "_BLOCK_ROWS", 7)
    got = pairs._side_by_side([(source, seed, "source.", keep[0]), (dest, where, "destination.", keep[1]),
                               (history, None, "", keep[2])])
    parts = [(source, seed), (dest, where), (history, np.arange(50))]
    np.testing.assert_array_equal(got.numeric, np.concatenate([t.numeric[r][:, k[0]] for (t, r), k in zip(parts, keep)], 1))
    np.testing.assert_array_equal(got.categorical,
                                  np.concatenate([t.categorical[r][:, k[1]] for (t, r), k in zip(parts, keep)], 1))
    assert got.numeric.dtype == np.float32 and got.cardinalities == [9, 9, 9]
    assert got.numeric_names[:4] == ["source.s0", "source.s2", "source.s3", "destination.d0"]
    assert got.numeric_names[-4:] == ["h1", "h2", "h3", "h4"]
    assert got.categorical_names == ["source.sc0", "source.sc1", "hc0"]


def test_a_column_with_one_value_on_every_training_pair_is_left_out_of_every_split(monkeypatch):
    """Constant, never present, or one value with missing rows: which columns vary is judged on the rows the
    training pairs read (not the others), a block at a time; the pair tables of every split keep the same columns."""
    from fourdb.features import pairs
    from fourdb.columns import EncodedTable

    nan = np.nan
    numeric = np.array([[1, nan, 5, 2, 0], [1, nan, nan, 3, 0], [1, nan, 5, 2, 0], [1, nan, 5, 2, 9]], np.float32)
    codes = np.array([[3, 1], [3, 2], [3, 1], [4, 1]])
    table = EncodedTable(numeric, codes, [5, 3], list("abcde"), ["k", "m"])
    monkeypatch.setattr(pairs, "_BLOCK_ROWS", 2)
    varies, codes_vary = pairs._varying(table, np.array([2, 0, 1, 0]))  # row 3 is read by no training pair
    assert varies.tolist() == [False, False, True, True, False] and codes_vary.tolist() == [False, True]
    assert [m.tolist() for m in pairs._varying(table, None)] == [[False, False, True, True, True], [True, True]]

    cfg = config("dataset=browsing", "dataset.params.size=150", "task=next-views", "model=gbdt", "features=dfs",
                 "max_train_seeds=300", "max_val_seeds=200")
    from fourdb.experiment.inputs import INPUT_KINDS
    from fourdb.experiment.prepare import prepare_run

    run = prepare_run(cfg)
    data = INPUT_KINDS.get("pairs").build(cfg, run.db, run.task, run.splits)
    train = data.pairs.features["train"]
    assert all(data.pairs.features[s].numeric_names == train.numeric_names for s in ("val", "test"))
    assert (pd.DataFrame(train.numeric).nunique(dropna=False) > 1).all() and len(train.numeric_names) > 20
    assert (pd.DataFrame(train.categorical).nunique() > 1).all()
