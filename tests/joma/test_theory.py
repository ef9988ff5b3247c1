"""JoMA's closed forms: the invariants, the softmax estimate and the normalised correlation against literal
transcriptions of the official script, the blow-up time against quadrature, the limit entropy, Fig. 4's mu."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from flows.joma import theory


def test_invariants_and_estimate_are_the_componentwise_formulas():
    rng = np.random.default_rng(0)
    z, V, W, xbar = rng.normal(size=5), rng.normal(size=(5, 3)), rng.normal(size=(8, 3)), rng.uniform(size=5)
    for i in range(5):
        s = sum(V[i, k] ** 2 for k in range(3))
        assert float(theory.exp_invariant(z, V, 0.5)[i]) == pytest.approx(z[i] - s / (2 * 0.5), rel=1e-14)
        assert float(theory.exp_invariant(z, V)[i]) == pytest.approx(z[i] - s / 2, rel=1e-14)
        assert float(theory.linear_invariant(z, V)[i]) == pytest.approx(z[i] ** 2 - s, rel=1e-14)
    # draw_figure_2_3.py: (W_tilde[:Mc].pow(2).sum(dim=1) - xbar * W.pow(2).sum()) / 2 / T
    want = (np.sum(V**2, axis=1) - xbar * np.sum(W**2)) / 2 / 0.5
    np.testing.assert_allclose(theory.softmax_estimate(V, W, xbar, 0.5), want, rtol=1e-14, atol=1e-13)


def official_norm_corr(v1, v2):
    """draw_figure_2_3.py's norm_corr, transcribed."""
    v1_s = v1 - v1.mean()
    v1_s = v1_s / (np.linalg.norm(v1_s) + 1e-8)
    v2_s = v2 - v2.mean()
    v2_s = v2_s / (np.linalg.norm(v2_s) + 1e-8)
    return float(v1_s @ v2_s)


def test_normalized_correlation_is_the_official_one():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=20), rng.normal(size=20)
    assert float(theory.normalized_correlation(a, b)) == pytest.approx(official_norm_corr(a, b), rel=1e-14)
    small = 1e-6 * a  # the eps matters at small norms, as in the official script
    assert float(theory.normalized_correlation(small, small)) == pytest.approx(official_norm_corr(small, small))
    assert float(theory.normalized_correlation(small, small)) < 1 - 1e-3


def test_entropy_and_limit_entropy():
    p = np.array([0.5, 0.25, 0.25, 0.0])
    assert float(theory.entropy(p)) == pytest.approx(1.5 * math.log(2), rel=1e-14)
    mu = np.array(theory.FIG4_MU)
    q = np.exp(mu**2 / 3.0)
    q = q / q.sum()
    assert theory.limit_entropy(mu, 3.0) == pytest.approx(-sum(x * math.log(x) for x in q), rel=1e-13)
    assert theory.limit_entropy([1.0, 1.0, 1.0]) == pytest.approx(math.log(3), rel=1e-14)
    with pytest.raises(ValueError, match="temperature"):
        theory.limit_entropy(mu, 0.0)
    with pytest.raises(ValueError, match="mu"):
        theory.limit_entropy([[1.0]])


@pytest.mark.parametrize("T, v0, delta", [(2.0, 0.0, 1.0), (2.0, 0.3, 2.5), (3.0, -0.5, 0.7)])
def test_blowup_time_is_the_integral(T, v0, delta):
    """t* = int_{v0}^inf e^{-s^2/T} ds / delta by quadrature; sqrt(pi/2) / delta at T = 2, v0 = 0."""
    quad, _ = integrate.quad(lambda s: math.exp(-(s**2) / T), v0, np.inf, epsabs=1e-14, epsrel=1e-13)
    assert float(theory.blowup_time(delta, T, v0)) == pytest.approx(quad / delta, rel=1e-11)
    to5, _ = integrate.quad(lambda s: math.exp(-(s**2) / T), v0, 5.0, epsabs=1e-14, epsrel=1e-13)
    assert float(theory.blowup_time(delta, T, v0, level=5.0)) == pytest.approx(to5 / delta, rel=1e-11)
    if T == 2.0 and v0 == 0.0:
        assert float(theory.blowup_time(delta)) == pytest.approx(math.sqrt(math.pi / 2) / delta, rel=1e-15)


def test_linear_mlp_solution_solves_the_flow():
    """v(t) = sqrt(T) erfinv(erf(v0/sqrt T) + 2 delta t / sqrt(pi T)) satisfies v' = delta e^{v^2/T} (finite
    differences) and v(0) = v0; it is nan past the blow-up."""
    T, delta, v0 = 2.0, 1.3, 0.2
    t = np.linspace(0.0, 0.9 * float(theory.blowup_time(delta, T, v0)), 7)
    h = 1e-6
    v = np.asarray(theory.linear_mlp_solution(t, delta, T, v0))
    dv = (
        np.asarray(theory.linear_mlp_solution(t + h, delta, T, v0))
        - np.asarray(theory.linear_mlp_solution(np.maximum(t - h, 0), delta, T, v0))
    ) / (t + h - np.maximum(t - h, 0))
    assert v[0] == pytest.approx(v0, rel=1e-14)
    np.testing.assert_allclose(dv[1:], delta * np.exp(v[1:] ** 2 / T), rtol=1e-6)
    assert np.isnan(float(theory.linear_mlp_solution(1.01 * float(theory.blowup_time(delta, T, v0)), delta, T, v0)))


def test_blowup_time_rejects_bad_input():
    with pytest.raises(ValueError, match="delta"):
        theory.blowup_time(0.0)
    with pytest.raises(ValueError, match="level"):
        theory.blowup_time(1.0, v0=2.0, level=1.0)
    with pytest.raises(ValueError, match="temperature"):
        theory.blowup_time(1.0, temperature=-1.0)


def test_fig4_mu_are_the_official_draws():
    """sort(rand(10) * 3 + 1) after torch.manual_seed(0), as draw_figure_4.py draws them."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    wstar, _ = (torch.rand(10) * 3 + 1).sort()
    assert tuple(float(x) for x in wstar) == theory.FIG4_MU
