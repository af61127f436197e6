"""Columns that identify a row or a person: what an import leaves out of the features (``feature: false`` in
schema.yaml) unless told to keep them.

A column *identifies its row* when nearly every value is its own: a business id (``c_customer_id``), a product
code, a file name. As a category it is codes a model can only memorise, each seen once; as a number it counts
nothing. Free text (values with spaces: names of airports, reviews) is unique too, and is kept. A number counts
only when its name says it is an id (``*_id``, ``*_sk``, ``*_number``, ...): prices and timestamps are unique
as well.

A column holds *personal data* when its name says so (e-mail, phone, first or last name, login, ...) and it has
many values (a yes/no flag named ``p_channel_email`` is not), or when its values are e-mail addresses.

Only an import guesses this, as it guesses dtypes: a column a person declared in schema.yaml is used as
declared, and a built-in database's schema is its own declaration.
"""
from __future__ import annotations

import re

import pandas as pd

SAMPLE_ROWS = 10_000  # values whose text is read per column (a seeded sample); distinct values are counted in all
MIN_DISTINCT = 100  # an identifier has at least this many distinct values (a 12-row table's names are not ids)
UNIQUE_SHARE = 0.9  # of the non-null values that are distinct, for a column to identify its row
SPACED_SHARE = 0.5  # of the values with a space, above which a column is free text, not an id
PERSONAL_MIN_DISTINCT = 20  # a column named like personal data holds at least this many values (not a flag)
VALUE_SHARE = 0.9  # of the values that look like e-mail addresses, for the values to say personal data

EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
ID_WORDS = {"id", "sk", "key", "number", "no", "num", "code", "uuid", "guid"}
PERSON_WORDS = {"email", "phone", "telephone", "mobile", "cellphone", "fax", "login", "username", "password",
                "ssn", "passport", "firstname", "lastname", "surname", "forename", "fullname", "givenname", "nickname"}
NAME_PARTS = {"first", "last", "given", "middle", "full", "family", "maiden", "nick", "sur", "birth"}


def words(name: str) -> list[str]:
    """A column name's words, lower case: ``c_email_address`` -> c, email, address; ``nameFirst`` -> name, first."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def personal_name(name: str) -> str | None:
    """What personal data a column's name says it holds, or None."""
    w = words(name)
    found = [x for x in w if x in PERSON_WORDS] or (["e-mail"] if "e" in w and "mail" in w else [])
    if "name" in w and NAME_PARTS & set(w):
        found.append(" ".join([x for x in w if x in NAME_PARTS] + ["name"]))
    return found[0].replace("email", "e-mail") if found else None


def identifying(name: str, dtype: str, values: pd.Series) -> str | None:
    """Why a column of ``dtype`` holding ``values`` identifies a row or a person, or None when it does not."""
    known = values.dropna()
    if dtype not in ("category", "text", "numeric") or known.empty:
        return None
    distinct = known.nunique()
    unique = distinct >= MIN_DISTINCT and distinct >= UNIQUE_SHARE * len(known)
    if dtype == "numeric":
        numbers = pd.to_numeric(known, errors="coerce")
        whole = bool(numbers.notna().all() and (numbers % 1 == 0).all())
        if unique and whole and words(name)[-1:] and words(name)[-1] in ID_WORDS:
            return f"identifies its row (an id number: {distinct} distinct values in {len(known)} rows)"
        return None
    text = (known.sample(n=SAMPLE_ROWS, random_state=0) if len(known) > SAMPLE_ROWS else known).astype(str)
    said = personal_name(name)
    if said and distinct >= PERSONAL_MIN_DISTINCT:
        return f"personal data ({said}, by its name)"
    if text.str.match(EMAIL).mean() >= VALUE_SHARE:
        return "personal data (its values are e-mail addresses)"
    if unique and text.str.contains(r"\s", regex=True).mean() < SPACED_SHARE:
        return f"identifies its row ({distinct} distinct values in {len(known)} rows)"
    return None


def identifying_columns(columns, frame: pd.DataFrame) -> dict[str, str]:
    """Of ``columns`` (schema columns of a table whose rows are ``frame``), those that identify a row or a
    person, and why."""
    return {c.name: why for c in columns if (why := identifying(c.name, c.dtype, frame[c.name]))}


def without_columns(db, gone: dict[str, set]):
    """``db`` (a ``Database``) without the columns ``gone`` names per table: the same rows, fewer columns."""
    from fourdb.rdb.database import Database
    from fourdb.rdb.schema import Schema, Table

    if not any(gone.values()):
        return db
    tables, frames = [], {}
    for t in db.schema.tables:
        drop = gone.get(t.name, set())
        tables.append(Table(t.name, t.source, [c for c in t.columns if c.name not in drop], t.time_column,
                            t.time_from, t.static, t.inherited_from))
        frames[t.name] = db.tables[t.name].drop(columns=sorted(drop)) if drop else db.tables[t.name]
    return Database(Schema(db.schema.name, tables, db.schema.on_dangling_foreign_key), frames, db.folder, db.notes)


def features_only(db):
    """``db`` without the columns its schema marks ``feature: false``: what a model may read of it."""
    return without_columns(db, {t.name: {c.name for c in t.not_features} for t in db.schema.tables})
