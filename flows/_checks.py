"""Argument checks shared by the configs and entry points: every bad value raises a `ValueError` that names
the field and its allowed range, never a `TypeError`, `OverflowError` or an
error from deep inside numpy or a compiled program, and no NaN or inf reaches a solver.

Integers are Python or numpy integers (never `bool`); sizes, step counts and other counters are at most
`INT_MAX = 2**31 - 1` (they become int32 shapes, indices and loop counters in the compiled programs) and
seeds at most `SEED_MAX = 2**63 - 1` (an int64 `jax.random` seed). Reals are Python or numpy reals or 0-d
real arrays (never `bool` or complex). Flags are `True` or `False` (or a numpy bool).
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = [
    "INT_MAX",
    "SEED_MAX",
    "check_bool",
    "check_choice",
    "check_dtype",
    "check_finite_tree",
    "check_int",
    "check_real",
    "forwarded_options",
    "real_array",
]

INT_MAX = 2**31 - 1
SEED_MAX = 2**63 - 1


def check_int(name, value, low, high=INT_MAX, *, integral_float=False) -> int:
    """`int(value)` if `value` is an integer in [low, high] (with `integral_float`, also a float with an
    integer value, e.g. 3.0), else a `ValueError` naming `name`."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not ok and integral_float and isinstance(value, (float, np.floating)):
        ok = math.isfinite(value) and float(value).is_integer()
    if not ok or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _jax():
    """jax if it is imported, else None: a value can be a jax array or tracer only once jax is imported, and a
    records-only script (the CLI's main job) need not import it for its checks."""
    return sys.modules.get("jax")


def _is_jax_array(value) -> bool:
    jax = _jax()
    return jax is not None and isinstance(value, jax.Array)


def _is_tracer(value) -> bool:
    jax = _jax()
    return jax is not None and isinstance(value, jax.core.Tracer)


def _real_scalar(value):
    """`float(value)` for a real scalar (Python/numpy int or float, 0-d real array), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            return None
    if (
        (isinstance(value, np.ndarray) or _is_jax_array(value))
        and not _is_tracer(value)
        and np.ndim(value) == 0
        and np.asarray(value).dtype.kind in "iuf"
    ):
        return float(np.asarray(value))
    return None


def check_real(name, value, *, low=None, strict=False, high=None, high_strict=False, finite=True) -> float:
    """`float(value)` if `value` is a real number (finite unless `finite=False`, but never NaN) within the
    bounds (`low` < or <= value, value < or <= `high`), else a `ValueError` naming `name`."""
    x = _real_scalar(value)
    if x is None or math.isnan(x) or (finite and not math.isfinite(x)):
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}real number, got {value!r}")
    if low is not None and (x <= low if strict else x < low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value!r}")
    if high is not None and (x >= high if high_strict else x > high):
        raise ValueError(f"{name} must be {'<' if high_strict else '<='} {high}, got {value!r}")
    return x


def check_bool(name, value) -> bool:
    """`bool(value)` if `value` is `True`/`False` (or a numpy bool), else a `ValueError` naming `name`."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(name, value, choices) -> str:
    """`value` if it is one of the strings `choices`, else a `ValueError` naming `name`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def real_array(name, value, *, finite=True) -> np.ndarray:
    """`value` as a float64 numpy array if it is a (nested sequence or array of) real numbers, finite unless
    `finite=False`; else a `ValueError` naming `name` (strings, complex, ragged lists, objects, NaN)."""
    arr = None
    if not isinstance(value, (str, bytes, Mapping)) and value is not None:
        try:
            raw = np.asarray(value)
        except (TypeError, ValueError, OverflowError):
            raw = None
        if raw is not None and raw.dtype.kind in "iuf":
            try:
                arr = raw.astype(float)
            except (TypeError, ValueError, OverflowError):
                arr = None
    if arr is None:
        raise ValueError(f"{name} must be a real number or an array of real numbers, got {value!r}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {value!r}")
    return arr


def check_dtype(name, dtype):
    """`np.dtype(dtype)` if it names a floating dtype (or `None`: returned as is), else a `ValueError`."""
    if dtype is None:
        return None
    try:
        out = np.dtype(dtype)
    except (TypeError, ValueError):
        out = None
    if out is None or out.kind != "f" or isinstance(dtype, np.ndarray) or _is_jax_array(dtype):
        raise ValueError(f"{name} must be a floating dtype (e.g. jnp.float64) or None, got {dtype!r}")
    return out


def _host(leaf):
    """A numpy view of a concrete leaf, None for a tracer or an array other processes hold part of."""
    if _is_tracer(leaf):
        return None
    if _is_jax_array(leaf):
        return np.asarray(leaf) if leaf.is_fully_addressable else None
    if isinstance(leaf, int) and not isinstance(leaf, bool) and not -(2**63) <= leaf < 2**63:
        return np.asarray(leaf, dtype=object)  # overflows int64: rejected below
    try:
        return np.asarray(leaf)
    except (TypeError, ValueError, OverflowError):
        return np.asarray(None, dtype=object)


def check_finite_tree(name, tree, *, floating=False):
    """Every leaf of `tree` is a numeric array or scalar (floating point with `floating`) whose entries are
    all finite; else a `ValueError` naming `name`. Tracers are passed unchecked (their values are unknown)."""
    import jax

    for leaf in jax.tree_util.tree_leaves(tree):
        arr = _host(leaf)
        if arr is None:
            continue
        kinds = "f" if floating else "biufc"
        if arr.dtype.kind not in kinds:
            what = "floating point" if floating else "numeric (bool, integer, real or complex)"
            raise ValueError(f"{name} must hold {what} arrays, got {type(leaf).__name__} of dtype {arr.dtype}")
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            raise ValueError(
                f"{name} must be finite (no NaN or inf), got {int(np.sum(~np.isfinite(arr)))} "
                f"non-finite entries in a leaf of shape {arr.shape}"
            )


def check_options(name: str, options, allowed, what: str) -> dict:
    """`options` (None -> {}) as a dict whose keys are all in `allowed` (ValueError naming `name` otherwise);
    `what` names the setting they belong to in the message (e.g. "optimizer 'adam'")."""
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"{name} must be a dict, got {type(options).__name__}")
    unknown = sorted(map(str, set(options) - set(allowed)))
    if unknown:
        raise ValueError(f"{name}: unknown keys {unknown} for {what} (allowed: {sorted(allowed)})")
    return options


@functools.cache
def _keyword_defaults(target: Callable) -> dict:
    return {p.name: p.default for p in inspect.signature(target).parameters.values() if p.kind is p.KEYWORD_ONLY}


def forwarded_options(caller: str, options: Mapping, target: Callable, names: Sequence[str]) -> dict:
    """The keywords `names` of `target`, as a thin wrapper `caller` that takes them as `**options` passes them on:
    `options` completed with `target`'s defaults, so that the options are defined, defaulted and documented once,
    in `target`'s signature. An unknown keyword, or a missing one that `target` requires, is a `TypeError` naming
    it, as Python's own for a function that lists its parameters."""
    unknown = sorted(map(str, set(options) - set(names)))
    if unknown:
        raise TypeError(
            f"{caller}() got an unexpected keyword argument {unknown[0]!r} (it takes the options of "
            f"{target.__name__}: {', '.join(names)})"
        )
    defaults = _keyword_defaults(target)
    missing = [name for name in names if name not in options and defaults[name] is inspect.Parameter.empty]
    if missing:
        raise TypeError(f"{caller}() missing required keyword argument {missing[0]!r} (as in {target.__name__})")
    return {name: options.get(name, defaults[name]) for name in names}
