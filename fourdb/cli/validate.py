"""``fourdb validate FOLDER``: a database folder and its tasks checked, every problem one line."""
from __future__ import annotations

from pathlib import Path

from fourdb.cli.errors import error_line
from fourdb.errors import FourdbError


def validate(args) -> int:
    from fourdb.rdb import Database
    from fourdb.tasks import find_task, materialize
    from fourdb.tasks.checks import late_label_warnings, task_report, task_warnings
    from fourdb.utils import progress

    db = Database.load(args.folder, args.allow_outside_paths)
    print(db.summary().to_string(index=False))
    for note in db.notes:
        print(f"warning: {note}")
    print(f"ok: {args.folder} is a valid database ({len(db.schema.tables)} tables)")
    tasks = args.task or [str(p) for p in sorted((Path(args.folder) / "tasks").glob("*.yaml"))]
    failed = 0
    for name in progress(tasks, desc="tasks", unit="task", leave=False):
        try:  # every task is checked, so one broken task does not hide the others' problems
            task = materialize(find_task(args.folder, name), db, allow_empty_splits=True)
        except FourdbError as e:
            print(error_line(e))  # one printable line, whatever the task's text holds
            failed += 1
            continue
        print(f"\n{task_report(task, db)}")
        for warning in task_warnings(task) + late_label_warnings(task, db):
            print(f"warning: {warning}")
    if tasks:
        print(f"{'ok' if not failed else 'FAILED'}: {len(tasks) - failed} of {len(tasks)} tasks materialize")
    return 2 if failed else 0
