"""``fourdb leaderboard submit | template | render | show``."""
from __future__ import annotations

import argparse

import yaml

from fourdb.contracts import REGIMES, SUPERVISED
from fourdb.errors import FourdbError


def dataset_params(pairs: list[str] | None) -> dict:
    """``--dataset-param KEY=VALUE`` pairs as a dict, each value read as YAML (``size=150`` is a number)."""
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise FourdbError(f"--dataset-param expects KEY=VALUE, got '{pair}'")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def _submit(args) -> int:
    from fourdb.leaderboard.store import leaderboard_root, submit_records, submit_run_dirs

    root = leaderboard_root(args.root)
    if args.predictions:
        missing = [f"--{k}" for k in ("method", "dataset", "task") if not getattr(args, k)]
        if missing:
            raise FourdbError(f"--predictions needs {', '.join(missing)}")
        if args.run_dirs:
            raise FourdbError("give either run folders or --predictions, not both")
        from fourdb.leaderboard.external import external_record

        record = external_record(args.predictions, args.method, args.dataset, args.task, args.seed,
                                 dataset_params(args.dataset_param), regime=args.regime)
        result = submit_records([(args.predictions, record)], root, args.skip_duplicates, progress=None,
                                replace=args.replace)
        for r in result.added:
            print(f"scored {args.predictions}: " + ", ".join(f"test {k} {v:.4f}" for k, v in r["metrics"]["test"].items()
                                                              if v is not None))
    else:
        if not args.run_dirs:
            raise FourdbError("give run folders (holding record.json) or --predictions FILE.csv")
        result = submit_run_dirs(args.run_dirs, root, args.skip_duplicates, progress=None, replace=args.replace)
    from collections import Counter

    from fourdb.leaderboard.boards import board_path

    for path, n in sorted(Counter(board_path(root, r["dataset"], r["task"]) for r in result.added).items()):
        print(f"{path}: +{n} record(s)")
    if result.replaced:
        print(f"replaced {len(result.replaced)} record(s) by their certified run(s)")
    if result.skipped:
        print(f"skipped {len(result.skipped)} record(s) already on the leaderboard")
    print(f"submitted {len(result.added)} record(s)")
    return 0


def _template(args) -> int:
    from fourdb.leaderboard.external import write_template

    n = write_template(args.dataset, args.task, args.out, dataset_params(args.dataset_param))
    print(f"wrote {n} test keys to {args.out}: fill in the prediction column(s) and submit with "
          f"`fourdb leaderboard submit --predictions {args.out} --method NAME --dataset {args.dataset} "
          f"--task {args.task}`")
    return 0


def _roots(args) -> list:
    from fourdb.leaderboard.store import committed_root

    return (args.root or [None]) + ([committed_root()] if args.with_committed else [])


def _render(args) -> int:
    from fourdb.leaderboard.render import render

    print(f"wrote {render(_roots(args))}")
    return 0


def _show(args) -> int:
    from fourdb.leaderboard.render import show

    print(show(args.dataset, args.task, _roots(args)))
    return 0


def add_parser(sub) -> None:
    lb = sub.add_parser("leaderboard", help="submit results, render and show the leaderboards")
    cmds = lb.add_subparsers(dest="leaderboard_command", required=True)
    root = argparse.ArgumentParser(add_help=False)
    root.add_argument("--root", help="leaderboards folder (default: $FOURDB_LEADERBOARDS or ./leaderboards)")
    roots = argparse.ArgumentParser(add_help=False)
    roots.add_argument("--root", action="append",
                       help="leaderboards folder (default: $FOURDB_LEADERBOARDS or ./leaderboards); repeat it to read "
                            "several side by side, each row saying which it comes from")
    roots.add_argument("--with-committed", action="store_true",
                       help="also read the boards committed with fourdb (leaderboards/ of its source checkout)")
    data = argparse.ArgumentParser(add_help=False)
    data.add_argument("--dataset-param", action="append", metavar="KEY=VALUE",
                      help="a built-in dataset parameter, e.g. size=150 (repeatable)")

    p = cmds.add_parser("submit", parents=[root, data],
                        help="validate run records (or score a prediction file) and append them")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run or multirun folders, or record.json files")
    p.add_argument("--predictions", metavar="FILE.csv", help="external predictions keyed by (entity, cutoff)")
    p.add_argument("--method", help="name of the external method")
    p.add_argument("--dataset", help="dataset of the external predictions")
    p.add_argument("--task", help="task of the external predictions")
    p.add_argument("--seed", type=int, default=0, help="seed of the external run (default 0)")
    p.add_argument("--regime", choices=REGIMES, default=SUPERVISED,
                   help="how the external model learned the database: supervised (trained on its training split, "
                        "the default) or in-context (no gradient step on it); boards rank each regime apart")
    p.add_argument("--skip-duplicates", action="store_true",
                   help="leave out records already on the board instead of refusing the submission")
    p.add_argument("--replace", action="store_true",
                   help="a certified run (certify passed) takes the place of the record on the board with the same "
                        "key (its plain twin); a record without a passed certify verdict is refused")
    p.set_defaults(func=_submit)

    p = cmds.add_parser("template", parents=[data], help="write a task's test keys, to fill in with predictions")
    p.add_argument("--dataset", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--out", required=True, metavar="FILE.csv")
    p.set_defaults(func=_template)

    p = cmds.add_parser("render", parents=[roots],
                        help="write README.md and plots/ from the boards (into the first --root)")
    p.set_defaults(func=_render)

    p = cmds.add_parser("show", parents=[roots], help="print one board")
    p.add_argument("dataset")
    p.add_argument("task")
    p.set_defaults(func=_show)
