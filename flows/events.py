"""Events: stop a solve at a condition, or locate it without stopping (`Event(stop=False)`).

A stopping event is a `diffrax.Event` inside the compiled solve, its crossing located by bisection on the
solver's dense interpolant of the step where it triggered (`BracketBisection`, which also works under vmap;
the step brackets the root, and bisection reaches one float32 ulp where Newton may not). A non-stopping event
reruns the same compiled program from the event state with the event switched off, and the two runs are
merged on the host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .trajectory import EVENT, OK

__all__ = ["BracketBisection", "Event", "continue_after_event"]


@dataclasses.dataclass(frozen=True)
class Event:
    """A condition at which to stop the solve (or, with `stop=False`, only to record the time).

    **Arguments:**

    - `condition`: `f(t, y, args) -> scalar`. A real value triggers when it changes sign and its zero is
      located by bisection on the solver's dense interpolant of that step (to 1e-14 relative); a boolean
      triggers at the end of the first step on which it is true.
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


class BracketBisection(optx.Bisection):
    """Bisection on the bracket [lower, upper] that diffrax hands the root finder (the step of the event).

    Two changes to `optimistix.Bisection`, both for the vmapped solve, where every member runs the root find
    (diffrax's `lax.cond` becomes a select) and a member whose event did not trigger is handed the function
    `upper - t`, whose root is the bracket's end:
    - the orientation is detected from the two ends without `Bisection`'s "root not contained" error
      (`upper - t` is 0 at the upper end; a tie goes to the upper end);
    - it stops when the bracket is smaller than `atol + rtol |t|` or can no longer be halved in the time's
      dtype (float32: one ulp), not only when |f| < atol as well: the event time is what is wanted, to that
      tolerance, whatever the scale of the condition.
    """

    def init(
        self, fn: Callable, y: Any, args: Any, options: dict, f_struct: Any, aux_struct: Any, tags: frozenset
    ) -> Any:
        fn, f_struct = _summed(fn), _scalar_struct(f_struct)
        lower = jnp.asarray(options["lower"], f_struct.dtype)
        upper = jnp.asarray(options["upper"], f_struct.dtype)
        lower_val, _ = fn(lower, args)
        upper_val, _ = fn(upper, args)
        flip = (lower_val > upper_val) | ((lower_val == upper_val) & (lower_val >= 0))
        # mypy reads optimistix's `norm` class attribute as an init field
        plain: optx.Bisection = optx.Bisection(self.rtol, self.atol, flip=True)  # type: ignore[call-arg]
        state = plain.init(fn, y, args, options, f_struct, aux_struct, tags)
        return eqx.tree_at(lambda st: st.flip, state, flip)

    def step(self, fn: Callable, y: Any, args: Any, options: dict, state: Any, tags: frozenset) -> Any:
        return super().step(_summed(fn), y, args, options, state, tags)

    def terminate(self, fn: Callable, y: Any, args: Any, options: dict, state: Any, tags: frozenset) -> Any:
        scale = self.atol + self.rtol * jnp.abs(y)
        # or the bracket cannot shrink any more in this dtype (float32 states: 1e-14 is below one ulp)
        mid = state.lower + 0.5 * (state.upper - state.lower)
        stuck = (mid == state.lower) | (mid == state.upper)
        return (jnp.abs(state.lower - state.upper) < scale) | stuck, optx.RESULTS.successful


def _summed(fn):
    """diffrax hands one value per condition (event, blow-up guard), the ones that did not trigger set to 0:
    their sum is the triggered condition's value (bisection needs a scalar)."""

    def scalar(t, args):
        value, aux = fn(t, args)
        return sum(jax.tree_util.tree_leaves(value)), aux

    return scalar


def _scalar_struct(f_struct):
    leaves = jax.tree_util.tree_leaves(f_struct)
    return jax.ShapeDtypeStruct((), jnp.result_type(*[leaf.dtype for leaf in leaves]))


def continue_after_event(fn: Callable, raw: dict, args: Any, t0: Any, t1: Any, ts: Any, batched: bool) -> dict:
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
    later = cont[..., None] & ((ts_np > (t_ev[..., None] if batched else t_ev)) | ~np.isfinite(np.asarray(raw["ts"])))

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
