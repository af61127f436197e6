"""The warehouse's people: customers (with names, e-mail addresses and the hidden traits that drive what they
buy and when they stop), their addresses, and the demographics and income bands they point to."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fourdb.datasets.warehouse.dims import CATEGORIES, CITIES, DAYS, STATES, business_ids, date_key

FIRST_NAMES = ("James", "Mary", "John", "Patricia", "Robert", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
               "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Carlos", "Karen",
               "Wei", "Nancy", "Ahmed", "Lisa", "Daniel", "Betty", "Matthew", "Sandra", "Anthony", "Ashley")
LAST_NAMES = ("Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
              "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
              "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson")
DOMAINS = ("example.com", "mail.example.org", "shop.example.net")
RISKY = {CATEGORIES.index(c) for c in ("Electronics", "Jewelry", "Music")}  # their buyers stop sooner
LIFETIME_DAYS = (900.0, 300.0)  # the mean lifetime of a customer, otherwise and for a risky category's buyer
RETURNER_SHARE, RETURN_RATES = 0.2, (0.04, 0.25)  # a line's chance to come back, otherwise and for a returner
INCOME_BANDS = 20
CDEMO = (("M", "F"), ("M", "S", "D", "W", "U"), ("Primary", "Secondary", "College", "2 yr Degree", "4 yr Degree",
                                                  "Advanced Degree", "Unknown"), tuple(range(500, 10_001, 500)),
         ("Good", "High Risk", "Low Risk", "Unknown"))
HDEMO = (tuple(range(1, INCOME_BANDS + 1)), (">10000", "5001-10000", "1001-5000", "501-1000", "0-500", "Unknown"),
         tuple(range(10)), tuple(range(-1, 5)))


@dataclass
class Customers:
    """What the facts need of each customer (index k is customer k + 1): when they start and stop buying, how
    often, what they favour, how often they return things, and the rows they point to."""

    join: np.ndarray  # the day (from START) of the first purchase
    end: np.ndarray  # the day they stop buying (may lie past the last day of sales)
    rate: np.ndarray  # visits a day while active
    favourite: np.ndarray  # category index
    return_rate: np.ndarray
    addr: np.ndarray
    cdemo: np.ndarray
    hdemo: np.ndarray
    store: np.ndarray  # the store they visit most

    def __len__(self) -> int:
        return len(self.join)


def customers(rng: np.random.Generator, n: int, n_addresses: int, n_stores: int,
              visits: float) -> tuple[pd.DataFrame, Customers]:
    """The customer table and the hidden traits behind it, ``visits`` the mean visits a customer makes. A
    customer's lifetime is shorter when their favourite category is risky or they return much, a little longer
    when they are a preferred customer (a column of their own row: the weak, single-table part of the signal)."""
    join = rng.integers(0, DAYS - 90, n)
    favourite = rng.integers(0, len(CATEGORIES), n)
    returner = rng.random(n) < RETURNER_SHARE
    preferred = rng.random(n) < 0.5
    mean = np.where(np.isin(favourite, list(RISKY)), LIFETIME_DAYS[1], LIFETIME_DAYS[0])
    mean = mean * np.where(returner, 0.5, 1.0) * np.where(preferred, 1.25, 1.0)
    end = join + 30 + rng.exponential(mean)
    rate = rng.gamma(2.0, 0.5, n)  # how often a customer buys varies (mean 1), scaled to ``visits`` a customer
    rate *= visits * n / max(float((rate * np.clip(np.minimum(end, DAYS) - join, 0, None)).sum()), 1.0)
    traits = Customers(join=join, end=end, rate=rate,
                       favourite=favourite, return_rate=np.where(returner, RETURN_RATES[1], RETURN_RATES[0]),
                       addr=rng.integers(1, n_addresses + 1, n), cdemo=rng.integers(1, _count(CDEMO) + 1, n),
                       hdemo=rng.integers(1, _count(HDEMO) + 1, n), store=rng.integers(1, n_stores + 1, n))
    sk = np.arange(1, n + 1)
    first, last = rng.choice(FIRST_NAMES, n), rng.choice(LAST_NAMES, n)
    email = pd.Series(first).str.cat(pd.Series(last), sep=".") + "@" + rng.choice(DOMAINS, n)
    birth = rng.integers(1930, 2003, n)
    table = pd.DataFrame({
        "c_customer_sk": sk, "c_customer_id": business_ids(sk), "c_current_cdemo_sk": traits.cdemo,
        "c_current_hdemo_sk": traits.hdemo, "c_current_addr_sk": traits.addr,
        "c_first_shipto_date_sk": date_key(join - rng.integers(0, 30, n)), "c_first_sales_date_sk": date_key(join),
        "c_salutation": rng.choice(["Mr.", "Mrs.", "Ms.", "Dr.", "Sir", "Miss"], n), "c_first_name": first,
        "c_last_name": last, "c_preferred_cust_flag": np.where(preferred, "Y", "N"),
        "c_birth_day": rng.integers(1, 29, n), "c_birth_month": rng.integers(1, 13, n), "c_birth_year": birth,
        "c_birth_country": rng.choice(["UNITED STATES", "CANADA", "MEXICO", "GERMANY", "INDIA", "JAPAN"], n),
        "c_login": [f"user{k}" for k in sk], "c_email_address": email.str.lower(),
    })
    return table, traits


def customer_address(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    return pd.DataFrame({
        "ca_address_sk": sk, "ca_address_id": business_ids(sk), "ca_street_number": rng.integers(1, 999, n).astype(str),
        "ca_street_name": rng.choice(["Main", "Oak", "Park", "Lake", "Hill", "Elm", "Cedar", "Pine"], n),
        "ca_street_type": rng.choice(["Street", "Avenue", "Road", "Lane", "Court", "Way"], n),
        "ca_suite_number": np.char.add("Suite ", rng.integers(0, 500, n).astype(str)), "ca_city": rng.choice(CITIES, n),
        "ca_county": rng.choice(["Williamson County", "Walker County", "Ziebach County", "Bronx County"], n),
        "ca_state": rng.choice(STATES, n), "ca_zip": rng.integers(10000, 99999, n).astype(str),
        "ca_country": "United States", "ca_gmt_offset": rng.choice([-5.0, -6.0, -7.0, -8.0], n),
        "ca_location_type": rng.choice(["single family", "apartment", "condo"], n),
    })


def _count(levels) -> int:
    return int(np.prod([len(v) for v in levels]))


def _cross(levels) -> list[np.ndarray]:
    """Every combination of the levels, the last varying fastest (TPC-DS's demographics are such products)."""
    grids = np.meshgrid(*[np.arange(len(v)) for v in levels], indexing="ij")
    return [np.asarray(v, dtype=object)[g.ravel()] for v, g in zip(levels, grids)]


def customer_demographics() -> pd.DataFrame:
    gender, marital, education, estimate, credit = _cross(CDEMO)
    n = len(gender)
    return pd.DataFrame({
        "cd_demo_sk": np.arange(1, n + 1), "cd_gender": gender.astype(str), "cd_marital_status": marital.astype(str),
        "cd_education_status": education.astype(str), "cd_purchase_estimate": estimate.astype(np.int64),
        "cd_credit_rating": credit.astype(str), "cd_dep_count": np.arange(n) % 7,
        "cd_dep_employed_count": np.arange(n) % 5, "cd_dep_college_count": np.arange(n) % 3,
    })


def household_demographics() -> pd.DataFrame:
    band, potential, dependants, vehicles = _cross(HDEMO)
    return pd.DataFrame({"hd_demo_sk": np.arange(1, len(band) + 1), "hd_income_band_sk": band.astype(np.int64),
                         "hd_buy_potential": potential.astype(str), "hd_dep_count": dependants.astype(np.int64),
                         "hd_vehicle_count": vehicles.astype(np.int64)})


def income_band() -> pd.DataFrame:
    sk = np.arange(1, INCOME_BANDS + 1)
    return pd.DataFrame({"ib_income_band_sk": sk, "ib_lower_bound": (sk - 1) * 10_000 + 1,
                         "ib_upper_bound": sk * 10_000})
