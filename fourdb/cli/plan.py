"""``fourdb plan <overrides> [--out FILE.png]``: every engine strategy of a run priced, its Pareto frontier
drawn; the overrides are Hydra's, as for ``fourdb run``."""
from __future__ import annotations

import argparse
from pathlib import Path

from fourdb.cli.run import hydra_run
from fourdb.errors import FourdbError


def plan(argv: list[str]) -> None:
    # Hydra's own flags (-m, --cfg job, ...) pass through with the overrides
    parser = argparse.ArgumentParser(prog="fourdb plan", add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--out", metavar="FILE.png", help="where the frontier is drawn (default: the run folder)")
    try:
        args, overrides = parser.parse_known_args(argv)
    except argparse.ArgumentError as e:
        raise FourdbError(f"fourdb plan: {e}") from None
    hydra_run(overrides, str(Path(args.out).resolve()) if args.out else None, plan=True)
