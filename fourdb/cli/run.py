"""``fourdb run``, ``fourdb certify`` and ``fourdb plan``: the Hydra app that composes a run's config, then
trains it (on one process or, through ``launch``, several), certifies it, or prices its engine strategies."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from fourdb.cli.errors import fail
from fourdb.defaults import CONF_DIR
from fourdb.errors import FourdbError

log = logging.getLogger("fourdb")


def hydra_run(argv: list[str], plan_png: str | None = None, plan: bool = False) -> None:
    """``fourdb run`` (or, with ``plan``, ``fourdb plan``: price the engine's strategies, train nothing)."""
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig, OmegaConf

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def app(cfg: DictConfig) -> float | None:
        from fourdb.engine.distribution.ddp import in_torchrun
        from fourdb.experiment.launch import exit_rank, launch, needs_launch, quiet_other_ranks
        from fourdb.experiment.prepare import clear_launch, read_launch
        from fourdb.experiment.run import format_records, run_checked
        from fourdb.experiment.settings import check_settings

        out_dir = output_dir(HydraConfig.get())
        if plan:
            from fourdb.experiment.plan import plan_run

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
            check_settings(cfg)  # once, before torchrun starts any rank, or trainer.nproc=auto profiles the run
            if needs_launch(cfg):
                record = launch(cfg, out_dir, list(HydraConfig.get().overrides.task), run_checked)
            else:
                if not in_torchrun():
                    clear_launch(out_dir)
                record = run_checked(cfg, out_dir)
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
        sys.argv = ["fourdb run", *folder_dataset(argv), *_literal_cwd()]
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
    from fourdb.experiment.prepare import literal_text

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


def folder_dataset(argv: list[str]) -> list[str]:
    """``dataset=path/to/db`` (a database folder, not a config name) -> the ``folder`` dataset config.

    The folder's path is text, never Hydra syntax: a folder named ``${oc.env:VAR}`` or ``a,b'c`` is passed
    quoted and escaped (``hydra_text``), so Hydra neither resolves nor splits it, and the run is named by a
    plain stem of the folder's name. A value that is neither a dataset config nor a database folder is refused
    here in one line; Hydra would only say that it has no config ``dataset/<value>``.
    """
    from fourdb.experiment.prepare import hydra_text
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
