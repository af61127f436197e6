"""The ``fourdb`` command: run and plan (Hydra apps), validate, import, export, datasets, leaderboard."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from fourdb.defaults import CONF_DIR
from fourdb.errors import FourdbError
from fourdb.untrusted import first_line, safe_text

log = logging.getLogger("fourdb")
DEBUG_ENV = "FOURDB_DEBUG"


def error_line(e: BaseException) -> str:
    """One printable line for an error that ends a command: fourdb's own as it is worded, any other as its
    kind and first line (input is data, and no input ends in a traceback; ``FOURDB_DEBUG=1`` shows it)."""
    if isinstance(e, FourdbError):
        return f"error: {safe_text(e, 2000)}"
    return f"error: {safe_text(first_line(e), 2000)} ({DEBUG_ENV}=1 shows the traceback)"


def fail(e: BaseException) -> int:
    if os.environ.get(DEBUG_ENV) and not isinstance(e, FourdbError):
        raise e
    print(error_line(e), file=sys.stderr, flush=True)
    return 2


def _hydra_run(argv: list[str], plan_png: str | None = None, plan: bool = False) -> None:
    """``fourdb run`` (or, with ``plan``, ``fourdb plan``: price the engine's strategies, train nothing)."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def app(cfg: DictConfig) -> float | None:
        from fourdb.run import format_records, run_experiment
        from fourdb.settings import check_settings

        from fourdb.engine.distribution.ddp import in_torchrun
        from fourdb.launch import exit_rank, launch, needs_launch, quiet_other_ranks
        from fourdb.prepare import clear_launch, read_launch

        out_dir = output_dir(HydraConfig.get())
        if plan:
            from fourdb.plan import plan_run

            try:
                check_settings(cfg)
                text, verdict = plan_run(cfg, out_dir, plan_png)
            except Exception as e:  # noqa: BLE001 - one line, never a traceback (error_line)
                text, verdict = None, e
            if text:
                print(text, flush=True)
            if verdict:  # a bad setting, or a memory limit no strategy meets
                sys.exit(fail(verdict if isinstance(verdict, BaseException) else FourdbError(verdict)))
            return None
        quiet_other_ranks()
        try:  # trainer.nproc > 1: torchrun starts the ranks, rank 0 writes the record
            check_settings(cfg)  # before torchrun starts any rank, or trainer.nproc=auto profiles the run
            if needs_launch(cfg):
                record = launch(cfg, out_dir, list(HydraConfig.get().overrides.task), run_experiment)
            else:
                if not in_torchrun():
                    clear_launch(out_dir)
                record = run_experiment(cfg, out_dir)
        except Exception as e:  # noqa: BLE001 - one line, never a traceback (error_line)
            sys.exit(fail(e))
        if in_torchrun():  # a rank: the `fourdb run` that started torchrun prints the record, else rank 0
            if record is not None and read_launch(out_dir) is None:
                log.info("run record: %s/record.json", out_dir)
                print(format_records([record]), flush=True)
            exit_rank()
        log.info("run record: %s/record.json", out_dir)
        print(format_records([record]), flush=True)
        verdict = record.get("certify")
        if verdict is not None:
            print(certify_line(verdict), flush=True)
            if not verdict["passed"] and HydraConfig.get().mode == RunMode.RUN:
                sys.exit(1)
        return record["metrics"]["val"][record["metric"]]

    OmegaConf.register_new_resolver("metric_direction", metric_direction, replace=True)
    OmegaConf.register_new_resolver("fourdb_output_dir", lambda *, _root_: output_dir(_root_.hydra), replace=True)
    try:
        sys.argv = ["fourdb run", *_folder_dataset(argv), *_literal_cwd()]
    except FourdbError as e:  # a mistyped dataset path, found before Hydra starts
        sys.exit(fail(e))
    app()


def output_dir(hydra_cfg) -> str:
    """The run folder, as Hydra stored it: a path, never read as an interpolation. Hydra stores the absolute
    path of ``hydra.run.dir`` as config text, so a ``${...}`` in the folder's name (or in the current folder's)
    would be resolved on every read of ``hydra.runtime.output_dir``."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(hydra_cfg.runtime, resolve=False)["output_dir"]


def _literal_cwd() -> list[str]:
    """Where the current folder's path holds ``${``: no ``.hydra`` folder, which Hydra places by resolving the run
    folder's path (``output_dir``); the run's record and log are written as always."""
    from fourdb.prepare import literal_text

    cwd = os.getcwd()
    return ["hydra.output_subdir=null"] if literal_text(cwd) != cwd else []


def certify_line(verdict: dict) -> str:
    checks = verdict["checks"]
    if verdict["passed"]:
        return (f"certify: passed: {len(checks)} checks ({', '.join(sorted({c['mode'] for c in checks}))} the rows after "
                f"each of {len({c['cutoff'] for c in checks})} test cutoffs), every prediction unchanged")
    bad = verdict["first_failure"]
    return (f"certify: FAILED: with the rows after {bad['cutoff']} {bad['mode']}d, predictions change (max "
            f"{bad['max_abs_diff']:.3g}); first difference: {bad['first_difference']}")


def metric_direction(dataset, task: str) -> str:
    """``maximize`` or ``minimize``: which way the task's primary metric is better (for Optuna sweeps)."""
    from fourdb.tasks import find_task
    from fourdb.metrics import higher_is_better

    spec = find_task(dataset.get("path") or dataset.name, task)
    return "maximize" if higher_is_better(spec.metric) else "minimize"


def _folder_dataset(argv: list[str]) -> list[str]:
    """``dataset=path/to/db`` (a database folder, not a config name) -> the ``folder`` dataset config.

    The folder's path is text, never Hydra syntax: a folder named ``${oc.env:VAR}`` or ``a,b'c`` is passed
    quoted and escaped (``hydra_text``), so Hydra neither resolves nor splits it, and the run is named by a
    plain stem of the folder's name. A value that is neither a dataset config nor a database folder is refused
    here in one line; Hydra would only say that it has no config ``dataset/<value>``.
    """
    from fourdb.prepare import hydra_text
    from fourdb.rdb.schema import file_stem

    out = []
    for arg in argv:
        key, _, value = arg.partition("=")
        hydra_syntax = any(c in value for c in ",()[]{}$*")  # a sweep, choice(...), an interpolation
        config = "/" not in value and (Path(CONF_DIR) / "dataset" / f"{value}.yaml").exists()
        folder = key == "dataset" and value and not config and (Path(value) / "schema.yaml").is_file()
        if key != "dataset" or not value or config or hydra_syntax and not folder:
            out.append(arg)
        elif folder:
            path = Path(value).resolve()
            out += ["dataset=folder", f"dataset.name={hydra_text(file_stem(path.name, 'folder'))}",
                    f"dataset.path={hydra_text(str(path))}"]
        else:  # neither a dataset config nor a database folder: a typo (lahmann) or a wrong path
            from fourdb.datasets import dataset_error

            raise dataset_error(value)
    return out


class SummaryCallback:
    """Hydra callback: after a sweep, print every run's metrics in one table."""

    def __init__(self, *args, **kwargs):
        pass

    def on_multirun_start(self, config, **kwargs):
        pass

    def on_run_start(self, config, **kwargs):
        pass

    def on_run_end(self, config, **kwargs):
        pass

    def on_job_start(self, config, **kwargs):
        pass

    def on_job_end(self, config, job_return, **kwargs):
        pass

    def on_multirun_end(self, config, **kwargs):
        from fourdb.run import format_records
        from fourdb.untrusted import read_yaml

        paths = sorted(Path(config.hydra.sweep.dir).glob("*/record.json"), key=_job_order)
        records = [json.loads(p.read_text()) for p in paths]
        if records:
            overrides = [read_yaml(p.parent / ".hydra" / "overrides.yaml") or []
                         if (p.parent / ".hydra" / "overrides.yaml").exists() else [] for p in paths]
            print(f"\nResults ({len(records)} runs, records under {config.hydra.sweep.dir}):")
            print(format_records(records, varying_overrides(overrides)), flush=True)


def _job_order(path: Path) -> tuple:
    """A run folder ``<job number>_...`` in job order (job 10 after job 9)."""
    num = path.parent.name.split("_", 1)[0]
    return (0, int(num), path.parent.name) if num.isdigit() else (1, 0, path.parent.name)


def varying_overrides(runs: list[list[str]]) -> list[dict]:
    """Per run, the command-line overrides whose value is not the same in every run of a sweep (the summary's
    own columns, dataset, task, model and seed, aside): what tells two runs' rows apart."""
    parsed = [dict(o.lstrip("+~").split("=", 1) for o in run if "=" in o) for run in runs]
    keys = list(dict.fromkeys(k for p in parsed for k in p))
    varying = [k for k in keys if k not in ("dataset", "task", "model", "seed") and len({p.get(k) for p in parsed}) > 1]
    return [{k: p.get(k, "") for k in varying} for p in parsed]


def _validate(args) -> int:
    from fourdb.rdb import Database
    from fourdb.tasks import find_task, materialize
    from fourdb.tasks.checks import task_report, task_warnings
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
        print(f"\n{task_report(task)}")
        for warning in task_warnings(task):
            print(f"warning: {warning}")
    if tasks:
        print(f"{'ok' if not failed else 'FAILED'}: {len(tasks) - failed} of {len(tasks)} tasks materialize")
    return 2 if failed else 0


def _describe(args) -> int:
    from fourdb.datasets import load_dataset
    from fourdb.describe import column_report, report_frame
    from fourdb.leaderboard.cli import _params  # KEY=VALUE as `fourdb leaderboard template` reads them
    from fourdb.rdb.diagram import write_diagram
    from fourdb.rdb.schema import file_stem
    from fourdb.untrusted import inside_output
    from fourdb.tasks import find_task, materialize

    import yaml

    dfs = yaml.safe_load((Path(CONF_DIR) / "features" / "dfs.yaml").read_text())  # what features=dfs runs with
    depth = dfs["depth"] if args.depth is None else args.depth
    db = load_dataset(args.dataset, args.allow_outside_paths, **_params(args.dataset_param))
    task = materialize(find_task(args.dataset, args.task), db) if args.task else None
    print(db.summary().to_string(index=False))
    for note in db.notes:
        print(f"note: {note}")
    seeds = f"task {task.spec.name}'s seed rows ({task.spec.entity_table})" if task else \
        "each table as if it were a task's entity table"
    print(f"\nWhat each model kind makes of every column, for {seeds}: single_table reads the seed row; dfs the "
          f"seed row and DFS features to depth {depth}; graph every table ({args.graph}).")
    frame = report_frame(column_report(db, task, graph=args.graph, depth=depth, primitives=dfs["primitives"]))
    for table, part in frame.groupby("table", sort=False):
        print(f"\n{table}\n{part.drop(columns='table').to_string(index=False)}")
    # the schema's name is text from schema.yaml: the diagram is named by a plain stem of it, inside --out
    stem = inside_output(args.out, f"{file_stem(db.schema.name, 'database')}-schema", "describe --out")
    paths = write_diagram(db.schema, stem)
    print(f"\ndiagram: {', '.join(map(str, paths))}")
    return 0


def _import(args) -> int:
    from fourdb.importers import import_database

    report = import_database(args.path, args.out, name=args.name, lenient=args.lenient,
                             allow_outside_paths=args.allow_outside_paths)
    print(report.format())
    return 0


def _datasets(args) -> int:
    from fourdb.datasets import DATASETS
    from fourdb.tasks import TASKS_DIR

    for name, entry in sorted(DATASETS.items()):
        tasks = sorted(p.stem for p in (TASKS_DIR / name).glob("*.yaml"))
        print(f"{name:14s} {entry.description}")
        print(f"{'':14s} tasks: {', '.join(tasks) or '-'}; params: {entry.defaults}")
    return 0


def _export(args) -> int:
    from fourdb.export import export_predictions

    for line in export_predictions(args.run_dir, args.out, args.format):
        print(line)
    return 0


def _export_dataset(args) -> int:
    from fourdb.export import export_dataset
    from fourdb.leaderboard.cli import _params  # KEY=VALUE as `fourdb leaderboard template` reads them

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    for line in export_dataset(args.dataset, args.out, _params(args.dataset_param), tasks, args.allow_outside_paths):
        print(line)
    return 0


def _outside_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-outside-paths", action="store_true",
                   help="let the folder's files name sources outside it (an absolute path, '..', a symlink out); "
                        "refused by default, see README 'What fourdb trusts'")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except Exception as e:  # noqa: BLE001 - one line, never a traceback (error_line)
        return fail(e)


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "run":
        _hydra_run(argv[1:])
        return 0
    if argv and argv[0] == "plan":  # Hydra overrides as for run, and --out FILE.png
        rest, png = list(argv[1:]), None
        if "--out" in rest:
            at = rest.index("--out")
            png = str(Path(rest[at + 1]).resolve()) if at + 1 < len(rest) else None
            del rest[at:at + 2]
        _hydra_run(rest, png, plan=True)
        return 0
    if argv and argv[0] == "certify":  # a run that also proves its test predictions leak-free
        _hydra_run([*argv[1:], "certify.enabled=true"])
        return 0
    parser = argparse.ArgumentParser(prog="fourdb", description="Predictive ML on relational databases.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run experiments (Hydra overrides follow, e.g. model=sage -m)")
    sub.add_parser("plan", help="predict epoch time and peak memory of every engine strategy for a run, mark the "
                                "Pareto frontier and draw it (Hydra overrides as for run; --out FILE.png)")
    sub.add_parser("certify", help="run, then check that deleting or scrambling every row after a test cutoff "
                                   "leaves its predictions unchanged (Hydra overrides as for run)")
    p = sub.add_parser("import", help="convert a SQLite/DuckDB file, a 4DBInfer or a RelBench folder into a database folder")
    p.add_argument("path")
    p.add_argument("--out", required=True, help="database folder to write (must not exist, or be empty)")
    p.add_argument("--name", default=None, help="database name (default: the file or folder name)")
    p.add_argument("--lenient", action="store_true",
                   help="make values that break their declared type NULL and drop rows with a null or repeated "
                        "declared primary key, counted in warnings (default: stop with an error)")
    _outside_flag(p)
    p.set_defaults(func=_import)
    p = sub.add_parser("validate", help="check a database folder (schema.yaml plus data files) and its tasks")
    p.add_argument("folder")
    p.add_argument("--task", action="append", metavar="NAME_OR_FILE",
                   help="check this task (a name in FOLDER/tasks or a task file) instead of every task in "
                        "FOLDER/tasks (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=_validate)
    p = sub.add_parser("describe", help="what every table holds, which columns each model kind reads (and how, or "
                                        "why not), and the schema diagram (SVG and PNG)")
    p.add_argument("dataset", metavar="DATASET", help="a database folder or a built-in dataset")
    p.add_argument("--task", metavar="NAME_OR_FILE", help="report the columns as this task's runs read them")
    p.add_argument("--graph", default="r2ne", help="the graph construction (r2n or r2ne; default r2ne)")
    p.add_argument("--depth", type=int, help="DFS depth (default: conf/features/dfs.yaml's)")
    p.add_argument("--out", default=".", metavar="FOLDER", help="where the diagram goes (default: here)")
    p.add_argument("--dataset-param", action="append", metavar="KEY=VALUE",
                   help="a built-in dataset parameter, e.g. size=150 (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=_describe)
    p = sub.add_parser("datasets", help="list the built-in databases and their tasks")
    p.set_defaults(func=_datasets)
    p = sub.add_parser("export", help="write a run's test predictions as a RelBench prediction table (CSV)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (record.json and predictions.parquet)")
    p.add_argument("--format", default="relbench", help="the table's format: relbench (default)")
    p.add_argument("--out", required=True, metavar="FILE.csv")
    p.set_defaults(func=_export)
    p = sub.add_parser("export-dataset", help="write a database and its tasks as a RelBench 3 dataset folder")
    p.add_argument("dataset", metavar="DATASET", help="a built-in dataset or a database folder")
    p.add_argument("--out", required=True, metavar="FOLDER", help="folder to write (new, empty or an earlier export)")
    p.add_argument("--tasks", metavar="A,B", help="these tasks (names or task files) only (default: all)")
    p.add_argument("--dataset-param", action="append", metavar="KEY=VALUE",
                   help="a built-in dataset parameter, e.g. size=150 (repeatable)")
    _outside_flag(p)
    p.set_defaults(func=_export_dataset)
    from fourdb.leaderboard.cli import add_parser as add_leaderboard

    add_leaderboard(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
