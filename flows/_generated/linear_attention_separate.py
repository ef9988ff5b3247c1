"""GENERATED FILE: do not edit by hand.

Derivation: derivations.linear_attention:SeparateDerivation
System: linear_attention-separate
Linear attention with separate rank-one key and query (Zhang, Singh, Latham, Saxe 2025, eq 21):
one head on one eigen-direction of Lambda (eigenvalue lam, trace = tr Lambda), balanced ansatz
v = k = q = s; ds/dt = lam^2 s^2 - lam^3 (1 + (1 + trace/lam)/N) s^5 (tau = 1, ZFB's clock).
Equations:
    ds/dt = lam**2*s**2*(N - s**3*(lam*(N + 1) + trace))/N

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import difflib
from collections.abc import Mapping

import jax.numpy as jnp

STATE = ('s',)
PARAMS = ('lam', 'N', 'trace')
SYSTEM = 'linear_attention-separate'


def vector_field(t, y, args):
    """d(s)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _check_args(args)
    s = y[..., 0]
    lam = args['lam']
    N = args['N']
    trace = args['trace']
    return jnp.stack([jnp.broadcast_to(lam**2*s**2*(N - s**3*(lam*(N + 1) + trace))/N, y[..., 0].shape)], axis=-1)


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
