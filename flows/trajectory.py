"""`Trajectory`, the record every solve returns, `FlowError`, and the status codes and messages of a solve.

Status codes are computed inside the compiled solve (so that they vmap) and decoded to strings here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

__all__ = ["STATUS_NAMES", "FlowError", "Trajectory"]

OK, EVENT, MAX_STEPS, DT_MIN, NONFINITE, DIVERGED, OTHER = range(7)
STATUS_NAMES = ("ok", "event", "max_steps", "dt_min", "nonfinite", "diverged", "failed")
#: codes of a solve that stopped before its horizon without an event (the vector field is probed there)
STUCK = (MAX_STEPS, DT_MIN, OTHER)


class FlowError(RuntimeError):
    """A flow could not be integrated to its horizon; the message says what happened and where.

    The partial `Trajectory` (a network record for `flows.training.TrainingError`) is `error.trajectory`.
    """

    def __init__(self, message: str, trajectory: Any = None):
        super().__init__(message)
        self.trajectory = trajectory


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """The record of one solve (or, from `solve_batch`, of many: every array gains a leading batch axis).

    - `ts`: saved times, shape `(n,)`; entries after a stopping event are `inf`.
    - `ys`: saved states (a pytree like `y0`, each leaf with leading axis `n`), or `None` when only
      observables were saved.
    - `observables`: dict name -> array of leading shape `(n,)`, computed at the saved times.
    - `status`: `"ok"`, `"event"`, `"max_steps"`, `"dt_min"`, `"nonfinite"`, `"diverged"` or `"failed"`
      (a tuple of these for a batch); `message`: what happened, in words.
    - `t_final`: the time the solve reached; `t_event`: the located event time (`nan` if none occurred).
    - `num_steps`, `num_accepted_steps`, `num_rejected_steps`: solver counters.
    - `compile_s`, `run_s`: seconds spent compiling (0 when a cached compilation was reused) and running.
    - `solver`, `rtol`, `atol`: how it was solved (`rtol = atol = nan` for an SDE's constant steps).
    - `segments`: which solver ran over which interval, `((solver, t_start, t_end), ...)` in order (one
      segment unless `solver="auto"` switched; a tuple of these per member of a batch).
    """

    ts: Any
    ys: Any
    observables: dict
    status: str | tuple
    message: str | tuple
    t_final: Any
    t_event: Any
    num_steps: Any
    num_accepted_steps: Any
    num_rejected_steps: Any
    compile_s: float
    run_s: float
    solver: str
    rtol: float
    atol: float
    segments: tuple = ()

    @property
    def ok(self) -> bool:
        """True when every solve reached its horizon (a stopping event counts as success)."""
        statuses = (self.status,) if isinstance(self.status, str) else self.status
        return all(s in ("ok", "event") for s in statuses)

    def __getitem__(self, i) -> Trajectory:
        """Member `i` (or the members of a slice `i`) of a batched trajectory."""
        if isinstance(self.status, str):
            raise TypeError("indexing is only defined for a batched Trajectory (from solve_batch)")
        take = lambda x: jax.tree_util.tree_map(lambda a: a[i], x)
        per_member = "ts status message t_final t_event num_steps num_accepted_steps num_rejected_steps".split()
        return dataclasses.replace(
            self,
            ys=None if self.ys is None else take(self.ys),
            observables=take(self.observables),
            segments=self.segments[i] if self.segments else self.segments,
            **{name: getattr(self, name)[i] for name in per_member},
        )


def message(
    code, t_final, t1, y_end_max, max_steps, event, blowup, solver, rhs_finite=True, *, t_bad=math.nan, sde=False
):
    """The status `code` of a solve in words: what happened, where, and what to try. `t_bad`: the first saved
    time with a non-finite value (`nan`/`inf` if none); `sde`: the solve is an SDE's (constant steps)."""
    name = STATUS_NAMES[code]
    if name == "nonfinite" and not rhs_finite:
        return (
            f"the vector field returned NaN or inf near t = {t_final:.6g} (the state there is "
            f"{'finite' if math.isfinite(y_end_max) else 'not finite'}, max |y| = {y_end_max:.3g}); "
            f"the solver could not take a step ({name})"
        )
    if name == "ok":
        return "ok: integrated to t1"
    if name == "event":
        return f"event '{event.name}' at t = {t_final:.10g}"
    if name == "max_steps":
        where = f"max_steps = {max_steps} reached at t = {t_final:.6g} before t1 = {t1:.6g}"
        if sde:
            return where
        if math.isfinite(y_end_max) and y_end_max > 1e4:
            return (
                f"{where} with max |y| = "
                f"{y_end_max:.3g}: if the state grows without bound there, this is a finite-time blow-up of the "
                f"flow and a stiff solver does not help: end the solve before it (a smaller t1), lower "
                f"`blowup` to stop there, or check the rates and the initial scale; otherwise increase "
                f"max_steps or loosen rtol/atol"
            )
        stiff = (
            "solver 'auto' switched to kvaerno5 wherever it found the flow stiff"
            if solver == "auto"
            else f"if the flow is stiff (fast decaying modes), use solver 'auto' or 'kvaerno5' instead of {solver}"
        )
        return f"{where} (max |y| = {y_end_max:.3g}); increase max_steps, loosen rtol/atol, or, {stiff}"
    if name == "dt_min":
        return f"step size collapsed at t = {t_final:.6g} (max |y| = {y_end_max:.3g})"
    if name == "nonfinite":
        if sde:
            where = f"by t = {t_bad:.6g}" if math.isfinite(t_bad) else f"at t1 = {t1:.6g}"
            return (
                f"non-finite state (NaN or inf) {where} (max |y| at the end = {y_end_max:.3g}); reduce dt or the noise"
            )
        return f"non-finite state (NaN or inf) by t = {t_bad if math.isfinite(t_bad) else t_final:.6g}"
    if name == "diverged":
        return (
            f"diverged: max |y| passed blowup = {blowup:.3g} at t = {t_final:.6g} "
            f"(a finite-time blow-up or an unstable flow, not a solver failure: no solver or tolerance fixes "
            f"it; end the solve before t = {t_final:.6g}, check the rates and the initial scale, or raise "
            f"`blowup` if values this large are expected)"
        )
    return f"solver failed at t = {t_final:.6g}"


def decode(raw, options, t1, batched, compile_s, run_s, segments=()) -> Trajectory:
    """The raw outputs of a compiled solve (and its continuations) as a `Trajectory`; `segments` as in
    `Trajectory`."""
    saved = raw["saved"]
    ys = saved.get("__y__") if options["save_states"] else None
    obs = {k: v for k, v in saved.items() if k != "__y__"}
    codes = np.atleast_1d(np.asarray(raw["code"]))
    t_final = np.atleast_1d(np.asarray(raw["t_final"]))
    t_bad = np.atleast_1d(np.asarray(raw.get("t_bad", np.full(codes.shape, np.nan))))
    ymax = np.atleast_1d(np.asarray(raw["y_end_max"]))
    rhs_ok = np.atleast_1d(np.asarray(raw["rhs_finite"]))
    codes = np.where(np.isin(codes, STUCK) & ~rhs_ok, NONFINITE, codes)
    statuses = tuple(STATUS_NAMES[int(c)] for c in codes)
    settings = (options["max_steps"], options["event"], options["blowup"], options["solver"])
    sde = options.get("noise") is not None
    messages = tuple(
        message(int(c), float(tf), float(t1), float(ym), *settings, bool(ok), t_bad=float(tb), sde=sde)
        for c, tf, ym, ok, tb in zip(codes, t_final, ymax, rhs_ok, t_bad, strict=True)
    )
    return Trajectory(
        ts=raw["ts"],
        ys=ys,
        observables=obs,
        status=statuses if batched else statuses[0],
        message=messages if batched else messages[0],
        t_final=raw["t_final"],
        t_event=raw["t_event"],
        num_steps=raw["num_steps"],
        num_accepted_steps=raw["num_accepted_steps"],
        num_rejected_steps=raw["num_rejected_steps"],
        compile_s=compile_s,
        run_s=run_s,
        solver=options["solver"],
        rtol=options["rtol"],
        atol=options["atol"],
        segments=segments,
    )
