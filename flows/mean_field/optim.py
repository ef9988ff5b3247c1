"""The optimiser limits' old home: they are `mean_field.solve_flow(config, ts, optimizer=..., optim_args=...)`
(`flow.py`); `solve_optim` stays one release, deprecated."""

from __future__ import annotations

import warnings
from typing import Any

from .._solve import Trajectory
from ..optim_limits.problem import OPTIMIZERS as OPTIMIZERS
from .data import Config
from .flow import limit_loss as limit_loss
from .flow import limit_problem as limit_problem
from .flow import solve_flow

__all__ = ["OPTIMIZERS", "limit_loss", "limit_problem", "solve_optim"]


def solve_optim(
    config: Config,
    ts: Any,
    optimizer: str,
    optim_args: dict | None = None,
    *,
    observables: str = "basic",
    **kwargs: Any,
) -> Trajectory:
    """Deprecated: `mean_field.solve_flow(config, ts, optimizer=optimizer, optim_args=optim_args,
    observables="basic", ...)`, whose momentum takes `"lr"` where this took `"eta_tau"`."""
    warnings.warn(
        "flows.mean_field.optim.solve_optim is deprecated: use flows.mean_field.solve_flow(config, ts, "
        "optimizer=..., optim_args=...) (momentum's 'eta_tau' is its 'lr')",
        DeprecationWarning,
        stacklevel=2,
    )
    if isinstance(optim_args, dict) and "eta_tau" in optim_args:
        optim_args = {("lr" if k == "eta_tau" else k): v for k, v in optim_args.items()}
    return solve_flow(config, ts, optimizer=optimizer, optim_args=optim_args, observables=observables, **kwargs)
