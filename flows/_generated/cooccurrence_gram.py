"""GENERATED FILE: do not edit by hand.

Derivation: derivations.cooccurrence:GramDerivation
System: cooccurrence-gram
Word co-occurrence (Yang et al. 2024, Sec. 3.2, App. C): the gradient flow of W, W_V, W_K, W_Q
pushed forward to the Grams G = W_V^T W^T a, S = ||W^T a||^2, M_V, M_K, M_Q, A = W_K^T W_Q (any d),
given z = -dL/dG and B = -sqrt(m) dL/dA; a in {+-1}^m1, so a^T a = m1.
Equations:
    dG/dt = S*z + m1*M_V*z
    dS/dt = 2*m1*Trace(G.T*z)
    dM_V/dt = G*z.T + z*G.T
    dM_K/dt = 1/sqrt_m*A*B.T + 1/sqrt_m*B*A.T
    dM_Q/dt = 1/sqrt_m*A.T*B + 1/sqrt_m*B.T*A
    dA/dt = 1/sqrt_m*B*M_Q + 1/sqrt_m*M_K*B

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('G', 'S', 'M_V', 'M_K', 'M_Q', 'A')
PARAMS = ('z', 'B', 'm1', 'sqrt_m')
SHAPES = {'G': ('d',), 'S': (), 'M_V': ('d', 'd'), 'M_K': ('d', 'd'), 'M_Q': ('d', 'd'), 'A': ('d', 'd'), 'z': ('d',), 'B': ('d', 'd'), 'm1': (), 'sqrt_m': ()}
SYSTEM = 'cooccurrence-gram'


def vector_field(t, y, args):
    """d(G, S, M_V, M_K, M_Q, A)/dt of the state `y` (a dict of arrays of the shapes in SHAPES, one
    state: vmap for batches) and `args` (exactly the keys in PARAMS); the sizes are read from the
    arrays, so one module runs at every size."""
    _sizes = _runtime.check_named(y, args, STATE, PARAMS, SHAPES, SYSTEM)
    G = y['G'][:, None]
    S = y['S']
    M_V = y['M_V']
    M_K = y['M_K']
    M_Q = y['M_Q']
    A = y['A']
    z = args['z'][:, None]
    B = args['B']
    m1 = args['m1']
    sqrt_m = args['sqrt_m']
    _x0 = (G).T
    _x1 = sqrt_m**(-1.0)
    _x2 = (B).T
    _x3 = (A).T
    return {
        'G': (((m1) * (M_V @ z)) + ((S) * (z)))[:, 0],
        'S': jnp.asarray(2*m1*jnp.trace(_x0 @ z)),
        'M_V': (G @ (z).T) + (z @ _x0),
        'M_K': ((_x1) * (A @ _x2)) + ((_x1) * (B @ _x3)),
        'M_Q': ((_x1) * (_x3 @ B)) + ((_x1) * (_x2 @ A)),
        'A': ((_x1) * (B @ M_Q)) + ((_x1) * (M_K @ B)),
    }


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`): `{name: array}` for every name in STATE, of the shapes in
    SHAPES (sizes consistent), as arrays of `dtype` (default JAX's default float)."""
    return _runtime.pack_named(values, {name: SHAPES[name] for name in STATE}, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[name]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_named(ys, STATE, SYSTEM)
