"""A synthetic catalogue whose next views are planted two hops away: the recommendation family's test bed.

users -< views >- products >- shelves, and users -< gifts >- products.

* Each user browses one favourite shelf at a time (it changes about every three weeks) and views
  products of it, rarely the same one twice. The ``next-views`` task asks which products a user views
  next week: the shelf of the products viewed recently (user -> view -> product -> shelf) tells; a
  user's own past products (repeat) and the popular ones hardly do.
* ``gifts`` plants the leak twin: one day after each weekly cutoff every user gets a random product
  (``next-gifts``): unpredictable from the past, so every honest model scores as popularity does,
  while one that peeks past the cutoff finds it at once.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fourdb.datasets.base import register_dataset
from fourdb.rdb import Column, Schema, Table, write_database

START = pd.Timestamp("2020-01-01")
DAYS = 366
WEEK_ORIGIN = pd.Timestamp("2020-03-02")  # a Monday; the tasks' cutoffs are weekly from here
SHELF_PRODUCTS = 20  # products per shelf
VIEWS_PER_WEEK = 2.0
SHELF_WEEKS = 3.0  # a user's favourite shelf lasts this many weeks on average


@register_dataset("browsing", "catalogue with planted next views two hops away and a planted future leak (gifts)",
                  bounds={"size": (1, 100_000), "seed": (0, 2**32 - 1)}, size=1000, seed=0)
def build(out, size: int = 1000, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    n_users = int(size)
    users = pd.DataFrame({
        "user_id": np.arange(n_users),
        "signup_at": START + pd.to_timedelta(rng.integers(0, 60, n_users), unit="D"),
        "age": rng.integers(18, 80, n_users).astype(float),
    })
    weeks = pd.date_range(WEEK_ORIGIN, START + pd.Timedelta(days=DAYS), freq="7D")
    shelves, products, views, gifts = _browsing(rng, users, weeks)
    schema = Schema("browsing", [
        Table("users", "users.parquet", [
            Column("user_id", "primary_key"), Column("signup_at", "datetime"), Column("age", "numeric")],
            time_column="signup_at"),
        Table("shelves", "shelves.parquet", [
            Column("shelf_id", "primary_key"), Column("theme", "category"), Column("aisle", "category")]),
        Table("products", "products.parquet", [
            Column("product_id", "primary_key"), Column("shelf_id", "foreign_key", "shelves.shelf_id"),
            Column("price", "numeric")]),
        Table("views", "views.parquet", [
            Column("view_id", "primary_key"), Column("user_id", "foreign_key", "users.user_id"),
            Column("product_id", "foreign_key", "products.product_id"), Column("viewed_at", "datetime"),
            Column("seconds", "numeric")], time_column="viewed_at"),
        Table("gifts", "gifts.parquet", [
            Column("gift_id", "primary_key"), Column("user_id", "foreign_key", "users.user_id"),
            Column("product_id", "foreign_key", "products.product_id"), Column("given_at", "datetime")],
            time_column="given_at"),
    ])
    write_database(out, schema, {"users": users, "shelves": shelves, "products": products, "views": views,
                                 "gifts": gifts})


def _browsing(rng: np.random.Generator, users: pd.DataFrame, weeks: pd.DatetimeIndex):
    """Shelves, products, weekly views (mostly of the user's current shelf) and weekly random gifts,
    vectorized over users and weeks."""
    n_users = len(users)
    n_shelves = max(10, n_users // 40)
    # a shelf's theme names it, as a genre or a department would: what a model without row ids can match on
    shelves = pd.DataFrame({"shelf_id": np.arange(n_shelves), "theme": [f"theme{i}" for i in range(n_shelves)],
                            "aisle": [f"aisle{i % 5}" for i in range(n_shelves)]})
    n_products = n_shelves * SHELF_PRODUCTS
    products = pd.DataFrame({"product_id": np.arange(n_products), "shelf_id": np.arange(n_products) // SHELF_PRODUCTS,
                             "price": rng.gamma(2.0, 10.0, n_products).round(2)})
    # the favourite shelf per user and week: a fresh random shelf now and then, held in between
    n_weeks = len(weeks)
    switch = rng.random((n_users, n_weeks)) < 1.0 / SHELF_WEEKS
    switch[:, 0] = True
    fresh = rng.integers(0, n_shelves, (n_users, n_weeks))
    last_switch = np.maximum.accumulate(np.where(switch, np.arange(n_weeks)[None, :], 0), axis=1)
    shelf = np.take_along_axis(fresh, last_switch, 1)
    counts = rng.poisson(VIEWS_PER_WEEK, (n_users, n_weeks))
    user = np.repeat(np.repeat(np.arange(n_users), n_weeks), counts.reshape(-1))
    week = np.repeat(np.tile(np.arange(n_weeks), n_users), counts.reshape(-1))
    on_shelf = rng.random(len(user)) < 0.85
    chosen_shelf = np.where(on_shelf, shelf[user, week], rng.integers(0, n_shelves, len(user)))
    product = chosen_shelf * SHELF_PRODUCTS + rng.integers(0, SHELF_PRODUCTS, len(user))
    at = weeks[week] + pd.to_timedelta(rng.uniform(0, 7 * 86400, len(user)), unit="s")
    signed_up = users["signup_at"].to_numpy()[user] <= at
    views = pd.DataFrame({"user_id": user[signed_up], "product_id": product[signed_up], "viewed_at": at[signed_up],
                          "seconds": rng.exponential(30.0, int(signed_up.sum())).round(1)})
    views = views.sort_values("viewed_at", kind="stable").reset_index(drop=True)
    views.insert(0, "view_id", np.arange(len(views)))
    gift_user = np.repeat(users["user_id"].to_numpy(), n_weeks)
    gifts = pd.DataFrame({"gift_id": np.arange(len(gift_user)), "user_id": gift_user,
                          "product_id": rng.integers(0, n_products, len(gift_user)),
                          "given_at": np.tile(weeks + pd.Timedelta(days=1), n_users)})
    return shelves, products, views, gifts
