"""Observables of Scan and Snap shared by the trained network and the flows (Tian et al. 2023, Secs. 3-6): the
attention c_n (eq. 5), the loss, entropies, common-token mass, relative gains (Theorem 3), growth factors
(eq. 11), the pair invariant (eq. 110) and the knee and slowdown times of a trajectory (Theorem 4). Array
functions of a state (jit/vmap friendly; K classes, M tokens). See docs/systems/scan_snap.md."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ATTENTION_OBSERVABLES",
    "attention",
    "attention_observables",
    "attention_weights",
    "common_mass",
    "common_tokens",
    "cross_entropy",
    "distinct_tokens",
    "entropy",
    "entropy_distinct",
    "growth_factor",
    "knee_time",
    "log_slope",
    "normalized_attention",
    "pair_invariant_residual",
    "population_loss",
    "query_rows",
    "relative_gain",
    "slowdown_time",
]

Array = jax.Array


def query_rows(Z: Array, query_onehot: Array) -> Array:
    """z_{psi(n)} for every class: (K, M) = query_onehot (K, M) @ Z (M, M)."""
    return query_onehot @ Z


def attention_weights(weights: Array, zq: Array) -> Array:
    """w e^{z} / <w, e^{z}> along the last axis, zero where w = 0: the attention of eq. 5 on a class's law
    (w = P(.|n)) or on one sequence's context counts (w = N, the exact finite-T reduction). The shift by the
    largest logit on the support cancels in the ratio, so no gradient flows through it."""
    on = weights > 0
    zmax = jax.lax.stop_gradient(jnp.max(jnp.where(on, zq, -jnp.inf), axis=-1, keepdims=True))
    w = weights * jnp.exp(jnp.where(on, zq - zmax, 0.0))
    return w / jnp.sum(w, axis=-1, keepdims=True)


def attention(Z: Array, cond: Array, query_onehot: Array) -> Array:
    """c_n(Z) (eq. 5, Lemma 2), (K, M); zero outside supp(n)."""
    return attention_weights(cond, query_rows(Z, query_onehot))


def cross_entropy(logits: Array, target: Array) -> Array:
    """-log softmax(logits)_target per row: `logits` (..., M), `target` (...) token indices."""
    picked = jnp.take_along_axis(logits, target[..., None], axis=-1)[..., 0]
    return jax.nn.logsumexp(logits, axis=-1) - picked


def population_loss(c: Array, Y: Array, next_token: Array, class_probs: Array) -> Array:
    """sum_n P(n) CE(Y^T f_n, n) with f_n = c_n / ||c_n||: the T -> infinity loss (minus eq. 2), from the
    attention `c` (K, M), the next token of each class (K,) and P(n) (K,)."""
    return jnp.sum(class_probs * cross_entropy(normalized_attention(c) @ Y, next_token))


def normalized_attention(c: Array) -> Array:
    """f_n = c_n / ||c_n||_2 (K, M)."""
    return c / jnp.linalg.norm(c, axis=-1, keepdims=True)


def _plogp(p):
    return jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)


def entropy(c: Array) -> Array:
    """-sum_l c_l log c_l over all tokens, (K,)."""
    return -jnp.sum(_plogp(c), axis=-1)


def entropy_distinct(c: Array, distinct_mask: Array) -> Array:
    """Entropy of c_n restricted to G_DT(n) and renormalised (the Fig. 6 quantity), (K,)."""
    d = jnp.where(distinct_mask, c, 0.0)
    p = d / jnp.sum(d, axis=-1, keepdims=True)
    return -jnp.sum(_plogp(p), axis=-1)


def common_mass(c: Array, common_mask: Array) -> Array:
    """sum_{l in G_CT} c_{l|n}, (K,)."""
    return jnp.sum(jnp.where(common_mask, c, 0.0), axis=-1)


def distinct_tokens(cond: Array) -> Array:
    """(K, M) bool from P(l|n) `cond` (K, M): l is a distinct token of class n (l in supp(n), |Omega(l)| = 1);
    `SequenceClasses.distinct_mask` as an array function."""
    support = cond > 0
    return support & (jnp.sum(support, axis=0) == 1)[None, :]


def common_tokens(cond: Array) -> Array:
    """(M,) bool from P(l|n) `cond` (K, M): l is a common token (|Omega(l)| > 1); `SequenceClasses.common_mask`
    as an array function."""
    return jnp.sum(cond > 0, axis=0) > 1


#: the names of `attention_observables`: saved on the network record and on every flow Trajectory alike
ATTENTION_OBSERVABLES = ("attention", "entropy", "entropy_distinct", "common_mass")


def attention_observables(c: Array, cond: Array) -> dict[str, Array]:
    """The attention observables of c_n (K, M) for the classes with P(l|n) = `cond` (K, M), by name:
    `attention` c_n (K, M), `entropy` (K,), `entropy_distinct` (K,) (the Fig. 6 entropy over the distinct tokens
    of n), `common_mass` (K,) (the attention on common tokens). One function for the network record and the
    flows, so that both save the same names computed the same way."""
    return {
        "attention": c,
        "entropy": entropy(c),
        "entropy_distinct": entropy_distinct(c, distinct_tokens(cond)),
        "common_mass": common_mass(c, common_tokens(cond)),
    }


def relative_gain(c: Array, token: Any, other: Any) -> Array:
    """r_{l/l'|n} = c_{l|n}^2 / c_{l'|n}^2 - 1 (Theorem 3) for the token indices l = `token`, l' = `other`;
    shape c[..., 0]."""
    return (c[..., token] / c[..., other]) ** 2 - 1.0


def growth_factor(Z: Array, Z0: Array, query_onehot: Array) -> Array:
    """chi_l(t) = exp(2 (z_ml(t) - z_ml(0))) (eq. 11) for every class's query row, (K, M)."""
    return jnp.exp(2.0 * query_rows(Z - Z0, query_onehot))


def pair_invariant_residual(dz_l: Array, dz_lp: Array, r0: Any) -> Array:
    """(e^{-2 dz_l} - 1) - (r0 + 1)(e^{-2 dz_l'} - 1), zero along the reduced flow (eq. 110)."""
    return jnp.expm1(-2.0 * dz_l) - (r0 + 1.0) * jnp.expm1(-2.0 * dz_lp)


def knee_time(t: Any, rate: Any) -> float:
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
    x = np.log(t[i - 1 : i + 2])
    y = r[i - 1 : i + 2]
    a, b, _ = np.polyfit(x, y, 2)
    if a >= 0:
        return float(t[i])
    return float(np.exp(np.clip(-b / (2 * a), x[0], x[-1])))


def log_slope(t: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """d y / d ln t on a saved grid (second-order finite differences in ln t; points with t <= 0 dropped).
    Returns (t, slope), both (N,) over the kept points."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.ndim != 1 or y.shape != t.shape:
        raise ValueError(f"t and y must be 1-D of one length, got shapes {t.shape} and {y.shape}")
    keep = t > 0
    t, y = t[keep], y[keep]
    if t.size < 3 or np.any(np.diff(t) <= 0):
        raise ValueError("t must hold at least 3 increasing positive times")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError("t and y must be finite")
    return t, np.gradient(y, np.log(t))


def slowdown_time(t: Any, z: Any, fraction: float = 0.5) -> float:
    """The scan -> snap transition time of a logit trajectory z(t) (Tian et al. 2023, Theorem 4, eq. 14).

    In the scanning stage a logit moves like a power of t, so z is ~linear in ln t (for the common token,
    z_CT ~ -(1/2) ln t once Gamma >> C0: slope d z / d ln t ~ -1/2); in the snapping stage it moves like ln ln t,
    slope ~ 1 / ln t -> 0. This function locates the bend from the trajectory itself: with
    s(t) = d z / d ln t (`log_slope`) and t* = argmax |s|, it returns the first time after t* at which
    |s| <= `fraction` * max |s|, interpolated linearly in ln t. Unlike `knee_time` (the steepest point, which
    for the common token is set by eta_Z and the e^{4z} factor), this is the end of the steep stage.

    **Arguments:** `t` (N,) increasing save times (t <= 0 dropped; log-spaced grids recommended), `z` (N,)
    the logit at those times, `fraction` in (0, 1). Returns a float; raises ValueError if |s| never falls
    below the threshold after its maximum (the grid ends before the snap).
    """
    if not (0.0 < float(fraction) < 1.0):
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
    t, s = log_slope(t, z)
    a = np.abs(s)
    i = int(np.argmax(a))
    if a[i] == 0.0:
        raise ValueError("z: the trajectory is constant, it has no transition")
    thr = float(fraction) * a[i]
    below = np.flatnonzero(a[i:] <= thr)
    if below.size == 0:
        raise ValueError("z: |dz/d ln t| never falls below fraction * max after its maximum; extend the grid")
    j = i + int(below[0])
    x0, x1 = np.log(t[j - 1]), np.log(t[j])
    y0, y1 = a[j - 1], a[j]
    x = x1 if y0 == y1 else x0 + (y0 - thr) * (x1 - x0) / (y0 - y1)
    return float(np.exp(x))
