"""schema.yaml with the import's evidence as comments: above each table, why its keys and its time are what
they are (names matched, the share of values found, a composite key and how fourdb treats it). Comments are
no part of the schema: loading reads the same schema as without them, and an edit may drop them."""
from __future__ import annotations

import textwrap

from fourdb.rdb.schema import Schema
from fourdb.utils import yaml_text

WIDTH = 118


def commented_schema(schema: Schema, evidence: dict[str, list[str]], header: list[str]) -> str:
    """The text of ``schema`` as schema.yaml, ``header`` lines at its top and each table's ``evidence`` lines
    above it, as comments."""
    raw = schema.to_dict()
    tables = raw.pop("tables")
    out = [_comment(line, "# ") for line in header]
    out += [yaml_text(raw).rstrip("\n"), "tables:"]
    for table in tables:
        out += [_comment(line, "#   ") for line in evidence.get(table["name"], [])]
        out.append(yaml_text([table]).rstrip("\n"))
    return "\n".join(out) + "\n"


def _comment(line: str, indent: str) -> str:
    """One evidence line as comment lines (names from input hold no line break: ``check_name`` refuses them)."""
    text = " ".join(str(line).split())
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent="#     ")) or "#"
