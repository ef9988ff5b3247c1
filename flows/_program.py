"""The compiled program behind `flows.solve`, `flows.solve_batch` and `flows.solve_sde`: one
`diffrax.diffeqsolve` of an ODE or an SDE (`flows._terms`) with save points, observables, an optional event
and a blow-up guard, status codes computed inside (so that it vmaps), and the in-process cache of
ahead-of-time compiled programs keyed on the options and the shapes, dtypes and shardings of the call.
"""

from __future__ import annotations

import functools
import math
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._stiffness import EXPLICIT, IMPLICIT, SWITCH_RESULT, CalmWatch, StiffnessWatch
from ._xla import compile_lowered, options_key
from .events import BracketBisection
from .trajectory import DIVERGED, DT_MIN, EVENT, MAX_STEPS, NONFINITE, OK, OTHER

__all__ = [
    "AUTO",
    "CALL_STEPS",
    "COMPILED",
    "SOLVERS",
    "SOLVER_NAMES",
    "SWITCH",
    "all_finite",
    "build",
    "compiled",
    "is_compiled",
    "max_abs",
    "saved_outputs",
    "signature",
]

SOLVERS: dict[str, type[diffrax.AbstractSolver]] = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    "kvaerno5": diffrax.Kvaerno5,
    "heun": diffrax.Heun,
    "euler": diffrax.Euler,
}
#: The default solver: Tsit5, switching to Kvaerno5 where the flow turns stiff and back (`flows._stiffness`).
AUTO = "auto"
#: Every solver name `flows.solve` takes.
SOLVER_NAMES = (AUTO, *SOLVERS)
#: The watching forms of the solvers `AUTO` runs.
WATCHED = {EXPLICIT: StiffnessWatch, IMPLICIT: CalmWatch}
#: The status code (internal, never decoded) of a call of `AUTO` that stopped to switch solvers.
SWITCH = 7
#: The most steps one call of a compiled solve takes (its compiled `max_steps`): a larger budget continues in
#: further calls (`flows._chunked`), so every budget from here up shares one program.
CALL_STEPS = 100_000
#: Solvers without an embedded error estimate: they need `constant_step=True`.
FIXED_STEP_ONLY = ("euler",)
#: tolerances of the bisection that locates an event time on the step's dense interpolant: it stops when the
#: bracket is narrower than atol + rtol |t| (about 45 halvings of a step of length 1)
EVENT_RTOL, EVENT_ATOL = 1e-14, 1e-14


def max_abs(y):
    """max |y| over every leaf of a pytree (in the widest dtype of its leaves); NaN where an entry is NaN (the
    YNNPACK reductions XLA 0.10 runs on CPU drop NaN entries from a max over a large leaf, so it is checked
    apart)."""
    leaves = jax.tree_util.tree_leaves(y)
    with jax.numpy_dtype_promotion("standard"):  # leaves of mixed precisions
        largest = jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in leaves]))
    nan = jnp.any(jnp.stack([jnp.any(jnp.isnan(leaf)) for leaf in leaves]))
    return jnp.where(nan, jnp.asarray(jnp.nan, largest.dtype), largest)


def all_finite(y):
    """True iff every entry of every leaf is finite."""
    leaves = jax.tree_util.tree_leaves(y)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def _packing(example):
    """(pack, unpack) for a pytree shaped like `example` (a tree of `ShapeDtypeStruct`s).

    `pack(tree)` concatenates the raveled leaves of each dtype into one 1-D array (a dict dtype -> array);
    `unpack(packed)` undoes it for arrays with any leading axes. Saving one array per dtype instead of one per
    observable keeps the save path of the compiled solve small (diffrax writes every saved leaf with a
    scatter of its own).
    """
    leaves, treedef = jax.tree_util.tree_flatten(example)
    dtypes = sorted({jnp.dtype(leaf.dtype).name for leaf in leaves})
    layout = []  # (dtype, start, stop, shape) per leaf
    offsets = dict.fromkeys(dtypes, 0)
    for leaf in leaves:
        name, size = jnp.dtype(leaf.dtype).name, math.prod(leaf.shape)
        layout.append((name, offsets[name], offsets[name] + size, tuple(leaf.shape)))
        offsets[name] += size

    def pack(tree):
        flat = jax.tree_util.tree_leaves(tree)
        return {
            # astype: a leaf diffrax promoted (a state of mixed dtypes) is saved in the dtype y0 gave it
            name: jnp.concatenate(
                [jnp.ravel(x).astype(n) for x, (n, *_) in zip(flat, layout, strict=True) if n == name]
            )
            for name in dtypes
        }

    def unpack(packed):
        out = []
        for name, start, stop, shape in layout:
            arr = packed[name]
            out.append(arr[..., start:stop].reshape(arr.shape[:-1] + shape))
        return jax.tree_util.tree_unflatten(treedef, out)

    return pack, unpack


def _flat_state(vector_field, y0, always=False):
    """Integrate a pytree state of one dtype as one flat array (fewer leaves: a smaller program to trace and
    compile; diffrax's error norm, an RMS over every entry, is the same; an SDE's one Brownian motion draws the
    same numbers flat). Returns (vector field on the flat state, flat y0, ravel, unravel), `ravel` mapping a
    pytree like y0 to the flat form; the identity for a 1-D array or a state of mixed dtypes, unless `always`
    (general SDE noise: its factor is a matrix on the flat state)."""
    leaves = jax.tree_util.tree_leaves(y0)
    if not always and (
        (len(leaves) == 1 and jnp.ndim(leaves[0]) == 1) or len({jnp.result_type(x) for x in leaves}) > 1
    ):
        return vector_field, y0, lambda y: y, lambda y: y
    flat, unravel = ravel_pytree(y0)

    def flat_field(t, y, args):
        return ravel_pytree(vector_field(t, unravel(y), args))[0]

    return flat_field, flat, lambda y: ravel_pytree(y)[0], unravel


def saved_outputs(observables, save_states: bool):
    """The function `(t, y, args) -> {name: array}` of what a solve saves: the observables (a mapping name ->
    `g(t, y, args)`, or one function returning the dict) and, with `save_states`, the state as `"__y__"`."""
    obs = observables if callable(observables) else dict(observables or {})

    def save_fn(t, y, args):
        out = dict(obs(t, y, args)) if callable(obs) else {name: fn(t, y, args) for name, fn in obs.items()}
        if save_states:
            out["__y__"] = y
        return out

    return save_fn


def build(
    vector_field,
    *,
    solver,
    rtol,
    atol,
    dt0,
    max_steps,
    observables,
    save_states,
    event,
    blowup,
    progress,
    constant_step=False,
    noise=None,
    watch=False,
    norm=None,
):
    """Build the function (y0, args, t0, t1, ts, event_on, extra) -> raw outputs that is jitted (and possibly
    vmapped).

    `noise`: `None` (an ODE), or a `flows._terms.Noise` (an SDE with constant steps; `extra = (sigma, key, dt)`
    its traced inputs, `solver` a name of `flows._terms.SDE_SOLVERS`). An ODE with `constant_step`: `extra =
    (dt,)`, the call's step. `watch`: run the watching form of
    `solver` (`flows._stiffness`, for `solver="auto"`; `extra = (horizon,)`, the whole solve's t1), which may
    stop with status code `SWITCH`. `norm`: the error norm of the step-size controller (default diffrax's RMS
    norm; `flows._sweep`'s lockstep solve passes the largest of the members' norms).
    """

    def solver_for(extra):
        if noise is not None:
            return noise.solver_object()
        if watch:
            return WATCHED[solver](horizon=extra[0])
        return SOLVERS[solver]()

    fixed = constant_step or noise is not None
    controller = (
        diffrax.ConstantStepSize()
        if fixed
        else diffrax.PIDController(rtol=rtol, atol=atol, **({} if norm is None else {"norm": norm}))
    )
    save_fn = saved_outputs(observables, save_states)

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
        conds["blowup"] = lambda t, y, args, **kw: ~(max_abs(y) < blowup)  # also true for NaN
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
                sol.result == SWITCH_RESULT,
            ],
            [OK, DIVERGED, EVENT, MAX_STEPS, DT_MIN, SWITCH],
            default=OTHER,
        ), hit

    def run(y0, args, t0, t1, ts, event_on, extra=()):
        """One diffeqsolve; `event_on` (traced) switches the user event off for continuations."""
        general_noise = noise is not None and noise.diffusion is not None
        field, y0_flat, ravel, unravel = _flat_state(vector_field, y0, always=general_noise)
        # jitted once here, the vector field and the saved outputs are traced once and reused at every call
        # site diffrax traces (initial step, RK stages, buffer shapes): a shorter compile
        field = jax.jit(field)
        on_state = lambda f: lambda t, y, args, **kw: f(t, unravel(y), args, **kw)  # noqa: E731
        pack, unpack = _packing(jax.eval_shape(save_fn, t0, y0, args))
        dx_event = None
        if conds:
            bound = {
                k: (functools.partial(on_state(f), event_on=event_on) if k == "event" else f) for k, f in conds.items()
            }
            dx_event = diffrax.Event(
                bound,
                root_finder=BracketBisection(rtol=EVENT_RTOL, atol=EVENT_ATOL) if event is not None else None,
                direction=directions,
            )
        if noise is None:
            # constant steps: the step of this call is traced (`flows._chunked` divides each call's span into
            # whole steps of one uniform grid)
            step0 = extra[0] if constant_step else dt0
            terms, adjoint = diffrax.ODETerm(field), diffrax.RecursiveCheckpointAdjoint()
        else:
            terms = noise.terms(field, y0_flat, ravel, unravel, extra, t0, t1)
            step0, adjoint = extra[2], noise.adjoint()
        sol = diffrax.diffeqsolve(
            terms,
            solver_for(extra),
            t0=t0,
            t1=t1,
            dt0=step0,
            y0=y0_flat,
            args=args,
            saveat=diffrax.SaveAt(
                subs=[
                    diffrax.SubSaveAt(ts=ts, fn=jax.jit(lambda t, y, args: pack(save_fn(t, unravel(y), args)))),
                    diffrax.SubSaveAt(t1=True, fn=final_fn),
                ]
            ),
            stepsize_controller=controller,
            max_steps=max_steps,
            event=dx_event,
            throw=False,
            progress_meter=progress_meter,
            adjoint=adjoint,
        )
        code, hit = code_of(sol)
        t_end = sol.ts[1][-1]  # the SubSaveAt(t1=True): where the solve stopped
        # the last entry of every leaf (`ys[1][-1]` would index a dict or a tuple state), in y0's dtypes: diffrax
        # promotes a state of mixed dtypes to the widest, and the next chunk continues from y_end
        y_end = jax.tree_util.tree_map(
            lambda a, like: a.astype(like.dtype), unravel(jax.tree_util.tree_map(lambda a: a[-1], sol.ys[1])), y0
        )
        packed, saved_ts = sol.ys[0], sol.ts[0]
        saved = unpack(packed)
        # the reached save points whose state or observables are not finite, and the first of their times
        bad = saved_ts <= t_end
        bad = bad & ~jnp.all(jnp.stack([jnp.all(jnp.isfinite(a), axis=-1) for a in packed.values()]), axis=0)
        finite_saved = ~jnp.any(bad)
        code = jnp.where((code == OK) & ~(finite_saved & all_finite(y_end)), NONFINITE, code)
        return {
            "ts": saved_ts,
            "saved": saved,
            "code": code,
            "t_final": t_end,
            "t_event": jnp.where(hit, t_end, jnp.nan),
            "t_bad": jnp.min(jnp.where(bad, saved_ts, jnp.inf)),
            "y_end": y_end,
            "y_end_max": max_abs(y_end),
            "num_steps": sol.stats["num_steps"],
            "num_accepted_steps": sol.stats["num_accepted_steps"],
            "num_rejected_steps": sol.stats["num_rejected_steps"],
        }

    return run


#: The compiled programs, most recent last, at most `_CACHE_SIZE`: `build` makes a new closure per call, so
#: `jax.jit`'s own cache never hits and a repeated solve would trace and compile again (seconds) without it.
COMPILED: dict = {}
_CACHE_SIZE = 64


def signature(tree):
    """The part of a program's cache key that its arguments decide: the tree structure and, per leaf, the shape,
    the dtype the program sees and the sharding (a key for `compiled` and for any other cache of compiled
    programs)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    # the sharding is part of the program: a mesh-sharded y0 must not reuse a single-device compilation
    return treedef, tuple((np.shape(x), _dtype_name(x), getattr(x, "sharding", None)) for x in leaves)


def _dtype_name(x) -> str:
    """The dtype the compiled program sees for leaf `x`: an array's dtype canonicalised as JAX does (a numpy
    float64 is float32 without x64), `jnp.result_type` (slower) for Python scalars."""
    dtype = getattr(x, "dtype", None)
    return jax.dtypes.canonicalize_dtype(dtype).name if isinstance(dtype, np.dtype) else jnp.result_type(x).name


def is_compiled(key, batched: bool | str = False) -> bool:
    """Is the program of `key` (as passed to `compiled`) in the cache under the current XLA options?"""
    return (key, options_key(), batched) in COMPILED


def compiled(key, build, example_args, batched: bool | str = False, donate: tuple = ()):
    """Compile `build()` ahead of time for `example_args` (`batched`: with the compile options of a sweep's
    program, `flows._xla`; `donate`: the positions of arguments whose buffers the program may reuse for its
    outputs, which a call then deletes); cached on `key`. Returns (fn, compile_s)."""
    key = (key, options_key(), batched)
    hit = COMPILED.get(key)
    if hit is not None:
        return hit, 0.0
    start = time.perf_counter()
    fn = compile_lowered(jax.jit(build(), donate_argnums=donate).lower(*example_args), batched=batched)
    compile_s = time.perf_counter() - start
    if len(COMPILED) >= _CACHE_SIZE:
        COMPILED.pop(next(iter(COMPILED)))
    COMPILED[key] = fn
    return fn, compile_s
