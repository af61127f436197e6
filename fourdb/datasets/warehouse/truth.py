"""Every key the generated warehouse holds (none is declared in the files): what an import should find."""
from __future__ import annotations

from dataclasses import dataclass, field

PRIMARY_KEYS = {
    "date_dim": "d_date_sk", "time_dim": "t_time_sk", "customer": "c_customer_sk",
    "customer_address": "ca_address_sk", "customer_demographics": "cd_demo_sk",
    "household_demographics": "hd_demo_sk", "income_band": "ib_income_band_sk", "item": "i_item_sk",
    "store": "s_store_sk", "warehouse": "w_warehouse_sk", "promotion": "p_promo_sk", "web_site": "web_site_sk",
    "web_page": "wp_web_page_sk", "call_center": "cc_call_center_sk", "catalog_page": "cp_catalog_page_sk",
    "ship_mode": "sm_ship_mode_sk", "reason": "r_reason_sk",
}

# the parts of each fact's key, none of which is unique alone
COMPOSITE_KEYS = {
    "store_sales": ("ss_item_sk", "ss_ticket_number"), "store_returns": ("sr_item_sk", "sr_ticket_number"),
    "web_sales": ("ws_item_sk", "ws_order_number"), "web_returns": ("wr_item_sk", "wr_order_number"),
    "catalog_sales": ("cs_item_sk", "cs_order_number"), "catalog_returns": ("cr_item_sk", "cr_order_number"),
    "inventory": ("inv_date_sk", "inv_item_sk", "inv_warehouse_sk"),
}

# a return's (item, ticket or order) is its sale's: a composite foreign key
COMPOSITE_FOREIGN_KEYS = {"store_returns": "store_sales", "web_returns": "web_sales",
                          "catalog_returns": "catalog_sales"}


def _demographics(prefix: str) -> dict[str, str]:
    return {f"{prefix}cdemo_sk": "customer_demographics", f"{prefix}hdemo_sk": "household_demographics",
            f"{prefix}addr_sk": "customer_address"}


def _party(prefix: str) -> dict[str, str]:
    return {f"{prefix}customer_sk": "customer", **_demographics(prefix)}


FOREIGN_KEYS: dict[str, dict[str, str]] = {  # table -> column -> parent table (its primary key)
    "customer": {"c_current_cdemo_sk": "customer_demographics", "c_current_hdemo_sk": "household_demographics",
                 "c_current_addr_sk": "customer_address", "c_first_shipto_date_sk": "date_dim",
                 "c_first_sales_date_sk": "date_dim"},
    "household_demographics": {"hd_income_band_sk": "income_band"},
    "promotion": {"p_start_date_sk": "date_dim", "p_end_date_sk": "date_dim", "p_item_sk": "item"},
    "web_site": {"web_open_date_sk": "date_dim"},
    "web_page": {"wp_creation_date_sk": "date_dim", "wp_access_date_sk": "date_dim", "wp_customer_sk": "customer"},
    "call_center": {"cc_open_date_sk": "date_dim"},
    "catalog_page": {"cp_start_date_sk": "date_dim", "cp_end_date_sk": "date_dim"},
    "store_sales": {"ss_sold_date_sk": "date_dim", "ss_sold_time_sk": "time_dim", "ss_item_sk": "item",
                    **_party("ss_"), "ss_store_sk": "store", "ss_promo_sk": "promotion"},
    "store_returns": {"sr_returned_date_sk": "date_dim", "sr_return_time_sk": "time_dim", "sr_item_sk": "item",
                      **_party("sr_"), "sr_store_sk": "store", "sr_reason_sk": "reason"},
    "web_sales": {"ws_sold_date_sk": "date_dim", "ws_sold_time_sk": "time_dim", "ws_ship_date_sk": "date_dim",
                  "ws_item_sk": "item", **_party("ws_bill_"), **_party("ws_ship_"), "ws_web_page_sk": "web_page",
                  "ws_web_site_sk": "web_site", "ws_ship_mode_sk": "ship_mode", "ws_warehouse_sk": "warehouse",
                  "ws_promo_sk": "promotion"},
    "web_returns": {"wr_returned_date_sk": "date_dim", "wr_returned_time_sk": "time_dim", "wr_item_sk": "item",
                    **_party("wr_refunded_"), **_party("wr_returning_"), "wr_web_page_sk": "web_page",
                    "wr_reason_sk": "reason"},
    "catalog_sales": {"cs_sold_date_sk": "date_dim", "cs_sold_time_sk": "time_dim", "cs_ship_date_sk": "date_dim",
                      **_party("cs_bill_"), **_party("cs_ship_"), "cs_call_center_sk": "call_center",
                      "cs_catalog_page_sk": "catalog_page", "cs_ship_mode_sk": "ship_mode",
                      "cs_warehouse_sk": "warehouse", "cs_item_sk": "item", "cs_promo_sk": "promotion"},
    "catalog_returns": {"cr_returned_date_sk": "date_dim", "cr_returned_time_sk": "time_dim", "cr_item_sk": "item",
                        **_party("cr_refunded_"), **_party("cr_returning_"), "cr_call_center_sk": "call_center",
                        "cr_catalog_page_sk": "catalog_page", "cr_ship_mode_sk": "ship_mode",
                        "cr_warehouse_sk": "warehouse", "cr_reason_sk": "reason"},
    "inventory": {"inv_date_sk": "date_dim", "inv_item_sk": "item", "inv_warehouse_sk": "warehouse"},
}

FACTS = tuple(COMPOSITE_KEYS)
DATE_DIMENSION = "date_dim"
# the date keys of each fact, the time an import should give it: the latest of them
FACT_DATE_KEYS = {t: tuple(c for c, p in FOREIGN_KEYS[t].items() if p == DATE_DIMENSION) for t in FACTS}
NULL_DATE_SHARE = 0.02  # of each fact's first date key (not inventory's)


@dataclass(frozen=True)
class Truth:
    primary_keys: dict[str, str] = field(default_factory=lambda: dict(PRIMARY_KEYS))
    foreign_keys: dict[str, dict[str, str]] = field(default_factory=lambda: dict(FOREIGN_KEYS))
    composite_keys: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(COMPOSITE_KEYS))
    composite_foreign_keys: dict[str, str] = field(default_factory=lambda: dict(COMPOSITE_FOREIGN_KEYS))
    date_dimension: str = DATE_DIMENSION
    fact_date_keys: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(FACT_DATE_KEYS))

    def links(self) -> set[tuple[str, str, str, str]]:
        """Every foreign key as (table, column, parent table, parent key)."""
        return {(t, c, p, self.primary_keys[p]) for t, cols in self.foreign_keys.items() for c, p in cols.items()}


TRUTH = Truth()
