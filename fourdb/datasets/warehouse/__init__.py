"""A retail data warehouse shaped like TPC-DS, written as a DuckDB file or a folder of parquet files with no key
declared anywhere: the input ``fourdb import`` meets in the wild.

24 tables: 17 dimensions (``date_dim`` with one row per day from 2000 to 2100, ``time_dim``, ``customer`` with
names and e-mail addresses, ``customer_address``, ``customer_demographics``, ``household_demographics``,
``income_band``, ``item``, ``store``, ``warehouse``, ``promotion``, ``web_site``, ``web_page``, ``call_center``,
``catalog_page``, ``ship_mode``, ``reason``) and 7 facts (``store_sales``, ``store_returns``, ``web_sales``,
``web_returns``, ``catalog_sales``, ``catalog_returns``, ``inventory``). Keys are ``*_sk`` surrogate keys with a
prefix per table (``c_customer_sk`` in ``customer``, ``ss_customer_sk`` in ``store_sales``); facts are dated only
through ``date_dim`` (``ss_sold_date_sk``); facts have composite keys (``ss_item_sk`` + ``ss_ticket_number``;
``inv_date_sk`` + ``inv_item_sk`` + ``inv_warehouse_sk``); web and catalog sales name the customer twice (bill and
ship, role-playing keys); 2% of each fact's date keys are NULL. ``TRUTH`` says every key the data holds, so an
import can be checked against it.

Planted signal: customers live a while, then stop buying (churn), their visits thinning over their last 90 days.
Whoever mostly buys Electronics, Jewelry or Music, or returns much, stops sooner: the label sits two hops away
(customer -> sales -> item, customer -> returns). Each customer favours one category, and items within it by a
Zipf law, so their next items are learnable too.

    write_warehouse("warehouse.duckdb", rows=6_000_000)   # about 6M rows over all tables
    write_warehouse("warehouse", rows=50_000, format="parquet")
    fourdb import warehouse.duckdb --out dbs/warehouse
    write_tasks("dbs/warehouse/tasks")                    # churn and next-items task files

or from a shell: ``python -m fourdb.datasets.warehouse warehouse.duckdb --rows 6000000``, then after the import
``python -m fourdb.datasets.warehouse --tasks dbs/warehouse/tasks``.
"""
from fourdb.datasets.warehouse.generate import write_warehouse
from fourdb.datasets.warehouse.tasks import TASKS, write_tasks
from fourdb.datasets.warehouse.truth import TRUTH

__all__ = ["TASKS", "TRUTH", "write_tasks", "write_warehouse"]
