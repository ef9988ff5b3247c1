"""Closed forms of flows.linear_attention.theory against autodiff, brute-force minimisation, numerical
integration, Monte Carlo and the reference point of the docs page (d = 4, N = 20, Lambda = diag(1, .5, .25, .1))."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize

from flows.linear_attention import theory

EIG = (1.0, 0.5, 0.25, 0.1)
N = 20


def _rotation(d, seed=3):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


@pytest.mark.parametrize("rotated", [False, True])
def test_inverse_gamma_minimises_the_loss(rotated):
    R = _rotation(4) if rotated else None
    G = theory.optimal_G(EIG, N, R)
    np.testing.assert_allclose(G @ theory.gamma_matrix(EIG, N, R), np.eye(4), atol=1e-13)
    grad = jax.grad(theory.loss_of_G)(G, EIG, N, R)
    assert float(jnp.max(jnp.abs(grad))) < 1e-13
    L0 = float(theory.loss_of_G(G, EIG, N, R))
    assert L0 == pytest.approx(theory.min_loss(EIG, N), rel=1e-13)
    rng = np.random.default_rng(0)
    for _ in range(20):
        dG = 1e-3 * rng.normal(size=(4, 4))
        assert float(theory.loss_of_G(G + dG, EIG, N, R)) > L0
    # not least squares on the context: G = Lambda^{-1} (N -> inf) is worse at finite N
    lsq = jnp.linalg.inv(theory.covariance_matrix(EIG, R))
    assert float(theory.loss_of_G(lsq, EIG, N, R)) > L0 + 1e-3


def test_reference_point_in_zfb_convention():
    """Reference point of the docs page (ZFB's factor 1/2): min 0.1716, plateaus 0.925, 0.487, 0.285, 0.197, 0.172,
    separate-head scales gamma^{-1/3} = 0.9566, 1.1743, 1.4123, 1.7172."""
    assert theory.min_loss(EIG, N) == pytest.approx(0.1716, abs=5e-5)
    np.testing.assert_allclose(theory.plateau_losses(EIG, N), [0.925, 0.487, 0.285, 0.197, 0.172], atol=6e-4)
    # L_0 = tr(Lambda)/2: the factor 1/2 (ZSLS's convention would give tr(Lambda) = 1.85)
    assert theory.plateau_losses(EIG, N)[0] == pytest.approx(0.5 * sum(EIG), rel=1e-15)
    np.testing.assert_allclose(theory.separate_fixed_points(EIG, N), [0.9566, 1.1743, 1.4123, 1.7172], atol=6e-5)


def test_gamma_matrix_formula():
    g = np.asarray(theory.gamma_matrix(EIG, N))
    np.testing.assert_allclose(np.diag(g), (1 + 1 / N) * np.array(EIG) + sum(EIG) / N, rtol=1e-15)
    assert np.count_nonzero(g - np.diag(np.diag(g))) == 0
    np.testing.assert_allclose(theory.gamma_matrix(EIG, np.inf), np.diag(EIG), rtol=1e-15)


@pytest.mark.parametrize("rotated", [False, True])
def test_plateaus_are_brute_force_minima_on_the_top_directions(rotated):
    """L_k = min over G acting on the top k eigen-directions (a free k x k block in the eigenbasis), by BFGS."""
    eig = (0.25, 1.0, 0.1, 0.5)  # unsorted on purpose: the top directions are found by eigenvalue
    R = _rotation(4) if rotated else np.eye(4)
    top = R[:, np.argsort(eig)[::-1]]
    plateaus = theory.plateau_losses(eig, N)
    loss = jax.jit(lambda G: theory.loss_of_G(G, eig, N, R))
    for k in range(5):
        P = top[:, :k]

        def f(m, P=P, k=k):
            return float(loss(P @ m.reshape(k, k) @ P.T))

        best = (
            scipy.optimize.minimize(f, np.zeros(k * k), method="BFGS", options={"gtol": 1e-12}).fun
            if k
            else f(np.zeros(0))
        )
        assert best == pytest.approx(plateaus[k], abs=1e-10), k
        assert float(loss(theory.pcr_G(eig, N, k, R))) == pytest.approx(plateaus[k], abs=1e-13)
    assert np.all(np.diff(plateaus) < 0)


def test_loss_of_G_against_monte_carlo():
    """The closed form against a sample mean of (1/2)(x_q^T G h - y_q)^2 over 100k prompts (4 standard errors),
    at a random G and a rotated covariance."""
    rng = np.random.default_rng(1)
    R = _rotation(4, seed=5)
    cov = np.asarray(theory.covariance_matrix(EIG, R))
    G = rng.normal(size=(4, 4)) * 0.5
    B, chol = 100_000, np.linalg.cholesky(cov)
    X = rng.normal(size=(B, N, 4)) @ chol.T
    xq = rng.normal(size=(B, 4)) @ chol.T
    w = rng.normal(size=(B, 4))
    y = np.einsum("bnd,bd->bn", X, w)
    h = np.einsum("bn,bnd->bd", y, X) / N
    err = 0.5 * (np.einsum("bd,de,be->b", xq, G, h) - np.einsum("bd,bd->b", xq, w)) ** 2
    se = err.std() / np.sqrt(B)
    assert abs(err.mean() - float(theory.loss_of_G(G, EIG, N, R))) < 4 * se


def test_shift_losses_against_monte_carlo():
    """Context from N(0, C), query from N(0, Q), tasks with E[w w^T] = A (uniform on a sphere-scaled law, not
    Gaussian): shift_loss against 100k prompts of length M = 12 (4 standard errors)."""
    rng = np.random.default_rng(2)
    d, M, B = 3, 12, 100_000
    C, Q = np.diag([1.0, 0.4, 0.2]), np.array([[0.5, 0.1, 0.0], [0.1, 0.8, 0.2], [0.0, 0.2, 0.3]])
    scale = np.array([1.5, 0.5, 1.0])
    G = rng.normal(size=(d, d))
    X = rng.normal(size=(B, M, d)) * np.sqrt(np.diag(C))
    xq = rng.normal(size=(B, d)) @ np.linalg.cholesky(Q).T
    w = rng.choice([-1.0, 1.0], size=(B, d)) * scale  # E[w w^T] = diag(scale^2)
    y = np.einsum("bnd,bd->bn", X, w)
    h = np.einsum("bn,bnd->bd", y, X) / M
    err = 0.5 * (np.einsum("bd,de,be->b", xq, G, h) - np.einsum("bd,bd->b", xq, w)) ** 2
    want = float(theory.shift_loss(G, M, C, query_cov=Q, task_cov=np.diag(scale**2)))
    assert abs(err.mean() - want) < 4 * err.std() / np.sqrt(B)


def test_shift_predictions():
    """ZFB section 4.2: task and query shift are tolerated (loss -> 0 as N, M grow), covariate shift is not;
    the named shift losses are shift_loss at G* = Gamma_N^{-1}; prompt length M = N is the minimum loss."""
    lam = np.diag(EIG)
    assert float(theory.prompt_length_loss(EIG, N, N)) == pytest.approx(theory.min_loss(EIG, N), rel=1e-13)
    assert float(theory.prompt_length_loss(EIG, N, np.inf)) < theory.min_loss(EIG, N)
    A, Q = np.diag([2.0, 0.5, 1.0, 3.0]), np.diag([0.3, 1.0, 2.0, 0.7])
    for n in (20, 200, 2000):
        L_task = float(theory.task_shift_loss(EIG, n, A, M=n))
        L_query = float(theory.query_shift_loss(EIG, n, Q, M=n))
        # at M = N the query-shift loss is tr(Q (I - Gamma^{-1} Lambda)) / 2
        want = 0.5 * np.trace(Q @ (np.eye(4) - np.asarray(theory.optimal_G(EIG, n)) @ lam))
        assert L_query == pytest.approx(want, rel=1e-12)
        assert L_task < 20.0 / n and L_query < 20.0 / n
    c = 2.0
    L_cov = float(theory.covariate_shift_loss(EIG, 2000, c**2 * lam, M=np.inf))
    # y_hat -> c^2 x_q^T w: 2 L -> tr(c^2 Lambda) (c^2 - 1)^2 as N, M -> inf, not 0
    assert L_cov == pytest.approx(0.5 * c**2 * (c**2 - 1) ** 2 * sum(EIG), rel=1e-2)
    np.testing.assert_allclose(theory.covariate_shift_map(EIG, 10**6, c**2 * lam), c**2 * np.eye(4), atol=1e-4)


def test_separate_time_against_quadrature():
    """The closed-form time of the scalar ODE (ZSLS eq 21) against quadrature of dt = dv / rate(v)."""
    lam, tr = 0.25, sum(EIG)
    gam = (1 + 1 / N) * lam + tr / N
    v_half = (2 * gam) ** (-1 / 3)
    for v0 in (1e-2, 1e-1):

        def inv_rate(v):
            return 1.0 / (lam**2 * v**2 - lam**3 * (1 + (1 + tr / lam) / N) * v**5)

        want, _ = scipy.integrate.quad(inv_rate, v0, v_half, epsabs=0, epsrel=1e-12, limit=200)
        got = float(theory.separate_time(v_half, v0, lam, N, tr))
        assert got == pytest.approx(want, rel=1e-10)
    # algebraic in the initial scale: t ~ 1/(lambda^2 v0)
    t_small = float(theory.separate_time(v_half, 1e-6, lam, N, tr))
    assert t_small * lam**2 * 1e-6 == pytest.approx(1.0, rel=1e-4)


def test_merged_time_course_is_the_flow_of_the_loss():
    """u(t) solves du/dt = 2 u (-dL/du) with L(u) = loss_of_G((u / sqrt d) I) for white data, and is half-way at
    merged_drop_time."""
    lam, d, u0 = 0.7, 3, 1e-4
    eig = (lam,) * d

    def L_of_u(u):
        return theory.loss_of_G((u / np.sqrt(d)) * jnp.eye(d), eig, N, None)

    ts = jnp.linspace(0.0, 12.0, 25)
    u = theory.merged_time_course(ts, lam, d, N, u0)
    du = jax.vmap(jax.grad(lambda t: theory.merged_time_course(t, lam, d, N, u0)))(ts)
    rhs = jax.vmap(lambda x: 2.0 * x * -jax.grad(L_of_u)(x))(u)
    np.testing.assert_allclose(du, rhs, rtol=1e-9, atol=1e-14)
    t_drop = theory.merged_drop_time(lam, d, N, u0)
    u_star = float(theory.merged_time_course(1e6, lam, d, N, u0))
    np.testing.assert_allclose(theory.optimal_G(eig, N), (u_star / np.sqrt(d)) * np.eye(d), rtol=1e-12)
    assert float(theory.merged_time_course(t_drop, lam, d, N, u0)) == pytest.approx(u_star / 2, rel=1e-10)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: theory.gamma_matrix((1.0, -0.5), 3), "eigenvalues"),
        (lambda: theory.gamma_matrix((1.0, 0.5), 0), "N"),
        (lambda: theory.optimal_G((1.0, 0.5), 3, rotation=np.ones((2, 2))), "rotation"),
        (lambda: theory.loss_of_G(np.eye(3), (1.0, 0.5), 3), "G"),
        (lambda: theory.pcr_G((1.0, 0.5), 3, 3), "k"),
        (lambda: theory.shift_loss(np.eye(2), 3, np.eye(2), task_cov=-np.eye(2)), "task_cov"),
        (lambda: theory.merged_drop_time(1.0, 2, 10, 5.0), "u0"),
    ],
)
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
