"""A synthetic shop whose labels are planted in multi-hop, time-dependent relations.

users -< purchases >- items, and users -< audits.

* Each user has a hidden taste (item kind A or B) that flips now and then; 85% of a user's purchases
  are of the current taste. The ``taste`` task asks which kind dominates the user's purchases in the
  next window: only the kinds of the items the user bought recently (two hops: user -> purchase ->
  item) reveal it. The user's own columns are noise, so a single-table model is at chance.
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
AUDIT_ORIGIN = pd.Timestamp("2020-03-02")  # a Monday; the leak task's cutoffs are weekly from here


@register_dataset("synthetic", "shop with a planted multi-hop, time-dependent label and a planted future leak",
                  size=1000, seed=0)
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

    # purchases: each user buys about every 4 days; taste flips about every 150 days
    rows = []
    for u in range(n_users):
        t = signup[u]
        taste = rng.integers(0, 2)
        end = START + pd.Timedelta(days=DAYS)
        n = rng.poisson(DAYS / 4) + 1
        gaps = rng.exponential(4.0, n) * 86400
        times = t + pd.to_timedelta(np.cumsum(gaps), unit="s")
        times = times[times < end]
        flips = rng.random(len(times)) < (4.0 / 150.0)
        tastes = (taste + np.cumsum(flips)) % 2
        kind = np.where(rng.random(len(times)) < 0.85, tastes, 1 - tastes)
        item = rng.integers(0, n_items // 2, len(times)) * 2 + kind  # even items are A, odd are B
        rows.append(pd.DataFrame({"user_id": u, "item_id": item, "purchased_at": times}))
    purchases = pd.concat(rows, ignore_index=True).sort_values("purchased_at", kind="stable")
    purchases.insert(0, "purchase_id", np.arange(len(purchases)))
    purchases["quantity"] = rng.integers(1, 5, len(purchases)).astype(float)

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
