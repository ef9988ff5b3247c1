"""GENERATED FILE: do not edit by hand.

Derivation: derivations.scan_snap:decoder_h_flow
System: scan_snap-decoder
Scan and Snap decoder scalar flow (Tian et al. 2023, Lemma 6, eq. 45): projection of the
class-reduced logit flow onto w_n = (M-1) h zeta_n with the metric diag(1, M-1).
Equations:
    dh/dt = eta_Y/(M + exp(M*h) - 1)

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('h',)
PARAMS = ('eta_Y', 'M')
SYSTEM = 'scan_snap-decoder'


def vector_field(t, y, args):
    """d(h)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
    h = y[..., 0]
    eta_Y = args['eta_Y']
    M = args['M']
    return jnp.stack([jnp.broadcast_to(eta_Y/(M + jnp.exp(M*h) - 1), y[..., 0].shape)], axis=-1)


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`) whose last axis holds `values[name]` for every name in
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
