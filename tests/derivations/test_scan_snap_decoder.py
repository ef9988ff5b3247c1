"""The decoder h-flow is derived (projection of the logit flow), generated, and equals jax.grad of the loss."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from derivations.scan_snap import DecoderDerivation, decoder_symbols, explicit_decoder_h_flow
from derivations.verify import autodiff_flow, compare, projected_rate
from flows._generated import scan_snap_decoder as generated


@pytest.fixture(scope="module")
def derivation():
    return DecoderDerivation()


def test_derivation_produces_lemma6(derivation):
    M, eta_Y, h, _, _ = decoder_symbols()
    (rate,) = derivation.system.rhs
    assert sp.simplify(rate - eta_Y / ((M - 1) + sp.exp(M * h))) == 0
    assert derivation.projection.invariant  # the two-class ansatz is invariant under the flow


def test_naive_gradient_in_h_misses_the_metric(derivation):
    M, eta_Y, h, _, _ = decoder_symbols()
    ratio = sp.simplify(derivation.naive[0] / derivation.system.rhs[0])
    assert sp.simplify(ratio - M * (M - 1)) == 0  # J^T G J = M (M - 1)


@pytest.mark.parametrize("M", [3, 4, 6])
def test_class_reduction_equals_explicit_vocabulary(derivation, M):
    Ms, eta_Y, h, _, _ = decoder_symbols()
    explicit = explicit_decoder_h_flow(M)
    reduced = derivation.system.rhs[0].subs(Ms, M)
    eta_e, h_e = sp.symbols("eta_Y h", positive=True)
    assert sp.simplify(explicit - reduced.subs({eta_Y: eta_e, h: h_e})) == 0


def _full_loss(n):
    return lambda w: -jax.nn.log_softmax(w)[n]


# The references below are written over the full M-vector, so each M is a program of its own: the random
# points share a few vocabulary sizes (spanning 2 .. 299), each with random (eta_Y, h) or logits, and each
# reference is jitted once per M (eager, its ~30 small ops compiled per shape took ~2 s for every point).
M_PROJECTION = (2, 3, 29, 137, 299)
M_LOGITS = (2, 7, 49)


@functools.partial(jax.jit, static_argnums=0)
def _projected_reference(M, eta, hv):
    n = 0
    zeta = jnp.full((M,), -1.0).at[n].set(M - 1.0)  # (M-1) zeta_n = M e_n - 1
    phi = lambda hh: hh[0] * zeta
    theta_dot = autodiff_flow(_full_loss(n), eta)
    return projected_rate(theta_dot, phi, jnp.reshape(hv, (1,)))


@functools.partial(jax.jit, static_argnums=0)
def _logit_reference(M, eta, w):
    full = jnp.full((M,), w[1]).at[0].set(w[0])
    return autodiff_flow(_full_loss(0), eta)(full)


def test_generated_rhs_equals_autodiff_projection_at_random_points():
    """h_dot from the generated code vs lstsq(J, -eta grad L(phi(h))) with the full M-vector loss in JAX."""
    rng = np.random.default_rng(0)
    # M h in [-5, 5]: beyond that the float64 reference itself loses digits (1 - softmax near saturation,
    # measured 1e-12 relative at M h = 12), while the generated RHS stays within 1e-15 of mpmath.
    points = [
        (M, float(rng.uniform(0.01, 3.0)), float(rng.uniform(-5.0, 5.0)) / M) for M in M_PROJECTION for _ in range(4)
    ]

    def derived(p):
        M, eta, hv = p
        args = {"M": jnp.asarray(float(M)), "eta_Y": jnp.asarray(eta)}
        return generated.vector_field(0.0, jnp.asarray([hv]), args)

    def reference(p):
        M, eta, hv = p
        return _projected_reference(M, jnp.asarray(eta), jnp.asarray(hv))

    report = compare(derived, reference, points, rtol=1e-12)
    assert report.passed, str(report)


def test_logit_flow_equals_autodiff_at_random_points(derivation):
    """The class-reduced logit flow (w_t, w_o) vs -eta grad of the explicit M-vector cross-entropy."""
    f = derivation.logit_flow.lambdify()
    params = [str(p) for p in derivation.logit_flow.params]
    assert params == ["eta_Y", "M"]  # as declared: the learning rate, then the multiplicity M - 1
    rng = np.random.default_rng(1)
    points = [(M, float(rng.uniform(0.1, 2)), rng.normal(size=2)) for M in M_LOGITS for _ in range(7)]

    def derived(p):
        M, eta, w = p
        return np.array(f(list(w), eta_Y=eta, M=M), dtype=float)

    def reference(p):
        M, eta, w = p
        rate = np.asarray(_logit_reference(M, jnp.asarray(eta), jnp.asarray(w)))
        assert np.allclose(rate[1:], rate[1])  # the class structure is preserved
        return np.array([rate[0], rate[1]])

    report = compare(derived, reference, points, rtol=1e-12)
    assert report.passed, str(report)
