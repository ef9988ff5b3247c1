"""Closed forms Gamma, B_n (eq. 128-129), t0, chi sandwich, pair invariant vs integrated flows."""

import numpy as np
import pytest

from flows.scan_snap import solve_single_common_token, theory


@pytest.mark.parametrize(
    "M,K,eta_Y,eta_Z,C0", [(100, 2, 5.0, 0.5, 1.0), (1000, 10, 1.0, 0.5, 0.3), (50, 4, 0.5, 2.0, 2.0)]
)
def test_B_matches_single_common_token_flow(M, K, eta_Y, eta_Z, C0):
    t0 = float(theory.snap_time(M, K, eta_Y))
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * t0, 30 * t0, 50)])
    tr = solve_single_common_token(M, K, eta_Y, eta_Z, ts, C0=C0)
    B_flow = np.asarray(tr.ys[:, 2])
    B_closed = np.asarray(theory.B(ts, M, K, eta_Y, eta_Z, C0=C0))
    assert np.max(np.abs(B_flow - B_closed)) <= 1e-6
    z_closed = -np.log1p(4 * np.asarray(theory.Gamma(ts, M, K, eta_Y, eta_Z)) / C0) / 4
    assert np.max(np.abs(np.asarray(tr.ys[:, 1]) - z_closed)) <= 1e-6
    if C0 == 1.0:
        np.testing.assert_allclose(theory.B(ts, M, K, eta_Y, eta_Z, printed=True), B_closed, atol=1e-12)


def test_times_and_invariants():
    assert float(theory.snap_time(1000, 10, 0.5)) == pytest.approx(2 * 10 * np.log(1000) / 0.5)
    assert float(theory.scan_time(1000, 10, 0.5)) == pytest.approx(10 * np.log(1000) / 0.5)
    lo, hi = theory.chi_bounds(np.array([0.0, 1.0]), 0.25)
    np.testing.assert_allclose(lo, [1.0, np.exp(0.5)])
    np.testing.assert_allclose(hi, [1.0, np.exp(2.0)])
    assert float(theory.pair_invariant_rhs(0.0, 3.0)) == 0.0
    # B_n(t0) at fixed nu does not depend on eta_Z (Fig. 9)
    for nu in (1.0, 10.0):
        vals = [float(theory.B(theory.snap_time(100, 10, nu * ez), 100, 10, nu * ez, ez)) for ez in (0.5, 1, 8)]
        assert np.ptp(vals) <= 1e-12


def test_validation():
    with pytest.raises(ValueError, match="C0"):
        theory.B(1.0, 100, 2, 1.0, 1.0, C0=0.0)
    with pytest.raises(ValueError, match="eta_Z"):
        theory.Gamma(1.0, 100, 2, 1.0, -1.0)


def test_h_discrete_is_the_recursion_and_lemma7_sandwiches_it():
    """h*(s) of eq. 33 against a literal numpy loop of the recursion, and Lemma 7, 0 <= h*(s) - h(s) <= 2 eta_Y / M,
    against the continuous closed form (a wrong M - 1 in the recursion breaks the lower bound at s = 1)."""
    import numpy as np

    from flows.scan_snap import theory

    for M, eta in ((5, 1.0), (50, 0.3)):
        s = np.arange(0, 40)
        ref, h = [0.0], 0.0
        for _ in s[1:]:
            h = h + eta / ((M - 1) + np.exp(M * h))
            ref.append(h)
        got = np.asarray(theory.h_discrete(s, M, eta))
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=0)
        gap = got - np.asarray(theory.h(s.astype(float), M, eta))
        assert np.all(gap >= -1e-13) and np.all(gap <= 2 * eta / M), gap


def test_pair_invariant_rhs_is_the_invariant_the_reduced_flow_keeps():
    """theory.pair_invariant_rhs predicts e^{-2 dz_l} - 1 exactly where observables.pair_invariant_residual
    (which tests/scan_snap/test_flow.py holds at <= 1e-8 along the reduced flow) vanishes."""
    import numpy as np

    from flows.scan_snap import observables as obs
    from flows.scan_snap import theory

    rng = np.random.default_rng(0)
    dz_l, dz_lp, r0 = rng.normal(size=20), rng.normal(size=20), rng.uniform(0.0, 5.0, size=20)
    resid = np.asarray(obs.pair_invariant_residual(dz_l, dz_lp, r0))
    pred = np.asarray(theory.pair_invariant_rhs(dz_lp, r0))
    np.testing.assert_allclose(np.expm1(-2 * dz_l) - pred, resid, rtol=0, atol=1e-12)
