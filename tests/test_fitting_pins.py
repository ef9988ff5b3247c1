"""Exact pins of the statistics of flows.fitting, computed without the module: the bootstrap replicates by a
hand-written resampling loop (np.polyfit or np.linalg.lstsq on the resampled rows), the Student quantiles as
literals checked against their closed forms (2 and 4 degrees of freedom) and scipy.stats, the interval
half-widths as quantile x inflation x replicate sd, the percentile levels, the residual scale and
`deviation()` on constructions whose answers are known exactly.

The coverage checks of tests/test_fitting.py see a wrong quantile level or a wrong interval family; a degree of
freedom more or less, a dropped variance inflation or a halved half-width move coverage by 1-3 points, within
the binomial noise of any affordable run, so they are pinned here to rounding."""

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from flows.fitting import joint_power_fit, power_law_fit

X = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])

# Student t quantiles t_{dof, q} (scipy.stats.t.ppf; 2 and 4 degrees of freedom also by their closed forms
# below). Keys (q, dof).
T_PPF = {
    (0.975, 2): 4.302652729749462,
    (0.975, 4): 2.7764451051977934,
    (0.975, 17): 2.1098155778333156,
    (0.975, 28): 2.0484071417952454,
    (0.95, 2): 2.9199855803537242,
    (0.95, 4): 2.1318467863266495,
    (0.95, 17): 1.7396067260750725,
    (0.95, 28): 1.7011309342659313,
    (0.75, 2): 0.8164965809277261,
    (0.75, 4): 0.7406970841126829,
    (0.75, 17): 0.6891950751539387,
    (0.75, 28): 0.683352842988506,
}


def _t2(q):
    """Closed form of the t quantile with 2 degrees of freedom."""
    return (2.0 * q - 1.0) / math.sqrt(2.0 * q * (1.0 - q))


def _t4(q):
    """Closed form of the t quantile with 4 degrees of freedom (a depressed cubic in t^2)."""
    a = 4.0 * q * (1.0 - q)
    theta = math.acos(math.sqrt(a))
    return math.copysign(2.0 * math.sqrt(math.cos(theta / 3.0) / math.sqrt(a) - 1.0), q - 0.5)


def test_t_quantile_literals():
    """The literal table is right: closed forms for 2 and 4 degrees of freedom to 1e-13, scipy for all."""
    for (q, dof), value in T_PPF.items():
        assert abs(stats.t.ppf(q, dof) - value) <= 1e-12 * value, (q, dof)
        if dof in (2, 4):
            assert abs((_t2 if dof == 2 else _t4)(q) - value) <= 1e-13 * value, (q, dof)


# ---- data and the hand-written bootstrap ----------------------------------------------------------------------


def _power_data(n_seeds):
    rng = np.random.default_rng(0)
    x = np.tile(X, n_seeds)
    y = 3.0 * x**-1.0 * np.exp(0.2 * rng.standard_normal(x.size))
    # arbitrary, non-contiguous labels: whole seeds are resampled in the order of the sorted labels
    labels = np.repeat(np.array([17, 3, 9, 40, 5, 22, 11])[:n_seeds], X.size)
    return x, y, labels


def _joint_data(n_seeds):
    M, L = np.meshgrid([8.0, 16.0, 32.0, 64.0, 128.0], [2.0, 4.0, 8.0, 16.0], indexing="ij")
    M, L = np.tile(M.ravel(), n_seeds), np.tile(L.ravel(), n_seeds)
    rng = np.random.default_rng(1)
    err = 2.0 * M**-0.5 / L * np.exp(0.2 * rng.standard_normal(M.size))
    labels = np.repeat(np.arange(n_seeds), 20)
    return M, L, err, labels


def _hand_replicates(design, logy, labels, n_boot, seed):
    """The bootstrap by hand: draw `n_boot` x G cluster indices from `np.random.default_rng(seed)` (the
    module's documented draw: `rng.integers(0, G, size=(n_boot, G))`, G clusters in the order of the sorted
    labels, or every point its own cluster when `labels` is None), stack the drawn clusters' rows and refit by
    ordinary least squares. Returns the (n_boot, p) coefficients."""
    n = logy.size
    groups = (
        [np.array([i]) for i in range(n)]
        if labels is None
        else [np.flatnonzero(labels == lab) for lab in np.unique(labels)]
    )
    draws = np.random.default_rng(seed).integers(0, len(groups), size=(n_boot, len(groups)))
    out = []
    for draw in draws:
        rows = np.concatenate([groups[k] for k in draw])
        coef, *_ = np.linalg.lstsq(design[rows], logy[rows], rcond=None)
        out.append(coef)
    return np.array(out)


def _power_fit_and_hand(n_seeds, cluster, level=0.95, interval="t", n_boot=64):
    x, y, labels = _power_data(n_seeds)
    fit = power_law_fit(x, y, seeds=labels if cluster else None, n_boot=n_boot, level=level, rng=5, interval=interval)
    design = np.stack([np.ones(x.size), np.log(x)], axis=1)
    hand = _hand_replicates(design, np.log(y), labels if cluster else None, n_boot, 5)
    return fit, hand


def _joint_fit_and_hand(n_seeds, cluster, level=0.95, interval="t", n_boot=64):
    M, L, err, labels = _joint_data(n_seeds)
    fit = joint_power_fit(
        M, L, err, seeds=labels if cluster else None, n_boot=n_boot, level=level, rng=5, interval=interval
    )
    design = np.stack([np.ones(M.size), np.log(M), np.log(L)], axis=1)
    hand = _hand_replicates(design, np.log(err), labels if cluster else None, n_boot, 5)
    return fit, hand


@pytest.mark.parametrize("cluster", [True, False], ids=["cluster", "points"])
def test_bootstrap_replicates_are_the_hand_written_resamples(cluster):
    """Every replicate is the OLS fit of the resampled rows (a drawn seed brings all its points, as many times
    as it is drawn) to 1e-10: power law (5 seeds or 30 points) and joint fit (5 seeds or 20 points)."""
    fit, hand = _power_fit_and_hand(5, cluster)
    assert fit.n_boot_used == 64 and fit.n_groups == (5 if cluster else 30)
    assert np.max(np.abs(fit.boot_slopes - hand[:, 1])) <= 1e-10
    jfit, jhand = _joint_fit_and_hand(5 if cluster else 1, cluster)
    assert jfit.boot.shape == (64, 3) and jfit.n_groups == (5 if cluster else 20)
    assert np.max(np.abs(jfit.boot - jhand)) <= 1e-10
    assert np.std(hand[:, 1]) > 1e-3  # non-trivial replicates


# (case, n_seeds, cluster, degrees of freedom, inflation): cluster bootstrap G - 1 and sqrt(G / (G - 1)); point
# bootstrap n - p and sqrt(n / (n - p)), p = 2 coefficients (power law) or 3 (joint)
T_CASES = [
    ("power-cluster-5", 5, True, 4, math.sqrt(5.0 / 4.0)),
    ("power-cluster-3", 3, True, 2, math.sqrt(3.0 / 2.0)),
    ("power-points-30", 5, False, 28, math.sqrt(30.0 / 28.0)),
    ("joint-cluster-5", 5, True, 4, math.sqrt(5.0 / 4.0)),
    ("joint-points-20", 1, False, 17, math.sqrt(20.0 / 17.0)),
]


@pytest.mark.parametrize("level", [0.95, 0.9, 0.5])
@pytest.mark.parametrize(("case", "n_seeds", "cluster", "dof", "inflation"), T_CASES, ids=[c[0] for c in T_CASES])
def test_t_interval_half_width(case, n_seeds, cluster, dof, inflation, level):
    """The t interval is centred on the OLS coefficient and its half-width is t_{dof, (1 + level)/2} x
    inflation x sd of the hand-written replicates (ddof 1), to 1e-10 relative, for every coefficient."""
    q = {0.95: 0.975, 0.9: 0.95, 0.5: 0.75}[level]
    if case.startswith("power"):
        fit, hand = _power_fit_and_hand(n_seeds, cluster, level=level)
        pairs = [(fit.intercept, fit.intercept_ci, hand[:, 0]), (fit.slope, fit.slope_ci, hand[:, 1])]
    else:
        fit, hand = _joint_fit_and_hand(n_seeds, cluster, level=level)
        pairs = [
            (fit.intercept, fit.intercept_ci, hand[:, 0]),
            (fit.a, fit.a_ci, hand[:, 1]),
            (fit.b, fit.b_ci, hand[:, 2]),
        ]
    for value, (lo, hi), reps in pairs:
        assert abs(0.5 * (lo + hi) - value) <= 1e-12 * max(1.0, abs(value))
        ratio = 0.5 * (hi - lo) / np.std(reps, ddof=1)
        assert abs(ratio - T_PPF[(q, dof)] * inflation) <= 1e-10 * ratio, (ratio, T_PPF[(q, dof)] * inflation)


@pytest.mark.parametrize(("level", "quantiles"), [(0.95, (0.025, 0.975)), (0.8, (0.1, 0.9)), (0.5, (0.25, 0.75))])
def test_percentile_interval_levels(level, quantiles):
    """The percentile interval is the (1 - level)/2 and (1 + level)/2 quantiles (numpy's default linear
    interpolation) of the hand-written replicates, to 1e-12, for the power law and both joint exponents."""
    fit, hand = _power_fit_and_hand(5, True, level=level, interval="percentile", n_boot=200)
    want = np.quantile(hand[:, 1], quantiles)
    assert np.max(np.abs(np.array(fit.slope_ci) - want)) <= 1e-12
    jfit, jhand = _joint_fit_and_hand(5, True, level=level, interval="percentile", n_boot=200)
    for ci, reps in ((jfit.a_ci, jhand[:, 1]), (jfit.b_ci, jhand[:, 2])):
        assert np.max(np.abs(np.array(ci) - np.quantile(reps, quantiles))) <= 1e-12


def test_residual_std_has_n_minus_p_degrees_of_freedom():
    """Residuals orthogonal to the design, so OLS recovers the exact coefficients and the residual scale is
    known: power law, 4 points, residuals 0.1 (1, -1, -1, 1): sqrt(0.04 / (4 - 2)) = 0.1 sqrt 2; joint fit, a
    3 x 3 grid, residuals 0.1 (1, -2, 1) (1, -2, 1)^T: sqrt(0.36 / (9 - 3)) = 0.1 sqrt 6."""
    x = np.array([1.0, 2.0, 4.0, 8.0])
    r = 0.1 * np.array([1.0, -1.0, -1.0, 1.0])
    fit = power_law_fit(x, np.exp(0.3 - 0.7 * np.log(x) + r), n_boot=10)
    assert abs(fit.slope + 0.7) <= 1e-12 and abs(fit.intercept - 0.3) <= 1e-12
    assert abs(fit.residual_std - 0.1414213562373095) <= 1e-12, fit.residual_std
    M, L = (a.ravel() for a in np.meshgrid([1.0, 3.0, 9.0], [2.0, 4.0, 8.0], indexing="ij"))
    r = 0.1 * np.outer([1.0, -2.0, 1.0], [1.0, -2.0, 1.0]).ravel()
    jfit = joint_power_fit(M, L, np.exp(0.2 - 0.5 * np.log(M) - 1.0 * np.log(L) + r), n_boot=10)
    assert abs(jfit.a + 0.5) <= 1e-12 and abs(jfit.b + 1.0) <= 1e-12 and abs(jfit.intercept - 0.2) <= 1e-12
    assert abs(jfit.residual_std - 0.2449489742783178) <= 1e-12, jfit.residual_std


def test_deviation_is_in_units_of_the_half_width():
    """deviation(target) = (value - target) / ((hi - lo) / 2), exact on set intervals (symmetric,
    asymmetric, zero-width); the joint fit uses the interval of the exponent asked for; on a fitted t
    interval |deviation| <= 1 exactly when the interval contains the target."""
    fit, _ = _power_fit_and_hand(5, True)
    one = dataclasses.replace(fit, slope=1.0, slope_ci=(0.5, 1.5))
    assert one.deviation(2.0) == -2.0 and one.deviation(0.75) == 0.5 and one.deviation(1.0) == 0.0
    skew = dataclasses.replace(fit, slope=1.0, slope_ci=(0.0, 4.0))
    assert skew.deviation(3.0) == -1.0 and skew.deviation(-1.0) == 1.0
    flat = dataclasses.replace(fit, slope=1.0, slope_ci=(1.0, 1.0))
    assert flat.deviation(2.0) == -math.inf and flat.deviation(0.0) == math.inf and flat.deviation(1.0) == 0.0
    jfit, _ = _joint_fit_and_hand(5, True)
    j = dataclasses.replace(jfit, a=0.0, a_ci=(-1.0, 1.0), b=0.0, b_ci=(-4.0, 4.0))
    assert j.deviation(0.5, "a") == -0.5 and j.deviation(2.0, "a") == -2.0
    assert j.deviation(2.0, "b") == -0.5 and j.deviation(-8.0, which="b") == 2.0
    lo, hi = fit.slope_ci
    half = 0.5 * (hi - lo)
    for target in (lo - 0.01, lo + 1e-9, fit.slope, hi - 1e-9, hi + 0.01, fit.slope - 0.3 * half):
        dev = fit.deviation(target)
        assert abs(dev - (fit.slope - target) / half) <= 1e-12
        assert (abs(dev) <= 1.0) == fit.contains(target), target
