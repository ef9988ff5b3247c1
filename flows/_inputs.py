"""What a solve is given, validated before anything is traced (shared by `flows.solve`, `flows.solve_batch` and
`flows.solve_sde`): the initial state, the vector field's output, the save times, the observables; and what a
loss is given (the parameters and the data of the optimiser limits and of the training loops). Every bad value
is a `ValueError` naming the argument.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_finite_tree, real_array

__all__ = [
    "as_state",
    "check_field",
    "check_loss_call",
    "check_observables",
    "check_params",
    "check_save_times",
    "check_state",
    "warn_precision",
    "widest_dtype",
]


def as_state(y0):
    """A list or tuple of plain numbers (or nested lists of them) becomes one array (it would otherwise
    reach the vector field as a Python list); integers become floats of JAX's default precision."""
    if (
        isinstance(y0, (list, tuple))
        and y0
        and all(
            isinstance(x, (int, float, np.number)) and not isinstance(x, bool) for x in jax.tree_util.tree_leaves(y0)
        )
    ):
        try:
            arr = np.asarray(y0)
        except ValueError as err:
            raise ValueError(f"y0 must be an array or a pytree of arrays, got a ragged {type(y0).__name__}") from err
        return jnp.asarray(arr, dtype=jnp.result_type(float) if not np.issubdtype(arr.dtype, np.floating) else None)
    return y0


def widest_dtype(*arrays):
    """The dtype of a state or parameter tree whose leaves may mix precisions: JAX's standard promotion of the
    leaves' dtypes (float32 and float64 -> float64), also where `jax_numpy_dtype_promotion` is "strict"."""
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(*arrays)


def check_state(y0):
    """y0: a floating array or a pytree of floating arrays, every entry finite. Returns its dtype."""
    leaves = jax.tree_util.tree_leaves(y0)
    if not leaves:
        raise ValueError("y0 must contain at least one array")
    check_finite_tree("y0", y0)
    dtype = widest_dtype(*leaves)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"y0 must be floating point, got dtype {dtype}")
    return dtype


def check_field(vector_field, t0, y0, args):
    """Trace `vector_field(t0, y0, args)` abstractly (no compile) and check that it returns a state of the
    same structure, shapes and dtypes as `y0`: a wrong-shaped output or a failing vector field is a
    ValueError here instead of an error from inside diffrax."""
    try:
        out = jax.eval_shape(vector_field, t0, y0, args)
    except Exception as err:  # noqa: BLE001 -- any error of the user's function, reported with the shapes
        shapes = jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), y0)
        raise ValueError(
            f"vector_field(t0, y0, args) failed for y0 of shape {shapes}: {type(err).__name__}: {err}"
        ) from err
    want = jax.tree_util.tree_structure(y0)
    got = jax.tree_util.tree_structure(out)
    if got != want:
        raise ValueError(f"vector_field must return a state structured like y0 ({want}), got {got}")
    for path, a, b in zip(
        jax.tree_util.tree_leaves_with_path(y0),
        jax.tree_util.tree_leaves(y0),
        jax.tree_util.tree_leaves(out),
        strict=True,
    ):
        where = jax.tree_util.keystr(path[0]) or "y"
        if tuple(np.shape(a)) != tuple(b.shape):
            raise ValueError(
                f"vector_field returned shape {tuple(b.shape)} for y0{where if where != 'y' else ''} of "
                f"shape {tuple(np.shape(a))}: dy/dt must have the shape of y"
            )
        if jnp.result_type(a) != b.dtype:
            raise ValueError(
                f"vector_field returned dtype {b.dtype} for y0{where if where != 'y' else ''} of dtype "
                f"{jnp.result_type(a)}: dy/dt must have the dtype of y"
            )


def check_save_times(ts, t0, t1) -> np.ndarray:
    """The save times `ts` (None: only `t1`) as a finite, non-decreasing, non-empty 1-D float array within
    `[t0, t1]`."""
    ts = np.array([float(t1)]) if ts is None else real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError("ts must be finite")
    if np.any(np.diff(ts) < 0):
        raise ValueError("ts must be non-decreasing")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"ts must lie within [t0, t1] = [{t0}, {t1}], got [{ts[0]}, {ts[-1]}]")
    return ts


def check_observables(observables, save_states: bool):
    """`observables`: None, one function `g(t, y, args) -> {name: array}`, or a mapping name -> `g(t, y, args)`
    (the name `__y__` is reserved for the saved state); something must be saved. Returns the part of a
    compiled program's cache key that stands for them."""
    if observables is not None and not callable(observables):
        if not isinstance(observables, Mapping) or not all(callable(f) for f in observables.values()):
            raise ValueError(
                "observables must be a mapping name -> f(t, y, args), or one function "
                "f(t, y, args) -> dict of named arrays"
            )
        if "__y__" in observables:
            raise ValueError("observables may not use the reserved name '__y__'")
    if not save_states and not observables:
        raise ValueError("save_states=False needs at least one observable to save")
    return observables if callable(observables) else tuple(sorted((observables or {}).items(), key=lambda kv: kv[0]))


#: A relative tolerance below this many machine epsilons of the state's dtype cannot be met: the rounding of the
#: steps and of the error estimate is of that size already.
RTOL_FLOOR_EPS = 4.0
#: The dtypes already warned about (the warning is given once per process and dtype).
_PRECISION_WARNED: set[str] = set()


def warn_precision(rtol: float, dtype) -> None:
    """Warn (once per dtype) when `rtol` is finer than a solve in `dtype` can give: below `RTOL_FLOOR_EPS`
    machine epsilons, e.g. the default rtol 1e-8 for a float32 state (JAX's default dtype unless
    `jax_enable_x64` is on), whose error then stays near 1e-6 whatever rtol asks."""
    dtype = jnp.dtype(dtype)
    eps = float(jnp.finfo(dtype).eps)
    if rtol >= RTOL_FLOOR_EPS * eps or dtype.name in _PRECISION_WARNED:
        return
    _PRECISION_WARNED.add(dtype.name)
    if dtype.itemsize < 8 and not jax.config.read("jax_enable_x64"):
        fix = (
            "for float64 call jax.config.update('jax_enable_x64', True) at start-up (before any array is made) "
            "and pass a float64 y0"
        )
    else:
        fix = "pass a float64 y0 (jax_enable_x64 is on)" if dtype.itemsize < 8 else "no wider dtype is available"
    warnings.warn(
        f"rtol = {rtol:g} is finer than a {dtype.name} solve can give (machine epsilon {eps:.2g}): the solve runs in "
        f"{dtype.name} and its error stays above about {RTOL_FLOOR_EPS * eps:.0e}; {fix}, or loosen rtol to at "
        f"least {RTOL_FLOOR_EPS * eps:.0e}",
        UserWarning,
        stacklevel=4,
    )


def check_params(name, tree):
    """Parameters (e.g. `theta0`): a non-empty pytree of real arrays or numbers, every entry finite. Returns it
    as floating JAX arrays (integers become floats of JAX's default precision); a bool, complex or non-numeric
    leaf, NaN or inf is a `ValueError` naming `name` and the leaf. Tracers are passed (values unknown)."""
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    if not leaves:
        raise ValueError(f"{name} must be a pytree of float arrays with at least one leaf, got {tree!r}")
    for path, leaf in leaves:
        where = name + jax.tree_util.keystr(path)
        dtype = getattr(leaf, "dtype", None)
        if dtype is None:
            try:
                dtype = np.asarray(leaf).dtype
            except (TypeError, ValueError, OverflowError):
                dtype = np.dtype(object)
        if np.dtype(dtype).kind not in "iuf":
            raise ValueError(
                f"{where} must be a real (integer or floating) array, got {type(leaf).__name__} of dtype {dtype}"
            )
    check_finite_tree(name, tree)

    def floating(x):
        a = jnp.asarray(x)
        return a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(jnp.result_type(float))

    return jax.tree_util.tree_map(floating, tree)


def _shapes(tree):
    return jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), tree)


def check_loss_call(loss, theta, data, *, names=("loss", "theta0", "batch")):
    """Trace `loss(theta, data)` abstractly (no compile): it must run and return a real scalar. A failure (a
    wrong data shape, a missing key) is a `ValueError` naming the data and the parameters with their shapes
    (instead of a JAX `TypeError` from inside a compiled program); a non-scalar output names the loss. `names`:
    how the caller calls (the loss, the parameters, the data)."""
    loss_name, theta_name, data_name = names
    try:
        out = jax.eval_shape(loss, theta, data)
    except Exception as err:  # noqa: BLE001 -- any error of the user's function, reported with the shapes
        raise ValueError(
            f"{loss_name}({theta_name}, {data_name}) failed: {type(err).__name__}: {str(err)[:400]}; check that "
            f"{data_name} (shapes {_shapes(data)}) and {theta_name} (shapes {_shapes(theta)}) are what "
            f"{loss_name} expects"
        ) from err
    if not (isinstance(out, jax.ShapeDtypeStruct) and out.shape == () and jnp.issubdtype(out.dtype, jnp.floating)):
        got = out if not isinstance(out, jax.ShapeDtypeStruct) else f"shape {out.shape}, dtype {out.dtype}"
        raise ValueError(f"{loss_name} must return a real scalar (a 0-d float array, what jax.grad needs), got {got}")
