"""The Richardson depth reference of examples/mean_field_rates.py in the default run, at a small size.

The example's own check (`depth_reference_check_tau0`: the Richardson outputs 2 y(2 L_R) - y(L_R) agree with the
continuous-depth reference to a tenth of the smallest depth gap) runs only with its --quick run, under
`-m slow`. Here the example's functions (`depth_members`, `depth_reference`, `richardson`,
`depth_reference_check`) run at tau = 0 on networks of depth 4, 8 and 16 on the curves of four members (M = 2,
smooth and tied laws, two seeds). The right extrapolation's distance to the depth ODE falls like 1/L_R^2 (ratio
about 4 from L_R = 4 to 8) and is about a tenth of the deeper network's own gap; every wrong one (the deeper
network alone, the second-order weights (4 y(2L) - y(L)) / 3, the depths swapped) falls like 1/L (ratio about
2) and stays above 0.6 of that gap. Measured per member: check / gap(2 L_R) = 0.04 to 0.11 at L_R = 8 (wrong:
0.65 to 3.1); error ratios from L_R = 4 to 8: 3.5 to 4.1 (wrong: 1.9 to 2.1)."""

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from flows.mean_field import coupling

ROOT = Path(__file__).resolve().parents[2]
S = dict(depth_M=2, K=3)
SEEDS = [0, 1]
DEPTHS = (4, 8, 16)


@pytest.fixture(scope="module")
def rates():
    spec = importlib.util.spec_from_file_location("example_mean_field_rates", ROOT / "examples" / "mean_field_rates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setting(rates):
    """(members, results): the example's depth members and, per depth L, (R, y) at tau = 0 in the layout of
    the example's `results` (R (members, 1) the risk on the host, y (members, 1, n)), the networks of depth L
    on the members' curves (`coupling.sample_depth`, as the example does)."""
    members = rates.depth_members(S, SEEDS)
    Z0 = jnp.stack([m[4].Z0 for m in members])
    targets = np.stack([np.asarray(m[4].y) for m in members])
    results = {}
    for L in DEPTHS:
        cfg = members[0][3].replace(L=L)
        parts = [coupling.sample_depth(m[5], L) for m in members]
        y = np.asarray(rates._outputs(rates._stack(parts), Z0, jnp.asarray(cfg.threshold, Z0.dtype), cfg.d))
        results[L] = (0.5 * np.mean((y - targets) ** 2, axis=1)[:, None], y[:, None, :])
    return members, results


def test_richardson_weights(rates):
    assert np.array_equal(rates.richardson(np.array([1.0, -2.0]), np.array([3.0, 0.5])), [5.0, 3.0])


def test_richardson_reference_falls_like_one_over_L_squared_towards_the_depth_ode(rates, setting):
    members, results = setting
    assert len(members) == 4 and {m[1] for m in members} == {"smooth", "tied"}
    check, gap = {}, {}
    for L_R in (4, 8):
        R_ref, y_ref = rates.depth_reference(results, L_R)
        assert R_ref.shape == (4, 1) and y_ref.shape == results[L_R][1].shape
        check[L_R] = rates.depth_reference_check(members, y_ref[:, 0])
        gap[L_R] = rates.depth_reference_check(members, results[2 * L_R][1][:, 0])  # the deeper network alone
    assert np.all(check[8] <= 0.3 * gap[8]), check[8] / gap[8]
    ratio = check[4] / check[8]
    assert np.all((ratio > 3.0) & (ratio < 5.5)), ratio
    # the test's power: the deeper network's own gap falls like 1/L (ratio 2), far outside that band
    assert np.all(np.abs(gap[4] / gap[8] - 2.0) < 0.3), gap[4] / gap[8]
