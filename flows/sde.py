"""`solve_sde`: stochastic differential equations by diffrax, with constant steps, through the one solve
core of `flows.solve` (`flows._terms` composes the drift and diffusion terms; the program, its statuses and
messages and the `Trajectory` are `flows.solve`'s).

- Additive noise (`sigma=`): dy = f(t, y, args) dt + sigma dW, as `diffrax.MultiTerm(ODETerm(f),
  ControlTerm(lineax.DiagonalLinearOperator(sigma), bm))`; the solvers of `SDE_SOLVERS`, strong orders in
  `STRONG_ORDER`. A pytree state of one dtype is integrated as one flat vector (one Brownian motion).
- General Itô noise (`diffusion=`, `noise_shape=`): dy = f dt + g(t, y, args) dW, g one (possibly low-rank)
  `lineax.MatrixLinearOperator` on the flattened state. Only Euler-Maruyama (`GENERAL_NOISE_SOLVERS`)
  converges to the Itô solution for non-commutative noise; the other solvers are refused.
- The Brownian motion: `diffrax.VirtualBrownianTree` (`brownian="tree"`: one path per key whatever dt, for
  strong-order checks) or `diffrax.UnsafeBrownianPath` (`"increments"`: the same law, cheaper, for moments).

It returns the `flows.Trajectory` of `flows.solve` (`t_event`, `rtol`, `atol` are `nan`); a non-finite state
or observable gives `status="nonfinite"` and raises `flows.FlowError` unless `throw=False`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import INT_MAX, SEED_MAX, check_bool, check_choice, check_finite_tree, check_int, check_real
from ._chunked import execute
from ._inputs import as_state, check_observables, check_save_times, check_state
from ._terms import BROWNIAN, GENERAL_NOISE_SOLVERS, SDE_SOLVERS, STRONG_ORDER, Noise
from .grids import check_horizon
from .trajectory import FlowError, Trajectory

logger = logging.getLogger(__name__)
PyTree = Any  # an array or a pytree of arrays

__all__ = ["BROWNIAN", "GENERAL_NOISE_SOLVERS", "SDE_SOLVERS", "STRONG_ORDER", "solve_sde"]


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
    shape = None
    if diffusion is not None:
        if not callable(diffusion):
            raise ValueError("diffusion must be callable g(t, y, args)")
        if noise_shape is None:
            raise ValueError("noise_shape (the shape of W) must be given with diffusion")
        shape = _noise_shape(noise_shape)
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
        _check_diffusion(diffusion, t0, y0, args, shape)
        sig = None
    keys, batched = _as_keys(key, seed, num_paths)

    options = {
        "solver": solver,
        "rtol": math.nan,
        "atol": math.nan,
        "dt0": None,
        "max_steps": int(max_steps),
        "observables": observables,
        "save_states": save_states,
        "event": None,
        "blowup": None,
        "progress": False,
        "constant_step": True,
        "noise": Noise(solver, brownian, tol if brownian == "tree" else None, diffusion, shape),
    }
    # the increments do not use tol: one program for every dt
    key_opts = ("sde", drift, *(obs_key if k == "observables" else v for k, v in options.items()))
    grid = np.asarray(ts, dtype=dtype)
    start, horizon, step = (np.asarray(x, dtype=dtype) for x in (t0, t1, dt))
    if batched:  # one path per key: the state, start and grid broadcast to the paths (on the host)
        n = int(np.shape(keys)[0])
        call_args = (
            jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (n,) + np.shape(a)), y0),
            args,
            np.full((n,), start),
            horizon,
            grid,
            np.ones((n,), bool),
            (sig, keys, step),
        )
        in_axes = (0, None, 0, None, 0, 0, (None, 0, None))
    else:
        call_args, in_axes = (y0, args, start, horizon, grid, np.asarray(True), (sig, keys, step)), None
    traj = execute(drift, options, key_opts, call_args, in_axes=in_axes)
    if traj.ys is not None:  # the saved states in y0's dtypes
        ys = jax.tree_util.tree_map(lambda a, d: a if a.dtype == d else a.astype(d), traj.ys, y_dtypes)
        traj = dataclasses.replace(traj, ys=ys)
    logger.debug("solve_sde: %s (compile %.3f s, run %.3f s)", traj.status, traj.compile_s, traj.run_s)
    if throw and not traj.ok:
        statuses = traj.status if batched else (traj.status,)
        messages = traj.message if batched else (traj.message,)
        bad = [i for i, s in enumerate(statuses) if s not in ("ok", "event")]
        where = f" (path {bad[0]} of {len(statuses)})" if batched else ""
        raise FlowError(f"SDE solve failed{where}: {messages[bad[0]]}", traj)
    return traj
