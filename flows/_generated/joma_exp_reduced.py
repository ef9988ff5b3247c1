"""GENERATED FILE: do not edit by hand.

Derivation: derivations.joma:ExpReducedDerivation
System: joma-exp-reduced
JoMA reduced flow of the MLP weights (Tian et al. 2024, Theorem 1, exp attention), 2
contextual tokens, 2 classes, linear MLP, U = I: the W rows of the joint gradient flow of
the mean cross-entropy with z_l = c_l + sum_j w_lj^2 / (2 tau) substituted (row 3: the query's).
Equations:
    (6 equations, 4445 characters: print them with `python -m flows derive joma-exp-reduced`)

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import difflib
from collections.abc import Mapping

import jax.numpy as jnp

STATE = ('w11', 'w12', 'w21', 'w22', 'w31', 'w32')
PARAMS = ('x11', 'x12', 'x21', 'x22', 'tau', 'c1', 'c2')
SYSTEM = 'joma-exp-reduced'


def vector_field(t, y, args):
    """d(w11, w12, w21, w22, w31, w32)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _check_args(args)
    w11 = y[..., 0]
    w12 = y[..., 1]
    w21 = y[..., 2]
    w22 = y[..., 3]
    w31 = y[..., 4]
    w32 = y[..., 5]
    x11 = args['x11']
    x12 = args['x12']
    x21 = args['x21']
    x22 = args['x22']
    tau = args['tau']
    c1 = args['c1']
    c2 = args['c2']
    _x0 = tau**(-1.0)
    _x1 = (1/2)*_x0
    _x2 = jnp.exp(_x0*(_x1*(w11**2 + w12**2) + c1))
    _x3 = _x2*x11
    _x4 = jnp.exp(_x0*(_x1*(w21**2 + w22**2) + c2))
    _x5 = _x4*x21
    _x6 = jnp.exp(_x3*w11 + _x5*w21 + w31)
    _x7 = jnp.exp(_x3*w12 + _x5*w22 + w32)
    _x8 = (_x6 + _x7)**(-1.0)
    _x9 = _x6*_x8
    _x10 = _x2*x12
    _x11 = _x4*x22
    _x12 = jnp.exp(_x10*w11 + _x11*w21 + w31)
    _x13 = jnp.exp(_x10*w12 + _x11*w22 + w32)
    _x14 = (_x12 + _x13)**(-1.0)
    _x15 = _x12*_x14
    _x16 = (1/2)*_x2
    _x17 = _x7*_x8
    _x18 = _x13*_x14
    _x19 = (1/2)*_x4
    return jnp.stack(
        [
            jnp.broadcast_to(_x16*(-_x15*x12 - _x9*x11 + x11), y[..., 0].shape),
            jnp.broadcast_to(_x16*(-_x17*x11 - _x18*x12 + x12), y[..., 0].shape),
            jnp.broadcast_to(_x19*(-_x15*x22 - _x9*x21 + x21), y[..., 0].shape),
            jnp.broadcast_to(_x19*(-_x17*x21 - _x18*x22 + x22), y[..., 0].shape),
            jnp.broadcast_to(-1/2*_x15 - 1/2*_x9 + 1/2, y[..., 0].shape),
            jnp.broadcast_to(-1/2*_x17 - 1/2*_x18 + 1/2, y[..., 0].shape),
        ],
        axis=-1,
    )


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`) whose last axis holds `values[name]` for every name in
    STATE, in that order. `values`: a mapping with exactly the names in STATE, each a real number or array;
    the arrays broadcast against each other (arrays of shape `s` give states of shape `s + (len(STATE),)`).
    `dtype`: default JAX's default float."""
    if not isinstance(values, Mapping):
        raise ValueError(f"values must be a mapping {{name: value}} with the names in STATE = {STATE}, "
                         f"got {type(values).__name__}")
    _check_keys("values", values, STATE, "STATE")
    dtype = jnp.result_type(float) if dtype is None else dtype
    arrays = []
    for name in STATE:
        try:
            value = jnp.asarray(values[name])
        except TypeError as err:
            raise ValueError(f"values[{name!r}] must be a real number or array, "
                             f"got {type(values[name]).__name__}") from err
        if not (jnp.issubdtype(value.dtype, jnp.integer) or jnp.issubdtype(value.dtype, jnp.floating)):
            raise ValueError(f"values[{name!r}] must be real numbers, got dtype {value.dtype}")
        arrays.append(value.astype(dtype))
    try:
        arrays = jnp.broadcast_arrays(*arrays)
    except ValueError as err:
        shapes = {name: tuple(a.shape) for name, a in zip(STATE, arrays, strict=True)}
        raise ValueError(f"values: the shapes {shapes} do not broadcast against each other") from err
    return jnp.stack(arrays, axis=-1)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE (the inverse of `pack_state`): `ys` is one state `(n,)`,
    the saved states of a solve `(T, n)`, of a batch `(B, T, n)`, or a `flows.Trajectory` (its `ys`)."""
    if hasattr(ys, "ys") and hasattr(ys, "ts"):  # a flows.Trajectory
        if ys.ys is None:
            raise ValueError("ys: the trajectory saved no states (ys is None); solve with save_states=True")
        ys = ys.ys
    try:
        ys = jnp.asarray(ys)
    except TypeError as err:
        raise ValueError(f"ys must be an array of states or a flows.Trajectory, got {type(ys).__name__}") from err
    if ys.ndim == 0 or ys.shape[-1] != len(STATE):
        raise ValueError(f"ys must hold the {len(STATE)} coordinates STATE = {STATE} on its last axis, "
                         f"got shape {tuple(ys.shape)}")
    return {name: ys[..., i] for i, name in enumerate(STATE)}


def _check_args(args):
    """`args` must hold exactly the keys in PARAMS: a misspelt key would otherwise be ignored silently."""
    if args is None and not PARAMS:
        return
    if not isinstance(args, Mapping):
        raise ValueError(f"args must be a mapping with the keys PARAMS = {PARAMS}, got {type(args).__name__}")
    _check_keys("args", args, PARAMS, "PARAMS")


def _check_keys(field, given, expected, what):
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
    raise ValueError(f"{field} of {SYSTEM!r}: {'; '.join(parts)}; the keys must be exactly {what} = {expected}")


def _close_match(key, names):
    """The name in `names` closest to `key` (also ignoring case), or None."""
    close = difflib.get_close_matches(key, names, n=1)
    if not close:
        lower = {n.lower(): n for n in names}
        close = [lower[c] for c in difflib.get_close_matches(key.lower(), list(lower), n=1)]
    return close[0] if close else None
