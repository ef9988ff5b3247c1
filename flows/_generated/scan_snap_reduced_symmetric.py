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

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('z_d', 'z_c')
PARAMS = ('p_d', 'p_c', 'D', 'C', 'K', 'eta_Z', 'gamma')
SYSTEM = 'scan_snap-reduced-symmetric'


def vector_field(t, y, args):
    """d(z_d, z_c)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
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
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
