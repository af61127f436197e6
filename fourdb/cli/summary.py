"""A sweep's summary: after ``fourdb run -m``, every run's metrics in one table and the best setting, chosen on
validation (test is printed beside every run, never used to choose; conf/config.yaml names ``SummaryCallback``
as a Hydra callback)."""
from __future__ import annotations

import json
from pathlib import Path

from hydra.experimental.callback import Callback


class SummaryCallback(Callback):
    """Hydra callback: after a sweep, print every run's metrics in one table, then the validation-best setting."""

    def on_multirun_end(self, config, **kwargs):
        from fourdb.experiment.run import format_records
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
