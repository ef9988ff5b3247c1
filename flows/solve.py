"""`solve`: the one wrapper over `diffrax.diffeqsolve` that every flow in this library goes through.

It returns a `Trajectory` record in the spirit of scipy's `OdeResult`: saved times and states, observables
computed on save, a `status` with a human-readable `message`, step counts, and compile/run timings measured
separately (ahead-of-time lowering, then a timed call).

Failures are never silent. A non-finite state, a state whose max-norm passes `blowup`, an exhausted
`max_steps` budget or a step size that collapsed give `status != "ok"` with a message saying what happened
and at which time; the single (non-batched) call then raises `FlowError` unless `throw=False`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

logger = logging.getLogger(__name__)

__all__ = [
    "SOLVERS",
    "Event",
    "FlowError",
    "Trajectory",
    "linear_grid",
    "log_grid",
    "solve",
    "solve_batch",
]

SOLVERS: dict[str, type[diffrax.AbstractSolver]] = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
    "heun": diffrax.Heun,
    "euler": diffrax.Euler,
}
#: Solvers without an embedded error estimate: they need `constant_step=True`.
_FIXED_STEP_ONLY = ("euler",)

# Status codes computed inside the compiled solve (so that they vmap), decoded to strings afterwards.
_OK, _EVENT, _MAX_STEPS, _DT_MIN, _NONFINITE, _DIVERGED, _OTHER = range(7)
_STATUS_NAMES = ("ok", "event", "max_steps", "dt_min", "nonfinite", "diverged", "failed")


class FlowError(RuntimeError):
    """A flow could not be integrated to its horizon; the message says what happened and where.

    The partial `Trajectory` is available as `error.trajectory`.
    """

    def __init__(self, message: str, trajectory: Trajectory | None = None):
        super().__init__(message)
        self.trajectory = trajectory


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
    - `solver`, `rtol`, `atol`: how it was solved.
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

    @property
    def ok(self) -> bool:
        """True when every solve reached its horizon (a stopping event counts as success)."""
        statuses = (self.status,) if isinstance(self.status, str) else self.status
        return all(s in ("ok", "event") for s in statuses)

    def __getitem__(self, i: int) -> Trajectory:
        """Member `i` of a batched trajectory."""
        if isinstance(self.status, str):
            raise TypeError("indexing is only defined for a batched Trajectory (from solve_batch)")
        take = lambda x: jax.tree_util.tree_map(lambda a: a[i], x)
        return dataclasses.replace(
            self,
            ts=self.ts[i],
            ys=None if self.ys is None else take(self.ys),
            observables=take(self.observables),
            status=self.status[i],
            message=self.message[i],
            t_final=self.t_final[i],
            t_event=self.t_event[i],
            num_steps=self.num_steps[i],
            num_accepted_steps=self.num_accepted_steps[i],
            num_rejected_steps=self.num_rejected_steps[i],
        )


def linear_grid(t0: float, t1: float, num: int) -> np.ndarray:
    """`num` equally spaced save times from `t0` to `t1` inclusive."""
    _check_horizon(t0, t1)
    if int(num) < 2:
        raise ValueError(f"num must be >= 2, got {num}")
    return np.linspace(float(t0), float(t1), int(num))


def log_grid(t0: float, t1: float, num: int, first: float | None = None) -> np.ndarray:
    """`t0`, then `num - 1` log-spaced times from `t0 + first` to `t1`.

    `first` defaults to `1e-6 * (t1 - t0)`. Log grids are the natural way to look at flows whose phases
    live on different time scales (scan then snap, phase 1 then phase 2).
    """
    _check_horizon(t0, t1)
    if int(num) < 2:
        raise ValueError(f"num must be >= 2, got {num}")
    span = float(t1) - float(t0)
    first = 1e-6 * span if first is None else float(first)
    if not (0.0 < first < span):
        raise ValueError(f"first must lie in (0, t1 - t0) = (0, {span}), got {first}")
    rest = np.geomspace(first, span, int(num) - 1) + float(t0)
    rest[-1] = float(t1)
    return np.concatenate([[float(t0)], rest])


def _check_horizon(t0, t1):
    for name, value in (("t0", t0), ("t1", t1)):
        if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if not float(t1) > float(t0):
        raise ValueError(f"t1 must be greater than t0, got t0={t0}, t1={t1}")


def _validate(solver, rtol, atol, t0, t1, ts, max_steps, blowup, dt0):
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {sorted(SOLVERS)}, got {solver!r}")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    _check_horizon(t0, t1)
    if not isinstance(max_steps, int) or max_steps <= 0:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if blowup is not None and not (isinstance(blowup, (int, float)) and blowup > 0):
        raise ValueError(f"blowup must be a positive number or None, got {blowup!r}")
    if dt0 is not None and not (isinstance(dt0, (int, float)) and dt0 > 0):
        raise ValueError(f"dt0 must be a positive number or None, got {dt0!r}")
    ts = np.asarray(ts, dtype=float)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError("ts must be finite")
    if np.any(np.diff(ts) < 0):
        raise ValueError("ts must be non-decreasing")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"ts must lie within [t0, t1] = [{t0}, {t1}], got [{ts[0]}, {ts[-1]}]")
    return ts


def _max_abs(y):
    leaves = jax.tree_util.tree_leaves(y)
    return jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in leaves]))


def _all_finite(y):
    leaves = jax.tree_util.tree_leaves(y)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def _build(vector_field, *, solver, rtol, atol, dt0, max_steps, observables, save_states, event,
           blowup, progress, constant_step=False):
    """Build the function (y0, args, t0, t1, ts) -> raw outputs that is jitted (and possibly vmapped)."""
    term = diffrax.ODETerm(vector_field)
    solver_obj = SOLVERS[solver]()
    controller = diffrax.ConstantStepSize() if constant_step else diffrax.PIDController(rtol=rtol, atol=atol)
    obs = observables if callable(observables) else dict(observables or {})

    def save_fn(t, y, args):
        out = dict(obs(t, y, args)) if callable(obs) else {name: fn(t, y, args) for name, fn in obs.items()}
        if save_states:
            out["__y__"] = y
        return out

    def final_fn(t, y, args):
        return y

    conds = {}
    directions = {}
    if event is not None:

        def event_cond(t, y, args, *, event_on, **kw):
            c = event.condition(t, y, args)
            if jnp.issubdtype(jnp.result_type(c), jnp.bool_):
                return c & event_on
            return jnp.where(event_on, c, jnp.ones_like(c))  # switched off: never changes sign

        conds["event"] = event_cond
        directions["event"] = event.direction
    if blowup is not None:
        conds["blowup"] = lambda t, y, args, **kw: ~(_max_abs(y) < blowup)  # also true for NaN
        directions["blowup"] = None
    progress_meter = diffrax.TqdmProgressMeter() if progress else diffrax.NoProgressMeter()

    def code_of(sol):
        R = diffrax.RESULTS
        mask = sol.event_mask if sol.event_mask is not None else {}
        blown = mask.get("blowup", jnp.array(False))
        hit = mask.get("event", jnp.array(False))
        return jnp.select(
            [
                sol.result == R.successful,
                (sol.result == R.event_occurred) & blown,
                (sol.result == R.event_occurred) & hit,
                sol.result == R.max_steps_reached,
                sol.result == R.dt_min_reached,
            ],
            [_OK, _DIVERGED, _EVENT, _MAX_STEPS, _DT_MIN],
            default=_OTHER,
        ), hit

    def run(y0, args, t0, t1, ts, event_on):
        """One diffeqsolve; `event_on` (traced) switches the user event off for continuations."""
        dx_event = None
        if conds:
            bound = {k: (functools.partial(f, event_on=event_on) if k == "event" else f) for k, f in conds.items()}
            dx_event = diffrax.Event(
                bound,
                root_finder=optx.Newton(rtol=1e-12, atol=1e-12) if event is not None else None,
                direction=directions,
            )
        sol = diffrax.diffeqsolve(
            term,
            solver_obj,
            t0=t0,
            t1=t1,
            dt0=dt0,
            y0=y0,
            args=args,
            saveat=diffrax.SaveAt(
                subs=[diffrax.SubSaveAt(ts=ts, fn=save_fn), diffrax.SubSaveAt(t1=True, fn=final_fn)]
            ),
            stepsize_controller=controller,
            max_steps=max_steps,
            event=dx_event,
            throw=False,
            progress_meter=progress_meter,
        )
        code, hit = code_of(sol)
        t_end = sol.ts[1][-1]  # the SubSaveAt(t1=True): where the solve stopped
        y_end = jax.tree_util.tree_map(lambda a: a[-1], sol.ys[1])
        saved, saved_ts = sol.ys[0], sol.ts[0]
        reached = saved_ts <= t_end
        leaves = jax.tree_util.tree_leaves(saved)
        finite_saved = jnp.all(jnp.stack([
            jnp.all(jnp.where(reached.reshape((-1,) + (1,) * (a.ndim - 1)), jnp.isfinite(a), True))
            for a in leaves
        ])) if leaves else jnp.array(True)
        code = jnp.where((code == _OK) & ~(finite_saved & _all_finite(y_end)), _NONFINITE, code)
        return {
            "ts": saved_ts,
            "saved": saved,
            "code": code,
            "t_final": t_end,
            "t_event": jnp.where(hit, t_end, jnp.nan),
            "y_end": y_end,
            "y_end_max": _max_abs(y_end),
            "num_steps": sol.stats["num_steps"],
            "num_accepted_steps": sol.stats["num_accepted_steps"],
            "num_rejected_steps": sol.stats["num_rejected_steps"],
        }

    return run


def _continue_after_event(fn, raw, args, t0, t1, ts, batched):
    """Event with stop=False: rerun the same compiled program from the event state with the event off.

    Members without an event (or with the event at t1) keep their first result; grid points after the event
    time are taken from the continuation. Works for a single solve and, elementwise, for a batch.
    """
    t_ev = raw["t_final"]
    cont = (raw["code"] == _EVENT) & (t_ev < t1)
    at_end = (raw["code"] == _EVENT) & ~(t_ev < t1)
    raw = dict(raw, code=jnp.where(at_end, _OK, raw["code"]))
    if not bool(jnp.any(cont)):
        return raw
    # Members that do not continue get a harmless tiny interval; their results are discarded.
    start = jnp.where(cont, t_ev, t1 - 1e-9 * (t1 - t0))
    ts2 = jnp.clip(ts, start[..., None] if batched else start, t1)
    off = jnp.zeros_like(cont)
    second = fn(raw["y_end"], args, start, t1, ts2, off)
    later = cont[..., None] & (ts > (t_ev[..., None] if batched else t_ev))

    def pick(a, b, mask):
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - mask.ndim)), b, a)

    out = dict(raw)
    out["saved"] = jax.tree_util.tree_map(lambda a, b: pick(a, b, later), raw["saved"], second["saved"])
    out["ts"] = jnp.where(later, ts, raw["ts"])
    for key in ("code", "t_final", "y_end_max"):
        out[key] = jnp.where(cont, second[key], raw[key])
    out["y_end"] = jax.tree_util.tree_map(lambda a, b: pick(a, b, cont), raw["y_end"], second["y_end"])
    for key in ("num_steps", "num_accepted_steps", "num_rejected_steps"):
        out[key] = raw[key] + jnp.where(cont, second[key], 0)
    return out


_COMPILED: dict = {}
_CACHE_SIZE = 64


def _signature(tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    # the sharding is part of the program: a mesh-sharded y0 must not reuse a single-device compilation
    return treedef, tuple((np.shape(x), jnp.result_type(x).name, getattr(x, "sharding", None)) for x in leaves)


def _compiled(key, build, example_args):
    """Compile `build()` ahead of time for `example_args`; cached on `key`. Returns (fn, compile_s)."""
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit, 0.0
    start = time.perf_counter()
    fn = jax.jit(build()).lower(*example_args).compile()
    compile_s = time.perf_counter() - start
    if len(_COMPILED) >= _CACHE_SIZE:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = fn
    return fn, compile_s


def _message(code, t_final, t1, y_end_max, max_steps, event, blowup, solver, rhs_finite=True):
    name = _STATUS_NAMES[code]
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
        return (
            f"max_steps = {max_steps} reached at t = {t_final:.6g} before t1 = {t1:.6g} "
            f"(max |y| = {y_end_max:.3g}); increase max_steps, loosen rtol/atol, "
            f"or use a stiff solver (kvaerno5) instead of {solver}"
        )
    if name == "dt_min":
        return f"step size collapsed at t = {t_final:.6g} (max |y| = {y_end_max:.3g})"
    if name == "nonfinite":
        return f"non-finite state (NaN or inf) by t = {t_final:.6g}"
    if name == "diverged":
        return (
            f"diverged: max |y| passed blowup = {blowup:.3g} at t = {t_final:.6g} "
            f"(finite-time blow-up or an unstable flow)"
        )
    return f"solver failed at t = {t_final:.6g}"


def _prepare(vector_field, y0, t0, t1, ts, args, solver, rtol, atol, dt0, max_steps, observables,
             save_states, event, blowup, progress, constant_step=False):
    if not callable(vector_field):
        raise ValueError("vector_field must be callable f(t, y, args)")
    if not isinstance(constant_step, bool):
        raise ValueError(f"constant_step must be True or False, got {constant_step!r}")
    if constant_step:
        if dt0 is None:
            raise ValueError("dt0 (the step size) must be given with constant_step=True")
        needed = math.ceil((float(t1) - float(t0)) / float(dt0) - 1e-9) if dt0 and dt0 > 0 else 0
        if isinstance(max_steps, int) and needed > max_steps:
            raise ValueError(f"max_steps = {max_steps} is too small for constant steps dt0 = {dt0} over "
                             f"[{t0}, {t1}] ({needed} steps needed)")
    elif solver in _FIXED_STEP_ONLY:
        raise ValueError(f"solver {solver!r} has no error estimate: pass constant_step=True and dt0")
    if ts is None:
        ts = np.array([float(t1)])
    ts = _validate(solver, rtol, atol, t0, t1, ts, max_steps, blowup, dt0)
    if observables is not None and not callable(observables):
        if not isinstance(observables, Mapping) or not all(callable(f) for f in observables.values()):
            raise ValueError("observables must be a mapping name -> f(t, y, args), or one function "
                             "f(t, y, args) -> dict of named arrays")
        if "__y__" in observables:
            raise ValueError("observables may not use the reserved name '__y__'")
    if not save_states and not observables:
        raise ValueError("save_states=False needs at least one observable to save")
    if event is not None and not isinstance(event, Event):
        raise ValueError("event must be a flows.Event")
    leaves = jax.tree_util.tree_leaves(y0)
    if not leaves:
        raise ValueError("y0 must contain at least one array")
    dtype = jnp.result_type(*leaves)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"y0 must be floating point, got dtype {dtype}")
    ts_arr = jnp.asarray(ts, dtype=dtype)
    t0_arr = jnp.asarray(t0, dtype=dtype)
    t1_arr = jnp.asarray(t1, dtype=dtype)
    options = dict(
        solver=solver, rtol=float(rtol), atol=float(atol), dt0=dt0, max_steps=int(max_steps),
        observables=observables, save_states=save_states, event=event, blowup=blowup,
        progress=progress, constant_step=constant_step,
    )
    key_opts = (
        vector_field, solver, float(rtol), float(atol), dt0, int(max_steps),
        observables if callable(observables) else tuple(sorted((observables or {}).items(), key=lambda kv: kv[0])),
        save_states, event, blowup,
        progress, constant_step,
    )
    return ts_arr, t0_arr, t1_arr, options, key_opts


def _execute(vector_field, options, key_opts, call_args, *, in_axes):
    """Compile (cached) and run; continue after a non-stopping event; decode into a Trajectory."""
    batched = in_axes is not None
    key = ("batch" if batched else "single", in_axes, key_opts, _signature(call_args))

    def build():
        run = _build(vector_field, **options)
        return jax.vmap(run, in_axes=in_axes) if batched else run

    fn, compile_s = _compiled(key, build, call_args)
    start = time.perf_counter()
    raw = fn(*call_args)
    event = options["event"]
    if event is not None and not event.stop:
        _, args, t0, t1, ts, _ = call_args
        raw = _continue_after_event(fn, raw, args, t0, t1, ts, batched)
    raw = jax.block_until_ready(raw)
    run_s = time.perf_counter() - start
    raw = dict(raw, rhs_finite=_probe_rhs(vector_field, raw, call_args, in_axes))
    traj = _decode(raw, options, float(call_args[3]), batched, compile_s, run_s)
    logger.debug("solve: %s (compile %.3f s, run %.3f s)", traj.status, compile_s, run_s)
    return traj


def _probe_rhs(vector_field, raw, call_args, in_axes):
    """Is the vector field itself non-finite where a stuck solve stopped (at or just after t_final)?

    Evaluated only when some solve ended stuck (max_steps, dt_min, failed), in a separate small program, so
    that the solve's own program does not trace the vector field for this diagnosis.
    """
    codes = np.atleast_1d(np.asarray(raw["code"]))
    if not np.any(np.isin(codes, (_MAX_STEPS, _DT_MIN, _OTHER))):
        return np.ones(codes.shape, bool)
    args, t1 = call_args[1], call_args[3]

    def probe(t_end, y_end, a):
        t_probe = t_end + 1e-9 * jnp.maximum(t1 - t_end, 0.0)
        return _all_finite(vector_field(t_end, y_end, a)) & _all_finite(vector_field(t_probe, y_end, a))

    fn = jax.vmap(probe, in_axes=(0, 0, in_axes[1])) if in_axes is not None else probe
    return np.atleast_1d(np.asarray(jax.jit(fn)(raw["t_final"], raw["y_end"], args)))


def _decode(raw, options, t1, batched, compile_s, run_s):
    saved = raw["saved"]
    ys = saved.get("__y__") if options["save_states"] else None
    obs = {k: v for k, v in saved.items() if k != "__y__"}
    codes = np.atleast_1d(np.asarray(raw["code"]))
    t_final = np.atleast_1d(np.asarray(raw["t_final"]))
    ymax = np.atleast_1d(np.asarray(raw["y_end_max"]))
    rhs_ok = np.atleast_1d(np.asarray(raw["rhs_finite"]))
    stuck = (_MAX_STEPS, _DT_MIN, _OTHER)
    codes = np.where(np.isin(codes, stuck) & ~rhs_ok, _NONFINITE, codes)
    statuses = tuple(_STATUS_NAMES[int(c)] for c in codes)
    messages = tuple(
        _message(int(c), float(tf), float(t1), float(ym), options["max_steps"], options["event"],
                 options["blowup"], options["solver"], bool(ok))
        for c, tf, ym, ok in zip(codes, t_final, ymax, rhs_ok, strict=True)
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
    )


def solve(
    vector_field: Callable,
    y0,
    *,
    t1: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args=None,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int = 100_000,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    event: Event | None = None,
    blowup: float | None = 1e10,
    progress: bool = False,
    throw: bool = True,
    constant_step: bool = False,
) -> Trajectory:
    """Integrate `dy/dt = vector_field(t, y, args)` from `t0` to `t1` with diffrax.

    **Arguments:**

    - `vector_field`: `f(t, y, args)` written with array operations; `y` is an array or small pytree.
    - `y0`: the initial state; its dtype sets the precision of the solve.
    - `t1`, `t0`: the horizon.
    - `ts`: save times within `[t0, t1]` (see `linear_grid`, `log_grid`); default: only `t1`.
    - `args`: parameters passed to `vector_field` (arrays are traced, so new values do not recompile).
    - `solver`: `"tsit5"` (default), `"dopri5"`, `"dopri8"` (tight tolerances), `"kvaerno5"` (stiff),
      `"heun"`, `"euler"` (explicit Euler; constant steps only: with step eta it is gradient descent).
    - `rtol`, `atol`: tolerances of the PID step-size controller.
    - `constant_step`: take constant steps of size `dt0` (`diffrax.ConstantStepSize`) instead of adaptive
      ones; `dt0` is then required and `max_steps` must cover (t1 - t0) / dt0.
    - `max_steps`: the step budget; exhausting it is reported as `status="max_steps"`.
    - `observables`: `{name: g(t, y, args)}` computed at every saved time, or one function
      `g(t, y, args) -> {name: array}` (when the observables share an expensive intermediate).
    - `save_states`: set `False` to save only the observables (bounded memory for big states).
    - `event`: a `flows.Event` to stop at (or, with `stop=False`, to locate) a condition.
    - `blowup`: the solve stops with `status="diverged"` once `max|y|` passes this (`None` disables).
    - `progress`: show a tqdm progress bar over `[t0, t1]`.
    - `throw`: raise `FlowError` (carrying the partial trajectory) when the status is not ok/event.

    **Returns:** a `Trajectory`.

    **Raises:** `ValueError` for bad arguments (naming the argument); `FlowError` for a failed solve.
    """
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(
        vector_field, y0, t0, t1, ts, args, solver, rtol, atol, dt0, max_steps, observables,
        save_states, event, blowup, progress, constant_step,
    )
    call_args = (y0, args, t0_arr, t1_arr, ts_arr, jnp.asarray(True))
    traj = _execute(vector_field, options, key_opts, call_args, in_axes=None)
    if throw and not traj.ok:
        raise FlowError(f"flow failed: {traj.message}", traj)
    return traj


def solve_batch(
    vector_field: Callable,
    y0,
    *,
    t1: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args=None,
    batch_y0: bool = False,
    batch_args: bool = True,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int = 100_000,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    event: Event | None = None,
    blowup: float | None = 1e10,
    throw: bool = False,
) -> Trajectory:
    """A vmapped sweep: one compilation, one solve per member of the batch.

    `args` (if `batch_args`) and/or `y0` (if `batch_y0`) carry a leading batch axis on every array leaf.
    Every field of the returned `Trajectory` gains that leading axis; `status` and `message` become tuples,
    and `traj[i]` extracts member `i`. The batch does not raise unless `throw=True` (then `FlowError` lists
    the failed members); inspect `traj.status`.

    Other arguments as in `solve`.
    """
    if not (batch_y0 or batch_args):
        raise ValueError("solve_batch needs batch_y0=True or batch_args=True")
    sizes = set()
    if batch_args:
        leaves = jax.tree_util.tree_leaves(args)
        if not leaves:
            raise ValueError("batch_args=True but args has no array leaves to batch over")
        sizes |= {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if batch_y0:
        sizes |= {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(y0)}
    if None in sizes or len(sizes) != 1:
        raise ValueError(f"batched leaves of args/y0 must share one leading axis size, got {sizes}")
    example_y0 = jax.tree_util.tree_map(lambda a: a[0], y0) if batch_y0 else y0
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(
        vector_field, example_y0, t0, t1, ts, None, solver, rtol, atol, dt0, max_steps, observables,
        save_states, event, blowup, False,
    )
    # Everything but args (if unbatched) and t1 carries the batch axis, so that a continuation after an
    # event (other start times, other states) reuses the same compiled program.
    (size,) = sizes
    if not batch_y0:
        y0 = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (size,) + jnp.shape(a)), y0)
    call_args = (y0, args, jnp.full((size,), t0_arr), t1_arr, jnp.broadcast_to(ts_arr, (size,) + ts_arr.shape),
                 jnp.ones((size,), bool))
    in_axes = (0, 0 if batch_args else None, 0, None, 0, 0)
    traj = _execute(vector_field, options, key_opts, call_args, in_axes=in_axes)
    if throw and not traj.ok:
        bad = [i for i, s in enumerate(traj.status) if s not in ("ok", "event")]
        raise FlowError(f"{len(bad)} of {len(traj.status)} solves failed, e.g. member {bad[0]}: "
                        f"{traj.message[bad[0]]}", traj)
    return traj
