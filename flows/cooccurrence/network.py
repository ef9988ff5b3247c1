"""The finite network of Yang et al. 2024, eq. (1): its initialisation, output and logistic loss, the `init` and
`loss` of the spec (`spec.system`; `spec.train` trains it on the shared driver). See
docs/systems/cooccurrence.md."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .data import Config, generator

__all__ = ["forward", "init_params", "network_loss"]


def init_params(config: Config, key: Any = None, dtype: Any = None) -> tuple[dict[str, Array], Array]:
    """(params, a): params = {W (m1, m), W_V, W_K, W_Q (m, d)} and the fixed signs a (m1,) in {+-1}.

    `config.init="theory"`: W ~ N(0, sigma1^2), W_V/K/Q ~ N(0, sigma0^2) (Sec. 2.2); `"kaiming"`: kaiming
    normal, std sqrt(2 / fan_in). Drawn with numpy from `config.rng("init")` (or from `key`, see
    `data.generator`): no program to compile.
    """
    rng = generator(config, "init", key)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    std0, std1 = config.init_stds
    m1, m, d = config.m1, config.m, config.d
    a = np.where(rng.random(m1) < 0.5, 1.0, -1.0)
    params = {
        "W": std1 * rng.standard_normal((m1, m)),
        "W_V": std0 * rng.standard_normal((m, d)),
        "W_K": std0 * rng.standard_normal((m, d)),
        "W_Q": std0 * rng.standard_normal((m, d)),
    }
    return {k: jnp.asarray(v, dtype) for k, v in params.items()}, jnp.asarray(a, dtype)


def forward(params: dict[str, Array], a: Array, tokens: Array) -> Array:
    """Eq. (1) for a batch of token-index sequences `tokens (n, L)` -> F `(n,)`."""
    m = params["W_V"].shape[0]
    V = params["W_V"].T[tokens]  # (n, L, m): v(x_h)
    K = params["W_K"].T[tokens]
    Q = params["W_Q"].T[tokens]
    s = jnp.einsum("nhm,nlm->nhl", K, Q) / math.sqrt(m)  # key h, query l
    p = jax.nn.softmax(s, axis=1)
    attended = jnp.einsum("nhl,nhm->nlm", p, V)  # W_V X p_l for every query l
    per_query = jnp.einsum("nlm,jm,j->nl", attended, params["W"], a)  # sum_j a_j w_j^T W_V X p_l
    return jnp.sum(per_query, axis=1)


def network_loss(params: dict[str, Array], a: Array, tokens: Array, labels: Array) -> Array:
    """Logistic loss (1/n) sum_i log(1 + exp(-y_i F_i))."""
    return jnp.mean(jax.nn.softplus(-labels * forward(params, a, tokens)))
