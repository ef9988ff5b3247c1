"""The vector fields of the T -> infinity flows of Scan and Snap (Tian et al. 2023): the full (Y, Z) population
gradient flow (Lemma 1, eq. 4 at T -> infinity, Lemma 2, eq. 5), the quasi-static reduced Z-flow (Lemma 4,
eq. 10) with the decoder scalar h and B_n (Theorem 1), the single-common-token flow (eq. 13) and the
class-symmetric reduced flow. They are the named limits of the spec (`limits`, solved by `flows.solve_flow`
and `spec.solve_flow`); the single-common-token flow is solved here. See docs/systems/scan_snap.md."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_real, real_array
from .._solve import Trajectory, solve
from . import observables as obs
from .data import SequenceClasses
from .theory import gamma_of_h

__all__ = [
    "check_ts",
    "flow_args",
    "UNROLLED_K",
    "full_vector_field",
    "gram_inverse",
    "h_rate",
    "population_loss",
    "reduced_vector_field",
    "single_ct_vector_field",
    "slaved_decoder",
    "solve_single_common_token",
    "symmetric_vector_field",
]

Array = jax.Array
Args = dict[str, Any]


def flow_args(
    classes: SequenceClasses,
    eta_Y: Any,
    eta_Z: Any,
    *,
    paper_time: bool = True,
    exact_slaving: bool = False,
    decoder_size: float | None = None,
    dtype: Any = None,
    query_rows: bool = False,
) -> Args:
    """The traced parameters of both vector fields (arrays; new values do not recompile).

    `query_rows=True`: the vector fields then take Z as its L query-token rows only, (L, M) in the order of
    `classes.query_tokens` (`Q` is (K, L)): the other rows of Z never enter c_n and never move, so this state
    is exact and M / L times smaller (the network's parameters, `model`).
    """
    dtype = dtype or jnp.result_type(float)
    K, M = classes.num_classes, classes.vocab_size
    Md = float(decoder_size or M)
    rows = {q: i for i, q in enumerate(classes.query_tokens)} if query_rows else {q: q for q in range(M)}
    Q = np.zeros((K, len(rows)))
    Q[np.arange(K), [rows[q] for q in classes.query]] = 1.0
    E = np.zeros((K, M))
    E[np.arange(K), classes.next_token] = 1.0
    p = np.asarray(classes.class_probs)
    weights = p if (exact_slaving or not paper_time) else K * p
    a = dict(cond=classes.cond_probs, Q=Q, E=E, p=p, w=weights, eta_Y=eta_Y, eta_Z=eta_Z, K=K, Md=Md)
    a["center"], a["scale"] = (1.0, (Md / (Md - 1.0)) ** 2) if exact_slaving else (0.0, 1.0)
    out = {k: jnp.asarray(v, dtype) for k, v in a.items()}
    return out | {"next": jnp.asarray(np.asarray(classes.next_token, np.int32))}


def population_loss(params: dict[str, Array], args: Args) -> Array:
    """sum_n P(n) (-log softmax(Y^T f_n)_n), the T -> infinity loss (minus eq. 2), as `loss(theta, batch)`
    on `flow_args` (`observables.population_loss`)."""
    c = obs.attention(params["Z"], args["cond"], args["Q"])
    return obs.population_loss(c, params["Y"], args["next"], args["p"])


def full_vector_field(t: Any, y: dict[str, Array], args: Args) -> dict[str, Array]:
    """d{Y, Z}/dt of the population gradient flow at T -> infinity (Lemma 1, eq. 4; Lemma 2, eq. 5):
    Y_dot = eta_Y sum_n P(n) f_n (e_n - alpha_n)^T, z_m_dot = eta_Z sum_{psi(n) = m} P(n) diag(f_n) P^perp_{f_n}
    Y (e_n - alpha_n), alpha_n = softmax(Y^T f_n)."""
    Y, Z = y["Y"], y["Z"]
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))  # (K, M)
    alpha = jax.nn.softmax(f @ Y, axis=-1)
    resid = args["E"] - alpha  # e_n - alpha_n, (K, M)
    pf = args["p"][:, None] * f
    Y_dot = args["eta_Y"] * (pf.T @ resid)
    g = resid @ Y.T  # g_n = Y (e_n - alpha_n)
    perp = g - f * jnp.sum(f * g, axis=-1, keepdims=True)
    Z_dot = args["eta_Z"] * (args["Q"].T @ (pf * perp))
    return {"Y": Y_dot, "Z": Z_dot}


def h_rate(h: Any, M: Any, eta_Y: Any, K: Any) -> Array:
    """dh/dt = eta_Y / (K ((M - 1) + e^{M h})): the decoder's scalar h = h(t/K) (Theorem 1, Lemma 4)."""
    return eta_Y / (K * ((M - 1.0) + jnp.exp(M * h)))


#: The largest class count K whose Gram matrix `gram_inverse` inverts by unrolled elimination.
UNROLLED_K = 8


def gram_inverse(G: Array) -> Array:
    """G^{-1} of a (K, K) Gram matrix F^T F, symmetric positive definite while the attention vectors are
    linearly independent. For K <= `UNROLLED_K`: Gauss-Jordan elimination unrolled at trace time, without
    pivoting (stable on a positive definite matrix, as Cholesky is), so that a sweep's members are inverted by
    elementwise operations vectorised across the batch; `jnp.linalg.inv` runs one LAPACK LU and two triangular
    solves per member on CPU (the row `scan_snap/sweep(n=256)` of `benchmarks/bench_scan_snap.py`). Larger K:
    `jnp.linalg.inv`."""
    K = G.shape[-1]
    if K > UNROLLED_K:
        return jnp.linalg.inv(G)
    A = jnp.concatenate([G, jnp.eye(K, dtype=G.dtype)], axis=-1)
    for i in range(K):
        pivot_row = A[i] / A[i, i]
        A = (A - jnp.outer(A[:, i], pivot_row)).at[i].set(pivot_row)
    return A[:, K:]


def _reduced_parts(Z, h, args):
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))
    G = f @ f.T  # F^T F in the paper's notation, (K, K)
    Ginv = gram_inverse(G)
    gt = Ginv @ f  # row n: (F^dagger)^T e_n = sum_j Ginv_{jn} f_j (Ginv symmetric)
    gt_c = gt - args["center"] * jnp.mean(gt, axis=0, keepdims=True) * (args["K"] / args["Md"])
    gamma = gamma_of_h(h, args["Md"]) * args["scale"]
    perp = gt_c - f * jnp.sum(f * gt_c, axis=-1, keepdims=True)
    xi = gamma * (jnp.diagonal(Ginv) - jnp.sum(f * gt, axis=-1))  # gamma sum_{n'!=n} beta f_n.f_n'
    return f, gamma, perp, xi


def reduced_vector_field(t: Any, y: dict[str, Array], args: Args) -> dict[str, Array]:
    """d{Z, h, B}/dt of the quasi-static reduced Z-flow (Lemma 4, eq. 10): z_m_dot = eta_Z gamma
    sum_{psi(n) = m} w_n diag(f_n) P^perp_{f_n} (F^dagger)^T e_n, dh/dt = `h_rate`, B_n_dot = eta_Z w_n xi_n
    (Theorem 1a); `exact_slaving` keeps the O(1/M) terms (docs/systems/scan_snap.md)."""
    Z, h = y["Z"], y["h"]
    f, gamma, perp, xi = _reduced_parts(Z, h, args)
    rows = (args["w"] * gamma)[:, None] * f * perp
    Z_dot = args["eta_Z"] * (args["Q"].T @ rows)
    h_dot = h_rate(h, args["Md"], args["eta_Y"], args["K"])
    B_dot = args["eta_Z"] * args["w"] * xi
    return {"Z": Z_dot, "h": h_dot, "B": B_dot}


def slaved_decoder(Z: Array, h: Any, args: Args) -> Array:
    """The quasi-static decoder Y = (F^dagger)^T W with w_n = (M-1) h zeta_n (Theorem 5 / Lemma 6), (M, M)."""
    f = obs.normalized_attention(obs.attention(Z, args["cond"], args["Q"]))
    M = args["Md"]
    zeta = (M / (M - 1.0)) * (args["E"] - 1.0 / M)
    W = (M - 1.0) * h * zeta  # (K, M)
    return f.T @ jnp.linalg.inv(f @ f.T) @ W


def check_ts(ts: Any, positive_end: bool = True) -> np.ndarray:
    """`ts` as a float array, or a ValueError unless it is a non-empty, non-decreasing 1-D array of finite times
    >= 0 (`positive_end`: ending at a time > 0)."""
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 1 or not np.all(np.isfinite(ts)) or np.any(ts < 0) or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a non-empty, non-decreasing 1-D array of finite times >= 0")
    if positive_end and ts[-1] <= 0:
        raise ValueError("ts must end at a time > 0")
    return ts


def single_ct_vector_field(t: Any, y: Array, args: Args) -> Array:
    """Single common token (Sec. 6, eq. 13): state (h, z, B) with h = h(t/K),
    z_dot = -eta_Z gamma e^{4z} / C0, B_dot = eta_Z gamma e^{4z} / C0 (xi_n = gamma e^{4z} / C0)."""
    h, z = y[0], y[1]
    M = args["M"]
    h_dot = h_rate(h, M, args["eta_Y"], args["K"])
    rate = args["eta_Z"] * gamma_of_h(h, M) * jnp.exp(4.0 * z) / args["C0"]
    return jnp.stack([h_dot, -rate, rate])


def solve_single_common_token(
    M: float,
    K: float,
    eta_Y: float,
    eta_Z: float,
    ts: Any,
    C0: float = 1.0,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> Trajectory:
    """Integrate eq. 13 (with the h-flow for gamma) from h = z = B = 0; `ys[:, 2]` is B_n(t)."""
    ts = check_ts(ts)
    dtype, vals = jnp.result_type(float), dict(M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, C0=C0)
    args = {k: jnp.asarray(check_real(k, v, low=1.0 if k == "M" else 0.0, strict=True), dtype) for k, v in vals.items()}
    y0 = jnp.zeros((3,), dtype)
    return solve(single_ct_vector_field, y0, t1=float(ts[-1]), ts=ts, args=args, solver="dopri8", rtol=rtol, atol=atol)


def symmetric_vector_field(t: Any, y: Array, args: Args) -> Array:
    """The generated class-symmetric reduced flow (derivations `scan_snap-reduced-symmetric`) with the h-flow
    for gamma: state (h, z_d, z_c), h = h(t/K); args M (decoder size), K, eta_Y, eta_Z, p_d, p_c, D, C."""
    from .._generated import scan_snap_reduced_symmetric as gen

    h = y[0]
    M = args["M"]
    h_dot = h_rate(h, M, args["eta_Y"], args["K"])
    # the generated field takes exactly its PARAMS (M and eta_Y drive the h-flow here, not it)
    gargs = {**{k: args[k] for k in gen.PARAMS if k != "gamma"}, "gamma": gamma_of_h(h, M)}
    z_dot = gen.vector_field(t, y[1:], gargs)
    return jnp.concatenate([h_dot[None], z_dot])
