"""GENERATED FILE: do not edit by hand.

Derivation: derivations.linear_attention:ZFBDerivation
System: linear_attention-zfb
Linear self-attention, one head (Zhang, Frei, Bartlett 2024, Lemma 5.2, eq 5.4), zero blocks
kept zero: value entry u = w_22, key-query block U = W_11 (d = 4, Lambda diagonal),
G = u U^T; gradient flow of L = (1/2)(tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) +
tr Lambda), Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I (eqs 3.7-3.9).
Equations:
    du/dt = (N*U11*lambda1**2 + N*U22*lambda2**2 + N*U33*lambda3**2 + N*U44*lambda4**2 - lambda1*u*(U11**2*lambda1 + U12**2*lambda2 + U13**2*lambda3 + U14**2*lambda4)*(lambda1*(N + 1) + lambda1 + lambda2 + lambda3 + lambda4) - lambda2*u*(U21**2*lambda1 + U22**2*lambda2 + U23**2*lambda3 + U24**2*lambda4)*(lambda1 + lambda2*(N + 1) + lambda2 + lambda3 + lambda4) - lambda3*u*(U31**2*lambda1 + U32**2*lambda2 + U33**2*lambda3 + U34**2*lambda4)*(lambda1 + lambda2 + lambda3*(N + 1) + lambda3 + lambda4) - lambda4*u*(U41**2*lambda1 + U42**2*lambda2 + U43**2*lambda3 + U44**2*lambda4)*(lambda1 + lambda2 + lambda3 + lambda4*(N + 1) + lambda4))/N
    dU11/dt = lambda1**2*u*(N - U11*u*(lambda1*(N + 1) + lambda1 + lambda2 + lambda3 + lambda4))/N
    dU12/dt = -U12*lambda1*lambda2*u**2*(lambda1*(N + 1) + lambda1 + lambda2 + lambda3 + lambda4)/N
    dU13/dt = -U13*lambda1*lambda3*u**2*(lambda1*(N + 1) + lambda1 + lambda2 + lambda3 + lambda4)/N
    dU14/dt = -U14*lambda1*lambda4*u**2*(lambda1*(N + 1) + lambda1 + lambda2 + lambda3 + lambda4)/N
    dU21/dt = -U21*lambda1*lambda2*u**2*(lambda1 + lambda2*(N + 1) + lambda2 + lambda3 + lambda4)/N
    dU22/dt = lambda2**2*u*(N - U22*u*(lambda1 + lambda2*(N + 1) + lambda2 + lambda3 + lambda4))/N
    dU23/dt = -U23*lambda2*lambda3*u**2*(lambda1 + lambda2*(N + 1) + lambda2 + lambda3 + lambda4)/N
    dU24/dt = -U24*lambda2*lambda4*u**2*(lambda1 + lambda2*(N + 1) + lambda2 + lambda3 + lambda4)/N
    dU31/dt = -U31*lambda1*lambda3*u**2*(lambda1 + lambda2 + lambda3*(N + 1) + lambda3 + lambda4)/N
    dU32/dt = -U32*lambda2*lambda3*u**2*(lambda1 + lambda2 + lambda3*(N + 1) + lambda3 + lambda4)/N
    dU33/dt = lambda3**2*u*(N - U33*u*(lambda1 + lambda2 + lambda3*(N + 1) + lambda3 + lambda4))/N
    dU34/dt = -U34*lambda3*lambda4*u**2*(lambda1 + lambda2 + lambda3*(N + 1) + lambda3 + lambda4)/N
    dU41/dt = -U41*lambda1*lambda4*u**2*(lambda1 + lambda2 + lambda3 + lambda4*(N + 1) + lambda4)/N
    dU42/dt = -U42*lambda2*lambda4*u**2*(lambda1 + lambda2 + lambda3 + lambda4*(N + 1) + lambda4)/N
    dU43/dt = -U43*lambda3*lambda4*u**2*(lambda1 + lambda2 + lambda3 + lambda4*(N + 1) + lambda4)/N
    dU44/dt = lambda4**2*u*(N - U44*u*(lambda1 + lambda2 + lambda3 + lambda4*(N + 1) + lambda4))/N

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import difflib
from collections.abc import Mapping

import jax.numpy as jnp

STATE = ('u', 'U11', 'U12', 'U13', 'U14', 'U21', 'U22', 'U23', 'U24', 'U31', 'U32', 'U33', 'U34', 'U41', 'U42', 'U43', 'U44')
PARAMS = ('lambda1', 'lambda2', 'lambda3', 'lambda4', 'N')
SYSTEM = 'linear_attention-zfb'


def vector_field(t, y, args):
    """d(u, U11, U12, U13, U14, U21, U22, U23, U24, U31, U32, U33, U34, U41, U42, U43, U44)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _check_args(args)
    u = y[..., 0]
    U11 = y[..., 1]
    U12 = y[..., 2]
    U13 = y[..., 3]
    U14 = y[..., 4]
    U21 = y[..., 5]
    U22 = y[..., 6]
    U23 = y[..., 7]
    U24 = y[..., 8]
    U31 = y[..., 9]
    U32 = y[..., 10]
    U33 = y[..., 11]
    U34 = y[..., 12]
    U41 = y[..., 13]
    U42 = y[..., 14]
    U43 = y[..., 15]
    U44 = y[..., 16]
    lambda1 = args['lambda1']
    lambda2 = args['lambda2']
    lambda3 = args['lambda3']
    lambda4 = args['lambda4']
    N = args['N']
    _x0 = N**(-1.0)
    _x1 = lambda1**2
    _x2 = lambda2**2
    _x3 = lambda3**2
    _x4 = lambda4**2
    _x5 = N + 1
    _x6 = lambda1 + lambda2 + lambda3 + lambda4
    _x7 = _x5*lambda1 + _x6
    _x8 = _x7*u
    _x9 = _x5*lambda2 + _x6
    _x10 = _x9*u
    _x11 = _x5*lambda3 + _x6
    _x12 = _x11*u
    _x13 = _x5*lambda4 + _x6
    _x14 = _x13*u
    _x15 = _x0*u
    _x16 = _x0*u**2
    _x17 = _x16*lambda2
    _x18 = _x7*lambda1
    _x19 = _x16*_x18
    _x20 = _x17*_x9
    _x21 = _x11*lambda3
    _x22 = _x16*lambda1
    _x23 = _x16*lambda4
    _x24 = _x13*lambda4
    return jnp.stack(
        [
            jnp.broadcast_to(_x0*(N*U11*_x1 + N*U22*_x2 + N*U33*_x3 + N*U44*_x4 - _x10*lambda2*(U21**2*lambda1 + U22**2*lambda2 + U23**2*lambda3 + U24**2*lambda4) - _x12*lambda3*(U31**2*lambda1 + U32**2*lambda2 + U33**2*lambda3 + U34**2*lambda4) - _x14*lambda4*(U41**2*lambda1 + U42**2*lambda2 + U43**2*lambda3 + U44**2*lambda4) - _x8*lambda1*(U11**2*lambda1 + U12**2*lambda2 + U13**2*lambda3 + U14**2*lambda4)), y[..., 0].shape),
            jnp.broadcast_to(_x1*_x15*(N - U11*_x8), y[..., 0].shape),
            jnp.broadcast_to(-U12*_x17*_x18, y[..., 0].shape),
            jnp.broadcast_to(-U13*_x19*lambda3, y[..., 0].shape),
            jnp.broadcast_to(-U14*_x19*lambda4, y[..., 0].shape),
            jnp.broadcast_to(-U21*_x20*lambda1, y[..., 0].shape),
            jnp.broadcast_to(_x15*_x2*(N - U22*_x10), y[..., 0].shape),
            jnp.broadcast_to(-U23*_x20*lambda3, y[..., 0].shape),
            jnp.broadcast_to(-U24*_x20*lambda4, y[..., 0].shape),
            jnp.broadcast_to(-U31*_x21*_x22, y[..., 0].shape),
            jnp.broadcast_to(-U32*_x17*_x21, y[..., 0].shape),
            jnp.broadcast_to(_x15*_x3*(N - U33*_x12), y[..., 0].shape),
            jnp.broadcast_to(-U34*_x21*_x23, y[..., 0].shape),
            jnp.broadcast_to(-U41*_x22*_x24, y[..., 0].shape),
            jnp.broadcast_to(-U42*_x17*_x24, y[..., 0].shape),
            jnp.broadcast_to(-U43*_x13*_x23*lambda3, y[..., 0].shape),
            jnp.broadcast_to(_x15*_x4*(N - U44*_x14), y[..., 0].shape),
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
