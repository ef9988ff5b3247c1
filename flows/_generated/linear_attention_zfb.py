"""GENERATED FILE: do not edit by hand.

Derivation: derivations.linear_attention:ZFBDerivation
System: linear_attention-zfb
Linear self-attention, one head (Zhang, Frei, Bartlett 2024, Lemma 5.2, eq 5.4), zero blocks
kept zero: value entry u = w_22, key-query block U = W_11 (d x d, any d), covariance Lambda
(d x d, symmetric), G = u U^T; gradient flow of L = (1/2)(tr(G^T Lambda G Gamma Lambda) -
2 tr(Lambda G Lambda) + tr Lambda), Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I (eqs 3.7-3.9).
Equations:
    du/dt = -u*(1 + 1/N)*Trace(Lambda*Lambda*U*Lambda*U.T) + Trace(Lambda*Lambda*U.T) - u*Trace(Lambda*U*Lambda*U.T)*Trace(Lambda)/N
    dU/dt = u*Lambda*Lambda + (-u**2*(N + 1)/N)*Lambda*Lambda*U*Lambda + (-u**2*Trace(Lambda)/N)*Lambda*U*Lambda

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""

import jax.numpy as jnp

from flows._generated import _runtime

STATE = ('u', 'U')
PARAMS = ('Lambda', 'N')
SHAPES = {'u': (), 'U': ('d', 'd'), 'Lambda': ('d', 'd'), 'N': ()}
SYSTEM = 'linear_attention-zfb'


def vector_field(t, y, args):
    """d(u, U)/dt of the state `y` (a dict of arrays of the shapes in SHAPES, one
    state: vmap for batches) and `args` (exactly the keys in PARAMS); the sizes are read from the
    arrays, so one module runs at every size."""
    _sizes = _runtime.check_named(y, args, STATE, PARAMS, SHAPES, SYSTEM)
    u = y['u']
    U = y['U']
    Lambda = args['Lambda']
    N = args['N']
    _x0 = (U).T
    _x1 = N**(-1.0)
    _x2 = jnp.trace(Lambda)
    _x3 = _x1*u**2
    return {
        'u': jnp.asarray(-_x1*_x2*u*jnp.trace(Lambda @ U @ Lambda @ _x0) - u*(_x1 + 1)*jnp.trace(Lambda @ Lambda @ U @ Lambda @ _x0) + jnp.trace(Lambda @ Lambda @ _x0)),
        'U': ((u) * (Lambda @ Lambda)) + ((-_x2*_x3) * (Lambda @ U @ Lambda)) + ((-_x3*(N + 1)) * (Lambda @ Lambda @ U @ Lambda)),
    }


def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`): `{name: array}` for every name in STATE, of the shapes in
    SHAPES (sizes consistent), as arrays of `dtype` (default JAX's default float)."""
    return _runtime.pack_named(values, {name: SHAPES[name] for name in STATE}, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[name]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_named(ys, STATE, SYSTEM)
