"""The observables of linear attention against the model and the theory module."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from flows.linear_attention import data, model, observables, theory


def _rotation(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def _single(G, d):
    """Single-head reduced parameters with effective matrix G (w_22 = 1, W_11 = G^T)."""
    pv, kq = np.zeros((d + 1, d + 1)), np.zeros((d + 1, d + 1))
    pv[d, d] = 1.0
    kq[:d, :d] = np.asarray(G).T
    return {"W_PV": jnp.asarray(pv), "W_KQ": jnp.asarray(kq)}


def test_data_args():
    R = _rotation(4, 0)
    cfg = data.Config(rotation=R, N=10)
    args = observables.data_args(cfg)
    np.testing.assert_allclose(args["lam"], data.covariance(cfg), rtol=1e-15)
    assert float(args["N"]) == 10.0
    gamma = np.asarray(theory.gamma_matrix(cfg.eigenvalues, cfg.N, R))
    np.testing.assert_allclose(R.T @ gamma @ R, np.diag(args["gamma"]), atol=1e-14)


def test_observables_on_the_optimum_and_the_pcr_plateaus():
    R = _rotation(4, 1)
    cfg = data.Config(rotation=R, eigenvalues=(0.25, 1.0, 0.1, 0.5))  # not sorted: alignment follows the order given
    args = observables.data_args(cfg)
    order = np.argsort(-np.asarray(cfg.eigenvalues))
    losses = theory.plateau_losses(cfg.eigenvalues, cfg.N)
    for k in range(cfg.d + 1):
        params = _single(theory.pcr_G(cfg.eigenvalues, cfg.N, k, R), cfg.d)
        out = observables.observe(0.0, params, args)
        expected = np.zeros(cfg.d)
        expected[order[:k]] = 1.0
        np.testing.assert_allclose(out["alignment"], expected, atol=1e-13)
        assert float(out["n_learned"]) == k
        np.testing.assert_allclose(out["loss"], losses[k], rtol=1e-12)
        np.testing.assert_allclose(out["G"], theory.pcr_G(cfg.eigenvalues, cfg.N, k, R), atol=1e-14)
        for name, f in observables.OBSERVABLES.items():
            np.testing.assert_allclose(f(0.0, params, args), out[name], rtol=1e-14, atol=1e-15)


def test_observables_agree_with_the_model_at_random_parameters():
    for form, kw in (("merged", dict(heads=3)), ("separate", dict(heads=2, rank=2))):
        cfg = data.Config(d=3, N=6, eigenvalues=(1.0, 0.5, 0.2), form=form, init="random", **kw)
        params = model.init_params(cfg)
        out = observables.observe(0.0, params, observables.data_args(cfg))
        np.testing.assert_allclose(out["loss"], model.population_loss(params, cfg), rtol=1e-14)
        np.testing.assert_allclose(out["G"], model.effective_G(params, cfg), rtol=1e-14)
        G = np.asarray(out["G"])
        gam = (1 + 1 / cfg.N) * np.asarray(cfg.eigenvalues) + sum(cfg.eigenvalues) / cfg.N
        np.testing.assert_allclose(out["alignment"], gam * np.diag(G), rtol=1e-13)


def test_shift_losses_match_the_theory():
    """At the optimum G = Gamma^{-1}: task, query and covariate shift (ZFB Sec. 4.2) against theory.shift_loss."""
    cfg = data.Config()
    G = theory.optimal_G(cfg.eigenvalues, cfg.N)
    params = _single(G, cfg.d)
    lam = np.asarray(data.covariance(cfg))
    task = np.diag([2.0, 0.5, 1.0, 3.0])
    query = np.diag([0.3, 1.0, 2.0, 0.7])
    test = 4.0 * lam
    np.testing.assert_allclose(
        observables.task_shift_loss(params, cfg, task), theory.shift_loss(G, cfg.N, lam, task_cov=task), rtol=1e-12
    )
    np.testing.assert_allclose(
        observables.query_shift_loss(params, cfg, query), theory.shift_loss(G, cfg.N, lam, query_cov=query), rtol=1e-12
    )
    shifted = observables.covariate_shift_loss(params, cfg, test)
    np.testing.assert_allclose(shifted, theory.shift_loss(G, cfg.N, test), rtol=1e-12)
    assert shifted > 10 * model.population_loss(params, cfg)  # covariate shift breaks the trained model
