"""The derived reduced flows of derivations.linear_attention: ZSLS eq 21 (the separate heads' scalar ODE) and
ZFB's (u, U) flow against autodiff of the closed-form loss (flows.linear_attention.theory)."""

import jax
import jax.numpy as jnp
import numpy as np
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


def test_zfb_generated_flow_is_minus_the_gradient_of_loss_of_G():
    """du/dt = -dL/du and dU/dt = -dL/dU with L = theory.loss_of_G(u U^T), by jax.grad, at random points (1e-12)."""
    rng = np.random.default_rng(0)
    dim = la.ZFB_DIM
    for trial in range(4):
        lam = rng.uniform(0.1, 2.0, size=dim)
        N = int(rng.integers(2, 40))
        u, U = rng.normal(), rng.normal(size=(dim, dim))

        def loss(u, U, lam=lam, N=N):
            return theory.loss_of_G(u * U.T, lam, N)

        gu, gU = jax.grad(loss, argnums=(0, 1))(jnp.asarray(u), jnp.asarray(U))
        args = {**{f"lambda{i + 1}": lam[i] for i in range(dim)}, "N": float(N)}
        y = jnp.concatenate([jnp.asarray([u]), jnp.asarray(U).reshape(-1)])
        got = np.asarray(gen_zfb.vector_field(0.0, y, args))
        want = -np.concatenate([[float(gu)], np.asarray(gU).reshape(-1)])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(), err_msg=str(trial))
    assert gen_zfb.STATE[0] == "u" and gen_zfb.STATE[1:3] == ("U11", "U12")
