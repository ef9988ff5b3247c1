"""Linear self-attention on in-context regression prompts, its three parametrisations and their exact
population loss.

The prompt is embedded as E in R^{(d+1) x (N+1)}, columns (x_i; y_i) and the query column (x_q; 0) last. One
head is f(E) = E + W^{PV} E (E^T W^{KQ} E) / N (Zhang, Frei, Bartlett 2024, eq. 3.5: normalised by N, the
query column included in E E^T); the prediction is the entry (d+1, N+1) of the sum of the heads' updates,

    y_hat = sum_h p_h^T (E E^T / N) K_h e_q,    E E^T / N = [[Lh + x_q x_q^T / N, h], [h^T, s]],

with p_h the last row of W^{PV}_h, K_h the key-query matrix, e_q = (x_q; 0), Lh = (1/N) sum_i x_i x_i^T,
h = Lh w and s = w^T Lh w (ZFB eq. 3.6). The forms (`Config.form`):

- `"single"`: one head, {"W_PV", "W_KQ"} both (d+1, d+1) (ZFB);
- `"merged"`: H heads, {"W_PV", "W_KQ"} both (H, d+1, d+1) (ZSLS's ATTN_M);
- `"separate"`: H heads, {"W_PV" (H, d+1, d+1), "W_K", "W_Q" (H, d+1, r)} with K_h = W_K,h W_Q,h^T (ZSLS's
  ATTN_S, eq. S).

The loss is ZFB's L = (1/2) E[(y_hat - y_q)^2] (eqs 3.7-3.8), whose gradient flow is d theta/dt = -grad L (3.9);
ZSLS's loss has no 1/2 and its time is ZFB's (see docs/systems/linear_attention.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from .._checks import check_int, real_array
from .data import Config, Prompts, covariance

__all__ = [
    "blocks",
    "effective_G",
    "init_params",
    "moment_loss",
    "population_loss",
    "predict",
    "sample_loss",
    "shifted_loss",
]


def init_params(config: Config) -> dict[str, jax.Array]:
    """The initial parameters of `config.form`, drawn from `config.rng("init")`.

    - `init="paper"`, `form="single"`: ZFB's Assumption 3.3 (eq. 3.10), W^{PV} = sigma [[0, 0], [0, 1]],
      W^{KQ} = sigma [[Theta Theta^T, 0], [0, 0]] with a Gaussian Theta (d x d) scaled to ||Theta Theta^T||_F = 1,
      sigma = `init_scale`.
    - `init="paper"`, multi-head forms: ZSLS's small initialisation on the blocks the reduced flow keeps, the
      rest zero: each head's value entry v_h = W^{PV}_h[d, d] and its x-blocks (W^{KQ}_h[:d, :d] merged;
      W_K,h[:d], W_Q,h[:d] separate) i.i.d. N(0, init_scale^2).
    - `init="random"`: every entry of every matrix i.i.d. N(0, init_scale^2).

    **Arguments:** `config`: the `Config`.

    **Returns:** a dict of float arrays (shapes in the module docstring).
    """
    rng = config.rng("init")
    d, H, r, sigma = config.d, config.heads, config.rank, config.init_scale
    D = d + 1
    shapes: dict[str, tuple[int, ...]]
    if config.form == "single":
        shapes = {"W_PV": (D, D), "W_KQ": (D, D)}
    elif config.form == "merged":
        shapes = {"W_PV": (H, D, D), "W_KQ": (H, D, D)}
    else:
        shapes = {"W_PV": (H, D, D), "W_K": (H, D, r), "W_Q": (H, D, r)}
    if config.init == "random":
        params = {k: sigma * rng.standard_normal(s) for k, s in shapes.items()}
    elif config.form == "single":
        theta = rng.standard_normal((d, d))
        tt = theta @ theta.T
        params = {k: np.zeros(s) for k, s in shapes.items()}
        params["W_PV"][d, d] = sigma
        params["W_KQ"][:d, :d] = sigma * tt / np.linalg.norm(tt)
    else:
        params = {k: np.zeros(s) for k, s in shapes.items()}
        params["W_PV"][:, d, d] = sigma * rng.standard_normal(H)
        for k in shapes:
            if k != "W_PV":
                params[k][:, :d] = sigma * rng.standard_normal(params[k][:, :d].shape)
    return {k: jnp.asarray(v, jnp.result_type(float)) for k, v in params.items()}


def _key_query(params: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """(p, K): the value rows (H, d+1) and the key-query matrices (H, d+1, d+1) of any form."""
    if "W_K" in params:
        K = jnp.einsum("hir,hjr->hij", params["W_K"], params["W_Q"])
        return params["W_PV"][:, -1, :], K
    W_PV, W_KQ = params["W_PV"], params["W_KQ"]
    if W_PV.ndim == 2:
        W_PV, W_KQ = W_PV[None], W_KQ[None]
    return W_PV[:, -1, :], W_KQ


def blocks(params: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The blocks of every head that the prediction reads: p_h = (u_h; v_h) the last row of W^{PV}_h and
    K_h = [[A_h, *], [b_h^T, *]] its key-query matrix (the last column of K_h meets the query's zero label).

    **Arguments:** `params` of any form.

    **Returns:** `{"u": (H, d), "v": (H,), "A": (H, d, d), "b": (H, d)}`; then
    y_hat = sum_h [u_h^T (Lh + x_q x_q^T / N) A_h x_q + (u_h^T h)(b_h^T x_q) + v_h h^T A_h x_q + v_h s b_h^T x_q].
    """
    p, K = _key_query(params)
    return {"u": p[:, :-1], "v": p[:, -1], "A": K[:, :-1, :-1], "b": K[:, -1, :-1]}


def effective_G(params: dict[str, jax.Array], config: Config | None = None) -> Float[jax.Array, "d d"]:
    """The effective matrix G of the part of the prediction bilinear in (x_q, h): x_q^T G h, with
    G = sum_h (v_h A_h^T + b_h u_h^T) (`blocks`). On ZFB's reduced parameters (u = 0, b = 0) this is the whole
    prediction, y_hat = x_q^T G h with G = w_22 (W_11)^T (ZFB Lemma 5.3), and G -> Gamma^{-1} is its limit.

    **Arguments:** `params` of any form, `config` its `Config` (unused: the form is read from `params`).

    **Returns:** G, shape `(d, d)`.
    """
    del config
    bl = blocks(params)
    return jnp.einsum("h,hji->ij", bl["v"], bl["A"]) + jnp.einsum("hi,hj->ij", bl["b"], bl["u"])


def predict(params: dict[str, jax.Array], config: Config | None, prompts: Prompts) -> Float[jax.Array, " B"]:
    """The prediction y_hat = f(E)_{d+1, N+1} of each prompt, summed over the heads (module docstring).

    **Arguments:** `params` of `config.form`, `config` (the form is read from `params`; `None` is accepted),
    `prompts` (`data.Prompts`, N context examples each).

    **Returns:** y_hat, shape `(B,)`.
    """
    p, K = _key_query(params)
    N = prompts.X.shape[1]
    Z = jnp.concatenate([prompts.X, prompts.y[..., None]], axis=-1)  # (B, N, d+1) context columns
    eq = jnp.concatenate([prompts.xq, jnp.zeros_like(prompts.yq)[:, None]], axis=-1)  # (B, d+1)
    gram = (jnp.einsum("bni,bnj->bij", Z, Z) + jnp.einsum("bi,bj->bij", eq, eq)) / N  # E E^T / N
    del config
    return jnp.einsum("hi,bij,hjk,bk->b", p, gram, K, eq)


def sample_loss(params: dict[str, jax.Array], config: Config | None, prompts: Prompts) -> jax.Array:
    """The empirical loss (1/2) mean_b (y_hat_b - y_q,b)^2 of a batch of prompts (ZFB eq. 3.7).

    **Arguments:** as `predict`.

    **Returns:** the loss (scalar).
    """
    return 0.5 * jnp.mean((predict(params, config, prompts) - prompts.yq) ** 2)


@functools.cache
def _cubature(d: int) -> tuple[np.ndarray, np.ndarray]:
    """A degree-5 cubature rule for N(0, I_d) (Stroud 1971, rule E_n^{r^2} 5-2): the origin, the 2d points
    +-r e_i and the 2d(d-1) points +-s e_i +-s e_j (i < j), r^2 = d + 2, s^2 = (d + 2) / 2; it integrates every
    polynomial of degree <= 5 exactly. Returns (points (P, d), weights (P,))."""
    r, s = np.sqrt(d + 2.0), np.sqrt((d + 2.0) / 2.0)
    points = [np.zeros(d)]
    weights = [2.0 / (d + 2.0)]
    for i in range(d):
        for sign in (1.0, -1.0):
            points.append(sign * r * np.eye(d)[i])
            weights.append((4.0 - d) / (2.0 * (d + 2.0) ** 2))
    for i in range(d):
        for j in range(i + 1, d):
            for si in (1.0, -1.0):
                for sj in (1.0, -1.0):
                    points.append(s * (si * np.eye(d)[i] + sj * np.eye(d)[j]))
                    weights.append(1.0 / (d + 2.0) ** 2)
    return np.asarray(points), np.asarray(weights)


def moment_loss(
    params: dict[str, jax.Array],
    context_cov: jax.Array,
    query_cov: jax.Array,
    task_root: jax.Array,
    N: jax.Array | float,
) -> jax.Array:
    """The exact (1/2) E[(y_hat - y_q)^2] for contexts of N inputs ~ N(0, `context_cov`) = N(0, Lc), a query
    x ~ N(0, `query_cov`) = N(0, Lq) and w = `task_root` z, z ~ N(0, I) (the attention normalised by N).

    With the blocks of `blocks`, y_hat = tr(Lh B) + c0: B = sum_h C_h x beta_h^T (C_h = A_h + w b_h^T,
    beta_h = u_h + v_h w) is linear in x, B = sum_l x_l B_l, and c0 = (1/N) sum_h (u_h . x)(x^T A_h x) is cubic.

    1. Over the context (Lh a Wishart matrix, mean Lc): E[(tr(Lh B) + c0 - y_q)^2] = (tr(Lc B) + c0 - y_q)^2
       + (tr(Lc B Lc B) + tr(Lc B^T Lc B)) / N.
    2. Over x (Isserlis): c0 = (c . x) / N + its part orthogonal to the linear functions of x, c = sum_h
       (u_h tr(S_h Lq) + 2 S_h Lq u_h) (S_h the symmetric part of A_h), whose second moment is `_cubic_rest`
       / N^2; so with rho = (tr(Lc B_l))_l - w + c / N the first term gives rho^T Lq rho + `_cubic_rest` / N^2,
       the second sum_lm Lq_lm (tr(Lc B_l Lc B_m) + tr(Lc B_l^T Lc B_m)).
    3. What is left is a polynomial of degree 4 in z, integrated exactly by `_cubature`.

    **Arguments:** `params` of any form; `context_cov`, `query_cov`, `task_root` `(d, d)`; `N` the prompt length
    (a number or a traced scalar).

    **Returns:** the loss (scalar).
    """
    bl = blocks(params)
    u, v, A, b = bl["u"], bl["v"], bl["A"], bl["b"]
    Lc, Lq = context_cov, query_cov
    z, wts = _cubature(int(Lc.shape[0]))
    w = jnp.asarray(z, Lc.dtype) @ task_root.T  # (P, d)
    C = A[None] + jnp.einsum("pi,hj->phij", w, b)  # (P, H, d, d)
    beta = u[None] + jnp.einsum("h,pi->phi", v, w)  # (P, H, d)
    Bl = jnp.einsum("phil,phj->pijl", C, beta)  # B_l = Bl[..., l]
    LB = jnp.einsum("ia,pajl->pijl", Lc, Bl)  # Lc B_l
    S = 0.5 * (A + jnp.swapaxes(A, 1, 2))
    c = jnp.einsum("hi,hjk,kj->i", u, S, Lq) + 2.0 * jnp.einsum("hij,jk,hk->i", S, Lq, u)
    rho = jnp.einsum("piil->pl", LB) - w + c[None] / N
    mean = jnp.einsum("pl,lm,pm->p", rho, Lq, rho)
    wishart = jnp.einsum("pijl,lm,pjim->p", LB, Lq, LB) + jnp.einsum("pcbl,lm,pcam,ab->p", Bl, Lq, LB, Lc)
    return 0.5 * (jnp.sum(jnp.asarray(wts, Lc.dtype) * (mean + wishart / N)) + _cubic_rest(u, S, Lq) / N**2)


def _cubic_rest(u, S, Lq):
    """N^2 E[c0^2] - c^T Lq c for x ~ N(0, Lq): the second moment of the part of N c0 = sum_h (u_h . x)(x^T S_h x)
    orthogonal to the linear functions of x. By Isserlis' theorem,
    2 sum_hk (u_h^T Lq u_k) tr(S_h Lq S_k Lq) + 4 sum_hk u_k^T Lq S_h Lq S_k Lq u_h."""
    SL = jnp.einsum("hij,jk->hik", S, Lq)  # S_h Lq
    Lu = jnp.einsum("ij,hj->hi", Lq, u)  # Lq u_h
    pairs = jnp.einsum("hi,ki->hk", u, Lu) * jnp.einsum("hij,kji->hk", SL, SL)
    crossed = jnp.einsum("ki,hij,kjl,hl->", Lu, SL, SL, u)
    return 2.0 * jnp.sum(pairs) + 4.0 * crossed


def population_loss(params: dict[str, jax.Array], config: Config) -> Float[jax.Array, ""]:
    """The exact population loss L = (1/2) E[(y_hat - y_q)^2] over prompts of `config` (ZFB eq. 3.8), for any
    parameters of any form: no sampling, differentiable (`moment_loss`).

    **Arguments:** `params` of `config.form`, `config`.

    **Returns:** L (scalar).
    """
    lam = covariance(config)
    return moment_loss(params, lam, lam, jnp.eye(config.d, dtype=lam.dtype), float(config.N))


def shifted_loss(
    params: dict[str, jax.Array],
    config: Config,
    *,
    context_cov: jax.Array | np.ndarray | None = None,
    query_cov: jax.Array | np.ndarray | None = None,
    task_cov: jax.Array | np.ndarray | None = None,
    prompt_length: int | None = None,
) -> jax.Array:
    """The exact loss (1/2) E[(y_hat - y_q)^2] under a distribution shift (ZFB Sec. 4.2, Theorem 4.2): context
    inputs ~ N(0, `context_cov`), the query ~ N(0, `query_cov`), w ~ N(0, `task_cov`), `prompt_length`
    context examples (the attention normalised by it). `None` keeps the training distribution of `config`;
    covariate shift is `context_cov = query_cov = Lambda'`.

    **Arguments:** `params` of `config.form`, `config`, the covariances (`(d, d)`, symmetric positive
    semi-definite) and `prompt_length` (>= 1).

    **Returns:** the loss (scalar).
    """
    lam = covariance(config)
    d = config.d

    def cov(name, value, default):
        if value is None:
            return default
        arr = real_array(name, value)
        if arr.shape != (d, d) or not np.allclose(arr, arr.T) or np.linalg.eigvalsh(arr).min() < -1e-12:
            raise ValueError(f"{name} must be a symmetric positive semi-definite {d} x {d} (d x d) matrix")
        return jnp.asarray(arr, lam.dtype)

    Lc = cov("context_cov", context_cov, lam)
    Lq = cov("query_cov", query_cov, lam)
    task = cov("task_cov", task_cov, None)
    if task is None:
        root = jnp.eye(d, dtype=lam.dtype)
    else:
        vals, vecs = np.linalg.eigh(np.asarray(task))
        root = jnp.asarray(vecs @ np.diag(np.sqrt(np.clip(vals, 0.0, None))) @ vecs.T, lam.dtype)
    M = config.N if prompt_length is None else check_int("prompt_length", prompt_length, 1)
    return moment_loss(params, Lc, Lq, root, float(M))
