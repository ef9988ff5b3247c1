"""The derived reduced flows of derivations.linear_attention: ZSLS eq 21 (the separate heads' scalar ODE) and
ZFB's (u, U) flow against autodiff of the closed-form loss (flows.linear_attention.theory)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from derivations import linear_attention as la
from flows._generated import linear_attention_separate as gen_separate
from flows._generated import linear_attention_zfb as gen_zfb
from flows.linear_attention import theory


def test_separate_flow_is_zsls_eq_21():
    d = la.SeparateDerivation()
    _, _, _, s, lam, N, trace = la.separate_symbols()
    eq21 = lam**2 * s**2 - lam**3 * (1 + (1 + trace / lam) / N) * s**5
    (rhs,) = d.system.rhs
    assert sp.simplify(rhs - eq21) == 0
    assert d.projection.invariant
    assert d.system.state == (s,)
    # the balanced ansatz keeps the three rates equal: ds/dt is each parameter's own rate
    v, k, q = la.separate_symbols()[:3]
    rates = [e.subs({v: s, k: s, q: s}) for e in d.head_flow.rhs]
    assert all(sp.simplify(r - eq21) == 0 for r in rates)


def test_separate_generated_module_fixed_point_and_rate():
    lam = np.array([1.0, 0.5, 0.25, 0.1])
    args = {"lam": lam, "N": 20.0, "trace": float(lam.sum())}
    star = theory.separate_fixed_points(lam, 20)
    np.testing.assert_allclose(gen_separate.vector_field(0.0, jnp.asarray(star)[:, None], args), 0.0, atol=1e-14)
    s = jnp.asarray([[0.3], [0.2], [0.5], [0.1]])
    gam = theory.gamma_values(lam, 20)
    want = lam**2 * s[:, 0] ** 2 * (1 - gam * s[:, 0] ** 3)
    np.testing.assert_allclose(gen_separate.vector_field(0.0, s, args)[:, 0], want, rtol=1e-13)


def _rotation(d, rng):
    q, r = np.linalg.qr(rng.normal(size=(d, d)))
    return q * np.sign(np.diag(r))


@pytest.mark.parametrize("dim", [2, 3, 5, 8])
def test_zfb_generated_flow_is_minus_the_gradient_of_loss_of_G_at_any_d(dim):
    """One generated module at every d: du/dt = -dL/du and dU/dt = -dL/dU with L = theory.loss_of_G(u U^T) in a
    rotated basis (Lambda not diagonal), by jax.grad, at random points (1e-12)."""
    rng = np.random.default_rng(dim)
    field = jax.jit(gen_zfb.vector_field)  # one compile per d instead of one per operation
    for trial in range(3):
        lam = rng.uniform(0.1, 2.0, size=dim)
        R = _rotation(dim, rng)
        N = int(rng.integers(2, 40))
        u, U = rng.normal(), rng.normal(size=(dim, dim))

        def loss(u, U, lam=lam, N=N, R=R):
            return theory.loss_of_G(u * U.T, lam, N, R)

        gu, gU = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(u), jnp.asarray(U))
        Lam = (R * lam) @ R.T
        args = {"Lambda": jnp.asarray(0.5 * (Lam + Lam.T)), "N": jnp.asarray(float(N))}
        got = field(0.0, {"u": jnp.asarray(u), "U": jnp.asarray(U)}, args)
        scale = max(abs(float(gu)), float(np.abs(gU).max()))
        np.testing.assert_allclose(float(got["u"]), -float(gu), rtol=1e-12, atol=1e-12 * scale, err_msg=str(trial))
        np.testing.assert_allclose(np.asarray(got["U"]), -np.asarray(gU), rtol=1e-12, atol=1e-12 * scale)
    assert gen_zfb.STATE == ("u", "U") and gen_zfb.SHAPES["U"] == ("d", "d")


def test_zfb_generated_flow_refuses_inconsistent_sizes():
    y = {"u": jnp.asarray(0.1), "U": jnp.zeros((3, 3))}
    with pytest.raises(ValueError, match=r"args\['Lambda'\] of 'linear_attention-zfb' has d = 4 on axis 0"):
        gen_zfb.vector_field(0.0, y, {"Lambda": jnp.eye(4), "N": jnp.asarray(5.0)})
    with pytest.raises(ValueError, match=r"y\['U'\] of 'linear_attention-zfb' must have shape \('d', 'd'\)"):
        gen_zfb.vector_field(0.0, {"u": jnp.asarray(0.1), "U": jnp.zeros(3)}, {"Lambda": jnp.eye(3), "N": 5.0})
    with pytest.raises(ValueError, match=r"y of 'linear_attention-zfb': unknown key 'V'"):
        gen_zfb.vector_field(0.0, {"u": 0.1, "V": jnp.zeros((3, 3))}, {"Lambda": jnp.eye(3), "N": 5.0})
