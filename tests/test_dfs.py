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
from fourdb.run import run_experiment
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
              hidden=None) -> dict:
    """Features of one row at one cutoff by looping over rows in pandas: the definition, spelled out."""
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
        sub = reference(db, fk.link_table, parent, cutoff, depth - 1)
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
    return out


def _kinds(db, table, depth, back_fk) -> dict:
    plan = D.build_plan(db.schema, table, depth, back_fk=back_fk)
    return {f.name: f.dtype for f in plan.features}


def assert_matches_reference(db, table, seeds, depth, hidden=()):
    got = D.compute_dfs(db, table, seeds, depth=depth, hidden=hidden, progress=False)
    rows = db.tables[table]
    checked = 0
    for i, (node, cutoff) in enumerate(zip(seeds["node"], seeds["cutoff"])):
        ref = reference(db, table, rows.iloc[node], pd.Timestamp(cutoff), depth, hidden=set(hidden))
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
            Column("region", "category"), Column("rank", "category"), Column("coastal", "numeric")],
            time_column="since"),
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
    row_features, parents_of = compile_module._Compiler.row_features, compile_module._Compiler.parents_of
    monkeypatch.setattr(compile_module._Compiler, "row_features",
                        lambda self, node, rids: gathered.append(node.table) or row_features(self, node, rids))
    monkeypatch.setattr(compile_module._Compiler, "parents_of",
                        lambda self, table, fk: parents.append((table, fk)) or parents_of(self, table, fk))
    running = D.compute_dfs(db, "users", seeds, depth=2, progress=False)
    assert gathered == ["visits"] and set(parents) == {("visits", "user_id")}
    by_city = D.compute_dfs(db, "cities", city_seeds, depth=1, progress=False)
    assert sorted(gathered[1:]) == ["tags", "visits"]
    monkeypatch.setattr(compile_module._Compiler, "runs", lambda self, ag: False)
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
