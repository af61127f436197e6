"""Loaded at start-up by the processes a test runs with ``PYTHONPATH=tests/hooks`` (torchrun's ranks
among them), to break a run from outside the code under test: with ``FOURDB_TEST_KILL_AT_STEP=N``, the
last data-parallel rank SIGKILLs itself at its N-th optimizer step, once (``FOURDB_TEST_KILL_MARKER``
names a file that says it has), so the restarted group goes on."""
import os

_at, _marker = os.environ.get("FOURDB_TEST_KILL_AT_STEP"), os.environ.get("FOURDB_TEST_KILL_MARKER")
_last_rank = os.environ.get("RANK") is not None and int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1
if _at and _marker and _last_rank and not os.path.exists(_marker):
    import signal
    import sys

    import torch

    _step = torch.optim.AdamW.step
    _count = [0]

    def _step_then_maybe_die(self, *args, **kwargs):
        out = _step(self, *args, **kwargs)
        _count[0] += 1
        if _count[0] == int(_at) and not os.path.exists(_marker):
            open(_marker, "w").write(str(_count[0]))
            print(f"test hook: rank {os.environ['RANK']} kills itself at step {_count[0]}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    torch.optim.AdamW.step = _step_then_maybe_die
