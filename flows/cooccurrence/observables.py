"""Observables of the co-occurrence model as functions `f(t, state, args)` of the Gram state (Yang et al.
2024, Sec. 3), shared by the flow trajectory and the network record. See docs/systems/cooccurrence.md.

The Gram state: `G (d,)` = a^T W W_V (Def. E.18), `S ()` = ||W^T a||^2 (eq. 5), `M_V`, `M_K`, `M_Q (d, d)` the
value, key, query Grams, `A (d, d)` = W_K^T W_Q (A[nu, mu]: score of key nu for query mu). `args`: the spec's
data (`spec.data`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

#: the Gram state and the spec's data (`spec.data`)
Gram = dict[str, Array]
Args = dict[str, Any]

__all__ = [
    "G3",
    "OBSERVABLES",
    "S",
    "attention",
    "balance_ratio",
    "gram_state",
    "group_g",
    "group_loss",
    "loss",
    "min_margin",
    "observe",
    "outputs",
    "p12",
    "phase2_ratio",
    "scores",
    "test_loss",
    "train_error",
    "value_gram",
]


def gram_state(params: Mapping[str, Any], a: Any) -> dict[str, Any]:
    """The Gram state of parameters `params = {W (m1, m), W_V, W_K, W_Q (m, d)}` and fixed `a (m1,)`."""
    u = params["W"].T @ a
    W_V, W_K, W_Q = params["W_V"], params["W_K"], params["W_Q"]
    return {"G": W_V.T @ u, "S": u @ u, "M_V": W_V.T @ W_V, "M_K": W_K.T @ W_K, "M_Q": W_Q.T @ W_Q, "A": W_K.T @ W_Q}


def attention(A: Array, tokens: Array, sqrt_m: Array | float) -> Array:
    """p[i, h, l] = softmax_h(A[x_h, x_l] / sqrt(m)): attention of query position l on key position h.

    Shapes: `A (d, d)`, `tokens (n, L)` -> `(n, L, L)` (each column `p[i, :, l]` sums to 1).
    """
    s = A[tokens[:, :, None], tokens[:, None, :]] / sqrt_m
    return jax.nn.softmax(s, axis=1)


def outputs(state: Gram, tokens: Array, sqrt_m: Array | float) -> tuple[Array, Array, Array]:
    """(p, Gx, F): attention `(n, L, L)`, G at the tokens `(n, L)`, and the network output
    F_i = sum_l G(X_i)^T p_l `(n,)` (eq. 1 rewritten with G)."""
    p = attention(state["A"], tokens, sqrt_m)
    Gx = state["G"][tokens]
    F = jnp.einsum("nh,nhl->n", Gx, p)
    return p, Gx, F


def _margins(state, args):
    _, _, F = outputs(state, args["tokens"], args["sqrt_m"])
    return args["labels"] * F


def _group_mean(values, onehot):
    return (onehot.T @ values) / jnp.sum(onehot, axis=0)


def loss(t: Any, state: Gram, args: Args) -> Array:
    """Empirical logistic loss L̂ = (1/n) sum_i log(1 + exp(-y_i F_i)) (Sec. 2.2)."""
    return jnp.mean(jax.nn.softplus(-_margins(state, args)))


def group_loss(t: Any, state: Gram, args: Args) -> Array:
    """Mean logistic loss over I_1, I_2, I_3, I_4, shape `(4,)` (Fig. 1b)."""
    return _group_mean(jax.nn.softplus(-_margins(state, args)), args["group_onehot"])


def train_error(t: Any, state: Gram, args: Args) -> Array:
    """Fraction of training samples with y_i F_i <= 0."""
    return jnp.mean((_margins(state, args) <= 0).astype(args["labels"].dtype))


def min_margin(t: Any, state: Gram, args: Args) -> Array:
    """min_i y_i F_i; its first upcrossing of 0 is T1, the end of phase 1 (Thm 3.1)."""
    return jnp.min(_margins(state, args))


def test_loss(t: Any, state: Gram, args: Args) -> Array:
    """Logistic loss on the fresh test draws `args["test_tokens"]`, `args["test_labels"]`."""
    _, _, F = outputs(state, args["test_tokens"], args["sqrt_m"])
    return jnp.mean(jax.nn.softplus(-args["test_labels"] * F))


def G3(t: Any, state: Gram, args: Args) -> Array:
    """(G(mu_1), G(mu_2), G(mu_3)), shape `(3,)`."""
    return state["G"][:3]


def S(t: Any, state: Gram, args: Args) -> Array:
    """S = ||W^T a||^2."""
    return state["S"]


def scores(t: Any, state: Gram, args: Args) -> Array:
    """The 3x3 score block A[nu, mu] = nu^T W_K^T W_Q mu for nu, mu in (mu_1, mu_2, mu_3): row = key,
    column = query. Thm 3.2: A[1,0], A[0,1] increase and A[2,0], A[2,1] decrease in phase 2."""
    return state["A"][:3, :3]


def value_gram(t: Any, state: Gram, args: Args) -> Array:
    """The 3x3 value-Gram block M_V[mu, nu] = mu^T W_V^T W_V nu (Lemma C.3)."""
    return state["M_V"][:3, :3]


def p12(t: Any, state: Gram, args: Args) -> Array:
    """p(mu_1 -> mu_2): attention of query mu_1 on key mu_2, averaged over the samples holding both
    (I_1) (Cor. F.17)."""
    return _p12(attention(state["A"], args["tokens"], args["sqrt_m"]), args["tokens"])


def _p12(p, tokens):
    key2, query1 = (tokens == 1).astype(p.dtype), (tokens == 0).astype(p.dtype)
    both = jnp.sum(key2, axis=1) * jnp.sum(query1, axis=1)
    return jnp.sum(jnp.einsum("nh,nhl,nl->n", key2, p, query1)) / jnp.sum(both)


def group_g(t: Any, state: Gram, args: Args) -> Array:
    """sum_{i in I_k} g_i for k = 1..4, shape `(4,)`, with g_i = 1 / (1 + exp(y_i F_i)) (Sec. 4.2)."""
    return args["group_onehot"].T @ jax.nn.sigmoid(-_margins(state, args))


def balance_ratio(t: Any, state: Gram, args: Args) -> Array:
    """sum_{I_2} g / sum_{I_3} g; Lemma 4.4 / Def. F.1: within [1/2, 2] in phase 2."""
    sums = group_g(t, state, args)
    return sums[1] / sums[2]


def phase2_ratio(t: Any, state: Gram, args: Args) -> Array:
    """R(t) = (sum_{I_2 u I_3 u I_4} g - sum_{I_1} g) / (sum_{I_1} g - sum_{I_2} g) (App. F.1, Lemma F.6)."""
    sums = group_g(t, state, args)
    return (sums[1] + sums[2] + sums[3] - sums[0]) / (sums[0] - sums[1])


#: name -> observable; shared by `solve_flow` and `train`.
OBSERVABLES: dict[str, Callable[[Any, Gram, Args], Array]] = {
    "loss": loss,
    "group_loss": group_loss,
    "train_error": train_error,
    "min_margin": min_margin,
    "test_loss": test_loss,
    "G": G3,
    "S": S,
    "A": scores,
    "M_V": value_gram,
    "p12": p12,
    "group_g": group_g,
    "balance_ratio": balance_ratio,
    "R": phase2_ratio,
}


def observe(t: Any, state: Gram, args: Args) -> dict[str, Array]:
    """Every observable of `OBSERVABLES` at once, sharing the attention and outputs of the training set
    (one attention evaluation for the training set and one for the test draws instead of one per
    observable: a smaller program to compile at every save point). Same names and values as
    `{name: f(t, state, args) for name, f in OBSERVABLES.items()}` (tested)."""
    tokens, labels, onehot, sqrt_m = args["tokens"], args["labels"], args["group_onehot"], args["sqrt_m"]
    p, _, F = outputs(state, tokens, sqrt_m)
    margins = labels * F
    softplus = jax.nn.softplus(-margins)
    sums = onehot.T @ jax.nn.sigmoid(-margins)
    _, _, F_test = outputs(state, args["test_tokens"], sqrt_m)
    return {
        "loss": jnp.mean(softplus),
        "group_loss": _group_mean(softplus, onehot),
        "train_error": jnp.mean((margins <= 0).astype(labels.dtype)),
        "min_margin": jnp.min(margins),
        "test_loss": jnp.mean(jax.nn.softplus(-args["test_labels"] * F_test)),
        "G": state["G"][:3],
        "S": state["S"],
        "A": state["A"][:3, :3],
        "M_V": state["M_V"][:3, :3],
        "p12": _p12(p, tokens),
        "group_g": sums,
        "balance_ratio": sums[1] / sums[2],
        "R": (sums[1] + sums[2] + sums[3] - sums[0]) / (sums[0] - sums[1]),
    }
