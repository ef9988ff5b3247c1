"""The exact population loss of every form: against Monte Carlo (4 standard errors), against an independent
exact reference (the literal embedding, the Wishart moments of the context, a tensor Gauss-Hermite rule over
(w, x_q)) to 1e-12, and on ZFB's reduced parameters against the closed form L(G) of the theory module."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy.polynomial import hermite_e

from flows.linear_attention import data, model, theory

FORMS = {
    "single": dict(form="single"),
    "merged": dict(form="merged", heads=3),
    "separate": dict(form="separate", heads=2, rank=2),
}


def _rotation(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def _root(S):
    vals, vecs = np.linalg.eigh(S)
    return vecs @ np.diag(np.sqrt(vals)) @ vecs.T


def _reference(params, Lc, Lq, Sw, N, nodes=5):
    """(1/2) E[(y_hat - y_q)^2] from the embedding itself: at fixed (w, x_q) the prediction is affine in the
    context covariance Lh (E E^T / N = [[Lh + x_q x_q^T / N, Lh w], [w^T Lh, w^T Lh w]]), y_hat = <Lh, B> + c0,
    read off at Lh = 0 and the unit matrices; the context average is (<Lc, B> + c0 - y_q)^2 + 2 tr(Lc Bs Lc Bs)/N
    (Bs the symmetric part of B); the rest by a tensor Gauss-Hermite rule in (w, x_q), exact up to degree
    2 * nodes - 1 in each coordinate."""
    P = {k: np.asarray(v) for k, v in params.items()}
    if "W_K" in P:
        K = np.einsum("hir,hjr->hij", P["W_K"], P["W_Q"])
    else:
        K = P["W_KQ"].reshape((-1,) + P["W_KQ"].shape[-2:])
    p = P["W_PV"].reshape((-1,) + P["W_PV"].shape[-2:])[:, -1, :]
    d = Lc.shape[0]
    x1, w1 = hermite_e.hermegauss(nodes)
    w1 = w1 / np.sqrt(2 * np.pi)
    grid = np.array(list(itertools.product(range(nodes), repeat=2 * d)))
    z, wt = x1[grid], np.prod(w1[grid], axis=1)
    w = z[:, :d] @ _root(Sw).T
    x = z[:, d:] @ _root(Lq).T
    eq = np.concatenate([x, np.zeros((len(x), 1))], axis=1)

    def yhat(L):  # L (P, d, d) -> (P,)
        top = np.concatenate([L + np.einsum("pi,pj->pij", x, x) / N, np.einsum("pij,pj->pi", L, w)[:, :, None]], 2)
        bottom = np.concatenate([np.einsum("pi,pij->pj", w, L), np.einsum("pi,pij,pj->p", w, L, w)[:, None]], 1)
        M = np.concatenate([top, bottom[:, None, :]], axis=1)
        return np.einsum("hi,pij,hjk,pk->p", p, M, K, eq)

    zero = np.zeros((len(x), d, d))
    c0 = yhat(zero)
    B = np.zeros((len(x), d, d))
    for i in range(d):
        for j in range(d):
            unit = zero.copy()
            unit[:, i, j] = 1.0
            B[:, i, j] = yhat(unit) - c0
    Bs = 0.5 * (B + np.swapaxes(B, 1, 2))
    mean = np.einsum("ij,pij->p", Lc, B) + c0 - np.einsum("pi,pi->p", w, x)
    var = 2.0 * np.einsum("ij,pjk,kl,pli->p", Lc, Bs, Lc, Bs) / N
    return 0.5 * np.sum(wt * (mean**2 + var))


def _config(form, d=2, **kw):
    eig = (1.0, 0.4, 0.2)[:d]
    return data.Config(d=d, N=3, eigenvalues=eig, rotation=_rotation(d, 1), init="random", init_scale=0.6,
                       **FORMS[form], **kw)  # fmt: skip


@pytest.mark.parametrize(
    "form", [pytest.param(f, marks=pytest.mark.slow) if f == "merged" else f for f in sorted(FORMS)]
)
def test_population_loss_equals_the_exact_reference(form):
    cfg = _config(form)
    params = model.init_params(cfg)
    lam = np.asarray(data.covariance(cfg))
    ref = _reference(params, lam, lam, np.eye(cfg.d), cfg.N)
    np.testing.assert_allclose(model.population_loss(params, cfg), ref, rtol=1e-12)


@pytest.mark.parametrize("form", ["merged", "separate"])
def test_shifted_loss_equals_the_exact_reference(form):
    """Context, query and task laws all different, and another prompt length (the attention normalised by it)."""
    cfg = _config(form)
    params = model.init_params(cfg)
    Lc = np.array([[1.3, 0.2], [0.2, 0.5]])
    Lq = np.array([[0.7, -0.3], [-0.3, 0.9]])
    Sw = np.array([[2.0, 0.5], [0.5, 0.6]])
    got = model.shifted_loss(params, cfg, context_cov=Lc, query_cov=Lq, task_cov=Sw, prompt_length=7)
    np.testing.assert_allclose(got, _reference(params, Lc, Lq, Sw, 7), rtol=1e-12)
    lam = np.asarray(data.covariance(cfg))
    np.testing.assert_allclose(model.shifted_loss(params, cfg), model.population_loss(params, cfg), rtol=1e-14)
    np.testing.assert_allclose(
        model.shifted_loss(params, cfg, query_cov=Lq), _reference(params, lam, Lq, np.eye(2), cfg.N), rtol=1e-12
    )


def test_shifted_loss_bad_values_name_the_field():
    cfg = _config("single")
    params = model.init_params(cfg)
    for kw, field in (
        (dict(context_cov=np.ones((3, 3))), "context_cov"),
        (dict(query_cov=np.array([[1.0, 2.0], [0.0, 1.0]])), "query_cov"),
        (dict(task_cov=-np.eye(2)), "task_cov"),
        (dict(prompt_length=0), "prompt_length"),
    ):
        with pytest.raises(ValueError, match=field):
            model.shifted_loss(params, cfg, **kw)


# one form in the default run (every form equals the independent exact reference above to 1e-12)
@pytest.mark.parametrize(
    "form", [f if f == "single" else pytest.param(f, marks=pytest.mark.slow) for f in sorted(FORMS)]
)
def test_population_loss_matches_monte_carlo(form):
    """At random (non-reduced) parameters, d = 3: the exact value within 4 standard errors of the mean of
    (1/2)(y_hat - y_q)^2 over 200000 prompts."""
    cfg = _config(form, d=3).replace(N=4, init_scale=0.5)
    params = model.init_params(cfg)
    exact = float(model.population_loss(params, cfg))
    prompts = data.sample(cfg, 11, 200_000)
    err = 0.5 * np.asarray(model.predict(params, cfg, prompts) - prompts.yq) ** 2
    se = err.std() / np.sqrt(err.size)
    assert abs(err.mean() - exact) < 4 * se, (exact, err.mean(), se)
    assert se < 0.02 * exact  # the check has teeth


def _reduced(form, cfg, rng):
    """Parameters on ZFB's reduced manifold (u = 0, b = 0: y_hat = x_q^T G h)."""
    d, H = cfg.d, cfg.heads
    params = {k: np.zeros(v.shape) for k, v in model.init_params(cfg).items()}
    if form == "single":
        params["W_PV"][d, d] = rng.standard_normal()
        params["W_KQ"][:d, :d] = rng.standard_normal((d, d))
    else:
        params["W_PV"][:, d, d] = rng.standard_normal(H)
        for k in params:
            if k != "W_PV":
                params[k][:, :d] = rng.standard_normal(params[k][:, :d].shape)
    return {k: jnp.asarray(v) for k, v in params.items()}


@pytest.mark.parametrize(
    "form", [pytest.param(f, marks=pytest.mark.slow) if f == "merged" else f for f in sorted(FORMS)]
)
def test_reduced_parameters_give_the_closed_form(form):
    """On u = 0, b = 0 the loss is ZFB's L(G), 2L = tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) +
    tr(Lambda), for G = effective_G (the theory module's loss_of_G, and the closed form written out here)."""
    cfg = data.Config(rotation=_rotation(4, 3), init="random", **FORMS[form])
    params = _reduced(form, cfg, np.random.default_rng(7))
    G = np.asarray(model.effective_G(params, cfg))
    lam = np.asarray(data.covariance(cfg))
    gamma = (1 + 1 / cfg.N) * lam + np.trace(lam) / cfg.N * np.eye(cfg.d)
    two_loss = np.trace(G.T @ lam @ G @ gamma @ lam) - 2 * np.trace(lam @ G @ lam) + np.trace(lam)
    got = float(model.population_loss(params, cfg))
    np.testing.assert_allclose(got, 0.5 * two_loss, rtol=1e-12)
    np.testing.assert_allclose(got, theory.loss_of_G(G, cfg.eigenvalues, cfg.N, cfg.rotation), rtol=1e-12)
    shifts = dict(context_cov=2.0 * lam, query_cov=np.diag([1.0, 2.0, 0.5, 0.1]), task_cov=np.diag([1.0, 0, 2, 3]))
    np.testing.assert_allclose(
        model.shifted_loss(params, cfg, prompt_length=50, **shifts), theory.shift_loss(G, 50, **shifts), rtol=1e-12
    )


def test_optimum_and_pcr_plateaus():
    """G = Gamma^{-1} gives the minimum loss and the PCR matrices give the plateau losses."""
    cfg = data.Config()
    d = cfg.d
    for k, expected in enumerate(theory.plateau_losses(cfg.eigenvalues, cfg.N)):
        Gk = np.asarray(theory.pcr_G(cfg.eigenvalues, cfg.N, k))
        params = {"W_PV": np.zeros((d + 1, d + 1)), "W_KQ": np.zeros((d + 1, d + 1))}
        params["W_PV"][d, d] = 1.0
        params["W_KQ"][:d, :d] = Gk.T
        got = model.population_loss({n: jnp.asarray(v) for n, v in params.items()}, cfg)
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_cubature_is_exact_to_degree_five():
    for d in (1, 2, 3, 6):
        z, wt = model._cubature(d)
        assert z.shape == (2 * d * d + 1, d)
        np.testing.assert_allclose(wt.sum(), 1.0, rtol=1e-14)
        np.testing.assert_allclose(np.einsum("p,pi,pj->ij", wt, z, z), np.eye(d), atol=1e-13)
        m4 = np.einsum("p,pi,pj,pk,pl->ijkl", wt, z, z, z, z)
        eye = np.eye(d)
        isserlis = (
            np.einsum("ij,kl->ijkl", eye, eye) + np.einsum("ik,jl->ijkl", eye, eye) + np.einsum("il,jk->ijkl", eye, eye)
        )
        np.testing.assert_allclose(m4, isserlis, atol=1e-12)
        assert np.max(np.abs(np.einsum("p,pi,pj,pk->ijk", wt, z, z, z))) < 1e-13


def test_population_loss_gradient():
    """jax.grad of the exact loss against central differences (every form, every parameter)."""
    for form in sorted(FORMS):
        cfg = _config(form)
        params = model.init_params(cfg)
        loss = jax.jit(model.population_loss, static_argnums=1)
        grads = jax.jit(jax.grad(model.population_loss), static_argnums=1)(params, cfg)
        rng = np.random.default_rng(0)
        for k in params:
            direction = jnp.asarray(rng.standard_normal(params[k].shape))
            eps = 1e-5
            plus = loss({**params, k: params[k] + eps * direction}, cfg)
            minus = loss({**params, k: params[k] - eps * direction}, cfg)
            fd = (plus - minus) / (2 * eps)
            np.testing.assert_allclose(jnp.sum(grads[k] * direction), fd, rtol=1e-7, err_msg=f"{form} {k}")
