"""Power-law fitting (flows.fitting): known slopes recovered from synthetic data with multiplicative
lognormal noise over seeds, empirical coverage of the bootstrap intervals, the joint M^a L^b fit, model
ranking, exact power laws, and the input validation."""

import math

import numpy as np
import pytest

from flows import fitting
from flows.fitting import compare_models, joint_power_fit, power_law_fit

X = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
SIGMA = 0.2  # lognormal noise: y = C x^p exp(SIGMA g), g ~ N(0, 1)


def _synthetic(rng, slope, n_seeds=5, C=3.0, sigma=SIGMA):
    x = np.tile(X, n_seeds)
    seeds = np.repeat(np.arange(n_seeds), X.size)
    y = C * x**slope * np.exp(sigma * rng.standard_normal(x.size))
    return x, y, seeds


@pytest.mark.parametrize("slope", [-1.0, -0.5])
@pytest.mark.parametrize("interval", ["t", "percentile"])
def test_recovers_known_slope_with_noise(slope, interval):
    rng = np.random.default_rng(11)
    x, y, seeds = _synthetic(rng, slope, n_seeds=8)
    fit = power_law_fit(x, y, seeds=seeds, n_boot=1000, rng=3, interval=interval)
    # OLS slope sd = sigma / sqrt(sum (log x - mean)^2) = 0.2 / sqrt(8 * 8.4) ~ 0.024
    assert abs(fit.slope - slope) < 0.08
    assert abs(fit.intercept - math.log(3.0)) < 0.3
    assert fit.contains(slope)
    assert abs(fit.deviation(slope)) <= 1.0
    assert not fit.contains(slope + 0.5) and abs(fit.deviation(slope + 0.5)) > 1.0
    lo, hi = fit.slope_ci
    assert lo < fit.slope < hi and 0.02 < hi - lo < 0.3
    assert fit.n_points == 48 and fit.n_groups == 8 and fit.bootstrap == "cluster"
    assert fit.n_boot_used == 1000 and fit.boot_slopes.shape == (1000,)
    assert abs(fit.residual_std - SIGMA) < 0.06
    assert fit.interval == interval and fit.level == 0.95


def test_fit_is_deterministic_for_an_integer_rng():
    x, y, seeds = _synthetic(np.random.default_rng(0), -1.0)
    a = power_law_fit(x, y, seeds=seeds, n_boot=300, rng=7)
    b = power_law_fit(x, y, seeds=seeds, n_boot=300, rng=7)
    assert a == b and np.array_equal(a.boot_slopes, b.boot_slopes)


# The coverage checks run 2000 synthetic experiments each (binomial sd 0.005 at 0.95, 0.007 at 0.90). Their
# bands hold the right construction by >= 5 sd (measured 0.9455-0.9545 against floors 0.92-0.925) and leave
# out the two-sided level read as one-sided (t_{(1+level)/2} -> t_level; measured 0.8995 and 0.9025 for the
# power law, >= 3.3 sd of their own noise below the floor 0.925; 0.893 for the joint fit's a, 3.9 sd below
# 0.92) and, for the cluster bootstrap over 5 seeds, the percentile interval (0.84) and a normal quantile in
# place of the t one (0.88). Smaller slips (a degree of freedom more, the variance inflation dropped:
# 0.93-0.95) are within the binomial noise of any affordable coverage run; tests/test_fitting_pins.py pins
# those exactly.
N_EXP = 2000


@pytest.mark.parametrize("cluster", [pytest.param(True, marks=pytest.mark.slow), False], ids=["cluster", "points"])
def test_coverage_of_95_percent_interval(cluster):
    """2000 synthetic experiments (5 seeds x 6 x values, n_boot 200): the 95% t interval holds the true slope
    in 92.5%-97.5% of them. Measured: 0.9545 (cluster bootstrap over 5 seeds), 0.9545 (point bootstrap of
    30 points); with the one-sided quantile t_{0.95}: 0.90 (both). In the cluster case the percentile
    interval of the same replicates undercovers (the documented reason for the t default): measured 0.8365,
    asserted <= 0.89 and at least 0.06 below the t interval."""
    rng = np.random.default_rng(2024)
    hits = {"t": 0, "percentile": 0}
    for e in range(N_EXP):
        x, y, seeds = _synthetic(rng, -1.0, n_seeds=5)
        for interval in ("t", "percentile") if cluster else ("t",):
            fit = power_law_fit(x, y, seeds=seeds if cluster else None, n_boot=200, rng=e, interval=interval)
            hits[interval] += fit.contains(-1.0)
    cover = {k: v / N_EXP for k, v in hits.items()}
    assert 0.925 <= cover["t"] <= 0.975, cover
    if cluster:
        assert cover["percentile"] <= 0.89 and cover["t"] - cover["percentile"] >= 0.06, cover


def test_exact_power_law_gives_exact_slope_and_zero_width_interval():
    x = np.tile(X, 5)
    seeds = np.repeat(np.arange(5), X.size)
    y = 0.7 * x**-1.5
    for s, interval in ((seeds, "t"), (None, "percentile"), (None, "t")):
        fit = power_law_fit(x, y, seeds=s, n_boot=200, interval=interval)
        assert abs(fit.slope + 1.5) < 1e-12
        assert abs(fit.intercept - math.log(0.7)) < 1e-12
        assert fit.slope_ci[1] - fit.slope_ci[0] < 1e-12 and fit.residual_std < 1e-12
        assert fit.contains(fit.slope)
        np.testing.assert_allclose(fit.predict(X), 0.7 * X**-1.5, rtol=1e-12)
    assert abs(fit.prefactor - 0.7) < 1e-12


def test_point_bootstrap_drops_degenerate_resamples():
    # 3 points, 2 distinct x: resamples with one x only (prob 2 * (1/3)^3 + ... ) are dropped
    fit = power_law_fit([1.0, 1.0, 2.0], [1.0, 1.1, 0.5], n_boot=400, rng=1)
    assert 0 < fit.n_boot_used < 400 and fit.boot_slopes.shape == (fit.n_boot_used,)


def _grid(n_seeds=6):
    M, L = np.meshgrid([8.0, 16.0, 32.0, 64.0, 128.0], [2.0, 4.0, 8.0, 16.0], indexing="ij")
    M, L = np.tile(M.ravel(), n_seeds), np.tile(L.ravel(), n_seeds)
    seeds = np.repeat(np.arange(n_seeds), M.size // n_seeds)
    return M, L, seeds


def test_joint_fit_takes_the_bootstrap_options_of_power_law_fit():
    """`joint_power_fit(**options)` takes `power_law_fit`'s keywords with its defaults (n_boot 2000, level 0.95,
    rng 0, interval "t", points resampled): the call without them is the call with them written out, bit for
    bit; an unknown keyword is a TypeError naming it."""
    rng = np.random.default_rng(5)
    M, L, seeds = _grid()
    err = 2.0 * M**-0.5 * L**-1.0 * np.exp(0.1 * rng.standard_normal(M.size))
    default = joint_power_fit(M, L, err)
    explicit = joint_power_fit(M, L, err, seeds=None, n_boot=2000, level=0.95, rng=0, interval="t")
    np.testing.assert_array_equal(default.boot, explicit.boot)
    assert default.a_ci == explicit.a_ci and default.n_boot == 2000 and default.bootstrap == "points"
    assert joint_power_fit(M, L, err, level=0.5).a_ci != default.a_ci  # the options reach the fit
    with pytest.raises(TypeError, match="'nboot'.*power_law_fit: seeds, n_boot"):
        joint_power_fit(M, L, err, nboot=10)


def test_joint_fit_recovers_width_and_depth_exponents():
    rng = np.random.default_rng(8)
    M, L, seeds = _grid()
    err = 2.0 * M**-0.5 * L**-1.0 * np.exp(0.1 * rng.standard_normal(M.size))
    fit = joint_power_fit(M, L, err, seeds=seeds, n_boot=1000, rng=0)
    assert abs(fit.a + 0.5) < 0.05 and abs(fit.b + 1.0) < 0.05
    assert fit.contains(-0.5, "a") and fit.contains(-1.0, "b")
    assert not fit.contains(0.0, "b") and not fit.contains(-1.0, "a")
    assert abs(fit.deviation(-0.5, "a")) <= 1.0 and abs(fit.deviation(-1.0, which="b")) <= 1.0
    assert fit.n_groups == 6 and fit.boot.shape == (1000, 3)
    # exact data: exponents exact, zero-width intervals
    exact = joint_power_fit(M, L, 2.0 * M**-0.5 * L**-1.0, seeds=seeds, n_boot=100)
    assert abs(exact.a + 0.5) < 1e-12 and abs(exact.b + 1.0) < 1e-12 and abs(exact.intercept - math.log(2.0)) < 1e-12
    assert exact.a_ci[1] - exact.a_ci[0] < 1e-12 and exact.b_ci[1] - exact.b_ci[0] < 1e-12
    np.testing.assert_allclose(exact.predict(M, L), 2.0 * M**-0.5 / L, rtol=1e-12)
    with pytest.raises(ValueError, match="which"):
        fit.contains(0.0, "c")


def test_joint_fit_coverage():
    """2000 synthetic joint experiments (5 seeds, 5 x 4 grid, sigma 0.2, n_boot 200): the 95% t intervals
    of a and b each hold the truth in 92%-97.5% of them. Measured 0.9455 (a), 0.953 (b); with the one-sided
    quantile t_{0.95}: 0.893, 0.901; the percentile interval: 0.82, 0.83."""
    M, L, _ = _grid(n_seeds=5)
    seeds = np.repeat(np.arange(5), 20)
    rng = np.random.default_rng(2024)
    hits = np.zeros(2)
    for e in range(N_EXP):
        err = 2.0 * M**-0.5 / L * np.exp(SIGMA * rng.standard_normal(M.size))
        fit = joint_power_fit(M, L, err, seeds=seeds, n_boot=200, rng=e)
        hits += (fit.contains(-0.5, "a"), fit.contains(-1.0, "b"))
    assert np.all((0.92 <= hits / N_EXP) & (hits / N_EXP <= 0.975)), hits / N_EXP


def test_compare_models_ranks_the_true_model_first():
    M, L, _ = _grid(n_seeds=1)
    for name, g in fitting.DEFAULT_MODELS.items():
        ranked = compare_models(M, L, 0.3 * g(M, L))
        assert ranked[0].name == name
        assert ranked[0].rms_log_residual < 1e-12 and abs(ranked[0].C - 0.3) < 1e-12
        assert ranked[1].rms_log_residual > 1e-2
        assert [m.rms_log_residual for m in ranked] == sorted(m.rms_log_residual for m in ranked)
    # the theorem shape at L = 1 is finite and positive (log(1 + L), not log L)
    assert np.all(np.isfinite(list(fitting.DEFAULT_MODELS.values())[0](np.array([4.0]), np.array([1.0]))))
    custom = compare_models(M, L, M**-1.0, models={"M^-1": lambda M, L: 1.0 / M, "L^-1": lambda M, L: 1.0 / L})
    assert [m.name for m in custom] == ["M^-1", "L^-1"]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: power_law_fit([1, 2, -3], [1, 2, 3]), "x must be positive"),
        (lambda: power_law_fit([1, 2, 3], [1, 0, 3]), "y must be positive"),
        (lambda: power_law_fit([1, 2, 3], [1, np.nan, 3]), "y must be finite"),
        (lambda: power_law_fit([1, 2, np.inf], [1, 2, 3]), "x must be finite"),
        (lambda: power_law_fit([1, 2, 3], [1, 2]), "x, y must have the same length"),
        (lambda: power_law_fit([1, 2], [1, 2]), "at least 3 points"),
        (lambda: power_law_fit([2, 2, 2], [1, 2, 3]), "x must hold at least 2 distinct"),
        (lambda: power_law_fit([[1, 2, 3]], [1, 2, 3]), "x must be a 1-D"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], level=1.0), "level"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], level=0), "level"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], n_boot=0), "n_boot"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], n_boot=10.5), "n_boot"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], interval="bca"), "interval"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], rng=-1), "rng"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], seeds=[0, 1]), "seeds"),
        (lambda: power_law_fit([1, 2, 3], [1, 2, 3], seeds=[0, 0, 0]), "seeds"),
        (lambda: joint_power_fit([1, 2, 3, 4], [1, 2, 3], [1, 2, 3, 4]), "M, L, err must have the same length"),
        (lambda: joint_power_fit([1, 2, 3], [1, 2, 3], [1, 2, 3]), "at least 4 points"),
        (lambda: joint_power_fit([1, 2, 4, 8], [2, 4, 8, 16], [1, 2, 3, 4]), "collinear"),
        (lambda: joint_power_fit([1, 1, 1, 1], [2, 4, 8, 16], [1, 2, 3, 4]), "M must hold"),
        (lambda: joint_power_fit([1, 2, 3, 4], [2, 4, 8, 16], [1, 2, 0, 4]), "err must be positive"),
        (lambda: compare_models([1, 2, 3], [1, 2, 3], [1, 2, 3], models={}), "models"),
        (
            lambda: compare_models([1, 2, 3], [1, 2, 3], [1, 2, 3], models={"bad": lambda M, L: M - 2}),
            r"models\['bad'\]",
        ),
        (lambda: compare_models([1, 2, 3], [1, 2, 3], [1, 2, 3], models={"bad": 3.0}), r"models\['bad'\]"),
        (lambda: compare_models([1, 2, 3], [0, 2, 3], [1, 2, 3]), "L must be positive"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
