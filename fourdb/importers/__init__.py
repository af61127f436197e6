"""Import a database from another format into a fourdb database folder (parquet files + schema.yaml).

``import_database(path, out)`` recognises:

* a SQLite or DuckDB file, or a folder of parquet/CSV files (``files``): every table is exported; primary and
  foreign keys declared in the catalog are kept, and where none are declared they are inferred from names and
  values (``keys``, ``keynames``, ``containment``; composite keys are said, ``composite``) and marked
  ``inferred: true`` in schema.yaml, with their evidence as comments; column dtypes are inferred from the SQL types and the values;
  a table with exactly one datetime column gets it as its time column (a guess, reported). SQLite stores
  any value in any column, so a value that does not fit its declared type (text in a REAL column, an
  unparseable date in a DATETIME one) and a declared primary key with nulls or duplicates are errors;
  ``lenient=True`` makes such values NULL and drops such rows instead, and counts them in the report.
* a folder in 4DBInfer's format (``metadata.yaml`` with ``dataset_name``, ``tables`` and ``tasks``):
  its declared columns, keys and time columns are converted, and its tasks that predict one value per
  row at a time become row-column task files in ``DIR/tasks/``.
* a RelBench 3 folder (``manifest.yaml``, ``db/<table>.parquet``, ``tasks/<task>/manifest.yaml``): keys and
  time columns from the manifest; forecast tasks keep their SQL and RelBench's cutoffs, autocomplete tasks
  become fourdb's, and external tasks' shipped labels are converted as below (see ``relbench3``).
* a RelBench dataset by name or Hub path (``rel-f1``, ``org/repo/subdir``; or ``relbench:<spec>``, where the spec
  may also be a local folder): fetched with RelBench's own loader (``relbench.load_dataset``), with the
  tasks hosted apart from it, then imported as a RelBench 3 folder; without a network, one line says so.
* a folder in the older RelBench layout (``db/<table>.parquet``, keys and time column in each file's parquet
  metadata), with its node tasks (``tasks/<task>/{train,val,test}.parquet``) converted the same way.

A converted task's rows become a table of the database (``task_<name>``: one row per sample with its
entity key, its time, its label and ``label_known_at``). fourdb splits by time, so validation starts at
the earliest validation sample and test at the earliest test sample; a sample's label becomes known
just before the next split starts (as 4DBInfer's temporal constraint and RelBench's timestamps
allow), so a training label is never visible to another training seed but is to validation seeds.

A table left without a time column that references timed tables (the lines of dated invoices) gets
``time_from``: its rows take the latest time of the parent rows they point to, so they cannot leak.

Each format is a module of this package that registers a ``Format`` in ``IMPORTERS``. A folder is offered to
the folder formats and a file to the file formats, in their declared order (folders: 4dbinfer, relbench3,
then relbench; files: sqlite, then duckdb), and the first that recognises it reads it.

Everything is written to a temporary folder beside ``out``, loaded back through ``Database.load``
(so the result passes ``fourdb validate``), and only then renamed to ``out``.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from fourdb.errors import DatabaseImportError, FourdbError, UntrustedInputError
from fourdb.importers.assemble import assemble
from fourdb.importers.base import IMPORTERS, Format, ImportReport, SourceTable
from fourdb.importers.comments import commented_schema
from fourdb.importers.dtypes import infer_dtype
from fourdb.importers.identifiers import mark_identifiers
from fourdb.importers.keys import infer_foreign_keys, infer_primary_key
from fourdb.rdb.database import Database, write_database
from fourdb.rdb.sandbox import refuse_links_out
from fourdb.tasks.splits import SPLITS
from fourdb.untrusted import check_name, reading, safe_text
from fourdb.utils import atomic_output, atomic_write_text, yaml_text

PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# what is fetched with RelBench's own loader: ``relbench:<anything it accepts>``, or a name that is not a local
# path and reads as a RelBench dataset name or Hub path (rel-f1, org/repo, org/repo/subdir)
RELBENCH_PREFIX = "relbench:"
RELBENCH_NAME = re.compile(r"rel-[a-z0-9-]+|[A-Za-z0-9][\w.-]*/[\w.-]+(/[\w.-]+)*")

__all__ = ["IMPORTERS", "Format", "ImportReport", "SourceTable", "assemble", "import_database", "infer_dtype",
           "infer_foreign_keys", "infer_primary_key"]


def import_database(path: str | Path, out: str | Path, name: str | None = None,
                    lenient: bool = False, allow_outside_paths: bool = False, infer_keys: bool = True,
                    keep_identifiers: bool = False) -> ImportReport:
    """Convert the database at ``path`` into a fourdb database folder ``out`` (which must not exist or be empty).

    ``lenient``: values that do not fit their declared type become NULL and rows with a null or repeated
    declared primary key are dropped (the first of each key kept), counted in the report's warnings,
    where otherwise they are errors. A folder's files, and the files it names, must lie inside it unless
    ``allow_outside_paths`` (the user's own opt-in). ``infer_keys=False`` keeps only the keys the source
    declares (a lone datetime column is still guessed as a table's time). The columns that identify a row or a
    person are written ``feature: false`` (``fourdb.importers.identifiers``), unless ``keep_identifiers``.
    """
    spec = str(path)
    path, out = Path(path), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatabaseImportError(f"{out}: already exists and is not an empty folder; choose another --out")
    hub = spec[len(RELBENCH_PREFIX):] if spec.startswith(RELBENCH_PREFIX) else None
    if hub is None and not path.exists():
        if not RELBENCH_NAME.fullmatch(spec):
            raise DatabaseImportError(f"{path}: no such file or folder")
        hub = spec  # a RelBench dataset by name (rel-f1) or Hub path (org/repo/subdir)
    if hub is not None:
        from fourdb.importers.relbench3 import fetch

        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".relbench-", dir=out.parent) as staging:
            return import_database(fetch(hub, Path(staging)), out, name or Path(hub.rstrip("/")).name, lenient,
                                   allow_outside_paths, infer_keys, keep_identifiers)
    offered = sorted(((kind, f) for kind, f in IMPORTERS.items() if f.folder == path.is_dir()),
                     key=lambda entry: (entry[1].order, entry[0]))
    kind, fmt = next(((kind, f) for kind, f in offered if f.detect(path)), (None, None))
    if fmt is None:
        raise DatabaseImportError(_unrecognised(path, [f for _, f in offered]))
    if path.is_dir():
        refuse_links_out(path, allow_outside_paths)
    report = ImportReport(str(path), kind, allow_outside_paths=allow_outside_paths)
    with reading(path):  # a library's error on a malformed file the reader did not word is one line naming it
        sources, tasks, dname = fmt.read(path, report)
    if not sources:
        raise DatabaseImportError(f"{path}: the database has no tables")
    for source in sources:  # every table becomes a DuckDB view named in double quotes (schema.yaml refuses one)
        check_name(source.name, str(path), "table name")
        if '"' in source.name:
            raise UntrustedInputError(f"{path}: table name {safe_text(source.name)!r} holds a double quote, which a "
                                      f"fourdb table name cannot; rename it in the source")
    for tname in tasks:  # a task's name becomes a file name in the output folder: nothing that walks out of it
        if not PLAIN_NAME.fullmatch(str(tname)):
            raise UntrustedInputError(f"{path}: task name {str(tname)!r:.80} is not a plain name (letters, digits, "
                                      f"'_', '-', '.'); not allowed")
    try:
        with reading(path, "cannot convert the database"):
            schema, frames = assemble(name or dname, sources, fmt.infer_keys and infer_keys, report, lenient,
                                      guess_time=fmt.infer_keys)
        if fmt.infer_keys and not infer_keys:
            report.notes.append("keys not inferred (--no-infer-keys): only those the source declares")
        mark_identifiers(schema, frames, report, keep_identifiers)
    except DatabaseImportError as e:  # its tables' and columns' errors name them; the file too
        raise DatabaseImportError(f"{path}: {e}" if not str(e).startswith(str(path)) else str(e)) from None

    with atomic_output(out, folder=True) as tmp:
        write_database(tmp, schema, frames)
        if report.evidence:  # why each inferred key and time is what it is, beside it for the user to review
            atomic_write_text(tmp / "schema.yaml", commented_schema(schema, report.evidence, [
                f"Imported from {safe_text(path.name)} by fourdb import. Keys and times marked `inferred: true` or",
                "explained below were inferred from names and values; change any of them here."]))
        db = Database.load(tmp)  # the written folder must be valid, or nothing is kept
        for tname, spec in tasks.items():
            report.tasks[tname] = _check_task(tmp, db, tname, spec, report)
    report.out, report.schema = out, schema
    report.rows = {t: len(df) for t, df in frames.items()}
    return report


def _unrecognised(path: Path, tried: list[Format]) -> str:
    """The error naming every format a path was offered to, in the order they were asked."""
    if path.is_dir() and (path / "schema.yaml").exists():
        return f"{path}: already a fourdb database folder (it has a schema.yaml): use it as it is (fourdb validate {path})"
    if path.is_dir():
        formats = " nor ".join(f"a {f.label} {'one' if i else 'folder'} ({f.lacks})" for i, f in enumerate(tried))
        return f"{path}: not {formats}"
    return f"{path}: not a {' or '.join(f.label for f in tried)} database file"


def _check_task(folder: Path, db: Database, name: str, spec: dict, report: ImportReport) -> dict[str, int]:
    """Write a converted task file and materialize it once; a task that does not materialize is dropped.
    A task's shipped ``candidates`` (a frame) are written beside it, and the file names them."""
    from fourdb.tasks import TaskSpec, materialize

    if isinstance(spec.get("candidates"), pd.DataFrame):
        path = Path("tasks") / f"{name}.candidates.parquet"
        (folder / "tasks").mkdir(exist_ok=True)
        spec["candidates"].to_parquet(folder / path, index=False)
        spec = {**spec, "candidates": str(path)}
    text = yaml_text(spec)  # SQL as a readable block
    try:
        task = materialize(TaskSpec.from_dict(yaml.safe_load(text), f"tasks/{name}.yaml"), db)
    except FourdbError as e:
        report.notes.append(f"task '{name}' not converted: {e}")
        if spec.get("candidates"):
            (folder / spec["candidates"]).unlink(missing_ok=True)
        return {}
    atomic_write_text(folder / "tasks" / f"{name}.yaml", text)
    return {s: int((task.frame["split"] == s).sum()) for s in SPLITS}
