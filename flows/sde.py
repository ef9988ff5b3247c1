"""`solve_sde`: stochastic differential equations by diffrax, with constant steps.

- Additive noise (`sigma=`): dy = f(t, y, args) dt + sigma dW, as `diffrax.MultiTerm(ODETerm(f),
  ControlTerm(lineax.DiagonalLinearOperator(sigma), bm))`; the solvers of `SDE_SOLVERS`, strong orders in
  `STRONG_ORDER`. A pytree state of one dtype is integrated as one flat vector (one Brownian motion).
- General Itô noise (`diffusion=`, `noise_shape=`): dy = f dt + g(t, y, args) dW, g one (possibly low-rank)
  `lineax.MatrixLinearOperator` on the flattened state. Only Euler-Maruyama (`GENERAL_NOISE_SOLVERS`)
  converges to the Itô solution for non-commutative noise; the other solvers are refused.
- The Brownian motion: `diffrax.VirtualBrownianTree` (`brownian="tree"`: one path per key whatever dt, for
  strong-order checks) or `diffrax.UnsafeBrownianPath` (`"increments"`: the same law, cheaper, for moments).

It returns the `flows.Trajectory` of `flows.solve` (`t_event`, `rtol`, `atol` are `nan`); a non-finite state
gives `status="nonfinite"` and raises `flows.FlowError` unless `throw=False`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jax.flatten_util import ravel_pytree

from . import _program
from ._checks import INT_MAX, SEED_MAX, check_bool, check_choice, check_finite_tree, check_int, check_real
from ._inputs import as_state, check_observables, check_save_times, check_state
from ._prng import fused
from ._program import all_finite, max_abs, saved_outputs, signature
from .grids import check_horizon
from .trajectory import MAX_STEPS, NONFINITE, OK, OTHER, STATUS_NAMES, FlowError, Trajectory

logger = logging.getLogger(__name__)
PyTree = Any  # an array or a pytree of arrays

__all__ = ["BROWNIAN", "GENERAL_NOISE_SOLVERS", "SDE_SOLVERS", "STRONG_ORDER", "solve_sde"]

#: name -> (diffrax solver class, Brownian-tree Lévy area it needs)
SDE_SOLVERS: dict[str, tuple[type[diffrax.AbstractSolver], type]] = {
    "euler": (diffrax.Euler, diffrax.BrownianIncrement),
    "heun": (diffrax.Heun, diffrax.BrownianIncrement),
    "sea": (diffrax.SEA, diffrax.SpaceTimeLevyArea),
    "sra1": (diffrax.SRA1, diffrax.SpaceTimeLevyArea),
    "shark": (diffrax.ShARK, diffrax.SpaceTimeLevyArea),
}
#: Strong order of each solver for additive noise (pathwise error ~ dt**order).
STRONG_ORDER = {"euler": 1.0, "heun": 1.0, "sea": 1.0, "sra1": 1.5, "shark": 1.5}

#: The solvers that converge to the Itô solution for general (non-commutative) noise (`diffusion=`), with
#: their weak order: Euler-Maruyama only (module docstring).
GENERAL_NOISE_SOLVERS = {"euler": 1.0}


def _as_keys(key, seed, num_paths):
    """-> (keys, batched): one key, or a batch of keys (leading axis = paths)."""
    if (key is None) == (seed is None):
        raise ValueError("give exactly one of key (a jax.random key) or seed (an integer)")
    if seed is not None:
        key = jax.random.key(check_int("seed", seed, -SEED_MAX - 1, SEED_MAX))
    elif isinstance(key, bool) or not isinstance(key, (jax.Array, np.ndarray)):
        raise ValueError(f"key must be a jax.random key (or a batch of keys), got {key!r}")
    elif not (jnp.issubdtype(jnp.result_type(key), jax.dtypes.prng_key) or jnp.result_type(key) == jnp.uint32):
        raise ValueError(f"key must be a jax.random key (or a batch of keys), got dtype {jnp.result_type(key)}")
    if not jnp.issubdtype(jnp.result_type(key), jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    batch = jnp.ndim(key) == 1
    if jnp.ndim(key) > 1:
        raise ValueError(f"key must be one key or a 1-D batch of keys, got shape {jnp.shape(key)}")
    if num_paths is not None:
        num_paths = check_int("num_paths", num_paths, 1)
        if batch:
            raise ValueError("give num_paths with a single key (it is split), not with a batch of keys")
        return jax.random.split(key, int(num_paths)), True
    return key, batch


def _sigma_tree(sigma, y0):
    """Broadcast `sigma` (a scalar, or a pytree with the structure of y0) to y0's leaves; validated."""
    y_leaves, treedef = jax.tree_util.tree_flatten(y0)
    if isinstance(sigma, (int, float, np.integer, np.floating)) or (
        isinstance(sigma, (np.ndarray, jax.Array)) and np.ndim(sigma) == 0
    ):
        s_leaves = [sigma] * len(y_leaves)
    else:
        s_leaves, s_def = jax.tree_util.tree_flatten(sigma)
        if s_def != treedef:
            raise ValueError(f"sigma must be a scalar or a pytree with the structure of y0 ({treedef}), got {s_def}")
    out = []
    for s, y in zip(s_leaves, y_leaves, strict=True):
        if isinstance(s, bool):
            raise ValueError(f"sigma must be a non-negative number or array, got {s!r}")
        s_np = np.asarray(s)
        if s_np.dtype.kind not in "iuf" or not np.all(np.isfinite(s_np)) or np.any(s_np < 0):
            raise ValueError(f"sigma must be finite and >= 0, got {s!r}")
        try:
            shape = np.broadcast_shapes(s_np.shape, np.shape(y))
        except ValueError:
            shape = None
        if shape != tuple(np.shape(y)):
            raise ValueError(
                f"sigma leaf of shape {s_np.shape} does not broadcast to the y0 leaf of shape {np.shape(y)}"
            )
        # full shape, so that the compiled program depends on the shapes of y0 only (not of sigma)
        out.append(jnp.asarray(np.broadcast_to(s_np, np.shape(y)), dtype=jnp.result_type(y)))
    return jax.tree_util.tree_unflatten(treedef, out)


def _noise_shape(noise_shape):
    """A tuple of positive integers (the shape of W for `diffusion=`)."""
    if isinstance(noise_shape, (int, np.integer)) and not isinstance(noise_shape, bool):
        noise_shape = (noise_shape,)
    if (
        not isinstance(noise_shape, (tuple, list))
        or not noise_shape
        or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 for k in noise_shape)
    ):
        raise ValueError(
            f"noise_shape must be a non-empty tuple of positive integers (the shape of W), got {noise_shape!r}"
        )
    size = math.prod(int(k) for k in noise_shape)
    if size > INT_MAX:
        raise ValueError(f"noise_shape {tuple(noise_shape)} has too many entries ({size})")
    return tuple(int(k) for k in noise_shape)


def _check_diffusion(diffusion, t0, y0, args, noise_shape):
    """Trace `diffusion(t0, y0, args)` abstractly (no compile): one array of shape leaf.shape + noise_shape
    per leaf of y0, with y0's structure and a floating dtype (ValueError naming `diffusion` otherwise)."""
    try:
        out = jax.eval_shape(diffusion, jnp.asarray(t0, jnp.result_type(*jax.tree_util.tree_leaves(y0))), y0, args)
    except Exception as err:  # noqa: BLE001 - any failure of the user's function is reported as such
        raise ValueError(f"diffusion(t, y, args) failed on y0: {type(err).__name__}: {err}") from err
    y_leaves, y_def = jax.tree_util.tree_flatten(y0)
    g_leaves, g_def = jax.tree_util.tree_flatten(out)
    if g_def != y_def:
        raise ValueError(f"diffusion must return a pytree with the structure of y0 ({y_def}), got {g_def}")
    for g, y in zip(g_leaves, y_leaves, strict=True):
        want = tuple(np.shape(y)) + noise_shape
        if tuple(g.shape) != want:
            raise ValueError(
                f"diffusion must return, for a y0 leaf of shape {np.shape(y)}, an array of shape "
                f"leaf.shape + noise_shape = {want}, got {tuple(g.shape)}"
            )
        if not jnp.issubdtype(g.dtype, jnp.floating):
            raise ValueError(f"diffusion must return floating arrays, got dtype {g.dtype}")


#: Brownian motions: "tree" (`diffrax.VirtualBrownianTree`, the default: one path per key whatever dt) or
#: "increments" (`diffrax.UnsafeBrownianPath`: one independent Gaussian increment per constant step, solved
#: with `diffrax.ForwardMode`; much cheaper, the same law, but the path depends on dt).
BROWNIAN = ("tree", "increments")


def _build(drift, solver, tol, max_steps, observables, save_states, diffusion, noise_shape, brownian):
    """The function `(y0, args, sigma, key, t0, t1, ts, dt) -> raw outputs` of one path (`solve_sde` jits it)."""
    solver_cls, levy = SDE_SOLVERS[solver]
    solver_obj = solver_cls()
    save = saved_outputs(observables, save_states)

    def run(y0, args, sigma, key, t0, t1, ts, dt):
        key = fused(key)  # the same Brownian draws, the threefry hash unrolled (flows._prng)
        leaves = jax.tree_util.tree_leaves(y0)
        if diffusion is not None:
            # general noise: one flat state (D,), a flat Brownian motion (m,), the factor as a D x m matrix
            y0, unravel = ravel_pytree(y0)
            m = math.prod(noise_shape)
            f = lambda t, z, a: ravel_pytree(drift(t, unravel(z), a))[0]  # noqa: E731

            def factor(t, z, a):
                g = diffusion(t, unravel(z), a)
                cols = [jnp.reshape(x, (-1, m)).astype(z.dtype) for x in jax.tree_util.tree_leaves(g)]
                return lx.MatrixLinearOperator(jnp.concatenate(cols, axis=0) if len(cols) > 1 else cols[0])

            noise_struct = jax.ShapeDtypeStruct((m,), y0.dtype)
        elif len(leaves) > 1 and len({jnp.result_type(a) for a in leaves}) == 1:
            # one flat state: one Brownian tree instead of one per leaf (the same law: independent
            # coordinates), which compiles much faster for pytree states
            y0, unravel = ravel_pytree(y0)
            sigma = ravel_pytree(sigma)[0]
            f = lambda t, z, a: ravel_pytree(drift(t, unravel(z), a))[0]  # noqa: E731
        else:
            unravel = lambda z: z  # noqa: E731
            f = drift

        def save_fn(t, z, args):
            return save(t, unravel(z), args)

        if diffusion is None:
            noise_struct = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), y0)
            factor = lambda t, y, a: lx.DiagonalLinearOperator(sigma)  # noqa: E731
        if brownian == "tree":
            bm = diffrax.VirtualBrownianTree(t0, t1, tol=tol, shape=noise_struct, key=key, levy_area=levy)
            adjoint = diffrax.RecursiveCheckpointAdjoint()
        else:
            bm = diffrax.UnsafeBrownianPath(shape=noise_struct, key=key, levy_area=levy)
            adjoint = diffrax.ForwardMode()
        terms = diffrax.MultiTerm(diffrax.ODETerm(f), diffrax.ControlTerm(factor, bm))
        sol = diffrax.diffeqsolve(
            terms,
            solver_obj,
            t0=t0,
            t1=t1,
            dt0=dt,
            y0=y0,
            args=args,
            saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts, fn=save_fn), diffrax.SubSaveAt(t1=True)]),
            stepsize_controller=diffrax.ConstantStepSize(),
            max_steps=max_steps,
            throw=False,
            adjoint=adjoint,
        )
        saved = sol.ys[0]
        y_end = jax.tree_util.tree_map(lambda a: a[-1], sol.ys[1])
        finite = all_finite(y_end)
        leaves = jax.tree_util.tree_leaves(saved)
        # first saved time at which a state or an observable is not finite (inf if none)
        bad = jnp.zeros(ts.shape, bool)
        for a in leaves:
            bad = bad | ~jnp.all(jnp.isfinite(a.reshape((a.shape[0], -1))), axis=1)
        t_bad = jnp.min(jnp.where(bad, ts, jnp.inf))
        R = diffrax.RESULTS
        code = jnp.select(
            [sol.result == R.max_steps_reached, ~finite | jnp.any(bad), sol.result == R.successful],
            [MAX_STEPS, NONFINITE, OK],
            default=OTHER,
        )
        return {
            "saved": saved,
            "code": code,
            "t_final": sol.ts[1][-1],
            "t_bad": t_bad,
            "y_end_max": max_abs(y_end),
            "num_steps": sol.stats["num_steps"],
        }

    return run


def _message(code, t_final, t_bad, t1, y_end_max, max_steps):
    name = STATUS_NAMES[code]
    if name == "ok":
        return "ok: integrated to t1"
    if name == "nonfinite":
        where = f"by t = {t_bad:.6g}" if math.isfinite(t_bad) else f"at t1 = {t1:.6g}"
        return f"non-finite state (NaN or inf) {where} (max |y| at the end = {y_end_max:.3g}); reduce dt or the noise"
    if name == "max_steps":
        return f"max_steps = {max_steps} reached at t = {t_final:.6g} before t1 = {t1:.6g}"
    return f"solver failed at t = {t_final:.6g}"


def solve_sde(
    drift: Callable,
    y0: PyTree,
    *,
    sigma: PyTree = None,
    t1: float,
    dt: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args: PyTree = None,
    solver: str = "euler",
    key: jax.Array | None = None,
    seed: int | None = None,
    num_paths: int | None = None,
    tol: float | None = None,
    max_steps: int | None = None,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    throw: bool = True,
    diffusion: Callable | None = None,
    noise_shape: Sequence[int] | int | None = None,
    brownian: str = "tree",
) -> Trajectory:
    """Integrate `dy = drift(t, y, args) dt + sigma dW` (or `+ diffusion(t, y, args) dW`, Itô) from `t0` to `t1`
    with diffrax, constant steps `dt`.

    **Arguments:**

    - `drift`: `f(t, y, args)` written with array operations; `y` is an array or a pytree of arrays.
    - `y0`: the initial state, an array or any pytree of float arrays (its dtype sets the precision; with
      `sigma`, leaves of mixed precisions are integrated at the widest and saved in their own dtypes).
    - `sigma`: the additive noise amplitude, `>= 0`: a scalar, or a pytree with the structure of `y0` whose
      leaves broadcast to the corresponding leaves of `y0` (a diagonal diffusion). `sigma = 0` is an ODE.
    - `diffusion`, `noise_shape`: instead of `sigma`, general (multiplicative, non-commutative) Itô noise:
      `diffusion(t, y, args)` returns for each leaf of `y` an array of shape `leaf.shape + noise_shape`, and
      W has the shape `noise_shape` (module docstring). Only `solver="euler"` (`GENERAL_NOISE_SOLVERS`).
      Give exactly one of `sigma` and `diffusion`; `noise_shape` goes with `diffusion`.
    - `t1`, `t0`, `dt`: the horizon and the constant step (`diffrax.ConstantStepSize`); the last step is
      clipped to end at `t1`.
    - `ts`: save times within `[t0, t1]`, non-decreasing; default: only `t1`. Off-grid save times are the
      solver's interpolant between steps (saving on the step grid is exact).
    - `solver`: `"euler"` (Euler-Maruyama, default), `"heun"`, `"sea"`, `"sra1"`, `"shark"` (module table;
      strong orders in `STRONG_ORDER`).
    - `key` or `seed`: the Brownian motion; exactly one of a `jax.random.key` (or a 1-D batch of keys, one
      path each) and an integer seed.
    - `num_paths`: solve this many independent paths (the key is split; one vmapped program). Every field of
      the returned `Trajectory` then gains a leading path axis (as from `flows.solve_batch`).
    - `brownian`: `"tree"` (default, `diffrax.VirtualBrownianTree`) or `"increments"`
      (`diffrax.UnsafeBrownianPath`: an independent N(0, dt) increment per step; the same law at a fraction of
      the cost, reproducible per key and dt, but a smaller dt gives another path: not for strong-order
      checks; `tol` is then unused).
    - `tol`: the `VirtualBrownianTree` tolerance; default `dt / 8`. Keep `tol` fixed (and <= the smallest
      `dt`) when comparing step sizes on the same Brownian path.
    - `max_steps`: default `ceil((t1 - t0) / dt) + 1`. The step `dt` is traced (a new `dt` reuses the compiled
      program) but `max_steps`, `tol`, the solver, the observables and the shapes are compiled in: pass one
      `max_steps` and one `tol` to a sweep over `dt` to compile it once.
    - `observables`: `{name: g(t, y, args)}` computed at every saved time, or one function
      `g(t, y, args) -> {name: array}`.
    - `save_states`: set `False` to keep only the observables.
    - `throw`: raise `flows.FlowError` (with the partial trajectory) when some path is not ok.

    **Returns:** a `flows.Trajectory` (`solver` is the name above; `rtol = atol = nan`; `t_event = nan`;
    `num_accepted_steps = num_steps`, `num_rejected_steps = 0`).

    **Raises:** `ValueError` naming the bad argument; `flows.FlowError` for a non-finite solve.
    """
    if not callable(drift):
        raise ValueError("drift must be callable f(t, y, args)")
    check_choice("solver", solver, sorted(SDE_SOLVERS))
    check_choice("brownian", brownian, BROWNIAN)
    if (sigma is None) == (diffusion is None):
        raise ValueError("give exactly one of sigma (additive noise) or diffusion (general noise, with noise_shape)")
    if diffusion is not None:
        if not callable(diffusion):
            raise ValueError("diffusion must be callable g(t, y, args)")
        if noise_shape is None:
            raise ValueError("noise_shape (the shape of W) must be given with diffusion")
        noise_shape = _noise_shape(noise_shape)
        if solver not in GENERAL_NOISE_SOLVERS:
            why = (
                "converges to the Stratonovich solution" if solver in ("heun", "sea") else "is for additive noise only"
            )
            raise ValueError(
                f"solver {solver!r} {why}; general (non-commutative, Itô) noise needs one of "
                f"{sorted(GENERAL_NOISE_SOLVERS)} (Euler-Maruyama)"
            )
    elif noise_shape is not None:
        raise ValueError("noise_shape goes with diffusion (additive noise sigma has the shape of y0)")
    check_horizon(t0, t1)
    span = float(t1) - float(t0)
    dt = check_real("dt", dt, low=0.0, strict=True)
    tol = dt / 8 if tol is None else check_real("tol", tol, low=0.0, strict=True)
    needed = math.ceil(span / dt - 1e-9)
    if needed > INT_MAX - 1:
        raise ValueError(
            f"dt = {dt} is too small for the horizon [t0, t1] = [{t0}, {t1}]: {needed:.3g} steps "
            f"(at most {INT_MAX - 1})"
        )
    # at least the constant steps dt over [t0, t1]
    max_steps = needed + 1 if max_steps is None else check_int("max_steps", max_steps, needed)
    save_states, throw = check_bool("save_states", save_states), check_bool("throw", throw)
    ts = check_save_times(ts, t0, t1)
    obs_key = check_observables(observables, save_states)
    y0 = as_state(y0)
    dtype = check_state(y0)
    check_finite_tree("args", args)
    y_dtypes = jax.tree_util.tree_map(jnp.result_type, y0)
    if diffusion is None:
        if len(set(jax.tree_util.tree_leaves(y_dtypes))) > 1:  # diffrax integrates mixed precisions at the widest:
            y0 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), y0)  # so do sigma and the noise
        sig = _sigma_tree(sigma, y0)
    else:
        if len({jnp.result_type(a) for a in jax.tree_util.tree_leaves(y0)}) > 1:
            raise ValueError("y0 must have leaves of one dtype with diffusion (the state is one flat vector)")
        _check_diffusion(diffusion, t0, y0, args, noise_shape)
        sig = None
    keys, batched = _as_keys(key, seed, num_paths)

    ts_arr, t0_arr, t1_arr, dt_arr = (jnp.asarray(x, dtype=dtype) for x in (ts, t0, t1, dt))
    call_args = (y0, args, sig, keys, t0_arr, t1_arr, ts_arr, dt_arr)
    tree_tol = tol if brownian == "tree" else None  # the increments do not use tol: one program for every dt
    static = (solver, tree_tol, int(max_steps), obs_key, save_states, diffusion, noise_shape, brownian)
    cache_key = ("sde", batched, drift, *static, signature(call_args[:3] + call_args[4:]), jnp.shape(keys))

    def build():
        run = _build(drift, solver, tol, int(max_steps), observables, save_states, diffusion, noise_shape, brownian)
        return jax.vmap(run, in_axes=(None, None, None, 0, None, None, None, None)) if batched else run

    fn, compile_s = _program.compiled(cache_key, build, call_args)  # the one compile hook of every solve
    start = time.perf_counter()
    raw = jax.block_until_ready(fn(*call_args))
    run_s = time.perf_counter() - start

    saved = raw["saved"]
    ys = saved.get("__y__") if save_states else None
    if ys is not None:  # the saved states in y0's dtypes
        ys = jax.tree_util.tree_map(lambda a, d: a if a.dtype == d else a.astype(d), ys, y_dtypes)
    obs = {k: v for k, v in saved.items() if k != "__y__"}
    codes = np.atleast_1d(np.asarray(raw["code"]))
    t_final = np.atleast_1d(np.asarray(raw["t_final"]))
    t_bad = np.atleast_1d(np.asarray(raw["t_bad"]))
    ymax = np.atleast_1d(np.asarray(raw["y_end_max"]))
    statuses = tuple(STATUS_NAMES[int(c)] for c in codes)
    messages = tuple(
        _message(int(c), float(tf), float(tb), float(t1), float(ym), int(max_steps))
        for c, tf, tb, ym in zip(codes, t_final, t_bad, ymax, strict=True)
    )
    n = codes.size
    traj = Trajectory(
        ts=jnp.broadcast_to(ts_arr, (n,) + ts_arr.shape) if batched else ts_arr,
        ys=ys,
        observables=obs,
        status=statuses if batched else statuses[0],
        message=messages if batched else messages[0],
        t_final=raw["t_final"],
        t_event=jnp.full(jnp.shape(raw["t_final"]), jnp.nan, dtype),
        num_steps=raw["num_steps"],
        num_accepted_steps=raw["num_steps"],
        num_rejected_steps=jnp.zeros_like(raw["num_steps"]),
        compile_s=compile_s,
        run_s=run_s,
        solver=solver,
        rtol=float("nan"),
        atol=float("nan"),
    )
    logger.debug("solve_sde: %s (compile %.3f s, run %.3f s)", traj.status, compile_s, run_s)
    if throw and not traj.ok:
        bad = [i for i, s in enumerate(statuses) if s not in ("ok", "event")]
        where = f" (path {bad[0]} of {n})" if batched else ""
        raise FlowError(f"SDE solve failed{where}: {messages[bad[0]]}", traj)
    return traj
