"""Adversarial databases written in the README's folder format, each planting one way the future can leak.

Every one has three cutoffs (one per split: train, validation, test) a week apart and a binary label
that is an independent coin per (entity, cutoff): from the past alone the answer is a coin flip, so an
honest model scores at chance. Each plants the label where a model that breaks one rule would find it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fourdb.rdb import Column, Schema, Table, write_database

START = pd.Timestamp("2022-01-03")
WEEK = pd.Timedelta(days=7)
CUTOFFS = [START + k * WEEK for k in (4, 5, 6)]  # train, val, test
TIMESTAMPS = {"start": str(CUTOFFS[0]), "val": str(CUTOFFS[1]), "test": str(CUTOFFS[2]), "end": str(CUTOFFS[2] + WEEK)}


def write_task(folder: Path, name: str, entity: str, sql: str, **extra) -> None:
    spec = {"name": name, "kind": "entity_window", "task_type": "binary", "entity_table": entity, "window": "7 days",
            "timestamps": {**TIMESTAMPS, "step": "7 days"}, "sql": sql, **extra}
    (folder / "tasks").mkdir(parents=True, exist_ok=True)
    (folder / "tasks" / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def sub_second(folder: Path, n: int = 600, seed: int = 0) -> Path:
    """users <- pings. For each cutoff every user gets a ping 1 microsecond after it whose ``flag`` is that
    cutoff's label, and noise pings earlier. A time compared in whole seconds puts the label ping at
    the cutoff, where a most-recent sampler or a LAST aggregate reads it."""
    rng = np.random.default_rng(seed)
    users = pd.DataFrame({"user_id": np.arange(n), "joined": START, "score": rng.normal(size=n)})
    rows = []
    for c in CUTOFFS:
        rows.append(pd.DataFrame({"user_id": np.arange(n), "at": c + pd.Timedelta(microseconds=1),
                                  "flag": rng.integers(0, 2, n).astype(float)}))
        rows.append(pd.DataFrame({"user_id": np.arange(n), "at": c - pd.Timedelta(days=2) + pd.Timedelta(
            milliseconds=500), "flag": rng.integers(0, 2, n).astype(float)}))
    pings = pd.concat(rows, ignore_index=True).sort_values("at", kind="stable").reset_index(drop=True)
    pings.insert(0, "ping_id", np.arange(len(pings)))
    schema = Schema("subsecond", [
        Table("users", "users.parquet", [Column("user_id", "primary_key"), Column("joined", "datetime"),
                                         Column("score", "numeric")], time_column="joined"),
        Table("pings", "pings.parquet", [Column("ping_id", "primary_key"),
                                         Column("user_id", "foreign_key", "users.user_id"),
                                         Column("at", "datetime"), Column("flag", "numeric")], time_column="at"),
    ])
    write_database(folder, schema, {"users": users, "pings": pings})
    write_task(folder, "flag", "users",
               "SELECT p.user_id, c.cutoff, CAST(max(p.flag) AS INTEGER) AS label FROM cutoffs c "
               "JOIN pings p ON p.at > c.cutoff AND p.at <= c.cutoff + {window} GROUP BY ALL")
    return folder


def line_items(folder: Path, n: int = 1500, seed: int = 0, static: bool = False) -> Path:
    """tracks <- lines -> invoices. Lines have no time column. A day after each cutoff one invoice holds a
    line per track whose ``flag`` is that cutoff's label (sold with a flag or not); earlier invoices hold
    noise lines. Lines always visible (``static``) show every cutoff's flag at once."""
    rng = np.random.default_rng(seed)
    tracks = pd.DataFrame({"track_id": np.arange(n), "genre": rng.choice(["rock", "jazz", "pop"], n)})
    days = [START + pd.Timedelta(days=3)] + [c + pd.Timedelta(days=1) for c in CUTOFFS]
    invoices = pd.DataFrame({"invoice_id": np.arange(len(days)), "issued_at": days, "total": rng.normal(size=len(days))})
    lines = pd.concat([pd.DataFrame({"invoice_id": i, "track_id": np.arange(n), "flag": rng.integers(0, 2, n).astype(float)})
                       for i in range(len(days))], ignore_index=True)
    lines.insert(0, "line_id", np.arange(len(lines)))
    schema = Schema("lineitems", [
        Table("tracks", "tracks.parquet", [Column("track_id", "primary_key"), Column("genre", "category")]),
        Table("invoices", "invoices.parquet", [Column("invoice_id", "primary_key"), Column("issued_at", "datetime"),
                                               Column("total", "numeric")], time_column="issued_at"),
        Table("lines", "lines.parquet", [Column("line_id", "primary_key"),
                                         Column("invoice_id", "foreign_key", "invoices.invoice_id"),
                                         Column("track_id", "foreign_key", "tracks.track_id"),
                                         Column("flag", "numeric")], static=static),
    ])
    write_database(folder, schema, {"tracks": tracks, "invoices": invoices, "lines": lines})
    write_task(folder, "flagged", "tracks",
               "SELECT l.track_id, c.cutoff, CAST(max(l.flag) AS INTEGER) AS label FROM cutoffs c "
               "JOIN invoices i ON i.issued_at > c.cutoff AND i.issued_at <= c.cutoff + {window} "
               "JOIN lines l ON l.invoice_id = i.invoice_id GROUP BY ALL")
    return folder


def unborn(folder: Path, n: int = 400, seed: int = 0) -> Path:
    """customers, some signing up after a cutoff. A CROSS JOIN task asks about every customer at every
    cutoff, and a customer's ``vip`` column is 1 exactly when they sign up within the next week: a seed
    whose customer does not exist yet reads the label off its own row."""
    rng = np.random.default_rng(seed)
    signup = START + pd.to_timedelta(rng.integers(0, 49, n), unit="D")
    vip = np.zeros(n)
    for c in CUTOFFS:
        vip[(signup > c) & (signup <= c + WEEK)] = 1.0
    customers = pd.DataFrame({"customer_id": np.arange(n), "signup": signup, "vip": vip})
    schema = Schema("unborn", [Table("customers", "customers.parquet", [
        Column("customer_id", "primary_key"), Column("signup", "datetime"), Column("vip", "numeric")],
        time_column="signup")])
    write_database(folder, schema, {"customers": customers})
    write_task(folder, "joins-soon", "customers",
               "SELECT u.customer_id, c.cutoff, CAST(u.signup > c.cutoff AND u.signup <= c.cutoff + {window} "
               "AS INTEGER) AS label FROM cutoffs c CROSS JOIN customers u")
    return folder


def drifting(folder: Path, n: int = 300, seed: int = 0) -> Path:
    """accounts <- sessions, where what comes after validation starts looks nothing like the earlier rows
    (sessions ten times longer on a device never seen before; a fifth of the accounts opened after the
    last cutoff with a hundred times the balance): statistics fitted on them would move."""
    rng = np.random.default_rng(seed)
    late_account = np.arange(n) >= n * 4 // 5
    accounts = pd.DataFrame({"account_id": np.arange(n),
                             "opened": np.where(late_account, CUTOFFS[2] + pd.Timedelta(days=2), START),
                             "tier": rng.choice(["a", "b"], n),
                             "balance": rng.normal(size=n) * np.where(late_account, 100.0, 1.0)})
    m = 20 * n
    at = START + pd.to_timedelta(rng.uniform(0, 48, m), unit="D")
    late = at > CUTOFFS[1]
    sessions = pd.DataFrame({"session_id": np.arange(m), "account_id": rng.integers(0, n, m), "at": at,
                             "minutes": np.where(late, 10.0, 1.0) * rng.gamma(2.0, 5.0, m),
                             "device": np.where(late, "robot", rng.choice(["phone", "laptop"], m)),
                             "seen": at - pd.to_timedelta(rng.uniform(0, 3, m), unit="D")})
    schema = Schema("drifting", [
        Table("accounts", "accounts.parquet", [Column("account_id", "primary_key"), Column("opened", "datetime"),
                                               Column("tier", "category"), Column("balance", "numeric")],
              time_column="opened"),
        Table("sessions", "sessions.parquet", [Column("session_id", "primary_key"),
                                               Column("account_id", "foreign_key", "accounts.account_id"),
                                               Column("at", "datetime"), Column("minutes", "numeric"),
                                               Column("device", "category"), Column("seen", "datetime")],
              time_column="at"),
    ])
    write_database(folder, schema, {"accounts": accounts, "sessions": sessions})
    write_task(folder, "long-session", "accounts",
               "SELECT a.account_id, c.cutoff, CAST(coalesce(max(s.minutes), 0) > 10 AS INTEGER) AS label "
               "FROM cutoffs c CROSS JOIN accounts a LEFT JOIN sessions s ON s.account_id = a.account_id "
               "AND s.at > c.cutoff AND s.at <= c.cutoff + {window} GROUP BY ALL")
    return folder
