"""Closed forms of linear attention trained on in-context linear regression.

Papers: (ZFB) R. Zhang, S. Frei, P. L. Bartlett, *Trained Transformers Learn Linear Models In-Context*, JMLR 25
(2024), arXiv:2306.09927; (ZSLS) Y. Zhang, A. K. Singh, P. E. Latham, A. Saxe, *Training Dynamics of
In-Context Learning in Linear Attention*, ICML 2025, arXiv:2501.16265. Derivations: `docs/systems/linear_attention.md`.

Conventions (every function here): x_i, x_q ~ N(0, Lambda) in R^d, w ~ N(0, I_d), y = w^T x;
h = (1/N) sum_i y_i x_i = Lambda_hat w; a model predicting y_hat = x_q^T G h has the population loss in ZFB's
convention (eqs 3.7-3.8), L = (1/2) E[(y_hat - y_q)^2] (ZSLS's loss, section 2.5, is 2 L), exactly

    2 L(G) = tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) + tr(Lambda),
    Gamma = (1 + 1/N) Lambda + (tr(Lambda) / N) I_d,

from the Wishart moment E[Lambda_hat A Lambda_hat] = Lambda A Lambda + (Lambda A^T Lambda + tr(A Lambda) Lambda) / N.
It is minimised by G* = Gamma^{-1} (ZFB Theorem 4.1, eq 4.1 with Lemma 5.3), where
2 L* = tr(Lambda) - tr(Lambda^2 Gamma^{-1}). Restricted to the top k eigen-directions of Lambda the minimiser is
principal-component regression, G_k = sum_{i<=k} gamma_i^{-1} r_i r_i^T (r_i, lambda_i the eigenpairs in
decreasing order, gamma_i = (1 + 1/N) lambda_i + tr(Lambda)/N), with 2 L_k = tr(Lambda) - sum_{i<=k} lambda_i^2 /
gamma_i: the saddles of the separate-heads model (ZSLS eqs 18-19) and its plateaus.

Functions take eigenvalues (a 1-D sequence, positive) and an optional orthogonal `rotation` R (Lambda =
R diag(eigenvalues) R^T, None: diagonal). The closed forms of the data alone (Gamma, G*, the plateaus, ...) are
float64 numpy arrays (constants, usable inside traced code); the functions of a matrix G or of time return jax
arrays (differentiable; float64 where x64 is enabled).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Float

from .._checks import check_int, check_real, real_array

__all__ = [
    "covariance_matrix",
    "covariate_shift_loss",
    "covariate_shift_map",
    "gamma_matrix",
    "gamma_values",
    "loss_of_G",
    "merged_drop_time",
    "merged_time_course",
    "min_loss",
    "optimal_G",
    "pcr_G",
    "plateau_losses",
    "prompt_length_loss",
    "query_shift_loss",
    "separate_fixed_points",
    "separate_time",
    "shift_loss",
    "task_shift_loss",
]


#: eigenvalues of Lambda: a sequence of positive numbers or a 1-D array.
Eigenvalues = Sequence[float] | ArrayLike
#: a (d, d) matrix: an array or nested sequences.
Matrix = Sequence[Sequence[float]] | ArrayLike
#: a prompt length: a positive integer, or inf.
Length = int | float


def _eigenvalues(eigenvalues) -> np.ndarray:
    lam = real_array("eigenvalues", eigenvalues)
    if lam.ndim != 1 or lam.size < 1 or np.any(lam <= 0):
        raise ValueError(f"eigenvalues must be a non-empty 1-D sequence of positive numbers, got {eigenvalues!r}")
    return lam


def _prompt_length(name: str, value) -> float:
    """A prompt length: a positive integer, or inf (the infinitely long prompt, 1/N = 0)."""
    if isinstance(value, float | np.floating) and np.isinf(value) and value > 0:
        return float("inf")
    return float(check_int(name, value, 1))


def _rotation(rotation, d: int) -> np.ndarray | None:
    if rotation is None:
        return None
    R = real_array("rotation", rotation)
    if R.shape != (d, d) or not np.allclose(R.T @ R, np.eye(d), atol=1e-10):
        raise ValueError(f"rotation must be an orthogonal ({d}, {d}) matrix (R^T R = I) or None")
    return R


def _sym(name: str, value, d: int) -> jax.Array:
    """A symmetric positive semi-definite (d, d) matrix (a covariance or second moment)."""
    A = real_array(name, value)
    if A.shape != (d, d) or not np.allclose(A, A.T, atol=1e-12 * max(1.0, float(np.max(np.abs(A))))):
        raise ValueError(f"{name} must be a symmetric ({d}, {d}) matrix, got shape {A.shape}")
    if np.min(np.linalg.eigvalsh(A)) < -1e-12 * max(1.0, float(np.max(np.abs(A)))):
        raise ValueError(f"{name} must be positive semi-definite")
    return jnp.asarray(A)


def _covariance(eigenvalues, rotation) -> np.ndarray:
    lam = _eigenvalues(eigenvalues)
    R = _rotation(rotation, lam.size)
    return np.diag(lam) if R is None else (R * lam) @ R.T


def covariance_matrix(eigenvalues: Eigenvalues, rotation: Matrix | None = None) -> Float[np.ndarray, "d d"]:
    """Lambda = R diag(eigenvalues) R^T `(d, d)` (R = I when `rotation` is None)."""
    return _covariance(eigenvalues, rotation)


def gamma_values(eigenvalues: Eigenvalues, N: Length) -> np.ndarray:
    """gamma_i = (1 + 1/N) lambda_i + tr(Lambda) / N `(d,)`: the eigenvalues of Gamma (same order as given)."""
    lam = _eigenvalues(eigenvalues)
    n = _prompt_length("N", N)
    return (1.0 + 1.0 / n) * lam + lam.sum() / n


def gamma_matrix(eigenvalues: Eigenvalues, N: Length, rotation: Matrix | None = None) -> Float[np.ndarray, "d d"]:
    """Gamma = (1 + 1/N) Lambda + (tr(Lambda) / N) I_d `(d, d)` (ZFB, Theorem 4.1).

    **Arguments:**

    - `eigenvalues`: the eigenvalues of Lambda (positive).
    - `N`: the prompt length (a positive integer; `inf` for the infinitely long prompt).
    - `rotation`: R with Lambda = R diag(eigenvalues) R^T, or None (diagonal).

    **Returns:** Gamma, symmetric positive definite.
    """
    lam = _eigenvalues(eigenvalues)
    n = _prompt_length("N", N)
    return (1.0 + 1.0 / n) * _covariance(lam, rotation) + (lam.sum() / n) * np.eye(lam.size)


def optimal_G(eigenvalues: Eigenvalues, N: Length, rotation: Matrix | None = None) -> Float[np.ndarray, "d d"]:
    """G* = Gamma^{-1} `(d, d)`: the global minimiser of `loss_of_G`, the limit of ZFB's gradient flow
    (Theorem 4.1, eq 4.1: the product of the trained value and key-query blocks)."""
    lam = _eigenvalues(eigenvalues)
    R = _rotation(rotation, lam.size)
    inv = 1.0 / gamma_values(lam, N)
    return np.diag(inv) if R is None else (R * inv) @ R.T


def shift_loss(
    G: ArrayLike, N: Length, context_cov: Matrix, *, query_cov: Matrix | None = None, task_cov: Matrix | None = None
) -> jax.Array:
    """L = (1/2) E[(x_q^T G h - x_q^T w)^2] for a context of N points x_i ~ N(0, context_cov), a query
    x_q ~ N(0, query_cov) and a task w with second moment E[w w^T] = task_cov (any law independent of x).

    With A = task_cov, Lambda = context_cov, Lambda_q = query_cov:
    2 L = tr(Lambda_q G E[Lambda_hat A Lambda_hat] G^T) - 2 tr(Lambda_q G Lambda A) + tr(Lambda_q A), with
    E[Lambda_hat A Lambda_hat] = (1 + 1/N) Lambda A Lambda + tr(A Lambda) Lambda / N. This is the test error of ZFB
    section 4.2 (task, query and covariate shift) and of Theorem 4.2 (a test prompt length N other than the
    training one); it is jax-differentiable in `G`.

    **Arguments:**

    - `G`: the effective matrix `(d, d)` (y_hat = x_q^T G h).
    - `N`: the context length of the test prompts (a positive integer, or `inf`).
    - `context_cov`: the covariance of the context inputs `(d, d)`.
    - `query_cov`: the covariance of the query (default `context_cov`).
    - `task_cov`: E[w w^T] (default I_d).

    **Returns:** the scalar L in ZFB's convention (with the factor 1/2).
    """
    n = _prompt_length("N", N)
    cov = real_array("context_cov", context_cov)
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or cov.shape[0] < 1:
        raise ValueError(f"context_cov must be a square (d, d) matrix, got shape {cov.shape}")
    d = cov.shape[0]
    lam = _sym("context_cov", cov, d)
    lam_q = lam if query_cov is None else _sym("query_cov", query_cov, d)
    A = jnp.eye(d) if task_cov is None else _sym("task_cov", task_cov, d)
    G = jnp.asarray(G)
    if G.shape != (d, d):
        raise ValueError(f"G must have shape ({d}, {d}), got {G.shape}")
    second = (1.0 + 1.0 / n) * lam @ A @ lam + (jnp.trace(A @ lam) / n) * lam
    two_loss = jnp.trace(lam_q @ G @ second @ G.T) - 2.0 * jnp.trace(lam_q @ G @ lam @ A) + jnp.trace(lam_q @ A)
    return 0.5 * two_loss


def loss_of_G(G: ArrayLike, eigenvalues: Eigenvalues, N: Length, rotation: Matrix | None = None) -> jax.Array:
    """The population loss L(G) = (1/2) E[(x_q^T G h - y_q)^2] of the module docstring (ZFB's convention),
    2 L = tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) + tr(Lambda): `shift_loss` without a shift.

    **Arguments:**

    - `G`: `(d, d)` (jax-differentiable).
    - `eigenvalues`, `N`, `rotation`: as in `gamma_matrix`.

    **Returns:** the scalar loss.
    """
    return shift_loss(G, N, _covariance(eigenvalues, rotation))


def min_loss(eigenvalues: Eigenvalues, N: Length) -> float:
    """L* = (1/2) (tr(Lambda) - sum_i lambda_i^2 / gamma_i): the loss at G* = Gamma^{-1} (ZFB's convention)."""
    return float(plateau_losses(eigenvalues, N)[-1])


def plateau_losses(eigenvalues: Eigenvalues, N: Length) -> Float[np.ndarray, " d+1"]:
    """L_k for k = 0..d `(d + 1,)`: the loss of principal-component regression on the top k eigen-directions,
    L_k = (1/2) (tr(Lambda) - sum_{i<=k} lambda_i^2 / gamma_i) with the eigenvalues in decreasing order (ZSLS
    eq 19, times 1/2 for ZFB's convention): L_0 = tr(Lambda)/2 at G = 0, L_d = `min_loss`. These are the
    plateaus of the separate-heads model, visited in this order (ZSLS section 4)."""
    lam = _eigenvalues(eigenvalues)
    gam = gamma_values(lam, N)
    order = np.argsort(-lam, kind="stable")
    gains = np.concatenate([[0.0], np.cumsum(lam[order] ** 2 / gam[order])])
    return 0.5 * (lam.sum() - gains)


def pcr_G(eigenvalues: Eigenvalues, N: Length, k: int, rotation: Matrix | None = None) -> Float[np.ndarray, "d d"]:
    """G_k = sum_{i<=k} gamma_i^{-1} r_i r_i^T `(d, d)`: the minimiser of `loss_of_G` among matrices acting on the
    top k eigen-directions (ZSLS eq 18); `loss_of_G(pcr_G(..., k))` is `plateau_losses(...)[k]`."""
    lam = _eigenvalues(eigenvalues)
    k = check_int("k", k, 0, lam.size)
    R = _rotation(rotation, lam.size)
    gam = gamma_values(lam, N)
    keep = np.zeros(lam.size)
    keep[np.argsort(-lam, kind="stable")[:k]] = 1.0
    diag = keep / gam
    return np.diag(diag) if R is None else (R * diag) @ R.T


# -- distribution shift (ZFB section 4.2, Theorem 4.2) ----------------------------------------------------------


def prompt_length_loss(eigenvalues: Eigenvalues, N: Length, M: Length, rotation: Matrix | None = None) -> jax.Array:
    """The loss of the trained model G* = Gamma_N^{-1} on test prompts of length M (ZFB Theorem 4.2, eq 4.6):
    `shift_loss(Gamma_N^{-1}, M, Lambda)`; M = N gives `min_loss`, M = inf the long-prompt limit."""
    return _trained_loss(eigenvalues, N, M, rotation)


def _trained_loss(eigenvalues, N, M, rotation, **shift) -> jax.Array:
    """`shift_loss` of the trained model G* = Gamma_N^{-1} on test prompts of length M (`None`: N) whose inputs
    have the training covariance Lambda, with the task or query moment of `shift`."""
    M = N if M is None else M
    return shift_loss(optimal_G(eigenvalues, N, rotation), M, _covariance(eigenvalues, rotation), **shift)


def task_shift_loss(
    eigenvalues: Eigenvalues, N: Length, task_cov: Matrix, *, M: Length | None = None, rotation: Matrix | None = None
) -> jax.Array:
    """The trained model's loss when the test tasks have second moment E[w w^T] = `task_cov` (ZFB section 4.2,
    task shift): it depends on the task law only through that moment and vanishes as N, M -> inf (y_hat ->
    x_q^T w). `M`: the test prompt length (default N)."""
    return _trained_loss(eigenvalues, N, M, rotation, task_cov=task_cov)


def query_shift_loss(
    eigenvalues: Eigenvalues, N: Length, query_cov: Matrix, *, M: Length | None = None, rotation: Matrix | None = None
) -> jax.Array:
    """The trained model's loss when only the query is drawn from N(0, `query_cov`) (ZFB section 4.2, query
    shift): at M = N, 2 L = tr(query_cov (I - Gamma^{-1} Lambda)); it vanishes as N, M -> inf. `M`: the test
    prompt length (default N)."""
    return _trained_loss(eigenvalues, N, M, rotation, query_cov=query_cov)


def covariate_shift_loss(
    eigenvalues: Eigenvalues, N: Length, test_cov: Matrix, *, M: Length | None = None, rotation: Matrix | None = None
) -> jax.Array:
    """The trained model's loss when context and query inputs are drawn from N(0, `test_cov`) (ZFB section 4.2,
    covariate shift): it does not vanish as M -> inf unless Gamma^{-1} test_cov -> I (see
    `covariate_shift_map`). `M`: the test prompt length (default N)."""
    M = N if M is None else M
    G = optimal_G(eigenvalues, N, rotation)
    return shift_loss(G, M, test_cov)


def covariate_shift_map(
    eigenvalues: Eigenvalues, N: Length, test_cov: Matrix, rotation: Matrix | None = None
) -> np.ndarray:
    """Gamma^{-1} Lambda' `(d, d)`: the long-test-prompt prediction of the trained model under covariate shift,
    y_hat -> x_q^T Gamma^{-1} Lambda' w (ZFB section 4.2); Lambda' = c^2 Lambda gives about c^2 x_q^T w."""
    lam = _eigenvalues(eigenvalues)
    return optimal_G(lam, N, rotation) @ np.asarray(_sym("test_cov", test_cov, lam.size))


# -- multi-head models (ZSLS) ------------------------------------------------------------------------------------


def separate_fixed_points(eigenvalues: Eigenvalues, N: Length) -> np.ndarray:
    """v_i* = gamma_i^{-1/3} `(d,)`: the nonzero fixed point of the separate-heads scalar ODE (ZSLS eq 21) of each
    eigen-direction (same order as `eigenvalues`); a head on direction i ends with k = q = v = v_i*."""
    return gamma_values(eigenvalues, N) ** (-1.0 / 3.0)


def _escape_primitive(x):
    """F(x) with F'(x) = 1 / (x^2 (1 - x^3)) on 0 < x < 1."""
    return (
        -1.0 / x
        + (jnp.log1p(x * (x + 1.0)) - 2.0 * jnp.log1p(-x)) / 6.0
        - jnp.arctan((2.0 * x + 1.0) / jnp.sqrt(3.0)) / jnp.sqrt(3.0)
    )


def separate_time(v: ArrayLike, v0: ArrayLike, eigenvalue: float, N: Length, trace: float) -> jax.Array:
    """The time the separate-heads scalar ODE takes from v0 to v (ZSLS eq 21, in ZFB's clock):

        dv/dt = lambda^2 v^2 - lambda^3 (1 + (1 + tr(Lambda)/lambda)/N) v^5 = lambda^2 v^2 (1 - gamma v^3),

    solved exactly: t = (gamma^{1/3} / lambda^2) (F(gamma^{1/3} v) - F(gamma^{1/3} v0)) with
    F(x) = -1/x + (ln(1 + x + x^2) - 2 ln(1 - x))/6 - atan((2x + 1)/sqrt 3)/sqrt 3; for small v0 it is about
    1/(lambda^2 v0): algebraic in the initial scale.

    **Arguments:**

    - `v`, `v0`: the end and start values, 0 < v0 <= v < gamma^{-1/3} (arrays broadcast).
    - `eigenvalue`: lambda of the direction; `N`: the prompt length; `trace`: tr(Lambda).

    **Returns:** the time (same shape as the broadcast inputs). The loss of the direction is half-learned
    (G_ii = v^3 = 1/(2 gamma)) at v = (2 gamma)^{-1/3}.
    """
    lam = check_real("eigenvalue", eigenvalue, low=0.0, strict=True)
    n = _prompt_length("N", N)
    tr = check_real("trace", trace, low=lam)
    gam = (1.0 + 1.0 / n) * lam + tr / n
    a = gam ** (1.0 / 3.0)
    v, v0 = jnp.asarray(v), jnp.asarray(v0)
    return (a / lam**2) * (_escape_primitive(a * v) - _escape_primitive(a * v0))


def merged_time_course(t: ArrayLike, eigenvalue: float, d: int, N: Length, u0: float) -> jax.Array:
    """The mode strength u(t) of the merged-heads model for white data Lambda = lambda I_d from an aligned,
    balanced small initialisation (ZSLS eq 10, the two-layer linear network of eqs 6-7 in ZFB's clock):

        du/dt = 2 u (s - lambda^2 gamma u),  s = lambda^2 sqrt(d),
        u(t) = u* / (1 + (u*/u0 - 1) e^{-2 s t}),  u* = sqrt(d) / gamma,

    with G(t) = (u(t) / sqrt d) I_d (u* gives G = Gamma^{-1}) and loss
    L = (1/2) (d lambda - 2 lambda^2 sqrt(d) u + lambda^2 gamma u^2).

    **Arguments:**

    - `t`: times (array).
    - `eigenvalue`: lambda; `d`: the dimension; `N`: the prompt length.
    - `u0`: the initial mode strength, 0 < u0 < u*.

    **Returns:** u(t), same shape as `t`.
    """
    lam = check_real("eigenvalue", eigenvalue, low=0.0, strict=True)
    d = check_int("d", d, 1)
    gam = float(gamma_values(np.full(d, lam), N)[0])
    u_star = np.sqrt(d) / gam
    u0 = check_real("u0", u0, low=0.0, strict=True, high=u_star, high_strict=True)
    s = lam**2 * np.sqrt(d)
    return u_star / (1.0 + (u_star / u0 - 1.0) * jnp.exp(-2.0 * s * jnp.asarray(t)))


def merged_drop_time(eigenvalue: float, d: int, N: Length, u0: float) -> float:
    """The time of the merged model's single drop, u(t) = u*/2 in `merged_time_course`:
    t = ln(u*/u0 - 1) / (2 lambda^2 sqrt d) (ZSLS eq 10; about ln(1/u0) / (2 ||Lambda^2||_F) for small u0)."""
    lam = check_real("eigenvalue", eigenvalue, low=0.0, strict=True)
    d = check_int("d", d, 1)
    gam = float(gamma_values(np.full(d, lam), N)[0])
    u_star = np.sqrt(d) / gam
    u0 = check_real("u0", u0, low=0.0, strict=True, high=u_star, high_strict=True)
    return float(np.log(u_star / u0 - 1.0) / (2.0 * lam**2 * np.sqrt(d)))
