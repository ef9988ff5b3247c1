"""The helpers every module emitted by `derivations.codegen` calls: the `args` check of `vector_field`, and
`pack_state` / `unpack_state` between `{name: value}` and the state. One copy here instead of one per
generated module; a module passes its own `STATE`, `PARAMS`, `SYSTEM` (and, for a system at symbolic sizes,
`SHAPES`).

Two layouts of the state:

- flat (a system of scalar coordinates): one array whose last axis holds the coordinates in `STATE` order;
- by name (a system of matrices at symbolic sizes): a dict `{name: array}`, the array of `name` of shape
  `SHAPES[name]` (size names such as `"d"` bound from the arrays, one value per name).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import jax.numpy as jnp

__all__ = [
    "check_args",
    "check_keys",
    "check_named",
    "check_shapes",
    "pack_named",
    "pack_state",
    "unpack_named",
    "unpack_state",
]


def check_args(args, params: tuple, system: str) -> None:
    """`args` must hold exactly the keys in `params`: a misspelt key would otherwise be ignored silently.
    Reads only the keys, so under jit it runs once, at trace time."""
    if args is None and not params:
        return
    if not isinstance(args, Mapping):
        raise ValueError(f"args must be a mapping with the keys PARAMS = {params}, got {type(args).__name__}")
    check_keys("args", args, params, "PARAMS", system)


def check_keys(field: str, given, expected: tuple, what: str, system: str) -> None:
    """A `ValueError` naming each unknown key (with the closest expected name) and each missing one."""
    missing = [k for k in expected if k not in given]
    unknown = [k for k in given if k not in expected]
    if not (missing or unknown):
        return
    parts = []
    for k in unknown:
        close = _close_match(k, missing) if isinstance(k, str) else None  # a misspelt key leaves one missing
        parts.append(f"unknown key {k!r}" + (f" (did you mean {close!r}?)" if close else ""))
    if missing:
        parts.append(f"missing {', '.join(map(repr, missing))}")
    raise ValueError(f"{field} of {system!r}: {'; '.join(parts)}; the keys must be exactly {what} = {expected}")


def _close_match(key: str, names: list) -> str | None:
    """The name in `names` closest to `key` (also ignoring case), or None."""
    close = difflib.get_close_matches(key, names, n=1)
    if not close:
        lower = {n.lower(): n for n in names}
        close = [lower[c] for c in difflib.get_close_matches(key.lower(), list(lower), n=1)]
    return close[0] if close else None


def _real(name: str, value, dtype):
    try:
        value = jnp.asarray(value)
    except TypeError as err:
        raise ValueError(f"values[{name!r}] must be a real number or array, got {type(value).__name__}") from err
    if not (jnp.issubdtype(value.dtype, jnp.integer) or jnp.issubdtype(value.dtype, jnp.floating)):
        raise ValueError(f"values[{name!r}] must be real numbers, got dtype {value.dtype}")
    return value.astype(jnp.result_type(float) if dtype is None else dtype)


def pack_state(values, state: tuple, system: str, dtype=None):
    """The flat state whose last axis holds `values[name]` for every name in `state`, in that order; the
    arrays broadcast against each other (arrays of shape `s` give states of shape `s + (len(state),)`)."""
    if not isinstance(values, Mapping):
        raise ValueError(
            f"values must be a mapping {{name: value}} with the names in STATE = {state}, got {type(values).__name__}"
        )
    check_keys("values", values, state, "STATE", system)
    arrays = [_real(name, values[name], dtype) for name in state]
    try:
        arrays = jnp.broadcast_arrays(*arrays)
    except ValueError as err:
        shapes = {name: tuple(a.shape) for name, a in zip(state, arrays, strict=True)}
        raise ValueError(f"values: the shapes {shapes} do not broadcast against each other") from err
    return jnp.stack(arrays, axis=-1)


def _states(ys):
    if hasattr(ys, "ys") and hasattr(ys, "ts"):  # a flows.Trajectory
        if ys.ys is None:
            raise ValueError("ys: the trajectory saved no states (ys is None); solve with save_states=True")
        return ys.ys
    return ys


def unpack_state(ys, state: tuple):
    """`{name: ys[..., i]}` for every name in `state` (the inverse of `pack_state`): `ys` is one state `(n,)`,
    the saved states of a solve `(T, n)`, of a batch `(B, T, n)`, or a `flows.Trajectory` (its `ys`)."""
    ys = _states(ys)
    try:
        ys = jnp.asarray(ys)
    except TypeError as err:
        raise ValueError(f"ys must be an array of states or a flows.Trajectory, got {type(ys).__name__}") from err
    if ys.ndim == 0 or ys.shape[-1] != len(state):
        raise ValueError(
            f"ys must hold the {len(state)} coordinates STATE = {state} on its last axis, got shape {tuple(ys.shape)}"
        )
    return {name: ys[..., i] for i, name in enumerate(state)}


def check_shapes(field: str, arrays: Mapping, shapes: Mapping, system: str, sizes: dict | None = None) -> dict:
    """Bind the size names of `shapes` (`{name: (size name or int, ...)}`) from `arrays` and return them
    (`sizes`, when given, holds names bound already); an array of another rank, or a size bound twice to
    different values, is a `ValueError` naming the key. Runs on shapes only (at trace time under jit)."""
    sizes = {} if sizes is None else dict(sizes)
    for name, shape in shapes.items():
        got = tuple(jnp.shape(arrays[name]))
        if len(got) != len(shape):
            raise ValueError(f"{field}[{name!r}] of {system!r} must have shape {shape}, got {got}")
        for axis, (size, n) in enumerate(zip(shape, got, strict=True)):
            if isinstance(size, int):
                if n != size:
                    raise ValueError(f"{field}[{name!r}] of {system!r} must have shape {shape}, got {got}")
                continue
            bound = sizes.setdefault(size, (n, f"{field}[{name!r}] axis {axis}"))
            if bound[0] != n:
                raise ValueError(
                    f"{field}[{name!r}] of {system!r} has {size} = {n} on axis {axis} (shape {shape}), but "
                    f"{bound[1]} has {size} = {bound[0]}"
                )
    return sizes


def check_named(y, args, state: tuple, params: tuple, shapes: Mapping, system: str) -> dict:
    """The checks of a `vector_field` at symbolic sizes: `args` with exactly the keys `params`, `y` a dict
    with exactly the keys `state`, every array of its shape in `shapes`; returns `{size name: int}`."""
    check_args(args, params, system)
    if not isinstance(y, Mapping):
        raise ValueError(f"y must be a dict of arrays with the keys STATE = {state}, got {type(y).__name__}")
    check_keys("y", y, state, "STATE", system)
    sizes = check_shapes("y", y, {k: shapes[k] for k in state}, system)
    sizes = check_shapes("args", args or {}, {k: shapes[k] for k in params}, system, sizes)
    return {name: n for name, (n, _) in sizes.items()}


def pack_named(values, shapes: Mapping, system: str, dtype=None) -> dict:
    """The state by name: `{name: values[name]}` as arrays, every name of `shapes` given once, each of its
    shape, the sizes consistent."""
    if not isinstance(values, Mapping):
        raise ValueError(
            f"values must be a mapping {{name: array}} with the names in STATE = {tuple(shapes)}, "
            f"got {type(values).__name__}"
        )
    check_keys("values", values, tuple(shapes), "STATE", system)
    out = {name: _real(name, values[name], dtype) for name in shapes}
    check_shapes("values", out, shapes, system)
    return out


def unpack_named(ys, state: tuple, system: str) -> dict:
    """`{name: ys[name]}` of a state by name, its saved states, or a `flows.Trajectory` (its `ys`)."""
    ys = _states(ys)
    if not isinstance(ys, Mapping):
        raise ValueError(f"ys must be a dict of states by name or a flows.Trajectory, got {type(ys).__name__}")
    check_keys("ys", ys, state, "STATE", system)
    return {name: ys[name] for name in state}
