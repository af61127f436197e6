"""Data files from input (parquet, CSV), read under the memory bound: what a file will take once decoded is
known, and checked, before it is decoded.

A parquet file is small on disk and large in memory by design, and input can make the gap as wide as it likes:
pages that inflate 1000:1, or a dictionary page holding one 200 MB string that every row refers to (7.5 KB on
disk, 200 MB times the row count once decoded). So every parquet file fourdb reads from input goes through
``ParquetSource``: its footer is checked first (the pages' uncompressed bytes and the fixed-width values the
rows hold), then its text and binary columns are read *as dictionaries* (a dictionary page stays one copy, each
row an index into it), their decoded size is counted from the dictionary's value lengths and the indices, and
only a column that fits the bound is decoded, to exactly what ``pandas.read_parquet`` gives. A CSV file is
sized by its bytes before it is parsed. Any library error on a malformed file becomes one line naming it.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fourdb.untrusted import check_bytes, load_json, memory_budget, reading

VALUE_OVERHEAD = 8  # bytes a decoded value takes besides its content (an offset, a pointer in a frame)
CSV_GROWTH = 4  # a CSV file's frame can take several times its bytes (a Python object per text value)
# an encoding whose values are rebuilt from shared prefixes: its decoded size has no bound in the page sizes
PREFIX_ENCODED = "DELTA_BYTE_ARRAY"
PREFIX_BATCH_SHARE = 0.25  # of the memory bound, what one batch of such a column may decode to at most


def read_parquet(path: str | Path, where: str, columns: list[str] | None = None) -> pd.DataFrame:
    """``pandas.read_parquet(path, columns=columns)``, refused in one line naming ``where`` if it is malformed
    or would take more than the memory bound once decoded."""
    return ParquetSource(path, where).frame(columns)


def read_csv(path: str | Path, where: str, **options) -> pd.DataFrame:
    """``pandas.read_csv(path, **options)``, refused past the memory bound before it is parsed, and any parse
    error as one line naming ``where``."""
    with reading(where):
        size = Path(path).stat().st_size
        check_bytes(size * CSV_GROWTH, where, f"the file ({size:,} bytes of CSV) once parsed")
        return pd.read_csv(path, **options)


class ParquetSource:
    """A parquet file from input: its column names and row count from the footer, and its columns read bounded.
    The footer is checked when the file is opened, the decoded size of what is read before it is decoded."""

    def __init__(self, path: str | Path, where: str):
        self.path, self.where = Path(path), where
        with reading(where):
            with pq.ParquetFile(self.path) as f:
                self.schema = f.schema_arrow
                self.metadata = f.metadata
                self.names = list(self.schema.names)
                self.num_rows = self.metadata.num_rows
                self._leaves = [self.metadata.schema.column(i) for i in range(self.metadata.num_columns)]
        self._check_footer(None)

    # ---- what the footer says --------------------------------------------------------------------------------
    def _chunks(self, columns: list[str] | None):
        """Every column chunk (of every row group) of the top-level ``columns`` (all when None)."""
        wanted = None if columns is None else set(columns)
        md = self.metadata
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            for i, leaf in enumerate(self._leaves):
                if wanted is None or leaf.path.split(".")[0] in wanted:
                    yield leaf, group.column(i)

    def _check_footer(self, columns: list[str] | None) -> None:
        """Refuse, before a page is read, columns whose pages inflate past the memory bound, or whose rows hold
        more fixed-width values than it allows (a run-length page can stand for billions of rows)."""
        pages = values = fixed = 0
        for leaf, chunk in self._chunks(columns):
            pages += max(chunk.total_uncompressed_size, 0)
            values += max(chunk.num_values, 0)
            if leaf.physical_type == "FIXED_LEN_BYTE_ARRAY":  # a dictionary of wide values, repeated per row
                fixed += max(chunk.num_values, 0) * max(leaf.length or 0, 0)
        what = "all its columns" if columns is None else "column(s) " + ", ".join(f"'{c}'" for c in columns)
        check_bytes(pages, self.where, f"inflating the pages of {what}")
        check_bytes(values * VALUE_OVERHEAD + fixed, self.where, f"holding the {values:,} values of {what}")

    def _text_leaves(self, columns: list[str] | None) -> list[str]:
        """The paths of the text and binary values among ``columns``: what is read as dictionaries (arrow cannot
        read prefix-encoded values as one, so those are read in batches instead)."""
        text = {leaf.path for leaf, _ in self._chunks(columns) if leaf.physical_type == "BYTE_ARRAY"}
        prefixed = {leaf.path for leaf, chunk in self._chunks(columns) if PREFIX_ENCODED in chunk.encodings}
        return sorted(text - prefixed)

    def _prefix_encoded(self, columns: list[str] | None) -> int:
        """The largest uncompressed chunk of a column among ``columns`` stored with prefix encoding (0: none)."""
        return max((chunk.total_uncompressed_size for _, chunk in self._chunks(columns)
                    if PREFIX_ENCODED in chunk.encodings), default=0)

    # ---- reading -----------------------------------------------------------------------------------------------
    def table(self, columns: list[str] | None = None, use_pandas_metadata: bool = True) -> pa.Table:
        """The arrow table of ``columns`` (all when None), as ``pyarrow.parquet`` reads it, decoded only once its
        decoded size is known to fit the memory bound."""
        if columns is not None:
            columns = list(columns)
        self._check_footer(columns)
        with reading(self.where):
            with pq.ParquetFile(self.path, read_dictionary=self._text_leaves(columns)) as f:
                chunk = self._prefix_encoded(columns)
                if chunk:
                    encoded = self._read_in_batches(f, columns, use_pandas_metadata, chunk)
                else:
                    encoded = f.read(columns=columns, use_pandas_metadata=use_pandas_metadata)
            self._check_decoded(encoded)
            return _decode(encoded, self.schema)

    def _read_in_batches(self, f: pq.ParquetFile, columns, use_pandas_metadata: bool, chunk: int) -> pa.Table:
        """A column stored with prefix encoding, where one page of a few bytes can decode to any size: read a few
        rows at a time (each value is at most its chunk's uncompressed size), the running size checked."""
        rows = max(1, int(memory_budget() * PREFIX_BATCH_SHARE) // max(chunk, 1))
        batches, total = [], 0
        for batch in f.iter_batches(batch_size=rows, columns=columns, use_pandas_metadata=use_pandas_metadata):
            total += sum(_decoded_bytes(c) for c in batch.columns)
            check_bytes(total, self.where, f"decoding the first {sum(len(b) for b in batches) + len(batch):,} rows")
            batches.append(batch)
        schema = batches[0].schema if batches else None
        table = pa.Table.from_batches(batches, schema) if batches else f.read(columns=columns, use_pandas_metadata=
                                                                               use_pandas_metadata)
        return table.replace_schema_metadata(self.schema.metadata)

    def _check_decoded(self, table: pa.Table) -> None:
        for name, column in zip(table.column_names, table.columns):
            size = sum(_decoded_bytes(c) for c in column.chunks)
            check_bytes(size, self.where, f"decoding column '{name}' ({len(column):,} rows)")
        total = sum(_decoded_bytes(c) for column in table.columns for c in column.chunks)
        check_bytes(total, self.where, f"decoding its {table.num_columns} columns ({table.num_rows:,} rows)")

    def frame(self, columns: list[str] | None = None) -> pd.DataFrame:
        """What ``pandas.read_parquet(path, columns=columns)`` gives, read bounded."""
        table = self.table(columns, use_pandas_metadata=True)
        with reading(self.where):
            frame = _to_pandas(table)
        attrs = (table.schema.metadata or {}).get(b"PANDAS_ATTRS")
        if attrs:
            frame.attrs = load_json(attrs, f"{self.where}: PANDAS_ATTRS")
        return frame

    def column(self, name: str) -> pd.Series:
        """One column as a series, without the pandas metadata (the index) of the file."""
        table = self.table([name], use_pandas_metadata=False)
        with reading(f"{self.where}, column '{name}'"):
            return table.column(0).to_pandas()


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """A table as ``pandas.read_parquet`` turns it into a frame (the same type mapping)."""
    try:
        from pandas.io._util import arrow_table_to_pandas
    except ImportError:  # another pandas: its default is arrow's own
        return table.to_pandas()
    return arrow_table_to_pandas(table)


def _decode(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Text and binary columns read as dictionaries back to the types the file gives them."""
    fields = []
    for field in table.schema:
        fields.append(schema.field(field.name) if schema.get_field_index(field.name) >= 0 else field)
    target = pa.schema(fields, metadata=table.schema.metadata)
    return table if target.equals(table.schema) else table.cast(target)


def _decoded_bytes(array: pa.Array) -> int:
    """Bytes ``array`` takes once every dictionary in it is decoded: a dictionary's value lengths counted
    through the indices that refer to them, so a huge value referred to by every row counts every time."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _dictionary_bytes(array)
    if isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray, pa.MapArray)):
        return len(array) * VALUE_OVERHEAD + _decoded_bytes(array.values)
    if isinstance(array, pa.StructArray):
        return len(array) + sum(_decoded_bytes(array.field(i)) for i in range(kind.num_fields))
    return array.nbytes


def _dictionary_bytes(array: pa.DictionaryArray) -> int:
    values, indices = array.dictionary, array.indices
    if len(values) == 0 or len(indices) == 0:
        return len(indices) * VALUE_OVERHEAD
    if pa.types.is_string(values.type) or pa.types.is_binary(values.type) or \
            pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type):
        lengths = pc.binary_length(values).cast(pa.int64())
    else:  # fixed-width or nested values: each takes its share of the dictionary
        per_value = -(-_decoded_bytes(values) // len(values))
        return len(indices) * (per_value + VALUE_OVERHEAD)
    content = pc.sum(pc.take(lengths, indices)).as_py() or 0
    return int(content) + len(indices) * VALUE_OVERHEAD
