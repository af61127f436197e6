"""The warehouse's dimension tables other than the customers': the calendar, the clock, items, stores,
warehouses, promotions, web sites and pages, call centers, catalog pages, ship modes and reasons."""
from __future__ import annotations

import numpy as np
import pandas as pd

CALENDAR = (pd.Timestamp("2000-01-01"), pd.Timestamp("2100-12-31"))  # decades past the facts, as TPC-DS's
START = pd.Timestamp("2020-01-01")  # the first day of sales
DAYS = 1096  # days of sales: 2020 to 2022
JULIAN_1970 = 2440588  # the Julian day number of 1970-01-01: TPC-DS's date keys are Julian day numbers
CATEGORIES = ("Books", "Children", "Electronics", "Home", "Jewelry", "Men", "Music", "Shoes", "Sports", "Women")
STATES = ("CA", "TX", "NY", "FL", "IL", "PA", "OH", "GA", "NC", "MI", "WA", "TN")
CITIES = ("Midway", "Fairview", "Oak Grove", "Five Points", "Riverside", "Pleasant Hill", "Centerville", "Salem")


def date_key(day: pd.Timestamp | np.ndarray) -> np.ndarray | int:
    """The date key (a Julian day number) of a day, or of days counted from START."""
    if isinstance(day, pd.Timestamp):
        return int((day - pd.Timestamp("1970-01-01")).days) + JULIAN_1970
    return np.asarray(day, dtype=np.int64) + date_key(START)


def business_ids(keys: np.ndarray) -> np.ndarray:
    """TPC-DS's 16-letter business keys (``AAAAAAAABAAAAAAA``): a key's 8 hex digits as letters A-P."""
    keys = np.asarray(keys, dtype=np.int64)
    digits = (keys[:, None] >> (4 * np.arange(8))) & 15
    letters = np.concatenate([np.full((len(keys), 8), ord("A")), ord("A") + digits], axis=1).astype(np.uint8)
    return letters.view("S16").ravel().astype(str)


def date_dim() -> pd.DataFrame:
    """One row per day from 2000 to 2100, keyed by Julian day number; ``d_date`` is its only date column."""
    days = pd.date_range(*CALENDAR, freq="D")
    sk = np.asarray(date_key(days[0])) + np.arange(len(days))
    first_dom = sk - (days.day.to_numpy() - 1)
    month_seq = (days.year.to_numpy() - 1900) * 12 + days.month.to_numpy() - 1
    holiday = ((days.month == 12) & (days.day == 25)) | ((days.month == 1) & (days.day == 1)) | (
        (days.month == 7) & (days.day == 4))
    weekend = days.dayofweek.to_numpy() >= 5
    return pd.DataFrame({
        "d_date_sk": sk, "d_date_id": business_ids(sk), "d_date": days.date, "d_month_seq": month_seq,
        "d_week_seq": (sk - date_key(pd.Timestamp("1900-01-01"))) // 7 + 1, "d_quarter_seq": month_seq // 3 + 1,
        "d_year": days.year, "d_dow": (days.dayofweek.to_numpy() + 1) % 7, "d_moy": days.month, "d_dom": days.day,
        "d_qoy": days.quarter, "d_fy_year": days.year, "d_fy_quarter_seq": month_seq // 3 + 1,
        "d_fy_week_seq": (sk - date_key(pd.Timestamp("1900-01-01"))) // 7 + 1, "d_day_name": days.day_name(),
        "d_quarter_name": days.year.astype(str) + "Q" + days.quarter.astype(str),
        "d_holiday": np.where(holiday, "Y", "N"), "d_weekend": np.where(weekend, "Y", "N"),
        "d_following_holiday": np.where(np.r_[False, holiday[:-1]], "Y", "N"), "d_first_dom": first_dom,
        "d_last_dom": first_dom + days.days_in_month.to_numpy() - 1, "d_same_day_ly": sk - 365, "d_same_day_lq": sk - 91,
        "d_current_day": "N", "d_current_week": "N", "d_current_month": "N", "d_current_quarter": "N",
        "d_current_year": "N",
    })


def time_dim() -> pd.DataFrame:
    """One row per minute of the day, keyed by its second of the day (TPC-DS's has one per second)."""
    minute = np.arange(24 * 60)
    hour = minute // 60
    meal = np.select([(hour >= 6) & (hour < 9), (hour >= 11) & (hour < 14), (hour >= 17) & (hour < 20)],
                     ["breakfast", "lunch", "dinner"], "")
    return pd.DataFrame({
        "t_time_sk": minute * 60, "t_time_id": business_ids(minute * 60), "t_time": minute * 60, "t_hour": hour,
        "t_minute": minute % 60, "t_second": 0, "t_am_pm": np.where(hour < 12, "AM", "PM"),
        "t_shift": np.select([hour < 8, hour < 16], ["third", "first"], "second"),
        "t_sub_shift": np.select([hour < 6, hour < 12, hour < 18], ["night", "morning", "afternoon"], "evening"),
        "t_meal_time": pd.Series(meal).replace("", None),
    })


def zipf_weights(n: int, skew: float = 1.0) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1) ** skew
    return w / w.sum()


def item(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Items by category: item k (from 1) is of category (k - 1) mod 10, so each category's items interleave."""
    sk = np.arange(1, n + 1)
    category = (sk - 1) % len(CATEGORIES)
    price = rng.gamma(2.0, 15.0, n).round(2) + 0.99
    start = pd.Timestamp("1997-10-27") + pd.to_timedelta(rng.integers(0, 3 * 365, n), unit="D")
    ended = rng.random(n) < 0.2
    end = pd.Series(start + pd.to_timedelta(rng.integers(400, 2000, n), unit="D")).where(ended)
    brand = rng.integers(1, 9, n)
    return pd.DataFrame({
        "i_item_sk": sk, "i_item_id": business_ids(sk), "i_rec_start_date": start.date, "i_rec_end_date": end.dt.date,
        "i_item_desc": [f"A {CATEGORIES[c].lower()} item, model {k} of the range" for c, k in zip(category, sk)],
        "i_current_price": price, "i_wholesale_cost": (price * rng.uniform(0.4, 0.8, n)).round(2),
        "i_brand_id": category * 1000 + brand,
        "i_brand": [f"{CATEGORIES[c].lower()}brand #{b}" for c, b in zip(category, brand)],
        "i_class_id": rng.integers(1, 16, n), "i_category_id": category + 1,
        "i_category": np.asarray(CATEGORIES)[category], "i_manufact_id": rng.integers(1, 1000, n),
        "i_size": rng.choice(["small", "medium", "large", "extra large", "N/A"], n),
        "i_color": rng.choice(["red", "blue", "green", "black", "white", "olive", "navy", "ivory"], n),
        "i_units": rng.choice(["Each", "Dozen", "Box", "Pound", "Case"], n),
        "i_manager_id": rng.integers(1, 100, n), "i_product_name": [f"product{k:07d}" for k in sk],
    })


def _place(rng: np.random.Generator, prefix: str, n: int) -> dict[str, np.ndarray]:
    """The address columns every outlet has."""
    return {f"{prefix}street_number": rng.integers(1, 999, n).astype(str),
            f"{prefix}street_name": np.char.add(rng.choice(["Main", "Oak", "Park", "Lake", "Hill", "Elm"], n), " Street"),
            f"{prefix}city": rng.choice(CITIES, n), f"{prefix}state": rng.choice(STATES, n),
            f"{prefix}zip": rng.integers(10000, 99999, n).astype(str), f"{prefix}country": "United States",
            f"{prefix}gmt_offset": rng.choice([-5.0, -6.0, -7.0, -8.0], n)}


def store(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    return pd.DataFrame({
        "s_store_sk": sk, "s_store_id": business_ids(sk), "s_store_name": [f"store {k}" for k in sk],
        "s_number_employees": rng.integers(200, 300, n), "s_floor_space": rng.integers(5_000_000, 10_000_000, n),
        "s_hours": rng.choice(["8AM-4PM", "8AM-8AM", "8AM-12AM"], n), "s_manager": rng.choice(["Ann", "Bob", "Cy"], n),
        "s_market_id": rng.integers(1, 10, n), "s_geography_class": "Unknown",
        "s_market_desc": [f"market {m}" for m in rng.integers(1, 10, n)], "s_division_id": 1,
        "s_division_name": "Unknown", "s_company_id": 1, "s_company_name": "Unknown",
        **_place(rng, "s_", n), "s_tax_precentage": rng.uniform(0, 0.11, n).round(2),
    })


def warehouse(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    return pd.DataFrame({"w_warehouse_sk": sk, "w_warehouse_id": business_ids(sk),
                         "w_warehouse_name": [f"warehouse {k}" for k in sk],
                         "w_warehouse_sq_ft": rng.integers(50_000, 1_000_000, n), **_place(rng, "w_", n)})


def promotion(rng: np.random.Generator, n: int, n_items: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    start = rng.integers(-200, DAYS, n)
    return pd.DataFrame({
        "p_promo_sk": sk, "p_promo_id": business_ids(sk), "p_start_date_sk": date_key(start),
        "p_end_date_sk": date_key(start + rng.integers(7, 60, n)), "p_item_sk": rng.integers(1, n_items + 1, n),
        "p_cost": 1000.0, "p_response_target": 1, "p_promo_name": rng.choice(["ought", "able", "pri", "ese"], n),
        **{f"p_channel_{c}": rng.choice(["Y", "N"], n) for c in ("dmail", "email", "catalog", "tv", "radio")},
        "p_purpose": "Unknown", "p_discount_active": "N",
    })


def web_site(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    return pd.DataFrame({
        "web_site_sk": sk, "web_site_id": business_ids(sk), "web_open_date_sk": date_key(rng.integers(-3000, -100, n)),
        "web_name": [f"site_{k}" for k in sk], "web_class": "Unknown", "web_manager": rng.choice(["Ann", "Bob"], n),
        "web_mkt_id": rng.integers(1, 7, n), "web_company_name": rng.choice(["pri", "able", "ought"], n),
        "web_city": rng.choice(CITIES, n), "web_state": rng.choice(STATES, n),
        "web_tax_percentage": rng.uniform(0, 0.12, n).round(2),
    })


def web_page(rng: np.random.Generator, n: int, n_customers: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    created = rng.integers(-3000, -30, n)
    owned = rng.random(n) < 0.3  # a few pages belong to a customer (TPC-DS's wp_customer_sk, mostly NULL)
    return pd.DataFrame({
        "wp_web_page_sk": sk, "wp_web_page_id": business_ids(sk), "wp_creation_date_sk": date_key(created),
        "wp_access_date_sk": date_key(created + rng.integers(0, 20, n)),
        "wp_autogen_flag": rng.choice(["Y", "N"], n),
        "wp_customer_sk": pd.Series(rng.integers(1, n_customers + 1, n), dtype="Int64").where(owned),
        "wp_url": "http://www.foo.com", "wp_type": rng.choice(["welcome", "order", "feedback", "general"], n),
        "wp_char_count": rng.integers(300, 8000, n), "wp_link_count": rng.integers(2, 25, n),
        "wp_image_count": rng.integers(1, 7, n), "wp_max_ad_count": rng.integers(0, 4, n),
    })


def call_center(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    return pd.DataFrame({
        "cc_call_center_sk": sk, "cc_call_center_id": business_ids(sk),
        "cc_open_date_sk": date_key(rng.integers(-4000, -100, n)), "cc_name": [f"center {k}" for k in sk],
        "cc_class": rng.choice(["small", "medium", "large"], n), "cc_employees": rng.integers(2, 70_000, n),
        "cc_sq_ft": rng.integers(1_000, 700_000, n), "cc_hours": rng.choice(["8AM-4PM", "8AM-12AM"], n),
        "cc_manager": rng.choice(["Ann", "Bob", "Cy"], n), "cc_mkt_id": rng.integers(1, 7, n),
        "cc_division": rng.integers(1, 7, n), "cc_company": rng.integers(1, 7, n),
        "cc_city": rng.choice(CITIES, n), "cc_state": rng.choice(STATES, n),
        "cc_tax_percentage": rng.uniform(0, 0.12, n).round(2),
    })


def catalog_page(rng: np.random.Generator, n: int) -> pd.DataFrame:
    sk = np.arange(1, n + 1)
    start = rng.integers(-400, DAYS, n)
    return pd.DataFrame({
        "cp_catalog_page_sk": sk, "cp_catalog_page_id": business_ids(sk), "cp_start_date_sk": date_key(start),
        "cp_end_date_sk": date_key(start + rng.integers(30, 400, n)), "cp_department": "DEPARTMENT",
        "cp_catalog_number": (sk - 1) // 100 + 1, "cp_catalog_page_number": (sk - 1) % 100 + 1,
        "cp_description": [f"page {k} of the catalog, with its offers" for k in sk],
        "cp_type": rng.choice(["bi-annual", "quarterly", "monthly"], n),
    })


def ship_mode(rng: np.random.Generator) -> pd.DataFrame:
    sk = np.arange(1, 21)
    return pd.DataFrame({"sm_ship_mode_sk": sk, "sm_ship_mode_id": business_ids(sk),
                         "sm_type": np.repeat(["REGULAR", "EXPRESS", "NEXT DAY", "OVERNIGHT", "TWO DAY"], 4),
                         "sm_code": np.tile(["AIR", "SURFACE", "SEA", "BIKE"], 5),
                         "sm_carrier": rng.choice(["UPS", "FEDEX", "DHL", "USPS", "ZHOU"], 20),
                         "sm_contract": [f"contract{k:03d}" for k in sk]})


def reason() -> pd.DataFrame:
    texts = ("Package was damaged", "Stopped working", "Did not fit", "Found a better price", "Not the product "
             "that was ordred", "Parts missing", "Did not like the color", "Gift exchange", "Duplicate purchase",
             "Unauthoized purchase", "No service location in my area", "Did not get it on time")
    sk = np.arange(1, 36)
    return pd.DataFrame({"r_reason_sk": sk, "r_reason_id": business_ids(sk),
                         "r_reason_desc": [texts[(k - 1) % len(texts)] for k in sk]})
