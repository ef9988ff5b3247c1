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

STATE = ('h',)
PARAMS = ('M', 'eta_Y')
SYSTEM = 'scan_snap-decoder'


def vector_field(t, y, args):
    """d(h)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with the keys in PARAMS; broadcasts over leading axes."""
    h = y[..., 0]
    M = args['M']
    eta_Y = args['eta_Y']
    return jnp.stack([jnp.broadcast_to(eta_Y/(M + jnp.exp(M*h) - 1), y[..., 0].shape)], axis=-1)
