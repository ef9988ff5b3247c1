"""Data and configuration of the mean-field transformer (Gao et al., NeurIPS 2024): in-context linear regression
with bounded support (x, beta uniform on the unit sphere, uniform label noise; Assumption 1), embedded as
Z0 (n, D, N + 1) with the labels in row d and the query in column N. `Config` holds every choice the paper
leaves open; randomness comes from its `seed` only. See docs/systems/mean_field.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from .._checks import INT_MAX, SEED_MAX, check_choice, check_int, check_real
from .._xla import jit as xla_jit

__all__ = ["INITS", "Config", "Prompts", "held_out_set", "sample_prompts", "training_set"]

#: A particle dict `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}` (or a
#: velocity of that shape, or the reference's node values with K in place of L).
Particles = dict[str, jax.Array]

#: Initial laws rho0(., t) of the particles, see `Config`.
INITS = ("iid", "tied", "smooth")


@dataclasses.dataclass(frozen=True)
class Config:
    """One mean-field transformer experiment (immutable, validated).

    **Arguments:**

    - `d`: input dimension of x (>= 1); `D`: embedding dimension (>= d + 1: x, the label row, padding).
    - `N`: context pairs per prompt (>= 1); prompts have N + 1 columns (the query last).
    - `L`: depth, the number of (attention, MLP) pairs (>= 1).
    - `M`: attention heads per layer = attention particles per depth slice (>= 1).
    - `M_mlp`: MLP neurons per layer (default `M`); the limit does not depend on it, the width error does.
      A defaulted `M_mlp` follows `M` through `replace` (`Config(M=6).replace(M=24).M_mlp == 24`, the same as
      `Config(M=24)`); one given explicitly is kept (`Config(M=6, M_mlp=6).replace(M=24).M_mlp == 6`).
    - `lam`: weight decay lambda >= 0 of Q = R + lam/(2 M L) sum(|V|^2 + |W|^2)
      + lam/(2 M_mlp L) sum(|W1|^2 + |W2|^2).
    - `n_train`: prompts in the fixed training set (>= 1); `n_test`: fresh prompts for the test error.
    - `label_noise`: half-width of the uniform label noise (>= 0; bounded support).
    - `threshold`: HuberizedReLU threshold h0 > 0: sigma(z) = 0 (z <= 0), z^2/(2 h0) (0 < z <= h0),
      z - h0/2 (z > h0). The rebuttal's definition is h0 = 1 (the default).
    - `init_scale`: rho0 has i.i.d. entries uniform on [-a, a], a = init_scale / sqrt(D) (bounded support).
    - `init`: how rho0 depends on depth t in [0, 1) (layer l sits at t_l = l / L):
      `"iid"` (default): every layer draws its own particles (depth-independent law, untied);
      `"tied"`: one draw per particle index j, the same at every depth (theta_{l,j} = theta_j);
      `"smooth"`: theta_{l,j} = (1 - t_l) A_j + t_l B_j with A, B two draws (a depth-smooth law whose
      particles are smooth curves in t; needed for the 1/L depth rate).
    - `seed`: seeds the training set, the initial particles and the test prompts (independent streams).

    **Raises:** `ValueError` naming the field and its allowed range.
    """

    d: int = 3
    D: int = 4
    N: int = 8
    L: int = 4
    M: int = 16
    M_mlp: int | None = None
    lam: float = 1e-3
    n_train: int = 64
    n_test: int = 256
    label_noise: float = 0.0
    threshold: float = 1.0
    init_scale: float = 1.0
    init: str = "iid"
    seed: int = 0

    def __post_init__(self):
        def set_int(name, low, high=INT_MAX):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low, high))

        set_int("d", 1)
        set_int("D", 1)
        if self.D < self.d + 1:
            raise ValueError(f"D must be >= d + 1 = {self.d + 1} (x, then the label row), got {self.D}")
        for name in ("N", "L", "M"):
            set_int(name, 1)
        # not a dataclass field (so neither compared, hashed nor serialised): `replace` reads it to let a
        # defaulted M_mlp follow a new M
        object.__setattr__(self, "_M_mlp_defaulted", self.M_mlp is None)
        if self.M_mlp is None:
            object.__setattr__(self, "M_mlp", self.M)
        for name in ("M_mlp", "n_train", "n_test"):
            set_int(name, 1)
        set_int("seed", 0, SEED_MAX)
        for name, strict in (("lam", False), ("label_noise", False), ("threshold", True), ("init_scale", True)):
            object.__setattr__(self, name, check_real(name, getattr(self, name), low=0.0, strict=strict))
        check_choice("init", self.init, INITS)

    @property
    def init_radius(self) -> float:
        """a = init_scale / sqrt(D): every initial entry lies in [-a, a]."""
        return self.init_scale / math.sqrt(self.D)

    @property
    def num_particles(self) -> int:
        """L (M + M_mlp): attention heads and MLP neurons of the whole network."""
        return self.L * (self.M + self.M_mlp)  # type: ignore[operator]  # M_mlp is an int after __post_init__

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied (validated again).

        A field that defaulted from another is derived again from the new values: an `M_mlp` left to its
        default follows `M` (`Config(M=6).replace(M=24)` equals `Config(M=24)`, M_mlp = 24), while an
        `M_mlp` given at construction or in an earlier `replace` is kept. `dataclasses.replace` copies the
        resolved `M_mlp` instead; use this method.
        """
        if "M_mlp" not in changes and getattr(self, "_M_mlp_defaulted", False):
            changes = {**changes, "M_mlp": None}
        return dataclasses.replace(self, **changes)

    def keys(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(data key, init key, test key): independent streams split off `seed`."""
        if jax.config.jax_enable_x64:  # type: ignore[attr-defined]  # a flag; seeds up to 2**63 - 1 fit an int64
            return _split_seed(jnp.asarray(self.seed, jnp.int64))
        return tuple(jax.random.split(jax.random.PRNGKey(self.seed), 3))


@functools.partial(xla_jit, one_shot=True)
def _split_seed(seed):
    """`tuple(jax.random.split(jax.random.PRNGKey(seed), 3))` as one compiled program (eagerly, the seeding,
    the split and the unstacking compile one program each)."""
    return tuple(jax.random.split(jax.random.PRNGKey(seed), 3))


class Prompts(NamedTuple):
    """A batch of embedded prompts: `Z0 (n, D, N + 1)` and targets `y (n,)`."""

    Z0: jax.Array
    y: jax.Array


def _flat(draw, key, shape, dtype, *args):
    """`draw(key, shape, dtype, *args)` drawn flat and reshaped: the same values (threefry's bits depend on the
    flat index only), and a rank-1 draw compiles faster than a rank-3 one."""
    return draw(key, (math.prod(shape),), dtype, *args).reshape(shape)


def _sphere(key, shape, dtype):
    g = _flat(jax.random.normal, key, shape, dtype)
    return g / jnp.linalg.norm(g, axis=-1, keepdims=True)


def _sample(key, n, d, D, N, noise, dtype):
    k_x, k_b, k_e = jax.random.split(key, 3)
    x = _sphere(k_x, (n, N + 1, d), dtype)  # columns 0..N-1 context, N the query
    beta = _sphere(k_b, (n, d), dtype)
    labels = jnp.einsum("nkd,nd->nk", x, beta)
    labels = labels + noise * _flat(jax.random.uniform, k_e, (n, N + 1), dtype, -1.0, 1.0)
    label_row = labels.at[:, N].set(0.0)  # the query's label slot is empty
    Z0 = jnp.zeros((n, D, N + 1), dtype)
    Z0 = Z0.at[:, :d, :].set(jnp.swapaxes(x, 1, 2)).at[:, d, :].set(label_row)
    return Z0, labels[:, N]


# one short draw per data set: compiled for compile time (`one_shot`)
_sample_jit = xla_jit(_sample, one_shot=True, static_argnums=(1, 2, 3, 4, 6))


def sample_prompts(config: Config, key: jax.Array, n: int, dtype: DTypeLike | None = None) -> Prompts:
    """`n` fresh prompts of the law in the module docstring (one jitted, vectorised draw)."""
    check_int("n", n, 1)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    Z0, y = _sample_jit(key, int(n), config.d, config.D, config.N, config.label_noise, dtype)
    return Prompts(Z0=Z0, y=y)


def training_set(config: Config, dtype: DTypeLike | None = None) -> Prompts:
    """The fixed training set: `config.n_train` prompts from the data key of `config.keys()`."""
    return sample_prompts(config, config.keys()[0], config.n_train, dtype)


def held_out_set(config: Config, dtype: DTypeLike | None = None) -> Prompts:
    """`config.n_test` fresh prompts from the test key (independent of the training set)."""
    return sample_prompts(config, config.keys()[2], config.n_test, dtype)
