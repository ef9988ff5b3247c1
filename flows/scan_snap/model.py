"""The finite-T 1-layer Y/Z transformer of Scan and Snap (Tian et al. 2023, Sec. 3.1, eqs. 1-2; App. G for the
embedding form): its losses, initialisation, failed-run bound and observables, the pieces of its spec
(`spec.system`).

**Parameters.** {"Y": (M, M), "Z": (L, M)}: the decoder Y and the rows z_m of the attention logits Z at the L
query tokens m (`classes.query_tokens`, in that order). The other rows of Z never enter the loss (a class
n reads only z_{psi(n)}), so they never move: `full_Z` puts them back. The embedding form holds
{"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}.

`count_loss` is the exact count-vector reduction (the loss on context counts), `token_loss` the same loss on
literal token sequences, `embedding_loss` the (U, W_Q, W_K, W_V) form; their `jax.grad` is Lemma 1. See
docs/systems/scan_snap.md."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching

from .._checks import check_choice, check_int
from .._prng import fused
from ..system import Params
from . import observables as obs
from .data import ClassArrays

__all__ = [
    "INITS",
    "SEED_LIMIT",
    "blowup_bound",
    "count_loss",
    "embedding_loss",
    "embedding_rows",
    "embedding_to_yz",
    "full_Z",
    "init_embedding",
    "init_params",
    "observe",
    "seed_init",
    "seed_keys",
    "split_seed",
    "support_loss",
    "token_loss",
    "within_bound",
]


#: the initialisations of Y and Z.
INITS = ("zero", "random")
#: the largest seed (seeds become uint32 `jax.random.PRNGKey` seeds).
SEED_LIMIT = 2**32 - 1


def count_loss(params: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """Batch-mean cross-entropy through the count-vector reduction; `counts` (B, M), `cls` (B,)."""
    u = obs.attention_weights(counts, params["Z"][arrays.query_row[cls]])
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(u) @ params["Y"], arrays.next_token[cls]))


def support_loss(params: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """`count_loss` computed on the support of each sequence's class (`counts` (B, S) as
    `data.sample_support_counts` draws them, entry j for token `arrays.support_index[cls, j]`): the counts are 0
    off the support, so c_n and f_n are too and only the decoder product needs the vocabulary. What
    `network.train_sweep` trains: its elementwise work runs on S entries instead of M (pinned equal to `train`,
    which uses `count_loss`)."""
    idx = arrays.support_index[cls]  # (B, S); padded entries repeat a token and have count 0
    # z_{psi(n), l} on the support: each class's (K, S) first, then a row per sequence (B, S); its gradient is a
    # sum of rows per class and K S entries added into Z, where a gather per entry scatters B S entries
    zs = params["Z"][arrays.query_row[:, None], arrays.support_index][cls]
    f_s = _normalized_weights(counts, zs)
    f = _place(f_s, idx, _support_position(arrays.support_index, params["Y"].shape[0])[cls])
    return jnp.mean(obs.cross_entropy(f @ params["Y"], arrays.next_token[cls]))


@jax.custom_vjp
def _normalized_weights(counts: jax.Array, z: jax.Array) -> jax.Array:
    """f = w / ||w||_2 with w = N e^{z - max z} along the last axis (the max over the entries with N > 0, zero
    where N = 0): `obs.normalized_attention(obs.attention_weights(counts, z))`, whose sum-normalisation cancels
    in f. Its reverse rule in one pass: df/dz_j = f_j (g_j - (g . f) f_j) (the shift by the max cancels in f; no
    gradient to the counts, which are data). Reverse mode only (`jax.custom_vjp`), as `_place`."""
    on = counts > 0
    zmax = jnp.max(jnp.where(on, z, -jnp.inf), axis=-1, keepdims=True)
    w = counts * jnp.exp(jnp.where(on, z - zmax, 0.0))
    return w / jnp.linalg.norm(w, axis=-1, keepdims=True)


def _normalized_weights_fwd(counts, z):
    f = _normalized_weights(counts, z)
    return f, f


def _normalized_weights_bwd(f, g):
    return None, f * (g - jnp.sum(g * f, axis=-1, keepdims=True) * f)


_normalized_weights.defvjp(_normalized_weights_fwd, _normalized_weights_bwd)


def _support_position(support_index: jax.Array, M: int) -> jax.Array:
    """(K, M): the position of token m in class n's support (its first entry in `support_index`; the padded
    entries repeat a token after its own entry), S where m is off the support."""
    S = support_index.shape[1]
    hit = support_index[:, :, None] == jnp.arange(M, dtype=support_index.dtype)[None, None, :]
    where = jnp.broadcast_to(jnp.arange(S, dtype=support_index.dtype)[None, :, None], hit.shape)
    return jnp.min(jnp.where(hit, where, S), axis=1)


@jax.custom_vjp
def _place(f_s: jax.Array, idx: jax.Array, position: jax.Array) -> jax.Array:
    """(B, M): f_s (B, S) placed into the vocabulary, entry j at token idx[b, j] (the padded entries, zero, are
    dropped): a gather along each row by `position` (B, M) (`_support_position` of each row's class), where
    scattering into zeros runs XLA's serial CPU scatter over every entry of a sweep's runs; its transpose, a
    gather at `idx`, is the reverse rule (the transpose of the scatter-add it replaces). Reverse mode only
    (`jax.custom_vjp`): the loss it serves is only ever differentiated by `jax.grad` in `train_sweep`."""
    S = f_s.shape[1]
    picked = jnp.take_along_axis(f_s, jnp.minimum(position, S - 1), axis=1)
    return jnp.where(position < S, picked, jnp.zeros((), f_s.dtype))


def _place_fwd(f_s, idx, position):
    return _place(f_s, idx, position), idx


def _place_bwd(idx, g):
    return jnp.take_along_axis(g, idx, axis=1), None, None


_place.defvjp(_place_fwd, _place_bwd)


def token_loss(params: Params, arrays: ClassArrays, cls: jax.Array, tokens: jax.Array) -> jax.Array:
    """The same loss on literal token sequences `tokens` (B, T-1): b = softmax_t(z_{m x_t}), X^T b."""
    M = arrays.cond.shape[1]
    zq = params["Z"][arrays.query_row[cls]]  # (B, M)
    b = jax.nn.softmax(jnp.take_along_axis(zq, tokens, axis=1), axis=-1)  # (B, T-1)
    X = jax.nn.one_hot(tokens, M, dtype=zq.dtype)  # (B, T-1, M)
    xb = jnp.einsum("bt,btm->bm", b, X)
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(xb) @ params["Y"], arrays.next_token[cls]))


def embedding_to_yz(emb: Params) -> Params:
    """The reparametrisation of Sec. 3.1: {"Y": U W_V^T U^T, "Z": U W_Q W_K^T U^T / sqrt(d)}, both (M, M),
    from `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}."""
    U = emb["U"]
    d = U.shape[1]
    return {"Y": U @ emb["W_V"].T @ U.T, "Z": U @ emb["W_Q"] @ emb["W_K"].T @ U.T / math.sqrt(d)}


def embedding_rows(emb: Params, arrays: ClassArrays) -> Params:
    """`embedding_to_yz` with Z as its query rows (the parameters of the Y/Z network), {"Y": (M, M), "Z": (L, M)}."""
    yz = embedding_to_yz(emb)
    return {"Y": yz["Y"], "Z": yz["Z"][arrays.query_tokens]}


def embedding_loss(emb: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """The embedding form (U, W_Q, W_K, W_V) of the same model (eqs. 1-2, normalisation on X^T b):

    Z = U W_Q W_K^T U^T / sqrt(d), Y = U W_V^T U^T, with `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}.
    """
    return count_loss(embedding_rows(emb, arrays), arrays, cls, counts)


def init_embedding(M: int, d: int, key: jax.Array, init_scale: float = 1.0, dtype: Any = None) -> Params:
    """Seeded init of the embedding form: U_ij ~ N(0, 1/d) (rows of norm ~1, nearly orthogonal for d >> 1),
    W_Q, W_K ~ N(0, init_scale^2 / d) entrywise, W_V = 0 (so Y(0) = 0 as in the theory; Z(0) is small but
    nonzero, since W_Q = W_K = 0 is a saddle where Z never moves). Returns {"U": (M, d), "W_Q", "W_K", "W_V":
    (d, d)}."""
    dtype = dtype or jnp.result_type(float)
    kU, kQ, kK = jax.random.split(fused(key), 3)
    s = init_scale / math.sqrt(d)
    return {
        "U": jax.random.normal(kU, (M, d), dtype) / math.sqrt(d),
        "W_Q": s * jax.random.normal(kQ, (d, d), dtype),
        "W_K": s * jax.random.normal(kK, (d, d), dtype),
        "W_V": jnp.zeros((d, d), dtype),
    }


def init_params(M: int, init: str, key: jax.Array, dtype: Any = None) -> Params:
    """{"Y", "Z"}, both (M, M): zeros, or i.i.d. uniform(-1/sqrt(M), 1/sqrt(M)) (PyTorch nn.Linear default)."""
    dtype = dtype or jnp.result_type(float)
    if init == "zero":
        return {"Y": jnp.zeros((M, M), dtype), "Z": jnp.zeros((M, M), dtype)}
    if init != "random":
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    kY, kZ = jax.random.split(fused(key))
    bound = 1.0 / math.sqrt(M)
    return {
        "Y": jax.random.uniform(kY, (M, M), dtype, -bound, bound),
        "Z": jax.random.uniform(kZ, (M, M), dtype, -bound, bound),
    }


def seed_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """(initialisation key, minibatch key) of `seed` (an integer in [0, 2^32 - 1], a uint32 `PRNGKey` seed):
    the two halves of `split(PRNGKey(seed))`; step i of a run draws its batch with `split(batch key, steps)[i]`."""
    seed = check_int("seed", seed, 0, SEED_LIMIT, integral_float=True)
    return split_seed(jnp.asarray(seed, jnp.uint32))


def split_seed(seed: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`seed_keys` of a uint32 array `seed` (traceable: vmaps over seeds)."""
    k_init, k_data = jax.random.split(fused(jax.random.PRNGKey(seed)))
    return k_init, k_data


def seed_init(M: int, init: str, seed: int, dtype: Any = None) -> Params:
    """The initial {"Y", "Z"} (both (M, M)) that `train(..., init=init, seed=seed)` draws (`init_params` on the
    initialisation key of `seed_keys`)."""
    check_choice("init", init, INITS)
    return init_params(M, init, seed_keys(seed)[0], dtype)


def full_Z(Z_rows: Any, Z0: Any, query_tokens: Any) -> np.ndarray:
    """The full (..., M, M) Z from its query rows `Z_rows` (..., L, M): `Z0` ((M, M), or one per leading entry)
    outside the rows `query_tokens` (where Z never moves), `Z_rows` in them."""
    Z_rows, Z0 = np.asarray(Z_rows), np.asarray(Z0)
    Z = np.array(np.broadcast_to(Z0, Z_rows.shape[:-2] + Z0.shape[-2:]))
    Z[..., list(query_tokens), :] = Z_rows
    return Z


def observe(params: Params, arrays: ClassArrays) -> dict[str, jax.Array]:
    """The observables of the network and of every flow on one (Y, Z) (Z its query rows): the attention
    observables `observables.ATTENTION_OBSERVABLES` (`attention` c_n (K, M), `entropy`, `entropy_distinct`,
    `common_mass` (K,), by `observables.attention_observables`) and `loss` the population loss
    sum_n P(n) CE_n (the T -> infinity loss)."""
    c = obs.attention(params["Z"], arrays.cond, arrays.query_onehot)
    return {
        **obs.attention_observables(c, arrays.cond),
        "loss": obs.population_loss(c, params["Y"], arrays.next_token, arrays.class_probs),
    }


def blowup_bound(dtype: Any) -> float:
    """The largest |entry| of Y or Z that `train` accepts: ln of the dtype's largest float (709.8 in float64,
    88.7 in float32), past which e^{entry} overflows. Y and Z are logits (Y^T f with |f| = 1, and z_m), so
    well before it the softmaxes are saturated to the float resolution: the loss rounds to 0 and the gradients
    vanish exactly, and the run no longer follows any flow. A run that gets there was driven by a learning
    rate far too large (its gradients are bounded, so it moves at most ~lr per step), not trained."""
    return float(np.log(np.finfo(np.dtype(dtype)).max))


def within_bound(params: Any) -> jax.Array:
    """All entries of `params` (a pytree) finite and within `blowup_bound` of their dtype (False on NaN and
    inf): the spec's `finite`. Under `jax.vmap` (a sweep's runs) one reduction over every run first, and one per
    run only when that fails (`lax.cond`): a sweep's runs almost always all hold, and on CPU a reduction to one
    value runs at a fraction of the cost of one to a value per run."""
    return _within_bound(params)


def _all_within(params: Any, runs: int | None = None) -> jax.Array:
    """|v| <= `blowup_bound` for every entry of every leaf (NaN compares False), over all entries or per run
    (`runs`: the leading axis). Not max |v| <= bound: the YNNPACK reductions XLA 0.10 runs on CPU drop NaN
    entries from a max over a large leaf."""
    leaves = jax.tree_util.tree_leaves(params)
    if runs is None:
        return jnp.all(jnp.stack([jnp.all(jnp.abs(v) <= blowup_bound(v.dtype)) for v in leaves]))
    per_leaf = [jnp.all((jnp.abs(v) <= blowup_bound(v.dtype)).reshape(runs, -1), axis=1) for v in leaves]
    return jnp.all(jnp.stack(per_leaf), axis=0)


@custom_batching.custom_vmap
def _within_bound(params: Any) -> jax.Array:
    return _all_within(params)


@_within_bound.def_vmap
def _within_bound_vmap(axis_size, in_batched, params):
    (batched,) = in_batched
    params = jax.tree_util.tree_map(
        lambda v, b: v if b else jnp.broadcast_to(v, (axis_size, *v.shape)), params, batched
    )
    per_run = jax.lax.cond(
        _all_within(params), lambda p: jnp.ones((axis_size,), bool), lambda p: _all_within(p, axis_size), params
    )
    return per_run, True
