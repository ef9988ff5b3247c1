"""Monte Carlo comparison of two samples of one observable (SGD SDE paths against SGD runs), for the SGD-noise
tests of the systems: z-scores of the mean and variance differences, and the weak-order-1 checks over a ladder
of learning rates."""

import numpy as np


def se_var(a):
    """The standard error of the variance of sample a (delta method: sqrt((m4 - m2^2) / N))."""
    d = a - a.mean()
    return np.sqrt((np.mean(d**4) - np.mean(d**2) ** 2) / a.size)


def z_mean(a, b):
    return (a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)


def z_var(a, b):
    return (a.var(ddof=1) - b.var(ddof=1)) / np.hypot(se_var(a), se_var(b))


def mismatch(a, b):
    """(mean difference, its standard error, variance difference, its standard error) of sample a (the SDE
    paths) against the independent sample b (the SGD runs)."""
    return (
        a.mean() - b.mean(),
        np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size),
        a.var(ddof=1) - b.var(ddof=1),
        np.hypot(se_var(a), se_var(b)),
    )


def summary(table):
    """{(lr, name): (z of the mean difference, "difference / lr +- SE / lr", z of the variance difference)}."""
    return {
        (lr, k): (round(float(v[0] / v[1]), 2), f"{v[0] / lr:.3g}+-{v[1] / lr:.2g}", round(float(v[2] / v[3]), 2))
        for lr, row in table.items()
        for k, v in row.items()
    }


def check_weak_order(ladder, table, name, strict=True, moment="mean"):
    """Weak order 1 of the mean of observable `name` over `ladder`, rates a factor 4 apart, largest first
    (`table[lr][name]` = `mismatch`). `moment="var"`: of its variance instead, whose difference d is
    O(lr^2) (the variance itself is O(lr), its relative error O(lr)): d / lr^2 replaces d / lr in 2.

    1. at the largest rate the mismatch d is resolved: |d| >= 3 SE;
    2. d / lr is the same at every rung within 3 SE of the difference (order 1; a constant mismatch would give
       4x and 16x the largest rung's d / lr);
    3. (`strict`) a constant mismatch is rejected between the two largest rungs: |d_0 - d_1| > 3 SE;
    4. (`strict`) the fall per 4x in lr, r = d_0 / d_1, has a 2-SE interval (delta method) that meets [2, 8].

    Returns (r, its SE) (None without `strict`).
    """
    at, p = {"mean": (0, 1), "var": (2, 2)}[moment]
    (d0, s0), (d1, s1) = (table[lr][name][at : at + 2] for lr in ladder[:2])
    assert abs(d0) >= 3 * s0, (name, moment, d0, s0)
    h0 = ladder[0] ** p
    for lr in ladder[1:]:
        d, s = table[lr][name][at : at + 2]
        h = lr**p
        assert abs(d / h - d0 / h0) <= 3 * np.hypot(s / h, s0 / h0), (name, moment, lr, d / h, d0 / h0)
    if not strict:
        return None
    assert abs(d0 - d1) > 3 * np.hypot(s0, s1), (name, d0, d1)
    r = d0 / d1
    se_r = abs(r) * np.hypot(s0 / d0, s1 / d1)
    assert r + 2 * se_r >= 2 and r - 2 * se_r <= 8, (name, r, se_r)
    return r, se_r
