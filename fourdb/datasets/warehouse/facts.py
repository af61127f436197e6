"""The warehouse's facts for one block of customers at a time: their visits, each a store ticket, a web order or
a catalog order of a few distinct items, the lines that come back, and the inventory's weekly counts.

Everything is drawn with array operations over the whole block; a block's rows are written before the next is
drawn, so memory stays bounded whatever the size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fourdb.datasets.warehouse.dims import CATEGORIES, DAYS, date_key, zipf_weights
from fourdb.datasets.warehouse.people import Customers
from fourdb.datasets.warehouse.truth import NULL_DATE_SHARE

CHANNELS = ("store", "catalog", "web")
CHANNEL_SHARE = (0.6, 0.25, 0.15)
FAVOURITE_SHARE = 0.7  # of a customer's lines, from their favourite category
DECLINE_DAYS, DECLINE = 90, 0.7  # over their last 90 days a customer's visits thin out by up to 70%
PROMOTED_SHARE = 0.5
SAME_SHIP_CUSTOMER = 0.85  # a web or catalog order shipped to the buyer; the rest to someone else
TICKET_LINES_BACK = 0.6  # of a ticket that comes back, the share of its lines that do


@dataclass
class Return:
    """When the returned lines came back: the day (from START) and the minute of the day."""

    day: np.ndarray
    minute: np.ndarray


@dataclass
class Sizes:
    """How many rows each dimension holds (the facts follow from the customers' visits)."""

    customers: int
    addresses: int
    items: int
    stores: int
    warehouses: int
    promotions: int
    web_sites: int
    web_pages: int
    call_centers: int
    catalog_pages: int
    reasons: int = 35
    ship_modes: int = 20


@dataclass
class Lines:
    """A block's lines of one channel, one per (visit, item), with the values every channel shares."""

    customer: np.ndarray  # index into the customers (the key is index + 1)
    day: np.ndarray  # from START
    minute: np.ndarray
    ticket: np.ndarray
    item: np.ndarray  # key
    quantity: np.ndarray
    prices: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.day)


def visits(rng: np.random.Generator, people: Customers, lo: int, hi: int) -> pd.DataFrame:
    """Customers lo..hi-1's visits: the first on their join day, then Poisson arrivals while they are active,
    thinned over their last ``DECLINE_DAYS``; each in one channel, at a minute of the day."""
    idx = np.arange(lo, hi)
    span = np.clip(np.minimum(people.end[idx], DAYS) - people.join[idx], 0, None)
    count = rng.poisson(people.rate[idx] * span)
    who = np.repeat(idx, count)
    day = people.join[who] + rng.random(len(who)) * np.repeat(span, count)
    closing = np.clip((day - (people.end[who] - DECLINE_DAYS)) / DECLINE_DAYS, 0, 1)
    keep = rng.random(len(who)) >= DECLINE * closing
    who = np.r_[idx, who[keep]]
    day = np.r_[people.join[idx], np.floor(day[keep]).astype(np.int64)]
    channel = np.r_[np.zeros(len(idx), np.int64), rng.choice(len(CHANNELS), keep.sum(), p=CHANNEL_SHARE)]
    minute = np.clip(rng.normal(14 * 60, 200, len(who)), 0, 24 * 60 - 1).astype(np.int64)
    order = np.lexsort((minute, day))
    return pd.DataFrame({"customer": who, "day": day, "channel": channel, "minute": minute}).iloc[order]


def lines(rng: np.random.Generator, people: Customers, visit: pd.DataFrame, items: pd.DataFrame,
          first_ticket: int) -> Lines:
    """A few distinct items per visit (ticket numbers from ``first_ticket``): mostly of the customer's favourite
    category, popular ones more often (Zipf), each at a discount off a list price near the item's."""
    n_visits, n_items = len(visit), len(items)
    per_visit = 1 + np.minimum(rng.poisson(1.5, n_visits), 7)
    at = np.repeat(np.arange(n_visits), per_visit)
    who = visit["customer"].to_numpy()[at]
    category = np.where(rng.random(len(at)) < FAVOURITE_SHARE, people.favourite[who],
                        rng.integers(0, len(CATEGORIES), len(at)))
    per_category = n_items // len(CATEGORIES)
    item = category + 1 + len(CATEGORIES) * rng.choice(per_category, len(at), p=zipf_weights(per_category))
    _, first = np.unique(at * (n_items + 1) + item, return_index=True)  # an item once per ticket
    first.sort()
    at, who, item = at[first], who[first], item[first]
    quantity = rng.integers(1, 11, len(at))
    price = items["i_current_price"].to_numpy()[item - 1]
    wholesale = items["i_wholesale_cost"].to_numpy()[item - 1]
    list_price = (price * rng.uniform(1.0, 1.4, len(at))).round(2)
    sales_price = (list_price * (1 - rng.uniform(0, 0.3, len(at)))).round(2)
    prices = {"wholesale_cost": wholesale, "list_price": list_price, "sales_price": sales_price,
              "ext_discount_amt": ((list_price - sales_price) * quantity).round(2),
              "ext_sales_price": (sales_price * quantity).round(2), "ext_wholesale_cost": (wholesale * quantity).round(2),
              "ext_list_price": (list_price * quantity).round(2)}
    return Lines(customer=who, day=visit["day"].to_numpy()[at], minute=visit["minute"].to_numpy()[at],
                 ticket=first_ticket + at, item=item, quantity=quantity, prices=prices)


def _key(values: np.ndarray, null: np.ndarray | None = None) -> pd.Series:
    """Integer keys, NULL where ``null``."""
    s = pd.Series(np.asarray(values, dtype=np.int64), dtype="Int64")
    return s if null is None else s.where(~null)


def _dated(rng: np.random.Generator, day: np.ndarray) -> pd.Series:
    """The date keys of ``day``, a few of them NULL (a row the loader could not date)."""
    return _key(date_key(day), rng.random(len(day)) < NULL_DATE_SHARE)


def _party(people: Customers, who: np.ndarray, prefix: str, shuffle: np.ndarray | None = None) -> dict:
    """A customer's key and the demographics and address the row records for them (their current ones, or
    another's for ``shuffle`` rows, as addresses change)."""
    addr = np.where(shuffle, np.roll(people.addr[who], 1), people.addr[who]) if shuffle is not None else people.addr[who]
    return {f"{prefix}customer_sk": _key(who + 1), f"{prefix}cdemo_sk": _key(people.cdemo[who]),
            f"{prefix}hdemo_sk": _key(people.hdemo[who]), f"{prefix}addr_sk": _key(addr)}


def _money(rng: np.random.Generator, sold: Lines, prefix: str, promoted: np.ndarray) -> dict:
    p = sold.prices
    coupon = np.where(promoted, (p["ext_sales_price"] * 0.05).round(2), 0.0)
    net_paid = (p["ext_sales_price"] - coupon).round(2)
    tax = (net_paid * 0.07).round(2)
    return {f"{prefix}quantity": sold.quantity, **{f"{prefix}{k}": v for k, v in p.items()},
            f"{prefix}ext_tax": tax, f"{prefix}coupon_amt": coupon, f"{prefix}net_paid": net_paid,
            f"{prefix}net_paid_inc_tax": (net_paid + tax).round(2),
            f"{prefix}net_profit": (net_paid - p["ext_wholesale_cost"]).round(2)}


def store_sales(rng: np.random.Generator, people: Customers, sold: Lines, sizes: Sizes) -> pd.DataFrame:
    n = len(sold)
    promoted = rng.random(n) < PROMOTED_SHARE
    store = np.where(rng.random(n) < 0.8, people.store[sold.customer], rng.integers(1, sizes.stores + 1, n))
    return pd.DataFrame({
        "ss_sold_date_sk": _dated(rng, sold.day), "ss_sold_time_sk": _key(sold.minute * 60), "ss_item_sk": _key(sold.item),
        **_party(people, sold.customer, "ss_", rng.random(n) < 0.1), "ss_store_sk": _key(store),
        "ss_promo_sk": _key(rng.integers(1, sizes.promotions + 1, n), ~promoted), "ss_ticket_number": sold.ticket,
        **_money(rng, sold, "ss_", promoted),
    })


def remote_sales(rng: np.random.Generator, people: Customers, sold: Lines, sizes: Sizes, web: bool) -> pd.DataFrame:
    """Web or catalog sales: billed to the buyer, shipped to them or (sometimes) to another customer."""
    n, p = len(sold), "ws_" if web else "cs_"
    promoted = rng.random(n) < PROMOTED_SHARE
    ship_to = np.where(rng.random(n) < SAME_SHIP_CUSTOMER, sold.customer, rng.integers(0, len(people), n))
    where = ({"ws_web_page_sk": _key(rng.integers(1, sizes.web_pages + 1, n)),
              "ws_web_site_sk": _key(rng.integers(1, sizes.web_sites + 1, n))} if web else
             {"cs_call_center_sk": _key(rng.integers(1, sizes.call_centers + 1, n)),
              "cs_catalog_page_sk": _key(rng.integers(1, sizes.catalog_pages + 1, n))})
    return pd.DataFrame({
        f"{p}sold_date_sk": _dated(rng, sold.day), f"{p}sold_time_sk": _key(sold.minute * 60),
        f"{p}ship_date_sk": _key(date_key(sold.day + rng.integers(1, 11, n))), f"{p}item_sk": _key(sold.item),
        **_party(people, sold.customer, f"{p}bill_"), **_party(people, ship_to, f"{p}ship_"), **where,
        f"{p}ship_mode_sk": _key(rng.integers(1, sizes.ship_modes + 1, n)),
        f"{p}warehouse_sk": _key(rng.integers(1, sizes.warehouses + 1, n)),
        f"{p}promo_sk": _key(rng.integers(1, sizes.promotions + 1, n), ~promoted), f"{p}order_number": sold.ticket,
        **_money(rng, sold, p, promoted),
    })


def returned(rng: np.random.Generator, people: Customers, sold: Lines) -> tuple[np.ndarray, Return]:
    """Which lines come back, and when: a ticket comes back in one trip (one day and minute, 1 to 60 days after
    the sale) with some of its lines, so a line's chance is its buyer's return rate."""
    if not len(sold):
        return np.zeros(0, bool), Return(np.zeros(0, np.int64), np.zeros(0, np.int64))
    ticket = sold.ticket - sold.ticket.min()
    n = int(ticket.max()) + 1
    comes_back, delay, minute = rng.random(n), rng.integers(1, 61, n), rng.integers(9 * 60, 21 * 60, n)
    back = (comes_back[ticket] < people.return_rate[sold.customer] / TICKET_LINES_BACK) & (
        rng.random(len(sold)) < TICKET_LINES_BACK)
    return back, Return(sold.day[back] + delay[ticket][back], minute[ticket][back])


def _return_money(rng: np.random.Generator, sales: pd.DataFrame, p: str, r: str) -> dict:
    qty = np.ceil(rng.random(len(sales)) * sales[f"{p}quantity"].to_numpy()).astype(np.int64)
    amount = (sales[f"{p}sales_price"].to_numpy() * qty).round(2)
    fee = rng.uniform(0.5, 100, len(sales)).round(2)
    return {f"{r}return_quantity": qty, f"{r}return_amt": amount, f"{r}return_tax": (amount * 0.07).round(2),
            f"{r}fee": fee, f"{r}net_loss": (fee + amount * 0.1).round(2)}


def store_returns(rng: np.random.Generator, back: Return, sales: pd.DataFrame, sizes: Sizes) -> pd.DataFrame:
    """The store lines that came back (``sales`` already cut to them)."""
    n = len(sales)
    return pd.DataFrame({
        "sr_returned_date_sk": _dated(rng, back.day), "sr_return_time_sk": _key(back.minute * 60),
        "sr_item_sk": sales["ss_item_sk"],
        **{f"sr_{k}": sales[f"ss_{k}"] for k in ("customer_sk", "cdemo_sk", "hdemo_sk", "addr_sk", "store_sk")},
        "sr_reason_sk": _key(rng.integers(1, sizes.reasons + 1, n)), "sr_ticket_number": sales["ss_ticket_number"],
        **_return_money(rng, sales, "ss_", "sr_"),
    }).reset_index(drop=True)


def remote_returns(rng: np.random.Generator, back: Return, sales: pd.DataFrame, sizes: Sizes,
                   web: bool) -> pd.DataFrame:
    """Web or catalog lines that came back: refunded to the buyer, returned by whoever it was shipped to."""
    n, p, r = len(sales), ("ws_" if web else "cs_"), ("wr_" if web else "cr_")
    party = {f"{r}{role}_{k}": sales[f"{p}{side}_{k}"] for role, side in (("refunded", "bill"), ("returning", "ship"))
             for k in ("customer_sk", "cdemo_sk", "hdemo_sk", "addr_sk")}
    where = ({"wr_web_page_sk": sales["ws_web_page_sk"]} if web else
             {k.replace("cs_", "cr_"): sales[k] for k in ("cs_call_center_sk", "cs_catalog_page_sk", "cs_ship_mode_sk",
                                                          "cs_warehouse_sk")})
    return pd.DataFrame({
        f"{r}returned_date_sk": _dated(rng, back.day), f"{r}returned_time_sk": _key(back.minute * 60),
        f"{r}item_sk": sales[f"{p}item_sk"],
        **party, **where, f"{r}reason_sk": _key(rng.integers(1, sizes.reasons + 1, n)),
        f"{r}order_number": sales[f"{p}order_number"], **_return_money(rng, sales, p, r),
    }).reset_index(drop=True)


def inventory_weeks(rng: np.random.Generator, items: np.ndarray, warehouses: int, weeks: np.ndarray) -> pd.DataFrame:
    """What each of ``items`` counts in each warehouse at the start of each of ``weeks`` (a few counts missing)."""
    week, item, house = (g.ravel() for g in np.meshgrid(weeks, items, np.arange(1, warehouses + 1), indexing="ij"))
    on_hand = rng.integers(0, 1000, len(week))
    return pd.DataFrame({"inv_date_sk": _key(date_key(week * 7)), "inv_item_sk": _key(item),
                         "inv_warehouse_sk": _key(house),
                         "inv_quantity_on_hand": _key(on_hand, rng.random(len(week)) < 0.05)})
