"""GENERATED FILE: do not edit by hand.

Derivation: derivations.linear_attention:SeparateDerivation
System: linear_attention-separate
Linear attention with separate rank-one key and query (Zhang, Singh, Latham, Saxe 2025, eq 21):
one head on one eigen-direction of Lambda (eigenvalue lam, trace = tr Lambda), reduced by the
permutations of (v, k, q) (found, not assumed) to v = k = q = s;
ds/dt = lam^2 s^2 - lam^3 (1 + (1 + trace/lam)/N) s^5 (tau = 1, ZFB's clock).
Equations:
    ds/dt = lam**2*s**2*(N - s**3*(lam*(N + 1) + trace))/N

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('s',)
PARAMS = ('lam', 'N', 'trace')
SYSTEM = 'linear_attention-separate'


def vector_field(t, y, args):
    """d(s)/dt for state `y[..., i]` in STATE order and
    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading
    axes."""
    _runtime.check_args(args, PARAMS, SYSTEM)
    s = y[..., 0]
    lam = args['lam']
    N = args['N']
    trace = args['trace']
    return jnp.stack([jnp.broadcast_to(lam**2*s**2*(N - s**3*(lam*(N + 1) + trace))/N, y[..., 0].shape)], axis=-1)


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`) whose last axis holds `values[name]` for every name in
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
