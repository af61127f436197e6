"""Task files for the imported warehouse: customer churn (binary) and the items a customer buys next
(recommendation). Sales are dated through ``date_dim``, so the SQL joins it, as a warehouse's own queries do."""
from __future__ import annotations

from pathlib import Path

from fourdb.utils import atomic_write_text, yaml_text

# sales run from 2020 to 2022; the calendar runs to 2100, so every task names its end
CHURN = {
    "name": "churn",
    "dataset": "warehouse",
    "description": "Will a customer who bought in a store in the last 90 days buy nothing there in the next 60? "
                   "Customers stop sooner when they favour Electronics, Jewelry or Music, or return much (two hops "
                   "away), and their visits thin out before they stop.",
    "kind": "entity_window",
    "task_type": "binary",
    "metrics": ["auroc", "accuracy"],
    "entity_table": "customer",
    "window": "60 days",
    "timestamps": {"start": "2020-07-01", "val": "2022-03-01", "test": "2022-07-01", "step": "30 days",
                   "end": "2022-12-31"},
    "sql": """SELECT active.c_customer_sk, active.cutoff, CAST(count(later.ss_ticket_number) = 0 AS INTEGER) AS label
FROM (SELECT DISTINCT s.ss_customer_sk AS c_customer_sk, c.cutoff
      FROM cutoffs c
      JOIN date_dim d ON d.d_date <= c.cutoff AND d.d_date > c.cutoff - INTERVAL 90 DAY
      JOIN store_sales s ON s.ss_sold_date_sk = d.d_date_sk
      WHERE s.ss_customer_sk IS NOT NULL) active
LEFT JOIN (SELECT s.ss_customer_sk, s.ss_ticket_number, d.d_date
           FROM store_sales s JOIN date_dim d ON d.d_date_sk = s.ss_sold_date_sk) later
  ON later.ss_customer_sk = active.c_customer_sk AND later.d_date > active.cutoff
 AND later.d_date <= active.cutoff + {window}
GROUP BY active.c_customer_sk, active.cutoff
""",
}

NEXT_ITEMS = {
    "name": "next-items",
    "dataset": "warehouse",
    "description": "Which items will a customer buy in a store in the next two weeks? Customers favour one "
                   "category, and popular items within it.",
    "kind": "recommendation",
    "task_type": "recommendation",
    "source_table": "customer",
    "destination_table": "item",
    "eval_k": 10,
    "window": "14 days",
    "timestamps": {"start": "2020-03-01", "val": "2022-06-01", "test": "2022-09-01", "step": "14 days",
                   "end": "2022-12-31"},
    "sql": """SELECT s.ss_customer_sk AS c_customer_sk, c.cutoff, LIST(DISTINCT s.ss_item_sk) AS label
FROM cutoffs c
JOIN date_dim d ON d.d_date > c.cutoff AND d.d_date <= c.cutoff + {window}
JOIN store_sales s ON s.ss_sold_date_sk = d.d_date_sk
WHERE s.ss_customer_sk IS NOT NULL
GROUP BY s.ss_customer_sk, c.cutoff
""",
}

TASKS = {t["name"]: t for t in (CHURN, NEXT_ITEMS)}


def write_tasks(folder: str | Path) -> list[Path]:
    """Write every task file into ``folder`` (a database folder's ``tasks/``); the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, spec in TASKS.items():
        path = folder / f"{name}.yaml"
        atomic_write_text(path, yaml_text(spec))
        paths.append(path)
    return paths
