"""The stamp submit leaves on a record it checked: what it recomputed, sealed with an HMAC under this user's
key (``fourdb.utils.seal``), so a stamp copied onto another record, or a board line edited after submit, no
longer verifies (``fourdb.leaderboard.verify`` says what is checked and shown)."""
from __future__ import annotations

import hmac
import json

from fourdb.leaderboard.schema import finite
from fourdb.utils import seal

STAMP = "checked"       # stored: what submit recomputed, sealed
UNSEALED = ("config_hash", "submitted_at")  # stamped by submit itself, after an external record is sealed


def canonical(record: dict) -> bytes:
    """The record as stored (JSON, NaN as null), less what submit stamps itself and the seal."""
    plain = finite(json.loads(json.dumps(record, default=str)))
    plain = {k: v for k, v in plain.items() if k not in UNSEALED and not k.startswith("_")}
    if isinstance(plain.get(STAMP), dict):
        plain[STAMP] = {k: v for k, v in plain[STAMP].items() if k != "seal"}
    return json.dumps(plain, sort_keys=True, separators=(",", ":")).encode()


def stamp(record: dict, **checked) -> dict:
    """``record`` with a sealed stamp saying what fourdb checked (``metrics``: how; ``certify``: its log)."""
    record = {**record, STAMP: checked}
    record[STAMP] = {**checked, "seal": seal(canonical(record), "records")}
    return record


def sealed(record: dict) -> bool:
    """Whether ``record``'s stamp was made by fourdb on this machine for exactly this record."""
    checked = record.get(STAMP)
    if not isinstance(checked, dict) or not isinstance(checked.get("seal"), str):
        return False
    return hmac.compare_digest(checked["seal"], seal(canonical(record), "records"))
