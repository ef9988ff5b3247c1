"""The data and the model choices of JoMA's one-layer experiments (Tian, Wang, Zhang, Chen, Du, *JoMA*, ICLR 2024,
arXiv:2310.00535, Sec. 3 and Fig. 2/3; the official script `ssl/real-dataset/joma/draw_figure_2_3.py` of
facebookresearch/luckmatters).

Bag-of-words classes: M_C = `n_distinct` + `n_common` contextual tokens and one query token. Class k (of K =
`n_classes`) has the token frequency vector x_k (a column of X, in the simplex): on the distinct tokens the
Gaussian bump exp(-(l - n_distinct k / K)^2 / `bump_width`), on the common tokens U(0, `common_scale`) draws,
then each column normalised to sum 1. One sample per class: the full batch is the population. The embedding is
U = [I_{M_C+1}; 0] in R^{d x (M_C+1)} (orthonormal columns: the contextual tokens U_C, then the query u_q).

Random streams of `seed` (`Config.key`): `"data"` draws the common-token entries of X, `"init"` the initial
parameters (W, z) of `model.init_params`, `"batch"` the minibatches of classes of SGD and `"noise"` the Brownian
motion of its SDE (`spec.system`). The official script sets no seed; the defaults reproduce its sizes, its
embedding, its readout and its initial scale 1/100.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from .._checks import SEED_MAX, check_choice, check_int, check_real

__all__ = ["ATTENTIONS", "MLPS", "ROWS", "STREAMS", "Config", "embedding", "frequencies", "population"]

#: the attention variants of JoMA (Sec. 3): softmax over the contextual tokens, unnormalised exp, linear
ATTENTIONS = ("softmax", "exp", "linear")
#: the MLP nonlinearities phi of h_k = phi(w_k^T f)
MLPS = ("linear", "relu", "silu")
#: the random streams of one seed
STREAMS = ("data", "init", "batch", "noise")
#: the entries of `population` that hold the samples (one row per class): what minibatches draw from
ROWS = ("x", "y")


@dataclasses.dataclass(frozen=True)
class Config:
    """One JoMA experiment: data, attention variant, MLP nonlinearity, initialisation (immutable, validated).

    **Arguments:**

    - `attention` in `ATTENTIONS`: with logits a = z / `tau`, "softmax" b = x o e^a / (x . e^a), "exp"
      b = x o e^a, "linear" b = x o a.
    - `mlp` in `MLPS`: phi of the readout h_k = phi(w_k^T f) (the official script: "linear").
    - `n_distinct`, `n_common` (>= 1 each): contextual tokens of each kind (M_C = their sum; official 10 + 10).
    - `n_classes` (>= 2): K, the classes and the MLP's output units (official 20).
    - `d` (>= M_C + 1): the embedding dimension (official 30).
    - `tau` (> 0): the attention temperature (official 0.5).
    - `bump_width` (> 0): the denominator of the distinct tokens' Gaussian bump (official 30).
    - `common_scale` (> 0): common-token entries are U(0, common_scale) before normalisation (official 0.5).
    - `init_scale` (> 0): W and z start i.i.d. N(0, init_scale^2) (official 1/100).
    - `seed` (>= 0): seeds the streams `STREAMS`.

    **Raises:** `ValueError` naming the field and its allowed range.
    """

    attention: str = "softmax"
    mlp: str = "linear"
    n_distinct: int = 10
    n_common: int = 10
    n_classes: int = 20
    d: int = 30
    tau: float = 0.5
    bump_width: float = 30.0
    common_scale: float = 0.5
    init_scale: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("mlp", self.mlp, MLPS)
        check_int("n_distinct", self.n_distinct, 1, 100_000)
        check_int("n_common", self.n_common, 1, 100_000)
        check_int("n_classes", self.n_classes, 2, 100_000)
        if isinstance(self.d, (int, np.integer)) and not isinstance(self.d, bool) and self.d < self.n_tokens + 1:
            raise ValueError(
                f"d must be an integer >= n_distinct + n_common + 1 = {self.n_tokens + 1} (the embedding holds "
                f"the contextual tokens and the query), got {self.d}"
            )
        check_int("d", self.d, self.n_tokens + 1, 1_000_000)
        for name in ("tau", "bump_width", "common_scale", "init_scale"):
            object.__setattr__(self, name, check_real(name, getattr(self, name), low=0.0, strict=True))
        check_int("seed", self.seed, 0, SEED_MAX)

    @property
    def n_tokens(self) -> int:
        """M_C, the number of contextual tokens."""
        return int(self.n_distinct) + int(self.n_common)

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def key(self, stream: str) -> jax.Array:
        """The `jax.random` key of one stream of `seed`: `"data"` (the common-token entries of X), `"init"` (the
        initial W and z), `"batch"` (the minibatches of SGD) or `"noise"` (the Brownian motion of its SDE)."""
        index = STREAMS.index(check_choice("stream", stream, STREAMS))
        return jax.random.fold_in(jax.random.PRNGKey(self.seed), index)


@functools.partial(jax.jit, static_argnames=("n_distinct", "n_common", "n_classes"))
def _frequencies(key, bump_width, common_scale, *, n_distinct, n_common, n_classes):
    dtype = jnp.result_type(float)
    token = jnp.arange(n_distinct, dtype=dtype)[:, None]
    centre = jnp.arange(n_classes, dtype=dtype)[None, :] * (n_distinct / n_classes)
    distinct = jnp.exp(-((token - centre) ** 2) / bump_width)
    common = common_scale * jax.random.uniform(key, (n_common, n_classes), dtype)
    X = jnp.concatenate([distinct, common], axis=0)
    return X / jnp.sum(X, axis=0, keepdims=True)


def frequencies(config: Config) -> Float[jax.Array, "M_C K"]:
    """The token frequencies X of the classes (the official Fig. 2/3 data), one column per class.

    X[l, k] = exp(-(l - n_distinct k / K)^2 / bump_width) on the distinct tokens l < n_distinct, U(0,
    common_scale) draws of the `"data"` stream on the common tokens, each column then divided by its sum.

    **Arguments:** `config`: the `Config`.

    **Returns:** X, shape `(M_C, K)`, columns in the simplex.
    """
    return _frequencies(
        config.key("data"),
        jnp.asarray(config.bump_width, jnp.result_type(float)),
        jnp.asarray(config.common_scale, jnp.result_type(float)),
        n_distinct=int(config.n_distinct),
        n_common=int(config.n_common),
        n_classes=int(config.n_classes),
    )


def embedding(config: Config) -> Float[jax.Array, "d M_C+1"]:
    """U = [I_{M_C+1}; 0]: the contextual tokens' embeddings U_C (the first M_C columns) and the query's u_q (the
    last), orthonormal.

    **Arguments:** `config`: the `Config`.

    **Returns:** U, shape `(d, M_C + 1)`.
    """
    return jnp.eye(int(config.d), config.n_tokens + 1, dtype=jnp.result_type(float))


def population(config: Config) -> dict[str, jax.Array]:
    """The full batch (one sample per class, so also the population) as the arrays the loss reads.

    **Arguments:** `config`: the `Config`.

    **Returns:** `{"x": (K, M_C) the frequencies x_k as rows (X^T), "y": (K, K) the one-hot labels (sample k has
    label k), "U": (d, M_C + 1) embedding, "xbar": (M_C,) the mean of x_k over the classes (the constant mean
    attention of the softmax estimate), "tau": the temperature (a 0-d array, so a new tau does not
    recompile)}`; `ROWS` = ("x", "y") are the samples, a minibatch is some of their rows.
    """
    X = frequencies(config)
    tau = jnp.asarray(config.tau, X.dtype)
    y = jnp.eye(X.shape[1], dtype=X.dtype)
    return {"x": X.T, "y": y, "U": embedding(config), "xbar": jnp.mean(X, axis=1), "tau": tau}
