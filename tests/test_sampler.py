"""The temporal sampler: every hop sees only what is known at the seed's cutoff, and samples what it should.

Block layout used throughout: the sampler's blocks put dst nodes first among src nodes and each block's
dst nodes are the next block's src nodes, so every block's src (and dst) nodes of a type are a prefix of
``input_nodes[type]`` / ``input_cutoffs[type]``. A block's local ids therefore map to global (node, cutoff)
pairs through the batch's input arrays, and every sampled edge at every hop can be checked against the
database by brute force.
"""
import tempfile
from collections import Counter

import dgl
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fourdb.engine.sampling.sampler import STRATEGIES, TemporalSampler
from fourdb.graph import build_graph
from fourdb.graph.build import ALWAYS
from fourdb.rdb import Column, Database, Schema, Table, write_database
from fourdb.tasks import TaskSpec, load_task, materialize
from fourdb.utils import NS_PER_DAY, to_epoch_ns

BASE = pd.Timestamp("2021-01-01")
HALF_DAY = pd.Timedelta("12h")


def nanos(ts) -> np.ndarray:
    return pd.to_datetime(pd.Series(ts)).astype("datetime64[ns]").astype("int64").to_numpy()


# ---------------------------------------------------------------------------------------------------
# brute force: every edge of every type, with the condition under which its source is known


def true_edges(db: Database, kind: str) -> dict:
    """(src, dst, time) per canonical edge type, from the tables themselves: an edge's source is known
    at cutoff c iff ``time <= c`` (static rows have time ALWAYS). Child -> parent: the child row must be
    known; parent -> child: the parent row (the child is the already admitted destination); through a
    link table (r2ne): the link row and the source row."""
    schema = db.schema
    referenced = {fk.link_table for t in schema.tables for fk in t.foreign_keys}
    links = {t.name for t in schema.tables if len(t.foreign_keys) == 2 and t.name not in referenced} \
        if kind == "r2ne" else set()

    def row_times(table):
        t = schema.table(table)
        n = len(db.tables[table])
        return nanos(db.tables[table][t.time_column]) if t.time_column else np.full(n, ALWAYS)

    def rows_of(table, values):
        keys = list(db.tables[table][schema.table(table).primary_key])
        return np.array([keys.index(v) for v in values], dtype=np.int64)

    out = {}
    for t in schema.tables:
        df, times = db.tables[t.name], row_times(t.name)
        if t.name in links:
            a, b = t.foreign_keys
            ra, rb = rows_of(a.link_table, df[a.name]), rows_of(b.link_table, df[b.name])
            ta, tb = row_times(a.link_table), row_times(b.link_table)
            out[(a.link_table, t.name, b.link_table)] = [
                (s, d, max(lt, ta[s])) for s, d, lt in zip(ra, rb, times)]
            out[(b.link_table, f"{t.name}__rev", a.link_table)] = [
                (s, d, max(lt, tb[s])) for s, d, lt in zip(rb, ra, times)]
            continue
        for fk in t.foreign_keys:
            parents = rows_of(fk.link_table, df[fk.name])
            pt = row_times(fk.link_table)
            out[(t.name, f"{t.name}__{fk.name}", fk.link_table)] = [
                (c, p, times[c]) for c, p in enumerate(parents)]
            out[(fk.link_table, f"{t.name}__{fk.name}__rev", t.name)] = [
                (p, c, pt[p]) for c, p in enumerate(parents)]
    return out


def check_batch(batch, graph, truth, fanouts, strategy, seed_type, seeds, cutoffs, hidden=frozenset(),
                id_etypes=None):
    """Every hop of ``batch`` against the brute-force truth. Returns the number of sampled edges.
    ``id_etypes``: the edge types whose block edges carry ids (default: those with features)."""
    id_etypes = set(graph.edge_features if id_etypes is None else id_etypes)
    nodes = {t: v.numpy() for t, v in batch.input_nodes.items()}
    cuts = {t: v.numpy() for t, v in batch.input_cutoffs.items()}
    k = len(seeds)
    assert batch.num_seeds == k and batch.seed_type == seed_type
    assert (nodes[seed_type][:k] == seeds).all() and (cuts[seed_type][:k] == cutoffs).all()
    # a block node is a (node, cutoff) pair, each pair once; cutoffs are inherited from the seeds
    for t in nodes:
        assert len(set(zip(nodes[t], cuts[t]))) == len(nodes[t]), t
        assert set(cuts[t]) <= set(cutoffs)
        # every sampled row (beyond the seeds themselves) is known at its cutoff, or static
        time = graph.node_time(t)[nodes[t]]
        beyond = slice(k if t == seed_type else 0, None)
        assert ((time[beyond] <= cuts[t][beyond]) | (time[beyond] == ALWAYS)).all(), t

    assert len(batch.blocks) == len(fanouts)
    total = 0
    for i, (block, fanout) in enumerate(zip(batch.blocks, fanouts)):
        for t in graph.ntypes:
            assert block.num_dst_nodes(t) <= block.num_src_nodes(t) <= len(nodes.get(t, ()))
            if i + 1 < len(batch.blocks):
                assert block.num_dst_nodes(t) == batch.blocks[i + 1].num_src_nodes(t)
            else:
                assert block.num_dst_nodes(t) == (k if t == seed_type else 0)
        for et in graph.canonical_etypes:
            s, d = (x.numpy() for x in block.edges(etype=et))
            total += len(s)
            src_t, _, dst_t = et
            gs = nodes.get(src_t, np.zeros(0, np.int64))[s]
            cs = cuts.get(src_t, np.zeros(0, np.int64))[s]
            assert (dgl.EID in block.edges[et].data.keys()) == (et in id_etypes), f"hop {i} {et}: edge ids"
            if len(s):
                assert (cs == cuts[dst_t][d]).all(), f"hop {i} {et}: a neighbour did not inherit its seed's cutoff"
                st_ = graph.node_time(src_t)[gs]
                assert ((st_ <= cs) | (st_ == ALWAYS)).all(), f"hop {i} {et}: sampled a row from after the cutoff"
            if len(s) and et in id_etypes:
                # each block edge names the graph edge it was sampled as: its ends, known at the cutoff, once
                eid = block.edges[et].data[dgl.EID].numpy()
                g_src, g_dst, g_time = graph.edges(et)
                assert (g_src[eid] == gs).all() and (g_dst[eid] == nodes[dst_t][d]).all(), f"hop {i} {et}: wrong ids"
                assert (g_time[eid] <= cs).all(), f"hop {i} {et}: an edge from after the cutoff"
                assert len(set(zip(eid, d))) == len(eid), f"hop {i} {et}: an edge sampled twice for one destination"
            by_dst = {}
            for src, dl in zip(gs, d):
                by_dst.setdefault(dl, []).append(src)
            for dl in range(block.num_dst_nodes(dst_t)):
                node, cut = nodes[dst_t][dl], cuts[dst_t][dl]
                known = [(src, tm) for src, dst, tm in truth[et] if dst == node and tm <= cut]
                got = Counter(by_dst.get(dl, []))
                where = f"hop {i} {et} dst {node} at {cut}"
                if (et in hidden or et[1] in hidden) and dst_t == seed_type and dl < k:
                    assert not got, f"{where}: hidden edge type sampled into a seed"
                    continue
                # a subset of the neighbours known at the cutoff, each at most as often as it is linked
                assert not got - Counter(src for src, _ in known), f"{where}: {got} not within {known}"
                want = len(known) if fanout < 0 else min(fanout, len(known))
                assert sum(got.values()) == want, f"{where}: {sum(got.values())} sampled, expected {want}"
                if strategy == "recent" and 0 <= fanout < len(known):
                    thr = sorted((tm for _, tm in known), reverse=True)[fanout - 1]
                    newer = Counter(src for src, tm in known if tm > thr)
                    tied = Counter(src for src, tm in known if tm == thr)
                    assert not newer - got and not (got - newer) - tied, f"{where}: not the most recent"
    return total


# ---------------------------------------------------------------------------------------------------
# random small temporal databases: P (static or timed) <- C (events) <- E (events linking C and P)


def write_pce(folder, n_p, p_times, c_rows, e_rows):
    """P(pid) <- C(cid, pid, at) <- E(eid, cid, pid, at). E is a pure link table, so r2ne makes it edges."""
    tables = [
        Table("P", "P.parquet", [Column("pid", "primary_key"), Column("size", "numeric")]
              + ([Column("made_at", "datetime")] if p_times is not None else []),
              time_column="made_at" if p_times is not None else None),
        Table("C", "C.parquet", [Column("cid", "primary_key"), Column("pid", "foreign_key", "P.pid"),
                                 Column("at", "datetime"), Column("x", "numeric")], time_column="at"),
        Table("E", "E.parquet", [Column("eid", "primary_key"), Column("cid", "foreign_key", "C.cid"),
                                 Column("pid", "foreign_key", "P.pid"), Column("at", "datetime"),
                                 Column("y", "numeric")], time_column="at"),
    ]
    P = pd.DataFrame({"pid": 100 + np.arange(n_p), "size": np.arange(n_p, dtype=float)})
    if p_times is not None:
        P["made_at"] = [BASE + h for h in p_times]
    C = pd.DataFrame({"cid": 50 + np.arange(len(c_rows)), "pid": [100 + p for p, _ in c_rows],
                      "at": [BASE + h for _, h in c_rows], "x": np.arange(len(c_rows), dtype=float)})
    E = pd.DataFrame({"eid": np.arange(len(e_rows)), "cid": [50 + c for c, _, _ in e_rows],
                      "pid": [100 + p for _, p, _ in e_rows], "at": [BASE + h for _, _, h in e_rows],
                      "y": np.arange(len(e_rows), dtype=float)})
    write_database(folder, Schema("pce", tables), {"P": P, "C": C, "E": E})
    return Database.load(folder)


@st.composite
def temporal_cases(draw):
    n_p = draw(st.integers(1, 3))
    n_c = draw(st.integers(1, 8))
    # half days, some a microsecond or half a second later: ties are common, so "<= cutoff" is exercised
    # at equality, and sub-second steps must not be rounded away
    hours = st.builds(lambda h, us: h * HALF_DAY + pd.Timedelta(microseconds=us), st.integers(0, 24),
                      st.sampled_from([0, 0, 1, 500_000]))
    p_times = draw(st.none() | st.lists(hours, min_size=n_p, max_size=n_p))
    c_rows = draw(st.lists(st.tuples(st.integers(0, n_p - 1), hours), min_size=n_c, max_size=n_c))
    e_rows = draw(st.lists(st.tuples(st.integers(0, n_c - 1), st.integers(0, n_p - 1), hours),
                           min_size=1, max_size=14))
    seed_type = draw(st.sampled_from(["C", "P", "E"]))
    n_seed = {"P": n_p, "C": n_c, "E": len(e_rows)}[seed_type]
    # cutoffs in ns around the data: on a half day, 1 us before or after it, half a second after, or anywhere
    half_day = 43200 * 10**9
    cut = st.builds(lambda h, d: h * half_day + d, st.integers(-2, 26),
                    st.sampled_from([0, -1000, 1000, 500_000_000, 500_001_000])) \
        | st.integers(-86400, 14 * 86400).map(lambda s: s * 10**9)
    pairs = draw(st.lists(st.tuples(st.integers(0, n_seed - 1), cut), min_size=1, max_size=6,
                          unique=True))
    fanouts = draw(st.lists(st.sampled_from([1, 2, 3, -1]), min_size=1, max_size=3) | st.just([3, 3]))
    rng_seed = draw(st.integers(0, 2**32 - 1))
    return n_p, p_times, c_rows, e_rows, seed_type, pairs, fanouts, rng_seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(temporal_cases())
def test_every_hop_sees_only_the_known_past(case):
    n_p, p_times, c_rows, e_rows, seed_type, pairs, fanouts, rng_seed = case
    with tempfile.TemporaryDirectory() as folder:
        db = write_pce(folder, n_p, p_times, c_rows, e_rows)
    base = int(nanos([BASE])[0])
    seeds = np.array([n for n, _ in pairs], dtype=np.int64)
    cutoffs = np.array([base + c for _, c in pairs], dtype=np.int64)
    for kind in ("r2n", "r2ne"):
        if kind == "r2ne" and seed_type == "E":
            continue  # E is edges, not nodes, in r2ne
        graph = build_graph(db, kind)
        truth = true_edges(db, kind)
        assert set(truth) == set(graph.canonical_etypes)
        for strategy in STRATEGIES:
            sampler = TemporalSampler(graph, fanouts, strategy, all_edge_ids=True)
            batch = sampler.sample(seed_type, seeds, cutoffs, np.random.default_rng(rng_seed))
            check_batch(batch, graph, truth, fanouts, strategy, seed_type, seeds, cutoffs,
                        id_etypes=graph.canonical_etypes)
            # by default only featured edge types carry ids; the sample itself is the same
            plain = TemporalSampler(graph, fanouts, strategy).sample(seed_type, seeds, cutoffs,
                                                                     np.random.default_rng(rng_seed))
            check_batch(plain, graph, truth, fanouts, strategy, seed_type, seeds, cutoffs)
            for a, b in zip(batch.blocks, plain.blocks):
                for et in graph.canonical_etypes:
                    assert all(torch.equal(x, y) for x, y in zip(a.edges(etype=et), b.edges(etype=et)))


# ---------------------------------------------------------------------------------------------------
# one seed on a tiny graph, checked by hand

# purchases of user 0 on days 1..8 (user 1 has one on day 2); cutoff at day 5 knows days 1..5
DAYS = [3, 1, 5, 2, 8, 4, 7, 6]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    schema = Schema("tiny", [
        Table("users", "users.parquet", [Column("user_id", "primary_key"), Column("age", "numeric")]),
        Table("buys", "buys.parquet", [Column("buy_id", "primary_key"), Column("user_id", "foreign_key", "users.user_id"),
                                       Column("at", "datetime")], time_column="at"),
    ])
    users = pd.DataFrame({"user_id": [0, 1], "age": [30.0, 40.0]})
    buys = pd.DataFrame({"buy_id": np.arange(len(DAYS) + 1), "user_id": [0] * len(DAYS) + [1],
                         "at": [BASE + pd.Timedelta(days=d) for d in DAYS + [2]]})
    write_database(folder, schema, {"users": users, "buys": buys})
    return build_graph(Database.load(folder), "r2n")


def _neighbours(graph, fanout, strategy, cutoff_day, rng, seed=0):
    sampler = TemporalSampler(graph, [fanout], strategy)
    cut = nanos([BASE + pd.Timedelta(days=cutoff_day)])
    b = sampler.sample("users", np.array([seed]), cut, rng)
    s, d = b.blocks[0].edges(etype=("buys", "buys__user_id", "users"))
    assert (d.numpy() == 0).all()
    return list(b.input_nodes["buys"].numpy()[s.numpy()])


def test_recent_takes_exactly_the_latest_known(tiny):
    days = {i: d for i, d in enumerate(DAYS)}
    got = _neighbours(tiny, 2, "recent", 5, np.random.default_rng(0))
    assert sorted(days[n] for n in got) == [4, 5]
    got = _neighbours(tiny, 3, "recent", 6.5, np.random.default_rng(0))
    assert sorted(days[n] for n in got) == [4, 5, 6]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fanout_at_least_degree_takes_all_known(tiny, strategy):
    known = sorted(i for i, d in enumerate(DAYS) if d <= 5)
    for fanout in (5, 6, 50, -1):
        assert sorted(_neighbours(tiny, fanout, strategy, 5, np.random.default_rng(1))) == known
    assert sorted(_neighbours(tiny, -1, strategy, 100, np.random.default_rng(1))) == list(range(len(DAYS)))
    assert _neighbours(tiny, 3, strategy, 0.5, np.random.default_rng(1)) == []  # nothing known yet
    assert _neighbours(tiny, 3, strategy, 5, np.random.default_rng(1), seed=1) == [len(DAYS)]


def test_uniform_is_a_uniform_subset_without_duplicates(tiny):
    known = {i for i, d in enumerate(DAYS) if d <= 5}  # five neighbours, three drawn
    rng = np.random.default_rng(7)
    counts = Counter()
    for _ in range(250):
        got = _neighbours(tiny, 3, "uniform", 5, rng)
        assert len(got) == 3 and len(set(got)) == 3 and set(got) <= known
        counts.update(got)
    # each known neighbour drawn with probability 3/5
    assert set(counts) == known
    assert all(0.5 < c / 250 < 0.7 for c in counts.values()), counts


# ---------------------------------------------------------------------------------------------------
# determinism, hidden edge types, edge features and the planted future leak on real task seeds


def _batch_signature(batch):
    sig = [(t, v.numpy().tolist(), batch.input_cutoffs[t].numpy().tolist()) for t, v in sorted(batch.input_nodes.items())]
    for block in batch.blocks:
        for et in block.canonical_etypes:
            s, d = block.edges(etype=et)
            sig.append((et, s.numpy().tolist(), d.numpy().tolist()))
    return sig


@pytest.fixture(scope="module")
def leak_task(synthetic_db):
    return load_task(synthetic_db, "synthetic", "leak")


@pytest.fixture(scope="module")
def synthetic_graphs(synthetic_db):
    return {kind: build_graph(synthetic_db, kind) for kind in ("r2n", "r2ne")}


@pytest.mark.parametrize("kind", ["r2n", "r2ne"])
def test_same_seed_same_sample(synthetic_graphs, leak_task, kind):
    graph = synthetic_graphs[kind]
    f = leak_task.split("train").iloc[:200]
    seeds, cutoffs = f["node"].to_numpy(), to_epoch_ns(f["cutoff"])
    sampler = TemporalSampler(graph, [3, 3], "uniform")
    sample = lambda s: _batch_signature(sampler.sample("users", seeds, cutoffs, np.random.default_rng(s)))  # noqa: E731
    assert sample(42) == sample(42)
    assert sample(42) != sample(43)
    # a sampler built anew, or with the same index via with_fanouts, samples the same
    again = TemporalSampler(graph, [3, 3], "uniform").with_fanouts([3, 3])
    assert _batch_signature(again.sample("users", seeds, cutoffs, np.random.default_rng(42))) == sample(42)
    # recent sampling does not depend on the rng at all
    recent = TemporalSampler(graph, [3, 3], "recent")
    a = recent.sample("users", seeds, cutoffs, np.random.default_rng(1))
    b = recent.sample("users", seeds, cutoffs, np.random.default_rng(2))
    assert _batch_signature(a) == _batch_signature(b)


ORDERS_SPEC = {
    "name": "late", "kind": "row_column", "task_type": "binary", "table": "orders", "label": "late",
    "cutoff_column": "placed_at", "known_columns": ["placed_at", "amount"],
    "timestamps": {"val": "2021-01-15", "test": "2021-01-25"},
}


@pytest.fixture(scope="module")
def orders_db(tmp_path_factory):
    folder = tmp_path_factory.mktemp("orders")
    rng = np.random.default_rng(0)
    n = 60
    schema = Schema("shop", [
        Table("customers", "customers.parquet", [Column("customer_id", "primary_key"), Column("tier", "category")]),
        Table("orders", "orders.parquet", [
            Column("order_id", "primary_key"), Column("customer_id", "foreign_key", "customers.customer_id"),
            Column("placed_at", "datetime"), Column("delivered_at", "datetime"), Column("amount", "numeric"),
            Column("late", "numeric")], time_column="delivered_at"),
    ])
    placed = BASE + pd.to_timedelta(np.sort(rng.integers(0, 30 * 24, n)), unit="h")
    orders = pd.DataFrame({"order_id": np.arange(n), "customer_id": rng.integers(0, 4, n), "placed_at": placed,
                           "delivered_at": placed + pd.to_timedelta(rng.integers(1, 48, n), unit="h"),
                           "amount": rng.random(n), "late": rng.integers(0, 2, n).astype(float)})
    customers = pd.DataFrame({"customer_id": np.arange(4), "tier": ["a", "b", "a", "c"]})
    write_database(folder, schema, {"customers": customers, "orders": orders})
    return Database.load(folder)


@pytest.mark.parametrize("kind", ["r2n", "r2ne"])
def test_hidden_foreign_key_is_not_sampled_into_the_seed(orders_db, kind):
    from fourdb.experiment.inputs.graph import graph_inputs

    rev = ("customers", "orders__customer_id__rev", "orders")
    task = materialize(TaskSpec.from_dict(dict(ORDERS_SPEC), "late.yaml"), orders_db)
    assert "customer_id" in task.hidden_columns
    cfg = OmegaConf.create({"graph": {"name": kind}, "sampler": {"fanouts": [4, 4], "name": "uniform"}})
    splits = {s: task.split(s) for s in ("train", "val", "test")}
    data = graph_inputs(cfg, orders_db, task, splits)
    assert data.hidden_etypes == frozenset({rev[1]})
    truth = true_edges(orders_db, kind)
    for split in ("train", "test"):
        seeds, cutoffs = data.seeds[split], data.cutoffs[split]
        for hidden in (data.hidden_etypes, frozenset({rev})):  # by name (as run.py passes) or canonical
            batch = data.sampler.sample("orders", seeds, cutoffs, np.random.default_rng(0), hidden)
            check_batch(batch, data.graph, truth, [4, 4], "uniform", "orders", seeds, cutoffs, hidden)
            s, d = batch.blocks[-1].edges(etype=rev)
            assert len(s) == 0
        # not vacuous: without hiding, every seed reaches its customer
        batch = data.sampler.sample("orders", seeds, cutoffs, np.random.default_rng(0))
        assert len(batch.blocks[-1].edges(etype=rev)[0]) == len(seeds)

    # with the key known, nothing is hidden
    spec = dict(ORDERS_SPEC, known_columns=["placed_at", "amount", "customer_id"])
    known = materialize(TaskSpec.from_dict(spec, "late.yaml"), orders_db)
    assert graph_inputs(cfg, orders_db, known, {s: known.split(s) for s in splits}).hidden_etypes == frozenset()


@pytest.mark.parametrize("kind", ["r2n", "r2ne"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_planted_future_audits_are_never_sampled(synthetic_db, synthetic_graphs, leak_task, kind, strategy):
    graph = synthetic_graphs[kind]
    audited = graph.node_time("audits")
    day = NS_PER_DAY
    for split in ("train", "val", "test"):
        f = leak_task.split(split)
        f = f.iloc[np.random.default_rng(0).choice(len(f), min(len(f), 400), replace=False)]
        seeds, cutoffs = f["node"].to_numpy(), to_epoch_ns(f["cutoff"])
        # the leak is there to find: each seed's label audit is one day after its cutoff
        users = synthetic_db.tables["audits"]["user_id"].to_numpy()
        for node, cut in zip(seeds[:20], cutoffs[:20]):
            assert ((users == node) & (audited == cut + day)).sum() == 1
        past = np.array([((users == n) & (audited <= c)).sum() for n, c in zip(seeds, cutoffs)])
        for fanouts in ([4, 4], [1, 1], [-1]):
            batch = TemporalSampler(graph, fanouts, strategy).sample(
                "users", seeds, cutoffs, np.random.default_rng(3))
            nodes, cuts = batch.input_nodes["audits"].numpy(), batch.input_cutoffs["audits"].numpy()
            assert len(nodes) > 0
            assert (audited[nodes] <= cuts).all(), "an audit from after the cutoff was sampled"
            s, d = batch.blocks[-1].edges(etype=("audits", "audits__user_id", "users"))
            s, d = s.numpy(), d.numpy()
            taken = np.bincount(d, minlength=len(seeds))
            if fanouts == [-1]:  # every past audit of every seed, and no other
                assert (taken == past).all()
                assert (users[nodes[s]] == seeds[d]).all()
            if fanouts == [1, 1]:
                assert (taken == np.minimum(past, 1)).all()
                if strategy == "recent":  # exactly the last audit, six days before the cutoff
                    assert (audited[nodes[s]] == cutoffs[d] - 6 * day).all()


def test_sampled_link_edges_carry_their_link_rows(synthetic_db):
    """r2ne: the features a sampled purchase edge gets (loader) are its own purchase row's encoded
    columns and its age at the seed's cutoff, and that purchase is known at the cutoff."""
    from fourdb.engine.sampling.source import GraphSource
    from fourdb.experiment.inputs.graph import graph_inputs

    task = load_task(synthetic_db, "synthetic", "taste")
    cfg = OmegaConf.create({"graph": {"name": "r2ne"}, "sampler": {"fanouts": [4, 4], "name": "uniform"}})
    data = graph_inputs(cfg, synthetic_db, task, {s: task.split(s) for s in ("train", "val", "test")})
    source = GraphSource(data, 100)
    batch = source.sample("train", np.arange(100), np.random.default_rng(0))
    source.gather(batch)
    purchases = synthetic_db.tables["purchases"]
    enc = data.graph.encoders["purchases"].transform(purchases)  # every purchase is an edge, in table order
    bought = to_epoch_ns(purchases["purchased_at"])
    keys = {t: synthetic_db.tables[t][k].to_numpy() for t, k in (("users", "user_id"), ("items", "item_id"))}
    nodes = {t: v.numpy() for t, v in batch.input_nodes.items()}
    cuts = {t: v.numpy() for t, v in batch.input_cutoffs.items()}
    seen = set()
    for block in batch.blocks:
        for et in data.graph.edge_features:
            s, d = (x.numpy() for x in block.edges(etype=et))
            eid, x = block.edges[et].data[dgl.EID].numpy(), block.edges[et].data
            ends = {et[0]: keys[et[0]][nodes[et[0]][s]], et[2]: keys[et[2]][nodes[et[2]][d]]}
            assert (purchases["user_id"].to_numpy()[eid] == ends["users"]).all(), et
            assert (purchases["item_id"].to_numpy()[eid] == ends["items"]).all(), et
            cut = cuts[et[2]][d]
            assert (bought[eid] <= cut).all(), f"{et}: a purchase from after the seed's cutoff"
            width = enc.numeric.shape[1]  # then the link row's datetime ages, then the edge's own age
            assert np.array_equal(x["num"][:, :width].numpy(), enc.numeric[eid]), et
            assert np.array_equal(x["cat"].numpy(), enc.categorical[eid]), et
            assert np.allclose(x["num"][:, -2].numpy(), np.log1p((cut - bought[eid]) / NS_PER_DAY), atol=1e-5), et
            if len(eid):
                seen.add(et)
    assert seen == set(data.graph.edge_features)  # both directions, not vacuously
