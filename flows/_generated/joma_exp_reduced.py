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

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('w11', 'w12', 'w21', 'w22', 'w31', 'w32')
PARAMS = ('x11', 'x12', 'x21', 'x22', 'tau', 'c1', 'c2')
SYSTEM = 'joma-exp-reduced'


def vector_field(t, y, args):
    """d(w11, w12, w21, w22, w31, w32)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
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
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
