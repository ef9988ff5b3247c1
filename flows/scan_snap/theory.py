"""Closed forms of Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380 v4): h (eq. 45), h* (eq. 33),
gamma (eq. 85, Lemma 9), Gamma (eq. 128), B_n (eq. 129), the stage times (eq. 14), the chi sandwich (eq. 12) and
the pair invariant (eq. 110). Functions take numpy or jax arrays (broadcasting) and return jax arrays.
See docs/systems/scan_snap.md."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from .._checks import real_array

__all__ = [
    "B",
    "Gamma",
    "chi_bounds",
    "gamma",
    "gamma_early",
    "gamma_late",
    "gamma_of_h",
    "h",
    "h_discrete",
    "pair_invariant_rhs",
    "regime_times",
    "scan_time",
    "snap_time",
]

_NEWTON_ITERS = 80


#: the domain of each argument by name: (lower bound, strict); None: any finite value
_DOMAIN: dict[str, tuple[float, bool] | None] = dict(t=(0, False), s=(0, False), M=(1, True), K=(0, True))
_DOMAIN |= dict(eta_Y=(0, True), eta_Z=(0, True), C0=(0, True), f0_sq=(0, False), B_n=None, dz_lp=None, r0=None)


def _check(_domain=None, **values):
    """Validate concrete inputs by name against `_DOMAIN` (or `_domain`, a (bound, strict) for all of them);
    tracers are passed through unchecked."""
    for name, value in values.items():
        if isinstance(value, jax.core.Tracer):
            continue
        arr = real_array(name, value, finite=False)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {value!r}")
        low, strict = _domain or _DOMAIN[name] or (None, False)
        if low is not None and np.any(arr <= low if strict else arr < low):
            raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value!r}")


def _float(x: ArrayLike) -> jax.Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def h(t: ArrayLike, M: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """h(t) of the decoder flow, from e^{M h} + (M-1) M h = M eta_Y t + 1 (Tian et al. 2023, eq. 45).

    Shapes broadcast; `M >= 2` (vocabulary size), `eta_Y > 0`, `t >= 0`. Newton's method on
    g(x) = expm1(x) + (M-1) x - M eta_Y t for x = M h from the upper bound min(eta_Y t, log1p(M eta_Y t)): g is
    increasing and convex, so the iterates decrease to the root without overflow (the Lambert-W form of the
    root overflows for large t and cancels for small t).
    """
    _check(t=t, M=M, eta_Y=eta_Y)
    t, M, eta_Y = jnp.broadcast_arrays(_float(t), _float(M), _float(eta_Y))
    a = M * eta_Y * t
    x0 = jnp.minimum(eta_Y * t, jnp.log1p(a))

    def newton(_, x):
        g = jnp.expm1(x) + (M - 1) * x - a
        step = g / (jnp.exp(x) + (M - 1))
        return jnp.maximum(x - step, 0.0)

    x = jax.lax.fori_loop(0, _NEWTON_ITERS, newton, x0)
    return x / M


def h_discrete(s: ArrayLike, M: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """The discrete recursion h*(s) = h*(s-1) + eta_Y / ((M-1) + exp(M h*(s-1))), h*(0) = 0 (eq. 33).

    `s` is an array of non-negative integers; `M` and `eta_Y` are scalars. Lemma 7: 0 <= h*(s) - h(s) <=
    2 eta_Y / M.
    """
    _check(M=M, eta_Y=eta_Y, s=s)
    s_arr = np.asarray(s)
    if s_arr.size and (not np.all(np.equal(np.mod(s_arr, 1), 0)) or np.any(s_arr < 0)):
        raise ValueError(f"s must be non-negative integers, got {s!r}")
    if np.ndim(M) or np.ndim(eta_Y):
        raise ValueError("h_discrete takes scalar M and eta_Y")
    s_int = s_arr.astype(np.int64)
    n = int(s_int.max()) if s_int.size else 0
    M, eta_Y = _float(M), _float(eta_Y)

    def step(hs, _):
        nxt = hs + eta_Y / ((M - 1) + jnp.exp(M * hs))
        return nxt, nxt

    _, path = jax.lax.scan(step, jnp.zeros_like(M), None, length=n)
    path = jnp.concatenate([jnp.zeros((1,), path.dtype), path])
    return path[jnp.asarray(s_int)]


def gamma_of_h(h: Any, M: Any) -> jax.Array:
    """gamma = (M-1)^2 h / ((M-1) + e^{M h}) (eq. 85) as a function of h, written as
    (M-1)^2 h e^{-Mh} / ((M-1) e^{-Mh} + 1) so that it does not overflow for large M h."""
    e = jnp.exp(-M * h)
    return (M - 1.0) ** 2 * h * e / ((M - 1.0) * e + 1.0)


def gamma(t: ArrayLike, M: ArrayLike, K: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """Speed-control coefficient gamma(t) = (M-1)^2 h(t/K) / ((M-1) + exp(M h(t/K))) (eq. 85).

    Lemma 9: gamma ~ eta_Y t / K early, ~ K ln(M eta_Y t / K) / (eta_Y t) late.
    """
    _check(t=t, M=M, K=K, eta_Y=eta_Y)
    hv = h(_float(t) / _float(K), M, eta_Y)
    return gamma_of_h(hv, _float(M))


def gamma_early(t: ArrayLike, K: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """Early-stage approximation gamma ~ eta_Y t / K (Lemma 9, t <= K ln M / eta_Y)."""
    _check(t=t, K=K, eta_Y=eta_Y)
    return _float(eta_Y) * _float(t) / _float(K)


def gamma_late(t: ArrayLike, M: ArrayLike, K: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """Late-stage approximation gamma ~ K ln(M eta_Y t / K) / (eta_Y t) (Lemma 9); t > 0."""
    _check((0, True), t=t)
    _check(M=M, K=K, eta_Y=eta_Y)
    t_, M_, K_, eta = _float(t), _float(M), _float(K), _float(eta_Y)
    return K_ * jnp.log(M_ * eta * t_ / K_) / (eta * t_)


def regime_times(M: float, K: float, eta_Y: float) -> tuple[float, float]:
    """(t0', t0): the end of the early stage K ln M / eta_Y and the start of the late stage
    2 (1 + omega_1) K ln M / eta_Y with omega_1 = ln ln M / ln M (Lemma 9; omega_1's constant is 1 here)."""
    _check((np.e, True), M=M)
    _check(K=K, eta_Y=eta_Y)
    if np.ndim(M) or np.ndim(K) or np.ndim(eta_Y):
        raise ValueError("regime_times takes scalar M, K and eta_Y")
    lnM = np.log(float(M))
    omega = np.log(lnM) / lnM
    return float(K) * lnM / float(eta_Y), 2 * (1 + omega) * float(K) * lnM / float(eta_Y)


# --- closed forms of the attention dynamics (Tian et al. 2023, Theorems 3-4) ------------------------------


def Gamma(t: ArrayLike, M: ArrayLike, K: ArrayLike, eta_Y: ArrayLike, eta_Z: ArrayLike) -> jax.Array:
    """Gamma(t) = eta_Z int_0^t gamma = (eta_Z / eta_Y) K (M-1)^2 h(t/K)^2 / 2 (eq. 128). Shapes broadcast."""
    _check(t=t, M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z)
    hv = h(_float(t) / _float(K), M, eta_Y)
    return _float(eta_Z) / _float(eta_Y) * _float(K) * (_float(M) - 1) ** 2 * hv**2 / 2


def B(
    t: ArrayLike,
    M: ArrayLike,
    K: ArrayLike,
    eta_Y: ArrayLike,
    eta_Z: ArrayLike,
    C0: ArrayLike = 1.0,
    printed: bool = False,
) -> jax.Array:
    """B_n(t) = eta_Z int_0^t xi_n of the single-common-token reduction (eq. 13, Theorem 4, eq. 129).

    Default: the exact integral (1/4) ln(1 + 4 Gamma(t) / C0) = (1/4) ln(1 + 2 (eta_Z/eta_Y) K (M-1)^2 h(t/K)^2
    / C0), so B(0) = 0. `printed=True` gives eq. 129 as printed, (1/4) ln(C0 + 4 Gamma); the two agree for
    C0 = 1. `C0 = rho_0^4 / K` in the paper; here a free positive constant.
    """
    _check(C0=C0)
    G = Gamma(t, M, K, eta_Y, eta_Z)
    C0 = _float(C0)
    if printed:
        return jnp.log(C0 + 4 * G) / 4
    return jnp.log1p(4 * G / C0) / 4


def scan_time(M: ArrayLike, K: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """t0' = K ln M / eta_Y: the end of the scanning stage (eq. 14, Lemma 9)."""
    _check(M=M, K=K, eta_Y=eta_Y)
    return _float(K) * jnp.log(_float(M)) / _float(eta_Y)


def snap_time(M: ArrayLike, K: ArrayLike, eta_Y: ArrayLike) -> jax.Array:
    """t0 ~ 2 K ln M / eta_Y: the snap (start of the O(ln ln t) stage; Theorem 4, eq. 14, leading order
    without the (1 + omega_1) factor; see `regime_times` for that). Independent of eta_Z."""
    return 2 * scan_time(M, K, eta_Y)


def chi_bounds(B_n: ArrayLike, f0_sq: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """The chi sandwich (eq. 12): (e^{2 f_{nl0}(0)^2 B_n}, e^{2 B_n}) bounding chi_{l0}(t) = e^{2 dz_{ml0}}."""
    _check(B_n=B_n, f0_sq=f0_sq)
    B_n, f0_sq = _float(B_n), _float(f0_sq)
    return jnp.exp(2 * f0_sq * B_n), jnp.exp(2 * B_n)


def pair_invariant_rhs(dz_lp: ArrayLike, r0: ArrayLike) -> jax.Array:
    """e^{-2 dz_l} - 1 predicted from the partner token (eq. 110): (r_{l/l'|n}(0) + 1)(e^{-2 dz_l'} - 1)."""
    _check(dz_lp=dz_lp, r0=r0)
    return (_float(r0) + 1) * jnp.expm1(-2 * _float(dz_lp))
