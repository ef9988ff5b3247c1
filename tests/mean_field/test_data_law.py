"""The law of the mean-field prompts (flows/mean_field/data.py) against its formulas, within a few standard
errors on one large fixed draw: x and beta uniform on the unit sphere S^{d-1}, labels beta^T x plus noise
uniform on [-eps, eps], independent across prompts and columns, on the context labels and on the target.

Moments used (u uniform on S^{d-1}): E u = 0, E u u^T = I / d, E u_i^2 u_k^2 = 1 / (d (d + 2)) (i != k),
E u_i^4 = 3 / (d (d + 2)), E u_i^8 = 105 / (d (d + 2) (d + 4) (d + 6)); for beta, x independent and uniform,
E (beta^T x)^2 = 1 / d and E (beta^T x)^4 = 3 / (d (d + 2)); for e uniform on [-eps, eps], E e = 0,
E e^2 = eps^2 / 3, E e^4 = eps^4 / 5. Each check allows 4 standard errors of the estimate (its variance from
the same formulas), so a right sampler fails one check with probability about 6e-5; the draw is fixed."""

import numpy as np
import pytest
from scipy import stats

from flows import mean_field as mf

EPS = 0.3
CFG = mf.Config(d=3, D=5, N=4, n_train=6000, label_noise=EPS, seed=11)
Z_SE = 4.0  # standard errors allowed


@pytest.fixture(scope="module")
def draws():
    """(noisy, clean): the same prompts with and without label noise (same key: the same x and beta)."""
    noisy = mf.training_set(CFG)
    clean = mf.training_set(CFG.replace(label_noise=0.0))
    return (
        {"Z0": np.asarray(noisy.Z0), "y": np.asarray(noisy.y)},
        {"Z0": np.asarray(clean.Z0), "y": np.asarray(clean.y)},
    )


def _within(sample, mean, var, what):
    """|mean(sample) - mean| <= Z_SE sqrt(var / n), var the variance of one term."""
    sample = np.asarray(sample, float).ravel()
    se = np.sqrt(var / sample.size)
    assert abs(sample.mean() - mean) <= Z_SE * se, (what, sample.mean(), mean, se)


def _noise(draws):
    noisy, clean = draws
    d, N = CFG.d, CFG.N
    context = noisy["Z0"][:, d, :N] - clean["Z0"][:, d, :N]  # (n, N)
    target = noisy["y"] - clean["y"]  # (n,)
    return context, target


@pytest.mark.parametrize("where", ["context", "target"])
def test_label_noise_mean_variance_and_law(draws, where):
    """Mean 0 (variance of a term eps^2/3), second moment eps^2/3 (variance eps^4/5 - eps^4/9), bounded by eps,
    and uniform on [-eps, eps] by Kolmogorov-Smirnov (p > 1e-3), on the context labels and on the target."""
    context, target = _noise(draws)
    e = context.ravel() if where == "context" else target
    var, m4 = EPS**2 / 3, EPS**4 / 5
    _within(e, 0.0, var, "mean")
    _within(e**2, var, m4 - var**2, "second moment")
    assert np.max(np.abs(e)) <= EPS * (1 + 1e-12)
    assert np.max(np.abs(e)) > 0.99 * EPS  # the whole interval is reached (n >= 6000 draws)
    assert stats.kstest(e, stats.uniform(loc=-EPS, scale=2 * EPS).cdf).pvalue > 1e-3


def test_label_noise_is_independent_across_columns_and_of_the_target(draws):
    """The mean of e_i e_k over pairs of distinct columns of one prompt (context-context and context-target) is
    0 within 4 standard errors (variance of a term (eps^2/3)^2 when independent); a noise shared within a prompt
    would put it at eps^2/3."""
    context, target = _noise(draws)
    var = EPS**2 / 3
    _within(context[:, 0] * context[:, 1], 0.0, var**2, "context pair")
    _within(context[:, -1] * target, 0.0, var**2, "context-target pair")


def test_inputs_and_task_vectors_are_uniform_on_the_sphere(draws):
    """x (context and query columns) and beta: unit norm, E u = 0, E u u^T = I/d, E u_i^4 = 3/(d(d+2)). beta is
    recovered from the clean context by least squares (N = 4 > d = 3 points)."""
    _, clean = draws
    d, N = CFG.d, CFG.N
    x = np.swapaxes(clean["Z0"][:, :d, :], 1, 2).reshape(-1, d)  # every column: (n (N + 1), d)
    X, labels = np.swapaxes(clean["Z0"][:, :d, :N], 1, 2), clean["Z0"][:, d, :N]
    beta = np.stack([np.linalg.lstsq(Xi, yi, rcond=None)[0] for Xi, yi in zip(X, labels, strict=True)])
    m4 = 3.0 / (d * (d + 2))
    for name, u in (("x", x), ("beta", beta)):
        assert np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-12), name
        for i in range(d):
            _within(u[:, i], 0.0, 1.0 / d, f"{name} mean {i}")
            _within(u[:, i] ** 2, 1.0 / d, m4 - 1.0 / d**2, f"{name} second moment {i}")
            _within(u[:, i] ** 4, m4, 105.0 / (d * (d + 2) * (d + 4) * (d + 6)) - m4**2, f"{name} fourth {i}")
            for k in range(i + 1, d):  # E u_i u_k = 0, E u_i^2 u_k^2 = 1/(d(d+2))
                _within(u[:, i] * u[:, k], 0.0, 1.0 / (d * (d + 2)), f"{name} cross {i}{k}")


def test_clean_target_moments(draws):
    """y_clean = beta^T x_q: E y = 0, E y^2 = 1/d (variance of a term 3/(d(d+2)) - 1/d^2); the target is read
    at the query column, whose label slot in Z0 is empty."""
    noisy, clean = draws
    d = CFG.d
    y = clean["y"]
    _within(y, 0.0, 1.0 / d, "target mean")
    _within(y**2, 1.0 / d, 3.0 / (d * (d + 2)) - 1.0 / d**2, "target second moment")
    assert np.all(noisy["Z0"][:, d, CFG.N] == 0.0)
