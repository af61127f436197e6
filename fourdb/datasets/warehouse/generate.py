"""Write the warehouse: the dimensions at once, then the facts one block of customers at a time (and the
inventory a few weeks at a time), so memory holds one block whatever ``rows`` is."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from fourdb.datasets.warehouse import dims, facts, people
from fourdb.datasets.warehouse.facts import Sizes
from fourdb.utils import atomic_output

BLOCK_LINES = 400_000  # sales lines drawn per block of customers (and inventory rows per chunk of weeks)
SALES_SHARE, INVENTORY_SHARE = 0.8, 0.1  # of ``rows``: sales lines (returns come on top) and inventory counts
LINES_PER_VISIT = 2.45  # 1 + min(Poisson(1.5), 7), less the repeated items dropped
FORMATS = ("duckdb", "parquet")


def sizes(rows: int) -> Sizes:
    """Dimension sizes for about ``rows`` rows over all tables (the calendar's 36,890 days, its 1,440 minutes
    and the 12,800 demographic profiles aside, which keep their size at every scale, as in TPC-DS)."""
    def clip(value: float, low: int, high: int) -> int:
        return int(min(max(value, low), high))

    n = int(rows)
    customers = max(100, n // 100)
    return Sizes(customers=customers, addresses=max(50, customers // 2), items=max(100, n // 400),
                 stores=clip(n // 200_000, 6, 100), warehouses=clip(n // 1_000_000 + 4, 5, 20),
                 promotions=clip(n // 20_000, 30, 1000), web_sites=clip(n // 300_000, 6, 60),
                 web_pages=clip(n // 100_000, 20, 3000), call_centers=clip(n // 1_000_000, 6, 60),
                 catalog_pages=clip(n // 5_000, 100, 12_000))


class _Sink:
    """Tables written a chunk at a time, to a DuckDB file or to one parquet file per table in a folder."""

    def __init__(self, path: Path, fmt: str):
        import pyarrow.parquet as pq

        self.path, self.fmt, self.writers, self.rows = path, fmt, {}, {}
        self.pq = pq
        if fmt == "duckdb":
            import duckdb

            self.con = duckdb.connect(str(path))

    def write(self, name: str, frame: pd.DataFrame) -> None:
        import pyarrow as pa

        table = pa.Table.from_pandas(frame, preserve_index=False)
        self.rows[name] = self.rows.get(name, 0) + len(frame)
        if self.fmt == "parquet":
            if name not in self.writers:
                self.writers[name] = self.pq.ParquetWriter(self.path / f"{name}.parquet", table.schema)
            self.writers[name].write_table(table.cast(self.writers[name].schema))
            return
        self.con.register("chunk", table)
        made = name in self.writers
        self.con.execute(f'INSERT INTO "{name}" SELECT * FROM chunk' if made else
                         f'CREATE TABLE "{name}" AS SELECT * FROM chunk')
        self.con.unregister("chunk")
        self.writers[name] = True

    def close(self) -> None:
        if self.fmt == "parquet":
            for w in self.writers.values():
                w.close()
        else:
            self.con.close()


def write_warehouse(path: str | Path, rows: int = 100_000, seed: int = 0, format: str | None = None) -> dict[str, int]:
    """Write a TPC-DS-shaped warehouse of about ``rows`` rows (the fixed calendar and demographics, about 51,000
    rows, aside) to ``path``: a DuckDB file (``format='duckdb'``, the default for a path ending ``.duckdb`` or
    ``.db``) or a folder of parquet files (``format='parquet'``). No key is declared. The same ``rows`` and
    ``seed`` write the same data. Returns each table's row count. Written beside ``path`` and renamed onto it, so
    a stopped run leaves nothing half-written."""
    path = Path(path)
    fmt = format or ("duckdb" if path.suffix.lower() in (".duckdb", ".db") else "parquet")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if int(rows) < 1:
        raise ValueError(f"rows must be positive, not {rows!r}")
    if fmt == "parquet":
        with atomic_output(path, folder=True) as tmp:
            return _write(_Sink(tmp, fmt), int(rows), int(seed))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        counts = _write(_Sink(tmp, fmt), int(rows), int(seed))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return counts


def _write(sink: _Sink, rows: int, seed: int) -> dict[str, int]:
    try:
        size = sizes(rows)
        items, customers = _dimensions(sink, size, rows, seed)
        _facts(sink, size, items, customers, rows, seed)
        _inventory(sink, size, rows, seed)
    finally:
        sink.close()
    return dict(sink.rows)


def _dimensions(sink: _Sink, size: Sizes, rows: int, seed: int) -> tuple[pd.DataFrame, people.Customers]:
    """Every dimension table written; the items and the customers' hidden traits, which the facts draw on."""
    rng = np.random.default_rng([seed, 0])
    visits = SALES_SHARE * rows / size.customers / LINES_PER_VISIT
    customer, traits = people.customers(rng, size.customers, size.addresses, size.stores, visits)
    items = dims.item(rng, size.items)
    tables = {
        "date_dim": dims.date_dim(), "time_dim": dims.time_dim(), "customer": customer,
        "customer_address": people.customer_address(rng, size.addresses),
        "customer_demographics": people.customer_demographics(),
        "household_demographics": people.household_demographics(), "income_band": people.income_band(),
        "item": items, "store": dims.store(rng, size.stores), "warehouse": dims.warehouse(rng, size.warehouses),
        "promotion": dims.promotion(rng, size.promotions, size.items), "web_site": dims.web_site(rng, size.web_sites),
        "web_page": dims.web_page(rng, size.web_pages, size.customers),
        "call_center": dims.call_center(rng, size.call_centers),
        "catalog_page": dims.catalog_page(rng, size.catalog_pages), "ship_mode": dims.ship_mode(rng),
        "reason": dims.reason(),
    }
    for name, frame in tables.items():
        sink.write(name, frame)
    return items, traits


def _facts(sink: _Sink, size: Sizes, items: pd.DataFrame, traits: people.Customers, rows: int, seed: int) -> None:
    """Sales and returns of every channel, a block of customers at a time; ticket and order numbers run on
    across blocks."""
    per_customer = SALES_SHARE * rows / len(traits)
    block = max(100, int(BLOCK_LINES / max(per_customer, 1.0)))
    next_ticket = 1
    for b, lo in enumerate(range(0, len(traits), block)):
        rng = np.random.default_rng([seed, 1, b])
        visit = facts.visits(rng, traits, lo, min(lo + block, len(traits)))
        for channel, name in enumerate(facts.CHANNELS):
            sold = facts.lines(rng, traits, visit[visit["channel"] == channel], items, next_ticket)
            next_ticket = int(sold.ticket.max()) + 1 if len(sold) else next_ticket
            if name == "store":
                sales = facts.store_sales(rng, traits, sold, size)
            else:
                sales = facts.remote_sales(rng, traits, sold, size, web=name == "web")
            back, when = facts.returned(rng, traits, sold)
            cut = sales[back].reset_index(drop=True)
            if name == "store":
                returns = facts.store_returns(rng, when, cut, size)
            else:
                returns = facts.remote_returns(rng, when, cut, size, web=name == "web")
            sink.write(f"{name}_sales", sales)
            sink.write(f"{name}_returns", returns)


def _inventory(sink: _Sink, size: Sizes, rows: int, seed: int) -> None:
    """Weekly counts of some items in every warehouse, a few weeks at a time."""
    rng = np.random.default_rng([seed, 2])
    weeks = np.arange((dims.DAYS + 6) // 7)
    n_items = int(min(max(round(INVENTORY_SHARE * rows / (len(weeks) * size.warehouses)), 2), size.items))
    counted = np.sort(rng.choice(np.arange(1, size.items + 1), n_items, replace=False))
    step = max(1, BLOCK_LINES // (n_items * size.warehouses))
    for lo in range(0, len(weeks), step):
        sink.write("inventory", facts.inventory_weeks(rng, counted, size.warehouses, weeks[lo:lo + step]))
