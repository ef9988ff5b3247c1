"""GENERATED FILE: do not edit by hand.

Derivation: derivations.cooccurrence:CooccurrencePhase2Derivation
System: cooccurrence-phase2
Word co-occurrence (Yang et al. 2024), phase-2 skeleton (theory digest §3.2; proofs of
Lemma F.6, Thm F.8): the 3-token system at uniform attention (A = 0) without the m1 M_V
term; dG = S z, dS = 2 m1 G^T z, z = -dL/dG.
Equations:
    dG1/dt = S*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G1 + G3)/(6*(exp(G1 + G3) + 1)))
    dG2/dt = S*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G2 + G3)/(6*(exp(G2 + G3) + 1)))
    dG3/dt = S*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G2 + G3)/(6*(exp(G2 + G3) + 1)) - exp(G1 + G3)/(6*(exp(G1 + G3) + 1)) - exp(G3)/(6*(exp(G3) + 1)))
    dS/dt = 2*m1*(G1*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G1 + G3)/(6*(exp(G1 + G3) + 1))) + G2*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G2 + G3)/(6*(exp(G2 + G3) + 1))) + G3*(exp(-G1 - G2 - G3)/(2*(exp(-G1 - G2 - G3) + 1)) - exp(G2 + G3)/(6*(exp(G2 + G3) + 1)) - exp(G1 + G3)/(6*(exp(G1 + G3) + 1)) - exp(G3)/(6*(exp(G3) + 1))))

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

STATE = ('G1', 'G2', 'G3', 'S')
PARAMS = ('m1',)
SYSTEM = 'cooccurrence-phase2'


def vector_field(t, y, args):
    """d(G1, G2, G3, S)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with the keys in PARAMS; broadcasts over leading axes."""
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
