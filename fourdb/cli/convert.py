"""``fourdb import PATH --out FOLDER``: a SQLite/DuckDB file, a folder of parquet/CSV files, a 4DBInfer or a
RelBench folder as a database folder."""
from __future__ import annotations


def convert(args) -> int:
    from fourdb.importers import import_database

    report = import_database(args.path, args.out, name=args.name, lenient=args.lenient,
                             allow_outside_paths=args.allow_outside_paths, infer_keys=args.infer_keys,
                             keep_identifiers=args.keep_identifiers)
    print(report.format())
    return 0
