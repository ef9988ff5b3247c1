"""In-context linear regression, the data of linear attention (Zhang, Frei, Bartlett, JMLR 2024, Sec. 3;
Zhang, Singh, Latham, Saxe, ICML 2025, Sec. 2).

A prompt is (x_1, y_1, ..., x_N, y_N, x_q): inputs x_i, x_q ~ N(0, Lambda) in R^d, independent; one task
vector w ~ N(0, I_d) per prompt; labels y_i = w^T x_i (no noise); the target is y_q = w^T x_q. Lambda is
given by its eigenvalues and an optional orthogonal `rotation` R: Lambda = R diag(eigenvalues) R^T.

`Config` also holds the model (`form`, `heads`, `rank`) and its initialisation (`init`, `init_scale`), so that
one object describes one experiment, as in every system of the package.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from .._checks import SEED_MAX, check_choice, check_int, check_real, real_array

__all__ = ["FORMS", "INITS", "Config", "Prompts", "covariance", "sample", "sqrt_covariance"]

#: the three parametrisations: ZFB's single head, ZSLS's merged (ATTN_M) and separate (ATTN_S) heads
FORMS = ("single", "merged", "separate")
#: "paper": the papers' initialisation (`model.init_params`); "random": every entry N(0, init_scale^2)
INITS = ("paper", "random")
_STREAMS = ("data", "init", "test")


@dataclasses.dataclass(frozen=True)
class Config:
    """Data, model and initialisation of one linear-attention experiment (immutable, validated).

    **Arguments:**

    - `d`: input dimension (>= 1); `N`: context examples per prompt (>= 1), also the attention's
      normalisation 1/N.
    - `eigenvalues`: the d eigenvalues of Lambda (positive, finite), in the order of the columns of `rotation`.
    - `rotation`: an orthogonal d x d matrix R (Lambda = R diag(eigenvalues) R^T) or `None` (R = I).
    - `heads` (>= 1; 1 for `form="single"`), `form` in `FORMS`, `rank` (columns of W_K and W_Q of
      `form="separate"`, in [1, d + 1]).
    - `init` in `INITS`, `init_scale` (> 0): sigma of ZFB's Assumption 3.3 for `form="single"`, the std of the
      small random initialisation otherwise (see `model.init_params`).
    - `seed`: seeds the initialisation and the prompts (`rng`, `keys`).

    **Raises:** `ValueError` naming the field and its allowed range.
    """

    d: int = 4
    N: int = 20
    eigenvalues: tuple[float, ...] = (1.0, 0.5, 0.25, 0.1)
    rotation: tuple[tuple[float, ...], ...] | None = None
    heads: int = 1
    form: str = "single"
    rank: int = 1
    init: str = "paper"
    init_scale: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("d", self.d, 1)
        check_int("N", self.N, 1)
        eig = real_array("eigenvalues", self.eigenvalues)
        if eig.shape != (self.d,) or not np.all(eig > 0):
            raise ValueError(f"eigenvalues must be {self.d} (= d) positive finite numbers, got {self.eigenvalues!r}")
        object.__setattr__(self, "eigenvalues", tuple(float(e) for e in eig))
        if self.rotation is not None:
            rot = real_array("rotation", self.rotation)
            if rot.shape != (self.d, self.d) or not np.allclose(rot.T @ rot, np.eye(self.d), rtol=0, atol=1e-10):
                raise ValueError(f"rotation must be an orthogonal {self.d} x {self.d} matrix (d x d) or None")
            object.__setattr__(self, "rotation", tuple(tuple(float(x) for x in row) for row in rot))
        check_choice("form", self.form, FORMS)
        check_int("heads", self.heads, 1, 1 if self.form == "single" else 4096)
        check_int("rank", self.rank, 1, self.d + 1)
        check_choice("init", self.init, INITS)
        object.__setattr__(self, "init_scale", check_real("init_scale", self.init_scale, low=0.0, strict=True))
        check_int("seed", self.seed, 0, SEED_MAX)

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def rng(self, stream: str) -> np.random.Generator:
        """The numpy generator of one random stream of `seed`: `"data"` (a fixed training sample), `"init"`
        (the initial parameters) or `"test"`."""
        return np.random.default_rng([self.seed, _STREAMS.index(check_choice("stream", stream, _STREAMS))])

    def key(self, stream: str) -> jax.Array:
        """The `jax.random` key of one stream of `seed` (the online prompts of `network.train`)."""
        index = _STREAMS.index(check_choice("stream", stream, _STREAMS))
        return jax.random.fold_in(jax.random.PRNGKey(self.seed), index)


class Prompts(NamedTuple):
    """A batch of B prompts: contexts `X (B, N, d)`, labels `y (B, N)`, queries `xq (B, d)`, targets `yq (B,)`
    and the task vectors `w (B, d)` (y = X w, yq = xq . w)."""

    X: Float[jax.Array, "B N d"]
    y: Float[jax.Array, "B N"]
    xq: Float[jax.Array, "B d"]
    yq: Float[jax.Array, " B"]
    w: Float[jax.Array, "B d"]


def _rotation(config: Config) -> np.ndarray:
    return np.eye(config.d) if config.rotation is None else np.asarray(config.rotation, dtype=float)


def covariance(config: Config) -> jax.Array:
    """The input covariance Lambda = R diag(eigenvalues) R^T.

    **Arguments:** `config`: the `Config`.

    **Returns:** Lambda, shape `(d, d)`.
    """
    R = _rotation(config)
    return jnp.asarray(R @ np.diag(config.eigenvalues) @ R.T, jnp.result_type(float))


def sqrt_covariance(config: Config) -> jax.Array:
    """The symmetric square root Lambda^{1/2} = R diag(sqrt(eigenvalues)) R^T.

    **Arguments:** `config`: the `Config`.

    **Returns:** Lambda^{1/2}, shape `(d, d)`.
    """
    R = _rotation(config)
    return jnp.asarray(R @ np.diag(np.sqrt(config.eigenvalues)) @ R.T, jnp.result_type(float))


def draw(key: jax.Array, batch: int, N: int, root: jax.Array) -> Prompts:
    """Prompts of N context examples with inputs `root` z, z ~ N(0, I): the pure function that `sample` and the
    online training loop share.

    **Arguments:** `key` a `jax.random` key, `batch` and `N` (static), `root` = Lambda^{1/2} `(d, d)`.

    **Returns:** `Prompts` (shapes as in `sample`).
    """
    d = root.shape[0]
    kx, kq, kw = jax.random.split(key, 3)
    X = jax.random.normal(kx, (batch, N, d), root.dtype) @ root
    xq = jax.random.normal(kq, (batch, d), root.dtype) @ root
    w = jax.random.normal(kw, (batch, d), root.dtype)
    return Prompts(X=X, y=jnp.einsum("bnd,bd->bn", X, w), xq=xq, yq=jnp.einsum("bd,bd->b", xq, w), w=w)


def sample(config: Config, key: jax.Array | int | None = None, batch: int = 1) -> Prompts:
    """`batch` prompts of the data model of `config`.

    **Arguments:**

    - `config`: the `Config`.
    - `key`: a `jax.random` key, an integer seed, or `None` (the `"test"` stream of `config.seed`).
    - `batch`: the number of prompts (>= 1).

    **Returns:** `Prompts` with `X (batch, N, d)`, `y (batch, N)`, `xq (batch, d)`, `yq (batch,)`, `w (batch, d)`;
    the same key gives the same prompts.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a linear_attention.Config, got {type(config).__name__}")
    batch = check_int("batch", batch, 1)
    if key is None:
        key = config.key("test")
    elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        key = jax.random.PRNGKey(check_int("key", key, 0, SEED_MAX))
    elif not isinstance(key, jax.Array):
        raise ValueError(f"key must be a jax.random key, an integer >= 0 or None, got {key!r}")
    return draw(key, batch, config.N, sqrt_covariance(config))
