"""The gap between optax.adam and the Adam ODE is first order in lr, with the modified equation's constant, once
lr is small against the initial scale s (lr <~ s / 10); above that it is pre-asymptotic.

The problem is `benchmarks/adam_order.py`'s (the measurement script; numbers in docs/systems/optim_limits.md):
a 3-3-3 linear network on whitened inputs, L = (1/2) ||W2 W1 - T||^2, T = U diag(3, 2, 1) V^T with rotated
singular frames, a balanced start W1 = s V^T, W2 = s U; Adam with b = 1 - c lr (c1 = 10, c2 = 1) to t = 4; the
gap is max_t max |W2 W1 (Adam) - W2 W1 (ODE)|, the order log2 of its ratio per halving of lr.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import adam_order as ao

SAVES = 40
TS = np.linspace(0.0, ao.T_END, SAVES + 1)


def _gaps(scale, lrs):
    theta0, batch = ao.problem(scale, rotated=True)
    ode = ao.ode_products(theta0, batch, TS)
    out = []
    for lr in lrs:
        steps, disc = ao.optax_products(theta0, batch, lr, SAVES)
        np.testing.assert_allclose(lr * steps, TS, rtol=0, atol=1e-12)  # the clock t = lr * step
        out.append(disc - ode)
    return out


def _orders(diffs):
    gaps = np.array([np.max(np.abs(d)) for d in diffs])
    return gaps, np.log2(gaps[:-1] / gaps[1:])


def test_adam_gap_is_first_order_with_the_modified_equation_constant():
    """s = 0.1 (lr / s <= 0.1): the orders over lr = 1e-2 .. 2.5e-3 are 1 within [0.95, 1.08] (measured 1.03,
    1.02), and gap / lr is the leading term e1(t) of Adam's modified equation (benchmarks.adam_order
    .modified_error, an independent linearised solve): the residual max_t |gap / lr - e1| is under 3% of
    max |e1| and halves with lr (measured 0.13, 0.061 against max |e1| = 3.48)."""
    lrs = (1e-2, 5e-3, 2.5e-3)
    diffs = _gaps(0.1, lrs)
    gaps, orders = _orders(diffs)
    assert np.all((orders >= 0.95) & (orders <= 1.08)), (gaps, orders)
    e1 = ao.modified_error(0.1, TS, rotated=True)
    residual = [np.max(np.abs(d / lr - e1)) for d, lr in zip(diffs[1:], lrs[1:], strict=True)]
    assert residual[-1] < 0.03 * np.max(np.abs(e1)), residual
    assert 1.8 <= residual[0] / residual[1] <= 2.2, residual


def test_adam_gap_is_pre_asymptotic_while_lr_is_not_small_against_the_init_scale():
    """s = 1e-2: at lr = 1e-2 -> 5e-3 (lr / s >= 0.5) the gap falls faster than first order (measured order
    1.69: the expansion in lr / s has not settled), from lr = s / 8 on it is first order (measured 1.05, 1.03)."""
    _, fast = _orders(_gaps(1e-2, (1e-2, 5e-3)))
    assert fast[0] > 1.4, fast
    _, orders = _orders(_gaps(1e-2, (1.25e-3, 6.25e-4, 3.125e-4)))
    assert np.all((orders >= 0.95) & (orders <= 1.12)), orders


@pytest.mark.slow
def test_adam_gap_at_a_small_init_needs_lr_well_below_the_init_scale():
    """s = 1e-3 (the user's experiment): over lr = 1e-2 .. 3.1e-4 the orders wander (measured 0.38 .. 1.77) and
    gap / lr is far from the modified equation's e1 (measured residual 98 .. 21 against max |e1| = 73); from
    lr = 7.8e-5 (lr / s < 0.1) on the order is 1 (measured 1.04, 1.02) and the residual falls like lr."""
    diffs = _gaps(1e-3, (1e-2, 5e-3, 2.5e-3, 1.25e-3, 6.25e-4, 3.125e-4))
    _, orders = _orders(diffs)
    assert np.max(np.abs(orders - 1.0)) > 0.4, orders
    e1 = ao.modified_error(1e-3, TS, rotated=True)
    assert np.max(np.abs(diffs[2] / 2.5e-3 - e1)) > 0.5 * np.max(np.abs(e1))
    small = (7.8125e-5, 3.90625e-5, 1.953125e-5)
    diffs = _gaps(1e-3, small)
    _, orders = _orders(diffs)
    assert np.all((orders >= 0.95) & (orders <= 1.1)), orders
    residual = [np.max(np.abs(d / lr - e1)) for d, lr in zip(diffs, small, strict=True)]
    assert residual[-1] < 0.03 * np.max(np.abs(e1)) and 1.7 <= residual[0] / residual[1] <= 2.3, residual
