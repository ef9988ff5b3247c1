"""GENERATED FILE: do not edit by hand.

Derivation: derivations.scan_snap:ReducedSymmetricDerivation
System: scan_snap-reduced-symmetric
Scan and Snap quasi-static reduced Z-flow (Tian et al. 2023, Lemma 4, eq. 10) on a
class-symmetric instance: one DT logit z_d and one CT logit z_c per query row.
Equations:
    dz_d/dt = C**2*eta_Z*gamma*p_c**4*(K - 1)*exp(4*z_c)/(D*(C*p_c**2*exp(2*z_c) + D*p_d**2*exp(2*z_d))*(C*K*p_c**2*exp(2*z_c) + D*p_d**2*exp(2*z_d)))
    dz_c/dt = -C*eta_Z*gamma*p_c**4*(K - 1)*exp(4*z_c)/((C*p_c**2*exp(2*z_c) + D*p_d**2*exp(2*z_d))*(C*K*p_c**2*exp(2*z_c) + D*p_d**2*exp(2*z_d)))

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import difflib
from collections.abc import Mapping

import jax.numpy as jnp

STATE = ('z_d', 'z_c')
PARAMS = ('p_d', 'p_c', 'D', 'C', 'K', 'eta_Z', 'gamma')
SYSTEM = 'scan_snap-reduced-symmetric'


def vector_field(t, y, args):
    """d(z_d, z_c)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _check_args(args)
    z_d = y[..., 0]
    z_c = y[..., 1]
    p_d = args['p_d']
    p_c = args['p_c']
    D = args['D']
    C = args['C']
    K = args['K']
    eta_Z = args['eta_Z']
    gamma = args['gamma']
    _x0 = p_c**4*jnp.exp(4*z_c)
    _x1 = C**2*_x0
    _x2 = C*D*p_c**2*p_d**2*jnp.exp(2*z_c + 2*z_d)
    _x3 = eta_Z*gamma*(K - 1)/(D**2*p_d**4*jnp.exp(4*z_d) + K*_x1 + K*_x2 + _x2)
    return jnp.stack(
        [
            jnp.broadcast_to(_x1*_x3/D, y[..., 0].shape),
            jnp.broadcast_to(-C*_x0*_x3, y[..., 0].shape),
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
