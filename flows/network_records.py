"""What the network records of every system share: the momentum clock, event times on saved series, and the
error a training run raises when it goes non-finite.

- `flow_time(lr, steps, momentum)`: the continuous time of a step count, t = lr * step / (1 - momentum)
  (heavy-ball SGD with momentum beta moves at the effective rate lr / (1 - beta); plain GD/SGD and Adam use
  t = lr * step).
- `event_time(record, name, level, direction)`: the first time an observable crosses `level`, by linear
  interpolation between saved points (`nan` if it never does); works on a network record and on a
  `flows.Trajectory` alike.
- `TrainingError`: a `flows.FlowError` naming the first non-finite step, with the partial record.
"""

from __future__ import annotations

import math

import numpy as np

from .trajectory import FlowError

__all__ = ["TrainingError", "event_time", "first_nonfinite_step", "flow_time"]


class TrainingError(FlowError):
    """A training run went non-finite (NaN or inf in the parameters or the saved observables; Scan and Snap
    also counts a Y or Z entry past `scan_snap.network.blowup_bound`, where its exponential overflows: its
    gradients are bounded, so an absurd learning rate drives them to huge finite values, not to NaN).

    - `step`: the first step whose parameters are not finite.
    - `record`: the record of the saved steps before it (or `None` if not even step 0 was finite).
    """

    def __init__(self, message: str, step: int, record=None):
        super().__init__(message)
        self.step = int(step)
        self.record = record


def flow_time(lr: float, steps, momentum: float | None = None) -> np.ndarray:
    """t = lr * steps / (1 - momentum): the one momentum clock of every system (`momentum=None` or 0: lr * step)."""
    beta = 0.0 if momentum is None else float(momentum)
    return float(lr) * np.asarray(steps, dtype=float) / (1.0 - beta)


def first_nonfinite_step(saved_steps, observables: dict, param_step: int = -1) -> int:
    """The first step at which a run is non-finite: `param_step` (the first step with non-finite parameters,
    -1 if none) or the first saved step at which an observable is NaN or inf, whichever comes first; -1 if
    neither."""
    saved_steps = np.asarray(saved_steps)
    ok = np.ones(saved_steps.shape, bool)
    for v in observables.values():
        v = np.asarray(v)
        ok &= np.all(np.isfinite(v.reshape(v.shape[0], -1)), axis=1) if v.ndim > 1 else np.isfinite(v)
    steps = [int(saved_steps[np.argmin(ok)])] if not ok.all() else []
    steps += [int(param_step)] if param_step >= 0 else []
    return min(steps) if steps else -1


def _series(record, name):
    observables = getattr(record, "observables", None)
    if not isinstance(observables, dict):
        raise ValueError(f"record must have an observables dict (a network record or a flows.Trajectory), got "
                         f"{type(record).__name__}")
    if name not in observables:
        raise ValueError(f"name must be one of the record's observables {sorted(observables)}, got {name!r}")
    ts = np.asarray(record.ts, dtype=float)
    ys = np.asarray(observables[name], dtype=float)
    if ts.ndim != 1 or ys.shape != ts.shape:
        raise ValueError(f"name: observable {name!r} must be a scalar series of shape {ts.shape} (one value per "
                         f"saved time), got shape {ys.shape}; pass a scalar observable")
    keep = np.isfinite(ts)  # a Trajectory stopped by an event pads ts with inf
    return ts[keep], ys[keep]


def event_time(record, name: str, level: float = 0.0, direction: bool | None = True) -> float:
    """The first time the observable `name` of `record` crosses `level`, as `flows.Event` defines a crossing.

    - `direction`: `True` an upcrossing (from below `level` to at or above it), `False` a downcrossing (from
      above to at or below), `None` either.
    - A crossing happens between two consecutive finite saved values, the first on the near side of `level`:
      a series that starts past `level` (above it for an upcrossing, below for a downcrossing) has crossed
      nothing there, and its first crossing is the first one after it comes back to the near side.
    - Linear interpolation between the two saved points that bracket the crossing; its error is of the order
      of the save spacing times the curvature, so save densely around the event for a sharp time. Across
      non-finite saved values there is no interpolation: the time is that of the finite point past `level`.

    **Returns:** the time (float); `ts[0]` if the first finite value equals `level` exactly; `nan` if the
    series never crosses `level` in `direction` (also when it lies past `level` from its first saved point on,
    or has no finite value).

    **Example** (T1 of a co-occurrence record, the first time with zero training error):
    `event_time(record, "min_margin", 0.0, direction=True)`.
    """
    if not any(direction is v for v in (None, True, False)):
        raise ValueError(f"direction must be None, True or False, got {direction!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)) \
            or not math.isfinite(level):
        raise ValueError(f"level must be a finite real number, got {level!r}")
    ts, ys = _series(record, name)
    g = ys - float(level)
    finite = np.flatnonzero(np.isfinite(g))
    if finite.size == 0:
        return math.nan
    gf = g[finite]
    if gf[0] == 0:
        return float(ts[finite[0]])
    below, above = gf[:-1] < 0, gf[:-1] > 0
    up = below & (gf[1:] >= 0)
    down = above & (gf[1:] <= 0)
    hits = np.flatnonzero(up if direction is True else down if direction is False else up | down)
    if hits.size == 0:
        return math.nan
    i0, i1 = int(finite[hits[0]]), int(finite[hits[0] + 1])
    g0, g1 = g[i0], g[i1]
    if i1 != i0 + 1:
        return float(ts[i1])
    return float(ts[i0] + (ts[i1] - ts[i0]) * (0.0 - g0) / (g1 - g0))
