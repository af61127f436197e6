"""DFS in DuckDB SQL equals a brute-force pandas reference, sees nothing after a seed's cutoff, and helps GBDT."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import config
from fourdb.errors import FourdbError
from fourdb.features import build_table_features
from fourdb.features import dfs as D
from fourdb.rdb import Column, Database, Schema, Table, write_database
from fourdb.experiment.run import run_experiment
from fourdb.utils import cache_root

T0 = pd.Timestamp("2021-01-01")
CUTOFFS = [T0 + pd.Timedelta(days=d) for d in (10, 20, 35)]


# ------------------------------------------------------------------------------------------ the data
def shop_tables(future: bool = False) -> dict[str, pd.DataFrame]:
    """customers -< orders >- products -< reviews; orders at, and one second after, a cutoff; ties in
    time; nulls in values, keys and times; optionally rows planted after every cutoff."""
    rng = np.random.default_rng(3)
    customers = pd.DataFrame({
        "customer_id": [1, 2, 3, 4, 5],
        "signup_at": [T0, T0, T0 + pd.Timedelta(days=5), T0 + pd.Timedelta(days=15), T0],
        "region": ["n", "s", None, "n", "e"],
        "age": [30.0, np.nan, 50.0, 22.0, 41.0],
    })
    products = pd.DataFrame({
        "product_id": ["a", "b", "c", "d"],
        "category": ["toy", "food", "toy", None],
        "price": [10.0, 2.5, np.nan, 7.0],
    })
    n = 40
    times = T0 + pd.to_timedelta(rng.integers(0, 40 * 24, n), unit="h")
    orders = pd.DataFrame({
        "order_id": np.arange(100, 100 + n),
        "customer_id": pd.array(rng.choice([1, 2, 3, 4, 5], n), dtype="Int64"),
        "product_id": rng.choice(["a", "b", "c", "d"], n).astype(object),
        "ordered_at": times,
        "quantity": rng.integers(1, 6, n).astype(float),
        "channel": rng.choice(["web", "app", "shop"], n).astype(object),
    })
    orders.loc[3, "quantity"] = np.nan
    orders.loc[5, "channel"] = None
    orders.loc[7, "customer_id"] = pd.NA
    orders.loc[9, "product_id"] = None
    orders.loc[11, "ordered_at"] = pd.NaT  # no time: always visible
    # exactly at a cutoff (visible) and one second after it (not yet), for customer 2 and product b
    orders.loc[20, ["customer_id", "product_id", "ordered_at", "quantity"]] = [2, "b", CUTOFFS[1], 100.0]
    orders.loc[21, ["customer_id", "product_id", "ordered_at", "quantity"]] = [2, "b", CUTOFFS[1] + pd.Timedelta(seconds=1), 1000.0]
    # ties in time: same customer, same instant, different values
    for i in (25, 26, 27):
        orders.loc[i, ["customer_id", "ordered_at"]] = [3, T0 + pd.Timedelta(days=8)]
    orders.loc[25, "channel"], orders.loc[26, "channel"], orders.loc[27, "channel"] = "app", "web", "web"
    reviews = pd.DataFrame({
        "review_id": np.arange(12),
        "product_id": ["a", "a", "b", "b", "b", "c", "c", "d", "a", "b", "c", "a"],
        "reviewed_at": T0 + pd.to_timedelta(rng.integers(0, 40, 12), unit="D"),
        "stars": [5.0, 3.0, 4.0, np.nan, 2.0, 1.0, 5.0, 4.0, 2.0, 3.0, 3.0, 4.0],
    })
    if future:
        late = CUTOFFS[-1] + pd.Timedelta(seconds=1)
        orders = pd.concat([orders, pd.DataFrame({
            "order_id": [900, 901], "customer_id": pd.array([1, 2], dtype="Int64"), "product_id": ["a", "b"],
            "ordered_at": [late, late + pd.Timedelta(days=3)], "quantity": [1e6, -1e6], "channel": ["leak", "leak"]})],
            ignore_index=True)
        reviews = pd.concat([reviews, pd.DataFrame({
            "review_id": [900], "product_id": ["a"], "reviewed_at": [late], "stars": [-99.0]})], ignore_index=True)
        customers = pd.concat([customers, pd.DataFrame({
            "customer_id": [9], "signup_at": [late], "region": ["leak"], "age": [999.0]})], ignore_index=True)
    return {"customers": customers, "products": products, "orders": orders, "reviews": reviews}


SCHEMA = Schema("shop", [
    Table("customers", "customers.parquet", [
        Column("customer_id", "primary_key"), Column("signup_at", "datetime"), Column("region", "category"),
        Column("age", "numeric")], time_column="signup_at"),
    Table("products", "products.parquet", [
        Column("product_id", "primary_key"), Column("category", "category"), Column("price", "numeric")]),
    Table("orders", "orders.parquet", [
        Column("order_id", "primary_key"), Column("customer_id", "foreign_key", "customers.customer_id"),
        Column("product_id", "foreign_key", "products.product_id"), Column("ordered_at", "datetime"),
        Column("quantity", "numeric"), Column("channel", "category")], time_column="ordered_at"),
    Table("reviews", "reviews.parquet", [
        Column("review_id", "primary_key"), Column("product_id", "foreign_key", "products.product_id"),
        Column("reviewed_at", "datetime"), Column("stars", "numeric")], time_column="reviewed_at"),
])


def make_db(folder: Path, future: bool = False) -> Database:
    return Database.load(write_database(folder, SCHEMA, shop_tables(future)))


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    return make_db(tmp_path_factory.mktemp("shop"))


def customer_seeds(db: Database) -> pd.DataFrame:
    n = len(db.tables["customers"])
    return pd.DataFrame({"node": np.tile(np.arange(n), len(CUTOFFS)), "cutoff": np.repeat(CUTOFFS, n)})


def order_seeds(db: Database) -> pd.DataFrame:
    """Every order asked at 12 hours before it was placed (a row-column task's seed)."""
    o = db.tables["orders"]
    keep = o["ordered_at"].notna().to_numpy()
    return pd.DataFrame({"node": np.flatnonzero(keep), "cutoff": (o["ordered_at"] - pd.Timedelta(hours=12))[keep].to_numpy()})


# --------------------------------------------------------------------------- brute-force reference
def _visible(db: Database, table: str, cutoff) -> pd.DataFrame:
    t = db.schema.table(table)
    df = db.tables[table].reset_index(drop=True)
    if t.time_column is None:
        return df
    times = df[t.time_column]
    return df[times.isna() | (times <= cutoff)]


def _label(name, fk, n):
    return name if n == 1 else f"{name}[{fk}]"


def _missing(v) -> bool:
    return v is None or (not isinstance(v, str) and bool(pd.isna(v)))


def reference(db: Database, table: str, row: pd.Series | None, cutoff, depth: int, back_fk=None,
              hidden=None, where=None) -> dict:
    """Features of one row at one cutoff by looping over rows in pandas: the definition, spelled out.
    ``where``: (settings, each table's conditions) for the conditional aggregates of this row's children."""
    t = db.schema.table(table)
    out = {}
    if hidden is None:
        for c in t.columns:
            if c.dtype in ("numeric", "category"):
                out[c.name] = None if row is None or _missing(row[c.name]) else row[c.name]
    if depth < 1:
        return out
    for fk in t.foreign_keys:
        if fk.name == back_fk or (hidden is not None and fk.name in hidden):
            continue
        label = _label(fk.link_table, fk.name, sum(c.link_table == fk.link_table for c in t.foreign_keys))
        parent = None
        if row is not None and not _missing(row[fk.name]):
            vis = _visible(db, fk.link_table, cutoff)
            hit = vis[vis[fk.link_column] == row[fk.name]]
            parent = hit.iloc[0] if len(hit) else None
        sub = reference(db, fk.link_table, parent, cutoff, depth - 1, where=where)
        # no parent (null key, or not there yet at the cutoff): every looked-up feature is missing
        out.update({f"{label}.{k}": None if parent is None else v for k, v in sub.items()})
    for child in db.schema.tables:
        links = [c for c in child.foreign_keys if c.link_table == table]
        for fk in links:
            label = _label(child.name, fk.name, len(links))
            rows = _visible(db, child.name, cutoff)
            pk = t.primary_key
            rows = rows.dropna(subset=[fk.name])
            rows = rows[(rows[fk.name] == row[pk]).fillna(False).astype(bool)] if row is not None else rows.iloc[:0]
            if child.time_column:
                key = rows[child.time_column].fillna(pd.Timestamp("1678-01-01"))
                rows = rows.assign(__k=key, __i=rows.index).sort_values(["__k", "__i"])
            subs = [reference(db, child.name, r, cutoff, depth - 1, back_fk=fk.name) for _, r in rows.iterrows()]
            out[f"COUNT({label})"] = len(rows)
            names = list(reference(db, child.name, None, cutoff, depth - 1, back_fk=fk.name))
            kinds = _kinds(db, child.name, depth - 1, fk.name)
            for name in names:
                values = [s[name] for s in subs]
                present = [v for v in values if not _missing(v)]
                last = values[-1] if values else None
                if kinds[name] == "numeric":
                    x = np.array(present, dtype=float)
                    out[f"SUM({label}.{name})"] = float(x.sum()) if len(x) else 0.0
                    out[f"MEAN({label}.{name})"] = float(x.mean()) if len(x) else None
                    out[f"MIN({label}.{name})"] = float(x.min()) if len(x) else None
                    out[f"MAX({label}.{name})"] = float(x.max()) if len(x) else None
                    out[f"STD({label}.{name})"] = float(x.std(ddof=1)) if len(x) > 1 else None
                    out[f"LAST({label}.{name})"] = last
                else:
                    counts, best, best_n = {}, None, 0
                    for v in present:  # the first value to reach the top count keeps it on a tie
                        counts[v] = counts.get(v, 0) + 1
                        if counts[v] > best_n:
                            best, best_n = v, counts[v]
                    out[f"MODE({label}.{name})"] = best
                    out[f"NUM_UNIQUE({label}.{name})"] = len(set(present))
                    out[f"LAST({label}.{name})"] = last
            if child.time_column:
                times = rows[child.time_column].dropna()
                days = lambda ts: (cutoff - ts) / pd.Timedelta(days=1)  # noqa: E731
                out[f"TIME_SINCE_LAST({label}.{child.time_column})"] = days(times.max()) if len(times) else None
                out[f"TIME_SINCE_FIRST({label}.{child.time_column})"] = days(times.min()) if len(times) else None
            for cond in (where[1].get(child.name, []) if where else []):
                if cond.column == fk.name:
                    continue
                met = rows[rows[cond.column].isin([cond.value]).to_numpy(dtype=bool)]
                tail = f" WHERE {cond.column} = {cond.shown})"
                if "count" in where[0].primitives:
                    out[f"COUNT({label}{tail}"] = len(met)
                for c in child.columns:
                    if c.dtype != "numeric":
                        continue
                    x = met[c.name].dropna().to_numpy(float)
                    last = met[c.name].iloc[-1] if len(met) else None
                    got = {"sum": float(x.sum()), "mean": x.mean() if len(x) else None,
                           "min": x.min() if len(x) else None, "max": x.max() if len(x) else None,
                           "std": x.std(ddof=1) if len(x) > 1 else None, "last": None if _missing(last) else last}
                    for p in where[0].primitives:
                        if p != "count":
                            out[f"{p.upper()}({label}.{c.name}{tail}"] = got[p]
    return out


def _kinds(db, table, depth, back_fk) -> dict:
    plan = D.build_plan(db.schema, table, depth, back_fk=back_fk)
    return {f.name: f.dtype for f in plan.features}


def assert_matches_reference(db, table, seeds, depth, hidden=(), where=None):
    got = D.compute_dfs(db, table, seeds, depth=depth, hidden=hidden, progress=False, where=where)
    config = D.check_where(where)
    # the values the plan picks (from the rows every seed sees); test_interesting_values_* checks the pick
    known_by = pd.Timestamp(seeds["cutoff"].min())
    conds = (config, D.interesting_values(db, config, known_by, {table: frozenset(hidden)})) if config else None
    rows = db.tables[table]
    checked = 0
    for i, (node, cutoff) in enumerate(zip(seeds["node"], seeds["cutoff"])):
        ref = reference(db, table, rows.iloc[node], pd.Timestamp(cutoff), depth, hidden=set(hidden), where=conds)
        assert set(ref) == set(got.columns), set(ref) ^ set(got.columns)
        for name, want in ref.items():
            have = got[name].iloc[i]
            where = f"{name} of {table} row {node} at {cutoff}"
            if _missing(want) or _missing(have):
                assert _missing(want) and _missing(have), f"{where}: {have!r} != {want!r}"
            elif isinstance(want, str):
                assert have == want, f"{where}: {have!r} != {want!r}"
            else:
                assert np.isclose(float(have), float(want), rtol=1e-5, atol=1e-4), f"{where}: {have!r} != {want!r}"
            checked += 1
    return got, checked


# --------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_entity_seeds_match_brute_force(shop, depth):
    got, checked = assert_matches_reference(shop, "customers", customer_seeds(shop), depth)
    assert checked > 100
    if depth >= 2:
        assert "MEAN(orders.products.price)" in got and "MODE(orders.products.category)" in got
    if depth == 3:  # an aggregate below an aggregate: each order's product, as of the seed's cutoff
        assert "MEAN(orders.products.MEAN(reviews.stars))" in got


@pytest.mark.parametrize("depth", [1, 2])
def test_row_seeds_match_brute_force_with_hidden_columns(shop, depth):
    """Seeds are orders asked before they happen: siblings (the customer's other orders) are cut at the
    seed's cutoff, and hidden columns and keys of the seed row are never followed."""
    seeds = order_seeds(shop)
    got, _ = assert_matches_reference(shop, "orders", seeds, depth, hidden=("quantity", "channel"))
    if depth == 2:
        assert "customers.COUNT(orders)" in got and "products.MEAN(reviews.stars)" in got
        # the seed order itself is never among its customer's orders: it happens after its cutoff
        o = shop.tables["orders"]
        customer = o["customer_id"].iloc[seeds["node"]].to_numpy()
        known = got["customers.COUNT(orders)"].notna().to_numpy()
        total = np.array([(o["customer_id"] == c).sum() for c in customer[known]])
        assert known.sum() > 20 and (got["customers.COUNT(orders)"].to_numpy()[known] < total).all()
    hidden_fk, _ = assert_matches_reference(shop, "orders", seeds.iloc[:8], depth, hidden=("product_id",))
    assert not any(c.startswith("products") for c in hidden_fk.columns)


def _as_objects(frame: pd.DataFrame) -> pd.DataFrame:
    """Category columns as plain values: two runs may number a dictionary differently."""
    return frame.apply(lambda c: c.astype(object).where(c.notna(), None) if isinstance(c.dtype, pd.CategoricalDtype) else c)


def test_running_aggregates_read_values_as_the_sql_path_does(monkeypatch):
    """A running aggregate gathers its rows' features from the tables, at the rows it scans, and looks
    up only their parents. On a database made in memory with columns of any type (integers, floats,
    booleans, pandas categoricals and Arrow strings as categories; nullable integers and booleans as
    numbers), null and dangling keys, and a child without time, it gives what the SQL path gives (the
    child's rows joined to their lookups and grouped in DuckDB), and it computes parent ids for no
    foreign key but the one it runs by."""
    from fourdb.features.dfs import compile as compile_module

    rng = np.random.default_rng(5)
    n = 300
    schema = Schema("mixed", [
        Table("users", "users.parquet", [Column("user_id", "primary_key"), Column("joined", "datetime")],
              time_column="joined"),
        Table("cities", "cities.parquet", [
            Column("city_id", "primary_key"), Column("since", "datetime"), Column("big", "category"),
            Column("region", "category"), Column("rank", "category"), Column("coastal", "numeric")]),
        # a dimension table (no time of its own): its keys are conditions of the aggregates over visits
        Table("visits", "visits.parquet", [
            Column("visit_id", "primary_key"), Column("user_id", "foreign_key", "users.user_id"),
            Column("city_id", "foreign_key", "cities.city_id"), Column("at", "datetime"),
            Column("kind", "category"), Column("code", "category"), Column("score", "numeric"),
            Column("paid", "numeric")], time_column="at"),
        Table("tags", "tags.parquet", [  # no time: every row is always there
            Column("tag_id", "primary_key"), Column("city_id", "foreign_key", "cities.city_id"),
            Column("weight", "numeric"), Column("label", "category")]),
    ])
    cities = pd.DataFrame({
        "city_id": [10, 11, 12, 13],
        "since": [T0] * 4,
        "big": [True, False, True, None],
        "region": pd.Categorical(["n", "s", None, "n"]),
        "rank": [1.5, 2.0, np.nan, 2.0],
        "coastal": pd.array([True, False, None, True], dtype="boolean"),
    })
    city = rng.choice([10, 11, 12, 13, 99], n).astype(float)  # 99: a city that is not there
    city[:5] = np.nan
    visits = pd.DataFrame({
        "visit_id": np.arange(n),
        "user_id": rng.integers(0, 20, n),
        "city_id": pd.array(city, dtype="Int64"),
        "at": T0 + pd.to_timedelta(rng.integers(0, 40 * 24, n), unit="h"),
        "kind": pd.array(rng.choice(["a", "b", "c"], n), dtype="string[pyarrow]"),
        "code": rng.integers(0, 4, n),
        "score": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 9, n)), dtype="Int64"),
        "paid": rng.random(n) < 0.5,
    })
    users = pd.DataFrame({"user_id": np.arange(20), "joined": [T0] * 20})
    tags = pd.DataFrame({"tag_id": np.arange(9), "city_id": [10, 10, 11, 12, 12, 12, 99, 13, 10],
                         "weight": [1, 2, None, 4, 5, 6, 7, 8, 9], "label": [1, 2, 2, None, 1, 3, 1, 2, 2]})
    db = Database(schema, {"users": users, "cities": cities, "visits": visits, "tags": tags})
    seeds = pd.DataFrame({"node": np.tile(np.arange(20), 3), "cutoff": np.repeat(CUTOFFS, 20)})
    city_seeds = pd.DataFrame({"node": np.tile(np.arange(4), 3), "cutoff": np.repeat(CUTOFFS, 4)})

    gathered, parents = [], []
    row_features, parents_of = compile_module.Compiler.row_features, compile_module.Compiler.parents_of
    monkeypatch.setattr(compile_module.Compiler, "row_features",
                        lambda self, node, rids: gathered.append(node.table) or row_features(self, node, rids))
    monkeypatch.setattr(compile_module.Compiler, "parents_of",
                        lambda self, table, fk: parents.append((table, fk)) or parents_of(self, table, fk))
    running = D.compute_dfs(db, "users", seeds, depth=2, progress=False)
    # once for the plain aggregate, once per conditional one (its rows of one value)
    assert set(gathered) == {"visits"} and set(parents) == {("visits", "user_id")}
    assert "MEAN(visits.score WHERE kind = a)" in running and "COUNT(visits WHERE city_id = 10)" in running
    gathered.clear()
    by_city = D.compute_dfs(db, "cities", city_seeds, depth=1, progress=False)
    assert set(gathered) == {"tags", "visits"}
    monkeypatch.setattr(compile_module.Compiler, "runs", lambda self, ag: False)
    joined = D.compute_dfs(db, "users", seeds, depth=2, progress=False)
    assert "MODE(visits.cities.region)" in running and "MEAN(visits.cities.coastal)" in running
    assert running["MODE(visits.code)"].notna().sum() > 30
    pd.testing.assert_frame_equal(_as_objects(running), _as_objects(joined), rtol=1e-5)
    assert by_city["COUNT(tags)"].tolist() == [3, 1, 3, 1] * 3 and by_city["MODE(tags.label)"].iloc[0] == "2.0"
    pd.testing.assert_frame_equal(_as_objects(by_city),
                                  _as_objects(D.compute_dfs(db, "cities", city_seeds, depth=1, progress=False)), rtol=1e-5)


def test_rows_at_the_cutoff_count_and_one_second_later_do_not(shop):
    c = CUTOFFS[1]
    seeds = pd.DataFrame({"node": [1, 1, 1], "cutoff": [c - pd.Timedelta(seconds=1), c, c + pd.Timedelta(seconds=1)]})
    got = D.compute_dfs(shop, "customers", seeds, depth=1, progress=False)
    counts = got["COUNT(orders)"].to_numpy()
    assert counts[1] == counts[0] + 1 and counts[2] == counts[1] + 1
    assert got["LAST(orders.quantity)"].tolist()[1:] == [100.0, 1000.0]
    assert got["MAX(orders.quantity)"].iloc[1] == 100.0 and got["MAX(orders.quantity)"].iloc[0] < 100


def test_a_planted_future_changes_nothing(shop, tmp_path):
    leaky = make_db(tmp_path / "leaky", future=True)
    for table, seeds in (("customers", customer_seeds(shop)), ("orders", order_seeds(shop))):
        clean = D.compute_dfs(shop, table, seeds, depth=3 if table == "customers" else 2, progress=False)
        dirty = D.compute_dfs(leaky, table, seeds, depth=3 if table == "customers" else 2, progress=False)
        pd.testing.assert_frame_equal(clean.astype(object), dirty.astype(object))
    # and the planted rows do count once the cutoff passes them
    late = pd.DataFrame({"node": [0], "cutoff": [CUTOFFS[-1] + pd.Timedelta(days=1)]})
    assert D.compute_dfs(leaky, "customers", late, depth=1, progress=False)["MAX(orders.quantity)"].iloc[0] == 1e6


def test_feature_names_follow_featuretools(tmp_path):
    schema = Schema("air", [
        Table("airports", "airports.parquet", [Column("faa", "primary_key"), Column("alt", "numeric")]),
        Table("flights", "flights.parquet", [
            Column("id", "primary_key"), Column("origin", "foreign_key", "airports.faa"),
            Column("dest", "foreign_key", "airports.faa"), Column("at", "datetime"), Column("delay", "numeric")],
            time_column="at"),
    ])
    names = [f.name for f in D.build_plan(schema, "flights", 3, seed_hidden=frozenset()).features]
    for want in ("airports[origin].alt", "airports[dest].alt", "airports[origin].MEAN(flights[origin].delay)",
                 "airports[dest].COUNT(flights[dest])", "airports[origin].TIME_SINCE_LAST(flights[dest].at)",
                 "airports[origin].MEAN(flights[origin].airports[dest].alt)"):
        assert want in names, want
    # no lookup back along the edge an aggregate came down: it would only repeat the parent
    assert "airports[origin].MEAN(flights[origin].airports[origin].alt)" not in names
    assert len(names) == len(set(names))


def test_bad_config_is_a_clear_error(shop):
    seeds = customer_seeds(shop)
    with pytest.raises(FourdbError, match="depth must be 1..3"):
        D.compute_dfs(shop, "customers", seeds, depth=4)
    with pytest.raises(FourdbError, match="unknown primitive 'median'"):
        D.compute_dfs(shop, "customers", seeds, primitives=["mean", "median"])


def test_running_out_of_memory_says_what_to_lower(tmp_path):
    db = make_db(tmp_path)
    db.con.execute("SET memory_limit = '1MB'")
    with pytest.raises(FourdbError, match=r"Out of Memory.*depth 3 makes \d+ features for 15 seeds: lower features.depth"):
        D.compute_dfs(db, "customers", customer_seeds(db), depth=3, progress=False)


TASTE = ["dataset=synthetic", "dataset.params.size=150", "task=taste", "model=gbdt"]


def test_gbdt_with_dfs_beats_single_table_on_planted_task():
    """taste is planted two hops away (user -> purchases -> items.kind): DFS depth 2 sees it."""
    flat = run_experiment(config(*TASTE))
    deep = run_experiment(config(*TASTE, "features=dfs", "features.depth=2"))
    assert deep["inputs"] == {"features": "dfs"}
    assert deep["config"]["features"]["depth"] == 2
    a, b = deep["metrics"]["test"]["auroc"], flat["metrics"]["test"]["auroc"]
    assert a >= 0.7 and a >= b + 0.08, (a, b)


def test_dfs_is_cached_and_encoded_for_gbdt(synthetic_db, monkeypatch):
    from fourdb.tasks import load_task

    task = load_task(synthetic_db, "synthetic", "taste")
    splits = {s: task.split(s) for s in ("train", "val", "test")}
    first = build_table_features("dfs", synthetic_db, task, splits, depth=2, primitives=["count", "mean", "mode"])
    assert list((cache_root() / "dfs").glob("users-d2-*.parquet"))
    monkeypatch.setattr(D, "compute_dfs", lambda *a, **k: pytest.fail("cache miss"))
    again = build_table_features("dfs", synthetic_db, task, splits, depth=2, primitives=["count", "mean", "mode"])
    for s in splits:
        assert first[s].numeric.shape == (len(splits[s]), len(first[s].numeric_names))
        np.testing.assert_array_equal(first[s].numeric, again[s].numeric)
        np.testing.assert_array_equal(first[s].categorical, again[s].categorical)
        assert np.isfinite(first[s].numeric).all()
    names = first["train"].numeric_names
    assert "COUNT(purchases)" in names and "MEAN(purchases.quantity)" in names and "age" in names
    cats = first["train"].categorical_names
    assert "MODE(audits.flag)" not in cats  # numeric input: no mode
    j = cats.index("MODE(purchases.items.kind)")
    for s in splits:
        codes = first[s].categorical[:, j]
        assert codes.min() >= 0 and codes.max() < first[s].cardinalities[j] == 3  # A, B and unknown/missing
    assert set(np.unique(first["train"].categorical[:, j])) >= {1, 2}
    tr = first["train"].numeric[:, names.index("COUNT(purchases)")]
    assert abs(tr.mean()) < 1e-4 and abs(tr.std() - 1) < 1e-3  # standardized with train statistics
    with pytest.raises(FourdbError, match="no parameter 'dept'"):
        build_table_features("dfs", synthetic_db, task, splits, dept=2)


# ------------------------------------------------------------------ conditional aggregates ("where")
LAB_TESTS = ["HDL", "LDL", "glucose", "HbA1c", "creatinine", "ferritin"]
LAB_CUTOFF = T0 + pd.Timedelta(days=60)
WHERE = {"values": 5, "min_share": 0.05, "lookup_rows": 10, "primitives": ["count", "mean", "last"],
         "max_features": 100}
ODD = ["x' OR 1=1 --", 'say "hi"', "two\nlines"]  # category values that must stay data


def lab_tables(future: bool = False) -> dict[str, pd.DataFrame]:
    """patients -< labs >- tests: a long table of results; a six-row lookup of tests, ferritin rare (under
    min_share); a flag column of awkward text; a glucose result at the cutoff and one a nanosecond later."""
    rng = np.random.default_rng(11)
    n = 600
    patients = pd.DataFrame({"patient_id": np.arange(30), "enrolled_at": [T0] * 30,
                             "sex": rng.choice(["f", "m"], 30).astype(object)})
    tests = pd.DataFrame({"test_id": np.arange(1, 7), "name": LAB_TESTS, "unit": ["mg/dL"] * 6})
    labs = pd.DataFrame({
        "lab_id": np.arange(n),
        "patient": rng.integers(0, 30, n),
        "test": rng.choice([1, 2, 3, 4, 5, 6], n, p=[0.25, 0.2, 0.25, 0.14, 0.14, 0.02]),
        "taken_at": T0 + pd.to_timedelta(rng.integers(0, 90 * 24 * 3600, n), unit="s"),
        "value": rng.normal(100, 30, n).round(1),
        "flag": rng.choice(ODD, n).astype(object),
    })
    at = len(labs)
    labs.loc[at] = [at, 0, 3, LAB_CUTOFF, 77.0, ODD[0]]  # patient 0's glucose exactly at the cutoff: seen
    labs.loc[at + 1] = [at + 1, 0, 3, LAB_CUTOFF + pd.Timedelta(1, "ns"), 999.0, ODD[0]]  # a nanosecond later: not
    if future:  # after every cutoff: results of the interesting values, and a flood of a new flag value
        late = T0 + pd.Timedelta(days=200)
        extra = pd.DataFrame({"lab_id": np.arange(n + 2, n + 2 + 400), "patient": np.arange(400) % 30,
                              "test": np.where(np.arange(400) % 2, 1, 3),
                              "taken_at": late + pd.to_timedelta(np.arange(400), unit="s"),
                              "value": 1e6, "flag": "leak"})
        labs = pd.concat([labs, extra], ignore_index=True)
    return {"patients": patients, "tests": tests, "labs": labs}


LAB_SCHEMA = Schema("clinic", [
    Table("patients", "patients.parquet", [Column("patient_id", "primary_key"), Column("enrolled_at", "datetime"),
                                           Column("sex", "category")], time_column="enrolled_at"),
    Table("tests", "tests.parquet", [Column("test_id", "primary_key"), Column("name", "category"),
                                     Column("unit", "category")]),
    Table("labs", "labs.parquet", [
        Column("lab_id", "primary_key"), Column("patient", "foreign_key", "patients.patient_id"),
        Column("test", "foreign_key", "tests.test_id"), Column("taken_at", "datetime"), Column("value", "numeric"),
        Column("flag", "category")], time_column="taken_at"),
])


@pytest.fixture(scope="module")
def clinic(tmp_path_factory):
    return Database.load(write_database(tmp_path_factory.mktemp("clinic"), LAB_SCHEMA, lab_tables()))


def patient_seeds(cutoff=LAB_CUTOFF) -> pd.DataFrame:
    return pd.DataFrame({"node": np.arange(30), "cutoff": [cutoff] * 30})


def test_mean_hdl_and_last_glucose_per_patient(clinic):
    """The test column is a key into a six-row lookup: DFS drops it as a column, and now conditions on it,
    shown by the lookup's name column; values are as of the cutoff, to the nanosecond."""
    got = D.compute_dfs(clinic, "patients", patient_seeds(), depth=1, where=WHERE, progress=False)
    labs = clinic.tables["labs"]
    seen = labs[labs["taken_at"] <= LAB_CUTOFF]
    for p in range(30):
        mine = seen[seen["patient"] == p].sort_values("taken_at", kind="stable")
        hdl, glucose = mine[mine["test"] == 1], mine[mine["test"] == 3]
        assert got["COUNT(labs WHERE test = HDL)"].iloc[p] == len(hdl)
        assert np.isclose(got["MEAN(labs.value WHERE test = HDL)"].iloc[p], hdl["value"].mean(), rtol=1e-5,
                          equal_nan=True)
        last = glucose["value"].iloc[-1] if len(glucose) else np.nan
        assert np.isclose(got["LAST(labs.value WHERE test = glucose)"].iloc[p], last, equal_nan=True)
    assert got["LAST(labs.value WHERE test = glucose)"].iloc[0] == 77.0  # at the cutoff; the 999 is 1 ns later
    later = D.compute_dfs(clinic, "patients", patient_seeds(LAB_CUTOFF + pd.Timedelta(1, "ns")), depth=1,
                          where=WHERE, progress=False, fit_until=LAB_CUTOFF)
    assert later["LAST(labs.value WHERE test = glucose)"].iloc[0] == 999.0
    # ferritin holds 2% of the rows (under min_share): no condition; the five others each have theirs
    names = [c for c in got.columns if "WHERE test = " in c]
    assert {n.split(" = ")[1][:-1] for n in names} == set(LAB_TESTS[:5]) and len(names) == 15
    assert "COUNT(labs WHERE patient = 0)" not in got  # patients is no lookup (30 rows > lookup_rows)


def test_conditional_aggregates_are_bounded(clinic):
    plan = D.seed_plan(clinic, "patients", 2, D.PRIMITIVES, D.check_where(WHERE), LAB_CUTOFF)
    names = [f.name for f in plan.features]
    where = [n for n in names if " WHERE " in n]
    assert len(where) == 15 + 9 and len(names) == len(set(names))  # test: 5 values x 3; flag: 3 values x 3
    assert all(n.count("(") == 1 for n in where)  # never an aggregate of conditional aggregates, at any depth
    capped = D.seed_plan(clinic, "patients", 2, D.PRIMITIVES, D.check_where({**WHERE, "max_features": 8}), LAB_CUTOFF)
    where = [f.name for f in capped.features if " WHERE " in f.name]
    assert len(where) == 8 and all(n.startswith("COUNT(") for n in where)  # dealt out: a count per value first
    # at most `values` per column, the most frequent first
    two = D.interesting_values(clinic, D.check_where({**WHERE, "values": 2}), LAB_CUTOFF)["labs"]
    assert [(c.column, c.value) for c in two] == [("test", v) for v in _top(clinic, "test", 2)] + \
        [("flag", v) for v in _top(clinic, "flag", 2)]
    assert D.seed_plan(clinic, "patients", 1, D.PRIMITIVES, D.check_where({**WHERE, "values": 0}), LAB_CUTOFF) \
        .features == D.seed_plan(clinic, "patients", 1, D.PRIMITIVES, None, LAB_CUTOFF).features


def _top(db, column, k):
    counts = db.tables["labs"].loc[lambda d: d["taken_at"] <= LAB_CUTOFF, column].value_counts()
    return sorted(counts.index, key=lambda v: (-counts[v], str(v)))[:k]


def test_values_with_quotes_stay_data(clinic, monkeypatch):
    """A category value is compared in pandas and marked as a boolean column for SQL, never spliced into a
    query: quotes, SQL and newlines are plain values on both paths, and names escape a line break."""
    from fourdb.features.dfs import compile as compile_module

    running = D.compute_dfs(clinic, "patients", patient_seeds(), depth=1, where=WHERE, progress=False)
    labs = clinic.tables["labs"]
    seen = labs[labs["taken_at"] <= LAB_CUTOFF]
    for v in ODD:
        name = f"COUNT(labs WHERE flag = {D.plan._shown(v)})"
        assert name in running and "\n" not in name
        want = seen[seen["flag"] == v].groupby("patient").size().reindex(range(30), fill_value=0)
        assert running[name].tolist() == want.tolist(), v
    assert "COUNT(labs WHERE flag = \"two\\nlines\")" in running
    monkeypatch.setattr(compile_module.Compiler, "runs", lambda self, ag: False)  # every aggregate through SQL
    joined = D.compute_dfs(clinic, "patients", patient_seeds(), depth=1, where=WHERE, progress=False)
    pd.testing.assert_frame_equal(_as_objects(running), _as_objects(joined), rtol=1e-5)


def test_conditional_aggregates_see_no_future(clinic, tmp_path):
    """Planted results after every cutoff, of the interesting values (and a flood of a new flag value)
    change no feature, on either path, and pick no value."""
    leaky = Database.load(write_database(tmp_path / "leaky", LAB_SCHEMA, lab_tables(future=True)))
    for seeds in (patient_seeds(), patient_seeds(T0 + pd.Timedelta(days=30))):
        clean = D.compute_dfs(clinic, "patients", seeds, depth=2, where=WHERE, progress=False, fit_until=LAB_CUTOFF)
        dirty = D.compute_dfs(leaky, "patients", seeds, depth=2, where=WHERE, progress=False, fit_until=LAB_CUTOFF)
        assert sum(" WHERE " in c for c in clean.columns) == 24
        pd.testing.assert_frame_equal(clean.astype(object), dirty.astype(object))
    late = D.compute_dfs(leaky, "patients", patient_seeds(T0 + pd.Timedelta(days=365)), depth=1, where=WHERE,
                         progress=False, fit_until=LAB_CUTOFF)
    assert late["MEAN(labs.value WHERE test = HDL)"].max() > 1e5  # they count once the cutoff passes them


def test_interesting_values_come_from_rows_known_before_validation(tmp_path):
    """Chosen from the rows known by fit_until, as the encoders are fitted: a value frequent only later is
    never a condition; and never from a seed row's hidden columns (a row task's label)."""
    leaky = Database.load(write_database(tmp_path / "leaky", LAB_SCHEMA, lab_tables(future=True)))
    config = D.check_where(WHERE)
    before = D.interesting_values(leaky, config, LAB_CUTOFF)["labs"]
    assert "leak" not in [c.value for c in before if c.column == "flag"]
    assert "leak" in [c.value for c in D.interesting_values(leaky, config, None)["labs"]]  # every row: it is
    got = D.compute_dfs(leaky, "patients", patient_seeds(), depth=1, where=WHERE, progress=False, fit_until=LAB_CUTOFF)
    assert not [c for c in got.columns if "leak" in c]
    # the seeds' earliest cutoff bounds them where no fit_until is given
    assert not [c for c in D.compute_dfs(leaky, "patients", patient_seeds(), depth=1, where=WHERE,
                                         progress=False).columns if "leak" in c]
    # a row task on labs with flag hidden: its siblings are aggregated, but never split by flag
    seeds = pd.DataFrame({"node": np.arange(50), "cutoff": leaky.tables["labs"]["taken_at"].iloc[:50]
                          - pd.Timedelta(hours=1)})
    shown = D.compute_dfs(leaky, "labs", seeds, depth=2, where=WHERE, progress=False, fit_until=LAB_CUTOFF)
    hidden = D.compute_dfs(leaky, "labs", seeds, depth=2, where=WHERE, hidden=("flag",), progress=False,
                           fit_until=LAB_CUTOFF)
    assert any("WHERE flag" in c for c in shown.columns) and "patients.MEAN(labs.value WHERE test = HDL)" in shown
    assert not any("WHERE flag" in c for c in hidden.columns) and "patients.MEAN(labs.value WHERE test = HDL)" in hidden


@pytest.mark.parametrize("where,message", [
    ("yes", "where must be a mapping"),
    ({**WHERE, "value": 5}, "where has no setting 'value'"),
    ({k: v for k, v in WHERE.items() if k != "max_features"}, "where.max_features is not given"),
    ({**WHERE, "values": -1}, "where.values must be an integer >= 0, got -1"),
    ({**WHERE, "values": 2.5}, "where.values must be an integer"),
    ({**WHERE, "min_share": 2}, "where.min_share must be a number 0..1, got 2"),
    ({**WHERE, "max_features": 0}, "where.max_features must be an integer >= 1"),
    ({**WHERE, "primitives": ["mean", "mode"]}, "where.primitives takes count, sum, mean, min, max, std, last; got 'mode'"),
    ({**WHERE, "primitives": []}, "where.primitives takes .*; got none"),
])
def test_bad_where_config_is_a_clear_error(clinic, where, message):
    with pytest.raises(FourdbError, match=message):
        D.compute_dfs(clinic, "patients", patient_seeds(), where=where, progress=False)


def test_where_switches_off():
    assert D.check_where(False) is None and D.check_where({"values": 0}) is None
    assert D.check_where({**WHERE, "values": 0}) is None
    assert D.check_where(WHERE).primitives == ("count", "mean", "last")


def test_a_key_into_a_table_of_events_is_no_condition(tmp_path):
    """Invoices have a time: ``lines.invoice_id`` names one past invoice, which no later cutoff's label is
    about, so it is no interesting value however few invoices there are; a dimension table's key is."""
    import planted
    from fourdb.features.dfs.plan import check_where, interesting_values

    db = Database.load(planted.line_items(tmp_path / "lines", n=50))
    assert len(db.tables["invoices"]) < 100 and db.schema.table("invoices").time_column
    conditions = interesting_values(db, check_where(None), None)
    assert not any(c.column == "invoice_id" for c in conditions.get("lines", []))
    assert {c.column for c in conditions.get("lines", [])} <= {"track_id"}
