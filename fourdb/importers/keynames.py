"""What a key's name says: which column names a table's own key, and which name another table's key.

Warehouses prefix every column with a short code of its table (``ss_`` in ``store_sales``, ``c_`` in ``customer``)
and name a surrogate key ``<prefix>_<thing>_sk``. So a column's *core* is its name without its table's prefix, and
a key's core ends in a key word (``sk``, ``id``, ``key``): ``ss_customer_sk`` and ``c_customer_sk`` share the core
``customer_sk``; ``ws_bill_customer_sk`` and ``ss_sold_date_sk`` add a role in front of it (``bill_``, ``sold_``);
``ss_addr_sk`` abbreviates ``ca_address_sk``'s ``address``; ``ss_cdemo_sk`` writes ``cd_demo_sk``'s table code
before its word. Names only propose a pair; the values decide (``keys``).
"""
from __future__ import annotations

from dataclasses import dataclass

KEY_WORDS = ("sk", "key", "id")  # a primary key's name ends in one of these, the first preferred
PREFIX_SHARE = 0.6  # a table's prefix is the first word of at least this share of its columns
TABLE_SUFFIXES = ("dim", "dimension", "fact", "facts", "table", "tbl")  # words a table name carries for its role
MIN_ABBREVIATION = 3  # "addr" abbreviates "address"; "a" abbreviates nothing


def words(name: str) -> list[str]:
    return [w for w in str(name).lower().split("_") if w]


def forms(word: str) -> set[str]:
    """Singular and plural spellings of a word."""
    out = {word, word + "s"}
    if word.endswith("ies"):
        out.add(word[:-3] + "y")
    if word.endswith("es"):
        out.add(word[:-2])
    if word.endswith("s"):
        out.add(word[:-1])
    if word.endswith("y"):
        out.add(word[:-1] + "ies")
    return out


def table_prefix(columns) -> str | None:
    """The word most of a table's columns start with (``ss`` for ``ss_item_sk``, ``ss_quantity``, ...), if any."""
    firsts = [words(c)[0] for c in columns if len(words(c)) > 1]
    if len(firsts) < 2:
        return None
    best = max(set(firsts), key=lambda w: (firsts.count(w), w))
    return best if firsts.count(best) >= PREFIX_SHARE * len(list(columns)) else None


def core(column: str, prefix: str | None) -> list[str]:
    """A column's words without its table's prefix."""
    w = words(column)
    return w[1:] if prefix and len(w) > 1 and w[0] == prefix else w


def split_key(w: list[str]) -> tuple[list[str], str] | None:
    """A key name's words before its key word, and the key word: ``customer_sk`` -> (["customer"], "sk"); also
    ``userid`` -> (["user"], "id"). None for a name that does not end in a key word."""
    if not w:
        return None
    if w[-1] in KEY_WORDS:
        return w[:-1], w[-1]
    if len(w[-1]) > 2 and w[-1].endswith("id"):
        return w[:-1] + [w[-1][:-2]], "id"
    return None


def abbreviates(short: str, word: str) -> bool:
    """``short`` is ``word``, another form of it, or its first letters (at least three)."""
    return short in forms(word) or (len(short) >= MIN_ABBREVIATION and word.startswith(short))


def names_table(stem: list[str], table: str) -> bool:
    """The words name the table: they match its last words (``address`` for customer_address, ``demo`` for
    customer_demographics, ``date`` for date_dim: a role word such as ``dim`` is no part of the name)."""
    tw = words(table)
    while len(tw) > 1 and tw[-1] in TABLE_SUFFIXES:
        tw = tw[:-1]
    if not stem or len(stem) > len(tw):
        return "".join(stem) in forms("".join(tw)) if stem else False
    return all(abbreviates(s, t) for s, t in zip(stem, tw[-len(stem):])) or "".join(stem) in forms("".join(tw))


def key_parts(column: str, prefix: str | None) -> list[tuple[list[str], str]]:
    """A key name's (words before the key word, key word), without the table's prefix and with it (``order_id`` in
    a table whose columns all start ``order_``); those with words before the key word."""
    out = []
    for w in (core(column, prefix), words(column)):
        parts = split_key(w)
        if parts is not None and parts[0] and parts not in out:
            out.append(parts)
    return out


def primary_key_rank(column: str, table: str, prefix: str | None) -> tuple[int, str] | None:
    """How well a column's name says it is its table's key (lower is better), and why; None if it does not:
    ``id``, then the table's name and a key word (``<table>_sk``, ``_key``, ``_id``, or ``<table>id``), then a name of
    the table behind the table's prefix or abbreviated (``c_customer_sk``, ``ca_address_sk``), ``sk`` first."""
    if words(column) == ["id"]:
        return 0, "named id"
    whole = split_key(words(column))
    if whole is not None and "".join(whole[0]) in forms("".join(words(table))):
        return 1 + KEY_WORDS.index(whole[1]), f"named <table>_{whole[1]}"
    ranks = []
    for stem, word in key_parts(column, prefix):
        if names_table(stem, table):
            ranks.append((1 + len(KEY_WORDS) + KEY_WORDS.index(word),
                          f"named after the table ({'_'.join(stem)}_{word})"))
    return min(ranks) if ranks else None


@dataclass(frozen=True)
class NameMatch:
    """Why a column's name points to a parent's key, and how strongly (``tier``: lower is stronger)."""

    tier: int
    why: str

    @property
    def strong(self) -> bool:
        """The child's name holds the parent key's whole name: a few dangling values are tolerated."""
        return self.tier <= ROLE


SAME, ROLE, SHORT, TABLE = range(4)


def name_match(column: str, prefix: str | None, parent: str, parent_key: str,
               parent_prefix: str | None) -> NameMatch | None:
    """How a child column's name points to ``parent``'s key ``parent_key`` (the strongest way), or None."""
    if str(column).lower() == str(parent_key).lower() and words(column) != ["id"]:
        return NameMatch(SAME, f"same name as {parent_key}")
    found = [m for child in key_parts(column, prefix) for key in key_parts(parent_key, parent_prefix) + [None]
             if (m := _match(child, key, parent, parent_prefix)) is not None]
    return min(found, key=lambda m: m.tier) if found else None


def _match(child: tuple[list[str], str], key: tuple[list[str], str] | None, parent: str,
           parent_prefix: str | None) -> NameMatch | None:
    (stem, word), label = child, "_".join(child[0] + [child[1]])
    if key is not None and key[1] == word:
        pstem = key[0]
        pname = "_".join(pstem + [word])
        if stem == pstem:
            return NameMatch(SAME, f"{label} = {pname}")
        if len(stem) > len(pstem) and stem[-len(pstem):] == pstem:
            return NameMatch(ROLE, f"{label} = {'_'.join(stem[:-len(pstem)])} + {pname} (a role)")
        if _shortened(stem, pstem, parent_prefix):
            return NameMatch(SHORT, f"{label} abbreviates {pname}")
    if key is None and names_table(stem, parent):
        return NameMatch(TABLE, f"{label} names the table {parent}")
    return None


def _shortened(stem: list[str], pstem: list[str], parent_prefix: str | None) -> bool:
    """The child's last words abbreviate the parent key's (``addr`` for ``address``), or its last word is the
    parent key's behind the start of the parent's prefix (``cdemo`` for ``cd_demo_sk``'s ``demo``)."""
    if len(stem) < len(pstem):
        return False
    tail = stem[-len(pstem):]
    if all(abbreviates(s, p) for s, p in zip(tail, pstem)):
        return True
    last, plast = tail[-1], pstem[-1]
    lead = last[:-len(plast)] if last.endswith(plast) else ""
    return bool(lead and parent_prefix and parent_prefix.startswith(lead) and tail[:-1] == pstem[:-1])
