"""Observables of Scan and Snap shared by the trained network and the flows (Tian et al. 2023, Secs. 3-6).

All functions are array functions of a state (jit/vmap friendly); shapes: K classes, M tokens.

- `attention(Z, cond, query_onehot)`: c_{l|n} = P(l|n) e^{z_{ml}} / sum_l' P(l'|n) e^{z_{ml'}} (eq. 5), (K, M).
- `normalized_attention`: f_n = c_n / ||c_n||_2, (K, M).
- `entropy_distinct`: entropy of c_n restricted to the distinct tokens of n and renormalised (Fig. 6), (K,).
- `entropy`: entropy of c_n over all tokens, (K,).
- `common_mass`: sum_{l in G_CT} c_{l|n}, (K,).
- `relative_gain`: r_{l/l'|n} = c_{l|n}^2 / c_{l'|n}^2 - 1 (Theorem 3).
- `growth_factor`: chi_l = e^{2 (z_ml(t) - z_ml(0))} (eq. 11), rows of the query tokens (K, M).
- `pair_invariant_residual`: (e^{-2 dz_l} - 1) - (r_{l/l'|n}(0) + 1)(e^{-2 dz_l'} - 1) (eq. 110).
- `knee_time`: the time at which a trajectory observable changes fastest (the snap).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["attention", "common_mass", "entropy", "entropy_distinct", "growth_factor", "knee_time",
           "normalized_attention", "pair_invariant_residual", "query_rows", "relative_gain"]


def query_rows(Z, query_onehot):
    """z_{psi(n)} for every class: (K, M) = query_onehot (K, M) @ Z (M, M)."""
    return query_onehot @ Z


def attention(Z, cond, query_onehot):
    """c_n(Z) (eq. 5, Lemma 2), (K, M); zero outside supp(n). Max-shifted over the support."""
    zq = query_rows(Z, query_onehot)
    on = cond > 0
    zmax = jnp.max(jnp.where(on, zq, -jnp.inf), axis=-1, keepdims=True)
    w = cond * jnp.exp(jnp.where(on, zq - zmax, 0.0))
    return w / jnp.sum(w, axis=-1, keepdims=True)


def normalized_attention(c):
    """f_n = c_n / ||c_n||_2 (K, M)."""
    return c / jnp.linalg.norm(c, axis=-1, keepdims=True)


def _plogp(p):
    return jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)


def entropy(c):
    """-sum_l c_l log c_l over all tokens, (K,)."""
    return -jnp.sum(_plogp(c), axis=-1)


def entropy_distinct(c, distinct_mask):
    """Entropy of c_n restricted to G_DT(n) and renormalised (the Fig. 6 quantity, digest §5), (K,)."""
    d = jnp.where(distinct_mask, c, 0.0)
    p = d / jnp.sum(d, axis=-1, keepdims=True)
    return -jnp.sum(_plogp(p), axis=-1)


def common_mass(c, common_mask):
    """sum_{l in G_CT} c_{l|n}, (K,)."""
    return jnp.sum(jnp.where(common_mask, c, 0.0), axis=-1)


def relative_gain(c, l, lp):
    """r_{l/l'|n} = c_{l|n}^2 / c_{l'|n}^2 - 1 (Theorem 3) for token indices `l`, `l'`; shape c[..., 0]."""
    return (c[..., l] / c[..., lp]) ** 2 - 1.0


def growth_factor(Z, Z0, query_onehot):
    """chi_l(t) = exp(2 (z_ml(t) - z_ml(0))) (eq. 11) for every class's query row, (K, M)."""
    return jnp.exp(2.0 * query_rows(Z - Z0, query_onehot))


def pair_invariant_residual(dz_l, dz_lp, r0):
    """(e^{-2 dz_l} - 1) - (r0 + 1)(e^{-2 dz_l'} - 1), zero along the reduced flow (eq. 110)."""
    return jnp.expm1(-2.0 * dz_l) - (r0 + 1.0) * jnp.expm1(-2.0 * dz_lp)


def knee_time(t, rate):
    """Time of the largest |rate| on a saved grid, refined by a parabola through the top three points in
    ln t (grids are log-spaced). `rate` is e.g. the speed dz/dt of the common-token logit: the snap is where
    the suppression is fastest, after which it slows to O(ln ln t) growth (Theorem 4). Returns a float."""
    t = np.asarray(t, dtype=float)
    r = np.abs(np.asarray(rate, dtype=float))
    keep = t > 0
    t, r = t[keep], r[keep]
    if t.size < 3:
        raise ValueError("knee_time needs at least 3 positive times")
    i = int(np.clip(np.argmax(r), 1, t.size - 2))
    x = np.log(t[i - 1: i + 2])
    y = r[i - 1: i + 2]
    a, b, _ = np.polyfit(x, y, 2)
    if a >= 0:
        return float(t[i])
    return float(np.exp(np.clip(-b / (2 * a), x[0], x[-1])))
