"""Linear attention beyond the training distribution, against a literal exact reference.

The reference (`_literal_loss`) never forms a Wishart matrix: at a fixed task w and query x_q the prediction
y_hat = (1/M) sum_i (g . x_i)(w . x_i), g = G^T x_q, is an average of M i.i.d. products of two jointly
Gaussian scalars, so over the context E[y_hat] = g^T C w and Var[y_hat] = ((g^T C g)(w^T C w) + (g^T C w)^2) / M
(Isserlis for one pair); what is left is a polynomial of degree <= 4 in each coordinate of (w, x_q),
integrated exactly by a 3-node Gauss-Hermite tensor rule. Every covariance here is rotated against every other
(none commute), G is not symmetric and the test prompt length M differs from the training length N, so that
a covariance on the wrong side of G, a transposed G, or N for M changes the number.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from numpy.polynomial import hermite_e

from flows.linear_attention import data, model, theory

EIG = (1.0, 0.45, 0.2)
N = 6


def _orthogonal(d, seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def _spd(eig, seed):
    Q = _orthogonal(len(eig), seed)
    return (Q * np.asarray(eig)) @ Q.T


R = _orthogonal(3, 11)
LAM = (R * np.asarray(EIG)) @ R.T
C_TEST = _spd((1.6, 0.7, 0.3), 12)  # context covariance of the test prompts
Q_TEST = _spd((0.9, 0.5, 1.4), 13)  # query covariance
A_TEST = _spd((2.0, 0.6, 0.25), 14)  # task second moment


def _root(S):
    vals, vecs = np.linalg.eigh(S)
    return (vecs * np.sqrt(np.clip(vals, 0.0, None))) @ vecs.T


def _literal_loss(G, M, C, Q, A):
    """(1/2) E[(y_hat - x_q . w)^2] for M context inputs ~ N(0, C), x_q ~ N(0, Q), w ~ N(0, A), y_hat =
    x_q^T G h, h = (1/M) sum_i (w . x_i) x_i; M = inf: the context average is exact (variance 0)."""
    d = G.shape[0]
    nodes, weights = hermite_e.hermegauss(3)
    weights = weights / np.sqrt(2.0 * np.pi)
    total = 0.0
    rA, rQ = _root(A), _root(Q)
    for idx in itertools.product(range(3), repeat=2 * d):
        z = nodes[list(idx)]
        wt = np.prod(weights[list(idx)])
        w, xq = rA @ z[:d], rQ @ z[d:]
        g = G.T @ xq
        mean = g @ C @ w
        var = 0.0 if np.isinf(M) else ((g @ C @ g) * (w @ C @ w) + mean**2) / M
        total += wt * ((mean - xq @ w) ** 2 + var)
    return 0.5 * total


def _gamma_inverse(eig, n, rot):
    """Gamma_N^{-1} from its definition (1 + 1/N) Lambda + tr(Lambda) / N I, inverted numerically."""
    lam = (rot * np.asarray(eig)) @ rot.T
    return np.linalg.inv((1.0 + 1.0 / n) * lam + np.trace(lam) / n * np.eye(len(eig)))


def test_shift_loss_equals_the_literal_reference():
    """Context, query and task all shifted, a non-symmetric G, test prompt lengths other than N and inf."""
    G = np.random.default_rng(5).normal(size=(3, 3))
    for M in (4, 37, np.inf):
        got = float(theory.shift_loss(G, M, C_TEST, query_cov=Q_TEST, task_cov=A_TEST))
        np.testing.assert_allclose(got, _literal_loss(G, M, C_TEST, Q_TEST, A_TEST), rtol=1e-12, err_msg=str(M))
    # defaults: the query follows the context, the task is N(0, I)
    got = float(theory.shift_loss(G, 9, C_TEST))
    np.testing.assert_allclose(got, _literal_loss(G, 9, C_TEST, C_TEST, np.eye(3)), rtol=1e-12)


@pytest.mark.parametrize("M", [2, 6, 50, np.inf])
def test_prompt_length_loss_is_the_trained_model_at_another_length(M):
    """ZFB Theorem 4.2: G* = Gamma_N^{-1} (trained at N) tested on prompts of length M; against the literal
    reference and the eigenbasis sum 2 L = sum_i (lam_i^2 gamma_i(M) / gamma_i(N)^2 - 2 lam_i^2 / gamma_i(N)
    + lam_i), gamma_i(n) = (1 + 1/n) lam_i + tr / n (gamma_i(inf) = lam_i)."""
    got = float(theory.prompt_length_loss(EIG, N, M, R))
    G = _gamma_inverse(EIG, N, R)
    np.testing.assert_allclose(got, _literal_loss(G, M, LAM, LAM, np.eye(3)), rtol=1e-12)
    lam = np.asarray(EIG)
    gam_n = (1 + 1 / N) * lam + lam.sum() / N
    gam_m = lam if np.isinf(M) else (1 + 1 / M) * lam + lam.sum() / M
    two_loss = np.sum(lam**2 * gam_m / gam_n**2 - 2 * lam**2 / gam_n + lam)
    np.testing.assert_allclose(got, 0.5 * two_loss, rtol=1e-12)
    if M != N:  # the model trained at N is not the best at M: Gamma_M^{-1} does better there
        best = _literal_loss(_gamma_inverse(EIG, M if np.isfinite(M) else 1e300, R), M, LAM, LAM, np.eye(3))
        assert got > best * (1 + 1e-6)


def test_named_shift_losses_are_the_trained_model_under_that_shift():
    """task, query and covariate shift of theory at G* = Gamma_N^{-1}, at M = N and at another M, against the
    literal reference with every other law the training one."""
    G = _gamma_inverse(EIG, N, R)
    eye = np.eye(3)
    for M in (N, 23):
        cases = (
            (theory.task_shift_loss(EIG, N, A_TEST, M=M, rotation=R), (LAM, LAM, A_TEST)),
            (theory.query_shift_loss(EIG, N, Q_TEST, M=M, rotation=R), (LAM, Q_TEST, eye)),
            (theory.covariate_shift_loss(EIG, N, C_TEST, M=M, rotation=R), (C_TEST, C_TEST, eye)),
        )
        for got, (C, Q, A) in cases:
            np.testing.assert_allclose(float(got), _literal_loss(G, M, C, Q, A), rtol=1e-12)


def test_covariate_shift_map_is_the_long_prompt_prediction_of_the_network():
    """Gamma^{-1} Lambda': the trained single head (reduced parameters at G*, `model.predict`, the literal
    attention) on prompts of 40000 context inputs from N(0, Lambda'): its prediction is x_q^T Gamma^{-1} Lambda' w
    up to the context's sampling error (relative ~ 1/sqrt(40000)); Lambda' does not commute with Lambda."""
    want = theory.covariate_shift_map(EIG, N, C_TEST, rotation=R)
    G = _gamma_inverse(EIG, N, R)
    np.testing.assert_allclose(want, G @ C_TEST, rtol=1e-12)
    assert np.max(np.abs(G @ C_TEST - C_TEST @ G)) > 0.1  # the side matters here
    d, M, B = 3, 40_000, 6
    params = {"W_PV": jnp.zeros((d + 1, d + 1)).at[d, d].set(1.0), "W_KQ": jnp.zeros((d + 1, d + 1))}
    params["W_KQ"] = params["W_KQ"].at[:d, :d].set(jnp.asarray(G.T))
    rng = np.random.default_rng(3)
    X = rng.normal(size=(B, M, d)) @ _root(C_TEST)
    xq = rng.normal(size=(B, d)) @ _root(C_TEST)
    w = rng.normal(size=(B, d))
    y = np.einsum("bnd,bd->bn", X, w)
    yq = np.einsum("bi,bi->b", xq, w)
    prompts = data.Prompts(*(jnp.asarray(a) for a in (X, y, xq, yq, w)))
    got = np.asarray(model.predict(params, None, prompts))
    wanted = np.einsum("bi,ij,bj->b", xq, want, w)
    # the error x_q^T G (h - Lambda' w) has variance ((g^T C g)(w^T C w) + (g^T C w)^2) / M, g = G^T x_q
    g = xq @ G
    se = np.sqrt((np.einsum("bi,ij,bj->b", g, C_TEST, g) * np.einsum("bi,ij,bj->b", w, C_TEST, w)
                  + np.einsum("bi,ij,bj->b", g, C_TEST, w) ** 2) / M)  # fmt: skip
    assert np.all(np.abs(got - wanted) < 5.0 * se), (got, wanted, se)
    wrong = np.einsum("bi,ij,bj->b", xq, C_TEST @ G, w)
    assert np.max(np.abs(wrong - wanted) / se) > 50.0
