"""Events: stop a solve at a condition, or locate it without stopping (`Event(stop=False)`).

A stopping event is a `diffrax.Event` inside the compiled solve; its crossing is located on the solver's
dense interpolant by Newton's method (`optimistix.Newton`; bisection compiles about 15% faster but
cannot be used under vmap, where members whose event did not trigger have no bracketed root). A
non-stopping event reruns
the **same** compiled program from the event state with the event switched off; the two runs are merged on
the host with numpy (eager JAX operations here would each compile a program of their own on first use).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .trajectory import EVENT, OK

__all__ = ["Event", "continue_after_event"]


@dataclasses.dataclass(frozen=True)
class Event:
    """A condition at which to stop the solve (or, with `stop=False`, only to record the time).

    **Arguments:**

    - `condition`: `f(t, y, args) -> scalar`. A real value triggers when it changes sign and its zero is
      located by a Newton root finder on the solver's dense interpolant; a boolean triggers at the end of the
      first step on which it is true.
    - `direction`: `None` (either crossing), `True` (upcrossing only) or `False` (downcrossing only).
    - `stop`: if `True` the solve ends at the event (`status="event"`); if `False` the solve is continued
      past it and only `Trajectory.t_event` is recorded.
    - `name`: used in messages.
    """

    condition: Callable[..., Any]
    direction: bool | None = None
    stop: bool = True
    name: str = "event"

    def __post_init__(self):
        if not callable(self.condition):
            raise ValueError("Event.condition must be callable f(t, y, args)")
        if self.direction not in (None, True, False):
            raise ValueError("Event.direction must be None, True or False")


def continue_after_event(fn, raw, args, t0, t1, ts, batched):
    """Event with stop=False: rerun the compiled program `fn` from the event state with the event off.

    Members without an event (or with the event at t1) keep their first result; grid points after the event
    time are taken from the continuation. Works for a single solve and, elementwise, for a batch. The merge
    runs in numpy on the host; the returned arrays are numpy arrays.
    """
    code = np.asarray(raw["code"])
    t_ev = np.asarray(raw["t_final"])
    t1_f = float(t1)
    cont = (code == EVENT) & (t_ev < t1_f)
    at_end = (code == EVENT) & ~(t_ev < t1_f)
    raw = dict(raw, code=np.where(at_end, OK, code))
    if not np.any(cont):
        return raw
    dtype = np.asarray(t0).dtype
    ts_np = np.asarray(ts)
    # Members that do not continue get a harmless tiny interval; their results are discarded.
    start = np.where(cont, t_ev, t1_f - 1e-9 * (t1_f - np.asarray(t0))).astype(dtype)
    ts2 = np.clip(ts_np, start[..., None] if batched else start, t1_f).astype(ts_np.dtype)
    second = fn(raw["y_end"], args, start, t1, ts2, np.zeros(cont.shape, bool))
    # after the event, and any point the first run did not save (an event at t0 saves nothing there)
    later = cont[..., None] & ((ts_np > (t_ev[..., None] if batched else t_ev))
                               | ~np.isfinite(np.asarray(raw["ts"])))

    def pick(a, b, mask):
        a, b = np.asarray(a), np.asarray(b)
        return np.where(mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), b, a)

    out = dict(raw)
    out["saved"] = jax.tree_util.tree_map(lambda a, b: pick(a, b, later), raw["saved"], second["saved"])
    out["ts"] = np.where(later, ts_np, np.asarray(raw["ts"]))
    for key in ("code", "t_final", "y_end_max"):
        out[key] = np.where(cont, np.asarray(second[key]), np.asarray(raw[key]))
    out["y_end"] = jax.tree_util.tree_map(lambda a, b: pick(a, b, cont), raw["y_end"], second["y_end"])
    for key in ("num_steps", "num_accepted_steps", "num_rejected_steps"):
        out[key] = np.asarray(raw[key]) + np.where(cont, np.asarray(second[key]), 0)
    return out
