"""Trajectory observables on synthetic curves with a known transition (`slowdown_time`, `log_slope`)."""

import math

import numpy as np
import pytest

from flows.scan_snap import observables as obs


def _logistic_drop(t, t_k, w):
    """z with d z / d ln t = -1 / (1 + (t / t_k)^{1/w}): slope -1 early, half of it exactly at t_k, 0 late."""
    x = np.log(t)
    return -(x - w * np.logaddexp(0.0, (x - math.log(t_k)) / w))


@pytest.mark.parametrize("t_k,w", [(3.0, 0.3), (250.0, 1.0), (0.02, 0.5)])
def test_slowdown_time_recovers_known_half_slope_point(t_k, w):
    t = np.concatenate([[0.0], np.geomspace(t_k * 1e-4, t_k * 1e4, 301)])
    z = np.concatenate([[0.0], _logistic_drop(t[1:], t_k, w)])
    assert abs(obs.slowdown_time(t, z, 0.5) / t_k - 1) <= 1e-2
    # another fraction: |s| = f at ln t = ln t_k + w ln((1 - f) / f)
    f = 0.2
    assert abs(obs.slowdown_time(t, z, f) / (t_k * ((1 - f) / f) ** w) - 1) <= 1e-2


def test_slowdown_time_after_a_peak_of_the_slope():
    """Gaussian bump of d z / d ln t at ln t = 2 with width 0.5: half of the maximum after the peak at
    ln t = 2 + 0.5 sqrt(2 ln 2), whatever the slope does before the peak."""
    t = np.geomspace(1e-2, 1e4, 400)
    x = np.log(t)
    z = -np.array([0.5 * math.sqrt(math.pi / 2) * (1 + math.erf((xi - 2.0) / (0.5 * math.sqrt(2)))) for xi in x])
    expected = math.exp(2.0 + 0.5 * math.sqrt(2 * math.log(2)))
    assert abs(obs.slowdown_time(t, z) / expected - 1) <= 1e-2
    ts, s = obs.log_slope(t, z)
    assert np.max(np.abs(s + np.exp(-((x - 2.0) ** 2) / (2 * 0.25)))) <= 1e-2


def test_slowdown_time_validation():
    t = np.geomspace(1.0, 10.0, 20)
    with pytest.raises(ValueError, match="fraction"):
        obs.slowdown_time(t, -np.log(t), 1.5)
    with pytest.raises(ValueError, match="never falls"):
        obs.slowdown_time(t, -(np.log(t) ** 2))  # slope grows to the end of the grid
    with pytest.raises(ValueError, match="constant"):
        obs.slowdown_time(t, np.zeros_like(t))
    with pytest.raises(ValueError, match="1-D of one length"):
        obs.slowdown_time(t, np.zeros(3))
