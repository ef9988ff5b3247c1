"""JoMA's one-layer network: attention over the contextual tokens, a residual, one MLP layer, cross-entropy
(Tian et al., ICLR 2024, Sec. 3; the official Fig. 2/3 script). Conventions: docs/systems/joma.md.

Parameters `{"W": (d, K), "z": (M_C,)}` (the two groups, trained at one learning rate). For class k (frequencies
x_k, a row of the batch's `"x"`) the attention is b_k = attn(x_k, z / tau) (`attention_weights`), the residual
stream f_k = U_C b_k + u_q, the readout h_kj = phi(w_j^T f_k) for the K output units j, and the loss the mean over
the classes of the batch of the cross-entropy of h_k against its label (one-hot `"y"`; the full batch holds
every class once, sample k with label k).

The spec-shaped functions (for `flows.System`, `spec.system`): `init_params(config)`, `make_loss(attention,
mlp)` -> `loss(params, batch)` with `batch = data.population(config)` (or some of its rows), and
`make_observe(attention, mlp)` -> `observe(params, data)` with `data = observe_data(config, params0)` (the full
batch and the invariant's constant at the start `params0`). The observables:

- `"loss"`: the cross-entropy above;
- `"entropy"`: the mean over classes of the attention entropy H(|b_k| / sum |b_k|) (for softmax and exp
  attention |b| = b);
- `"z_estimate_corr"`: the normalised correlation (`theory.normalized_correlation`) between z and its estimate
  from V (`z_estimate`): the softmax estimate of the official script plus its constant (softmax), or the exact
  invariant solved for z (exp: c + sum_k v_k^2 / (2 tau); linear, which fixes z up to its sign only: |z| against
  sqrt(c + sum_k v_k^2));
- `"z_estimate_slope"`: the least-squares slope of the centred z (|z| for linear attention) on the centred
  estimate;
- `"invariant_gap"` (exp and linear attention only): max_l |I_l(params) - I_l(params0)| of the exact invariant.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Float

from .._checks import check_choice
from ..system import Batch, Params
from . import theory
from .data import ATTENTIONS, MLPS, Config, population

__all__ = [
    "OBSERVABLES",
    "activation",
    "attention_weights",
    "contextual_weights",
    "init_params",
    "loss",
    "make_loss",
    "make_observe",
    "observe",
    "observe_data",
    "readout",
    "z_estimate",
]


#: the observables of `observe` (invariant_gap: exp and linear attention only)
OBSERVABLES = ("loss", "entropy", "z_estimate_corr", "z_estimate_slope", "invariant_gap")


def init_params(config: Config, key: jax.Array | None = None) -> Params:
    """W and z i.i.d. N(0, init_scale^2) (the official script: randn / 100), from `key` (default: the `"init"`
    stream of `config.seed`).

    **Arguments:** `config`: the `Config`; `key`: a `jax.random` key or None.

    **Returns:** `{"W": (d, K), "z": (M_C,)}`.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a joma.Config, got {type(config).__name__}")
    key = config.key("init") if key is None else key
    return _init(key, jnp.asarray(config.init_scale), d=int(config.d), K=int(config.n_classes), M=config.n_tokens)


@functools.partial(jax.jit, static_argnames=("d", "K", "M"))
def _init(key, scale, *, d, K, M):
    kW, kz = jax.random.split(key)
    dtype = jnp.result_type(float)
    return {"W": scale * jax.random.normal(kW, (d, K), dtype), "z": scale * jax.random.normal(kz, (M,), dtype)}


def attention_weights(z: jax.Array, X: jax.Array, tau: jax.Array, attention: str) -> Float[jax.Array, "M_C K"]:
    """b_k for every class (columns): with a = z / tau, "softmax" x o e^a / (x . e^a), "exp" x o e^a,
    "linear" x o a (Tian et al. 2024, Sec. 3).

    **Arguments:** `z` `(M_C,)`, `X` `(M_C, K)`, `tau`, `attention` in `data.ATTENTIONS`.

    **Returns:** B, shape `(M_C, K)`.
    """
    a = z / tau
    if attention == "softmax":
        e = X * jnp.exp(a - jnp.max(a))[:, None]  # the shift cancels in the normalisation
        return e / jnp.sum(e, axis=0, keepdims=True)
    if attention == "exp":
        return X * jnp.exp(a)[:, None]
    if attention == "linear":
        return X * a[:, None]
    raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")


def activation(mlp: str) -> Callable[[jax.Array], jax.Array]:
    """phi of the readout h = phi(w^T f): the identity ("linear"), `jax.nn.relu` or `jax.nn.silu`."""
    if mlp == "linear":
        return lambda h: h
    if mlp == "relu":
        return jax.nn.relu
    if mlp == "silu":
        return jax.nn.silu
    raise ValueError(f"mlp must be one of {MLPS}, got {mlp!r}")


def readout(params: Params, batch: Batch, attention: str, mlp: str) -> tuple[jax.Array, jax.Array]:
    """(F, H): the residual streams f_k = U_C b_k + u_q of the batch's n classes as columns `(d, n)` and the
    MLP's pre-activations H[k, j] = w_j^T f_k `(n classes, K units)`."""
    X, U = batch["x"].T, batch["U"]
    M = X.shape[0]
    B = attention_weights(params["z"], X, batch["tau"], attention)
    F = U[:, :M] @ B + U[:, M][:, None]
    return F, F.T @ params["W"]


def loss(params: Params, batch: Batch, attention: str = "softmax", mlp: str = "linear") -> jax.Array:
    """The mean over the batch's classes of the cross-entropy of phi(H[k]) against the label of class k (the
    official `CrossEntropyLoss` of `F^T W` with labels 0..K-1 on the full batch).

    **Arguments:** `params` `{"W", "z"}`, `batch` = `data.population(config)` or some of its rows `data.ROWS`
    (the other entries whole), `attention`, `mlp`.

    **Returns:** the scalar loss.
    """
    _, H = readout(params, batch, attention, mlp)
    out = activation(mlp)(H)
    return jnp.mean(jax.nn.logsumexp(out, axis=1) - jnp.sum(batch["y"] * out, axis=1))


def make_loss(attention: str, mlp: str) -> Callable[[Params, Batch], jax.Array]:
    """`loss(params, batch)` of one attention variant and MLP (the spec's `loss`; one function object per pair,
    so the optimiser limits and the training loop compile once per pair)."""
    return _make_loss(check_choice("attention", attention, ATTENTIONS), check_choice("mlp", mlp, MLPS))


@functools.cache
def _make_loss(attention: str, mlp: str) -> Callable[[Params, Batch], jax.Array]:
    def loss_fn(params: Params, batch: Batch) -> jax.Array:
        return loss(params, batch, attention, mlp)

    return loss_fn


def contextual_weights(params: Params, batch: Batch) -> Float[jax.Array, "M_C K"]:
    """V = U_C^T W: the MLP weights in the basis of the contextual tokens (column k: v_k)."""
    M = batch["x"].shape[1]
    return batch["U"][:, :M].T @ params["W"]


def _invariant(params: Params, batch: Batch, attention: str) -> jax.Array:
    V = contextual_weights(params, batch)
    if attention == "exp":
        return theory.exp_invariant(params["z"], V, batch["tau"])
    if attention == "linear":
        return theory.linear_invariant(params["z"], V)
    return params["z"] - theory.softmax_estimate(V, params["W"], batch["xbar"], batch["tau"])


def observe_data(config: Config, params0: Params | None = None) -> dict[str, jax.Array]:
    """The data `observe` reads: `data.population(config)` and the constant of the invariant at the start,
    `"z_offset"` `(M_C,)` (exp: z0 - sum v0^2 / (2 tau); linear: z0^2 - sum v0^2; softmax: z0 minus the
    official estimate, the script's C), and `"z_sign"` sign(z0) (the branch of the linear invariant).

    **Arguments:** `config`; `params0` the start (default `init_params(config)`).

    **Returns:** the dict of arrays.
    """
    batch = population(config)
    params0 = init_params(config) if params0 is None else params0
    return {**batch, "z_offset": _invariant(params0, batch, config.attention), "z_sign": jnp.sign(params0["z"])}


def z_estimate(params: Params, data: dict[str, jax.Array], attention: str) -> jax.Array:
    """The estimate of z from the MLP weights, `(M_C,)`: c + sum_k v_k^2 / (2 tau) (exp), c plus the official
    softmax estimate (softmax); for linear attention the invariant fixes z only up to its sign (z may cross 0),
    and this is the estimate sqrt(max(c + sum_k v_k^2, 0)) of |z|."""
    V = contextual_weights(params, data)
    c = data["z_offset"]
    if attention == "exp":
        return c + jnp.sum(V**2, axis=1) / (2 * data["tau"])
    if attention == "linear":
        return jnp.sqrt(jnp.maximum(c + jnp.sum(V**2, axis=1), 0.0))
    return c + theory.softmax_estimate(V, params["W"], data["xbar"], data["tau"])


def observe(params: Params, data: dict[str, jax.Array], attention: str, mlp: str) -> dict[str, jax.Array]:
    """The observables of the module docstring at `params`; `data` = `observe_data(config, params0)`."""
    B = attention_weights(params["z"], data["x"].T, data["tau"], attention)
    p = jnp.abs(B) / jnp.sum(jnp.abs(B), axis=0, keepdims=True)
    z = jnp.abs(params["z"]) if attention == "linear" else params["z"]
    est = z_estimate(params, data, attention)
    zc, ec = z - jnp.mean(z), est - jnp.mean(est)
    obs = {
        "loss": loss(params, data, attention, mlp),
        "entropy": jnp.mean(theory.entropy(p, axis=0)),
        "z_estimate_corr": theory.normalized_correlation(z, est),
        "z_estimate_slope": jnp.dot(zc, ec) / jnp.dot(ec, ec),
    }
    if attention in ("exp", "linear"):
        obs["invariant_gap"] = jnp.max(jnp.abs(_invariant(params, data, attention) - data["z_offset"]))
    return obs


def make_observe(attention: str, mlp: str) -> Callable[[Params, dict], dict[str, jax.Array]]:
    """`observe(params, data) -> dict` of one attention variant and MLP (the spec's `observe`)."""
    return _make_observe(check_choice("attention", attention, ATTENTIONS), check_choice("mlp", mlp, MLPS))


@functools.cache
def _make_observe(attention: str, mlp: str) -> Callable[[Params, dict], dict[str, jax.Array]]:
    def observe_fn(params: Params, data: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return observe(params, data, attention, mlp)

    return observe_fn
