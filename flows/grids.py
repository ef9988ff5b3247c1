"""Save grids over a horizon: `linear_grid`, `log_grid` (phases on different time scales)."""

from __future__ import annotations

import numpy as np

from ._checks import check_int, check_real

__all__ = ["check_horizon", "linear_grid", "log_grid"]


def linear_grid(t0: float, t1: float, num: int) -> np.ndarray:
    """`num` equally spaced save times from `t0` to `t1` inclusive."""
    check_horizon(t0, t1)
    num = check_int("num", num, 2, integral_float=True)
    return np.linspace(float(t0), float(t1), num)


def log_grid(t0: float, t1: float, num: int, first: float | None = None) -> np.ndarray:
    """`t0`, then `num - 1` log-spaced times from `t0 + first` to `t1`.

    `first` defaults to `1e-6 * (t1 - t0)`. Log grids are the natural way to look at flows whose phases
    live on different time scales (scan then snap, phase 1 then phase 2).
    """
    check_horizon(t0, t1)
    num = check_int("num", num, 2, integral_float=True)
    span = float(t1) - float(t0)
    first = 1e-6 * span if first is None else check_real("first", first)
    if not (0.0 < first < span):
        raise ValueError(f"first must lie in (0, t1 - t0) = (0, {span}), got {first}")
    rest = np.geomspace(first, span, int(num) - 1) + float(t0)
    rest[-1] = float(t1)
    return np.concatenate([[float(t0)], rest])


def check_horizon(t0: float, t1: float) -> None:
    for name, value in (("t0", t0), ("t1", t1)):
        if not isinstance(value, (int, float, np.floating, np.integer)):
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
        check_real(name, value)
    if not float(t1) > float(t0):
        raise ValueError(f"t1 must be greater than t0, got t0={t0}, t1={t1}")
