"""The check behind a record's ``regime``: a model that says it learns in context takes no gradient step on
the target database. Its fit runs under a hook on every torch optimizer (registered globally, so an optimizer
the model makes itself is caught too); one step ends the run in one line."""
from __future__ import annotations

import contextlib

from torch.optim.optimizer import register_optimizer_step_pre_hook

from fourdb.contracts import IN_CONTEXT, REGIMES
from fourdb.errors import FourdbError


class RegimeError(FourdbError):
    """A model broke the regime it states."""


@contextlib.contextmanager
def regime_guard(model_name: str, regime: str):
    """Fit ``model_name`` inside this block: where its ``regime`` is in-context, any optimizer step raises."""
    if regime not in REGIMES:
        raise RegimeError(f"model '{model_name}' states regime {regime!r}; a regime is one of {', '.join(REGIMES)}")
    if regime != IN_CONTEXT:
        yield
        return

    def refuse(optimizer, args, kwargs):
        raise RegimeError(f"model '{model_name}' states regime '{IN_CONTEXT}' but took a gradient step "
                          f"({type(optimizer).__name__}) on the target database; an in-context model only reads it")

    handle = register_optimizer_step_pre_hook(refuse)
    try:
        yield
    finally:
        handle.remove()
