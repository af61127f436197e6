"""A synthetic shop whose labels are planted in multi-hop, time-dependent relations.

users -< purchases >- items, and users -< audits.

* Each user has a hidden taste (item kind A or B) that flips about every 150 days; 85% of a user's
  purchases are of the current taste. How often users buy is skewed as in real shops (a power law: the
  median user buys every 4 days, a few several times a day), and so is how often each item is bought
  (Zipf). The ``taste`` task asks which kind dominates the user's purchases in the next window: only
  the kinds of the items the user bought recently (two hops: user -> purchase -> item) reveal it. The
  user's own columns are noise, so a single-table model is at chance.
* ``audits`` plants a future leak: every user gets an audit one day after each weekly cutoff whose
  ``flag`` is the label of the ``leak`` task, an independent coin per week. A model that sees only
  the past must score at chance on it; one that peeks past the cutoff scores perfectly.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fourdb.datasets.base import register_dataset
from fourdb.rdb import Column, Schema, Table, write_database

START = pd.Timestamp("2020-01-01")
DAYS = 366
MEDIAN_PURCHASES = DAYS / 4  # per user over the year (one every 4 days); the degrees follow a Pareto law
PARETO_SHAPE = 3.0  # a heavy tail, capped at MAX_PER_DAY purchases a day
MAX_PER_DAY = 2
FLIP_DAYS = 150.0  # a taste lasts this long on average
ITEM_SKEW = 0.8  # Zipf exponent of item popularity within a kind
AUDIT_ORIGIN = pd.Timestamp("2020-03-02")  # a Monday; the leak task's cutoffs are weekly from here


@register_dataset("synthetic", "shop with a planted multi-hop, time-dependent label and a planted future leak",
                  bounds={"size": (1, 100_000), "seed": (0, 2**32 - 1)}, size=1000, seed=0)
def build(out, size: int = 1000, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    n_users, n_items = int(size), max(40, int(size) // 10)

    signup = START + pd.to_timedelta(rng.integers(0, 60, n_users), unit="D")
    users = pd.DataFrame({
        "user_id": np.arange(n_users),
        "signup_at": signup,
        "age": rng.integers(18, 80, n_users).astype(float),
        "region": rng.choice(["north", "south", "east", "west"], n_users),
    })
    items = pd.DataFrame({
        "item_id": np.arange(n_items),
        "kind": np.where(np.arange(n_items) % 2 == 0, "A", "B"),
        "price": rng.gamma(2.0, 10.0, n_items).round(2),
    })

    purchases = _purchases(rng, signup.to_numpy().astype("datetime64[ns]").astype(np.int64), n_items)

    weeks = pd.date_range(AUDIT_ORIGIN, START + pd.Timedelta(days=DAYS), freq="7D")
    audit_user = np.repeat(users["user_id"].to_numpy(), len(weeks))
    audit_time = np.tile(weeks + pd.Timedelta(days=1), n_users)
    audits = pd.DataFrame({
        "audit_id": np.arange(len(audit_user)),
        "user_id": audit_user,
        "audited_at": audit_time,
        "flag": rng.integers(0, 2, len(audit_user)).astype(float),
    })

    schema = Schema("synthetic", [
        Table("users", "users.parquet", [
            Column("user_id", "primary_key"), Column("signup_at", "datetime"),
            Column("age", "numeric"), Column("region", "category")], time_column="signup_at"),
        Table("items", "items.parquet", [
            Column("item_id", "primary_key"), Column("kind", "category"), Column("price", "numeric")]),
        Table("purchases", "purchases.parquet", [
            Column("purchase_id", "primary_key"),
            Column("user_id", "foreign_key", "users.user_id"),
            Column("item_id", "foreign_key", "items.item_id"),
            Column("purchased_at", "datetime"), Column("quantity", "numeric")], time_column="purchased_at"),
        Table("audits", "audits.parquet", [
            Column("audit_id", "primary_key"),
            Column("user_id", "foreign_key", "users.user_id"),
            Column("audited_at", "datetime"), Column("flag", "numeric")], time_column="audited_at"),
    ])
    write_database(out, schema, {"users": users, "items": items, "purchases": purchases, "audits": audits})


def _purchases(rng: np.random.Generator, signup_ns: np.ndarray, n_items: int) -> pd.DataFrame:
    """Every user's purchases at once (array operations over all purchases, no loop per user).

    A user's count is Pareto distributed (median ``MEDIAN_PURCHASES`` over the year); given the count, the
    times are uniform between signup and the end (a Poisson process's arrivals). The taste flips at each
    purchase with probability gap / FLIP_DAYS, so it lasts about FLIP_DAYS whatever the user's rate.
    """
    n_users = len(signup_ns)
    end_ns = (START + pd.Timedelta(days=DAYS)).value
    span = end_ns - signup_ns
    scale = MEDIAN_PURCHASES / 2 ** (1 / PARETO_SHAPE)
    count = np.minimum(np.ceil(scale * (1 + rng.pareto(PARETO_SHAPE, n_users))), MAX_PER_DAY * DAYS).astype(np.int64)
    count = np.maximum(1, np.round(count * (span / (DAYS * 86_400 * 10**9))).astype(np.int64))  # a late signup buys less
    user = np.repeat(np.arange(n_users), count)
    times = signup_ns[user] + (rng.random(len(user)) * span[user]).astype(np.int64)
    order = np.lexsort((times, user))
    user, times = user[order], times[order]
    first = np.r_[True, user[1:] != user[:-1]]
    gap_days = np.where(first, 0, np.diff(times, prepend=times[0])) / (86_400 * 10**9)
    flips = (rng.random(len(user)) < np.minimum(1.0, gap_days / FLIP_DAYS)).astype(np.int64)
    flipped = np.cumsum(flips)
    flipped -= np.repeat(flipped[first] - flips[first], count)  # flips since the user's first purchase
    taste = (rng.integers(0, 2, n_users)[user] + flipped) % 2
    kind = np.where(rng.random(len(user)) < 0.85, taste, 1 - taste)
    half = n_items // 2
    weight = 1.0 / np.arange(1, half + 1) ** ITEM_SKEW
    item = rng.choice(half, len(user), p=weight / weight.sum()) * 2 + kind  # even items are A, odd are B
    order = np.argsort(times, kind="stable")
    return pd.DataFrame({"purchase_id": np.arange(len(user)), "user_id": user[order], "item_id": item[order],
                         "purchased_at": pd.to_datetime(times[order]),
                         "quantity": rng.integers(1, 5, len(user)).astype(float)})
