"""A folder of data files and nothing else: one table per ``*.parquet``, ``*.csv`` or ``*.tsv`` file at its top
(named by the file), with no key declared anywhere, as a warehouse export leaves them. Keys and time columns are
inferred as for a SQLite or DuckDB file without declared keys.

A folder with a ``schema.yaml`` is already a fourdb database and is not offered here; nor is a folder another
format recognises first (4DBInfer's, RelBench's).
"""
from __future__ import annotations

from pathlib import Path

from fourdb.errors import DatabaseImportError
from fourdb.importers.base import IMPORTERS, Format, Imported, ImportReport, SourceTable
from fourdb.rdb.files import read_csv, read_parquet
from fourdb.untrusted import check_name, safe_text

SUFFIXES = (".parquet", ".csv", ".tsv")


def _data_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)


def _detect(path: Path) -> bool:
    return not (path / "schema.yaml").exists() and bool(_data_files(path))


def _read(path: Path, report: ImportReport) -> Imported:
    tables: list[SourceTable] = []
    seen: dict[str, Path] = {}
    for f in _data_files(path):
        name = check_name(f.stem, str(path), "table name")
        if name in seen:
            raise DatabaseImportError(f"{path}: files '{safe_text(seen[name].name)}' and '{safe_text(f.name)}' "
                                      f"would both be table '{safe_text(name)}'; keep one")
        seen[name] = f
        where = f"{path}, file '{safe_text(f.name)}'"
        if f.suffix.lower() == ".parquet":
            frame = read_parquet(f, where)
        else:
            frame = read_csv(f, where, sep="\t" if f.suffix.lower() == ".tsv" else ",", low_memory=False)
        for column in frame.columns:
            check_name(str(column), where, "column name")
        tables.append(SourceTable(name, frame))
    skipped = [p.name for p in path.iterdir() if p.is_dir()]
    if skipped:
        report.notes.append(f"folders inside {safe_text(path.name)} are not read: "
                            f"{', '.join(safe_text(s) for s in sorted(skipped)[:10])}")
    return tables, {}, path.name


IMPORTERS.register("files", Format("parquet/CSV", folder=True, order=30, infer_keys=True,
                                   lacks="no *.parquet, *.csv or *.tsv file", detect=_detect, read=_read))
