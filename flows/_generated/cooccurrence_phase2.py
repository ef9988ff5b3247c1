"""GENERATED FILE: do not edit by hand.

Derivation: derivations.cooccurrence:CooccurrencePhase2Derivation
System: cooccurrence-phase2
Word co-occurrence (Yang et al. 2024), phase-2 skeleton (the Gram flow; proofs of
Lemma F.6, Thm F.8): the 3-token system at uniform attention (A = 0) without the m1 M_V
term; dG = S z, dS = 2 m1 G^T z, z = -dL/dG.
Equations:
    dG1/dt = S*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G1 + G3))))/6
    dG2/dt = S*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G2 + G3))))/6
    dG3/dt = S*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G2 + G3))) - 1/(1 + exp(-(G1 + G3))) - 1/(1 + exp(-G3)))/6
    dS/dt = m1*(G1*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G1 + G3)))) + G2*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G2 + G3)))) + G3*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G2 + G3))) - 1/(1 + exp(-(G1 + G3))) - 1/(1 + exp(-G3))))/3

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('G1', 'G2', 'G3', 'S')
PARAMS = ('m1',)
SYSTEM = 'cooccurrence-phase2'


def vector_field(t, y, args):
    """d(G1, G2, G3, S)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
    G1 = y[..., 0]
    G2 = y[..., 1]
    G3 = y[..., 2]
    S = y[..., 3]
    m1 = args['m1']
    _x0 = G1 + G3
    _x1 = jnp.exp(_x0)
    _x2 = G2 + _x0
    _x3 = -3*jnp.exp(-_x2)/(1 + jnp.exp(-_x2))
    _x4 = _x1/(_x1 + 1) + _x3
    _x5 = (1/6)*S
    _x6 = jnp.exp(G2 + G3)
    _x7 = _x6/(_x6 + 1)
    _x8 = _x3 + _x7
    _x9 = jnp.exp(G3)
    _x10 = _x4 + _x7 + _x9/(_x9 + 1)
    return jnp.stack(
        [
            jnp.broadcast_to(-_x4*_x5, y[..., 0].shape),
            jnp.broadcast_to(-_x5*_x8, y[..., 0].shape),
            jnp.broadcast_to(-_x10*_x5, y[..., 0].shape),
            jnp.broadcast_to(-1/3*m1*(G1*_x4 + G2*_x8 + G3*_x10), y[..., 0].shape),
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
