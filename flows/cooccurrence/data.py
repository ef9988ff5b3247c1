"""Data model of word co-occurrence (Yang et al. 2024, Def. 2.1, Assumption 2.3), tokens as indices.

0 = mu_1, 1 = mu_2 (the targets), 2 = mu_3 (the common token), 3..d-1 = the random tokens; groups I_1..I_4 with
probabilities (1/2, 1/6, 1/6, 1/6), y = +1 on I_1 only. `variant="theory"`: every random-token occurrence of the
training set distinct (Assumption 2.3(ii)); `variant="paper"`: drawn with replacement (App. A). See
docs/systems/cooccurrence.md."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import SEED_MAX, check_choice, check_int, check_real
from .._xla import jit as xla_jit

__all__ = [
    "Config",
    "Dataset",
    "GROUP_PROBS",
    "NUM_GROUPS",
    "generator",
    "num_random_slots",
    "sample_test",
    "training_set",
]

#: Probabilities of I_1..I_4 (Def. 2.1).
GROUP_PROBS = (0.5, 1.0 / 6.0, 1.0 / 6.0, 1.0 / 6.0)
NUM_GROUPS = 4
#: Labels of I_1..I_4.
GROUP_LABELS = (1.0, -1.0, -1.0, -1.0)
#: Special tokens (mu_3 first, then targets) of each group, as indices; -1 pads.
_SPECIAL = np.array([[2, 0, 1], [2, 0, -1], [2, 1, -1], [2, -1, -1]], dtype=np.int32)
_NUM_SPECIAL = np.array([3, 2, 2, 1], dtype=np.int32)
_VARIANTS = ("theory", "paper")
_INITS = ("theory", "kaiming")


def num_random_slots(n: int, L: int) -> int:
    """Random-token slots of a training set with exact proportions: n/2 (L-3) + n/3 (L-2) + n/6 (L-1)."""
    return n // 2 * (L - 3) + n // 3 * (L - 2) + n // 6 * (L - 1)


@dataclasses.dataclass(frozen=True)
class Config:
    """Sizes, initialisation and data variant of one co-occurrence experiment (immutable, validated).

    **Arguments:**

    - `n`: training samples, a multiple of 6 (exact proportions 1/2, 1/6, 1/6, 1/6; Assumption 2.3(i)).
    - `L`: sequence length, >= 3 (room for mu_1, mu_2, mu_3).
    - `d`: vocabulary size = token dimension; `variant="theory"` needs d >= 3 + `num_random_slots(n, L)`
      (Assumption 2.3(ii)), `variant="paper"` needs d >= 4.
    - `m`: width of W_Q, W_K, W_V (the softmax temperature is 1/sqrt(m)); `m1`: MLP neurons.
    - `sigma0`, `sigma1`: init std of W_V, W_K, W_Q and of W (Sec. 2.2); default 1/sqrt(L m) and
      1/sqrt(m1) (the scales of Condition 1). Ignored by `init="kaiming"`.
    - `variant`: `"theory"` (unique random tokens) or `"paper"` (with replacement, App. A).
    - `init`: `"theory"` (a = +-1, W ~ N(0, sigma1^2), W_V/K/Q ~ N(0, sigma0^2)) or `"kaiming"`
      (a = +-1, kaiming-normal std sqrt(2 / fan_in): sqrt(2/m) for W, sqrt(2/d) for W_V/K/Q).
    - `seed`: seeds the training set (and, split off it, the initialisation and test draws).

    **Raises:** `ValueError` naming the field and its allowed range.
    """

    n: int = 60
    L: int = 5
    d: int = 163
    m: int = 128
    m1: int = 256
    sigma0: float | None = None
    sigma1: float | None = None
    variant: str = "theory"
    seed: int = 0
    init: str = "theory"

    def __post_init__(self):
        check_int("n", self.n, 6)
        if self.n % 6:
            raise ValueError(f"n must be a multiple of 6 (exact proportions, Assumption 2.3(i)), got {self.n}")
        for name, low in (("L", 3), ("m", 1), ("m1", 1), ("d", 1)):
            check_int(name, getattr(self, name), low)
        check_int("seed", self.seed, 0, SEED_MAX)
        check_choice("variant", self.variant, _VARIANTS)
        check_choice("init", self.init, _INITS)
        theory = self.variant == "theory"
        need = 3 + num_random_slots(self.n, self.L) if theory else 4
        if self.d < need:
            why = "one unique token per random slot, Assumption 2.3(ii)" if theory else "at least one random token"
            raise ValueError(
                f"d must be >= {need} for variant={self.variant!r} with n={self.n}, L={self.L} (3 special tokens + "
                f"{why}), got {self.d}"
            )
        for name in ("sigma0", "sigma1"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_real(name, getattr(self, name), low=0.0, strict=True))
        # which init stds were left to their defaults, so that `replace` derives them again from new sizes
        object.__setattr__(self, "_defaulted", tuple(n for n in ("sigma0", "sigma1") if getattr(self, n) is None))
        if self.sigma0 is None:
            object.__setattr__(self, "sigma0", 1.0 / math.sqrt(self.L * self.m))
        if self.sigma1 is None:
            object.__setattr__(self, "sigma1", 1.0 / math.sqrt(self.m1))

    def replace(self, **changes: Any) -> Config:
        """A copy with `changes` applied (validated again); a `sigma0`, `sigma1` left to its default is derived
        again from the new sizes (`Config(m=16).replace(m=64) == Config(m=64)`), unlike `dataclasses.replace`."""
        changes = {**{n: None for n in getattr(self, "_defaulted", ()) if n not in changes}, **changes}
        return dataclasses.replace(self, **changes)

    @property
    def init_stds(self) -> tuple[float, float]:
        """(std of W_V/W_K/W_Q, std of W) actually used by the initialisation."""
        if self.init == "kaiming":
            return math.sqrt(2.0 / self.d), math.sqrt(2.0 / self.m)
        return self.sigma0, self.sigma1  # type: ignore[return-value]  # set in __post_init__

    @property
    def group_sizes(self) -> tuple[int, int, int, int]:
        """|I_1|, ..., |I_4| = n/2, n/6, n/6, n/6."""
        return (self.n // 2, self.n // 6, self.n // 6, self.n // 6)

    def keys(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(data key, init key, test key) as `jax.random` keys split off `seed` (the SGD minibatch key)."""
        return tuple(_split_seed(self.seed))

    def rng(self, stream: str) -> np.random.Generator:
        """The numpy generator of one random stream of `seed`: `"data"`, `"init"` or `"test"` (independent).
        Samplers and initial states are drawn with numpy: a `jax.random` program costs a compile."""
        return np.random.default_rng([self.seed, _STREAMS.index(stream)])


_STREAMS = ("data", "init", "test")


@functools.partial(xla_jit, one_shot=True)
def _split_seed(seed):
    return jax.random.split(jax.random.PRNGKey(seed), 3)


def generator(config: Config, stream: str, key: Any = None) -> np.random.Generator:
    """`config.rng(stream)`, or a generator seeded by the bits of an explicit `key` (a `jax.random` key,
    typed or raw uint32, or a non-negative int)."""
    if key is None:
        return config.rng(stream)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise ValueError(f"key must be a jax.random key or an integer >= 0, got {key!r}")
        return np.random.default_rng([int(key), _STREAMS.index(stream)])
    try:
        if jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key):
            key = jax.random.key_data(key)
        bits = np.asarray(key)
    except (TypeError, ValueError):
        bits = None
    if bits is None or bits.dtype.kind not in "ui" or bits.size == 0:
        raise ValueError(f"key must be a jax.random key or an integer >= 0, got {key!r}")
    return np.random.default_rng([*(int(b) for b in bits.astype(np.uint64).ravel()), _STREAMS.index(stream)])


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Token sequences as indices.

    - `tokens`: int32 `(n, L)`, token index per position (0 = mu_1, 1 = mu_2, 2 = mu_3, >= 3 random).
    - `labels`: float `(n,)`, +-1.
    - `groups`: int32 `(n,)`, 0..3 for I_1..I_4.
    """

    tokens: jax.Array
    labels: jax.Array
    groups: jax.Array

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])

    def group_onehot(self, dtype: Any = None) -> jax.Array:
        """`(n, 4)` indicator of the group of each sample."""
        dtype = dtype or jnp.result_type(float)
        return jnp.asarray(np.eye(NUM_GROUPS, dtype=dtype)[np.asarray(self.groups)])


def _assemble(rng: np.random.Generator, groups: np.ndarray, L: int, random_tokens: Callable) -> Dataset:
    """The samples of `groups`: the specials of each group at uniformly random positions, the rest filled with
    `random_tokens(is_random)` (vectorised over samples)."""
    n = groups.shape[0]
    special = _SPECIAL[groups]  # (n, 3)
    slots = np.concatenate([special, np.full((n, L - 3), -1, np.int32)], axis=1)  # (n, L)
    is_random = np.arange(L)[None, :] >= _NUM_SPECIAL[groups][:, None]
    slot_tokens = np.where(is_random, random_tokens(is_random), slots).astype(np.int32)
    # a uniformly random position for every slot: argsort of uniforms is a random permutation per row
    perm = np.argsort(rng.random((n, L)), axis=1)
    tokens = np.zeros((n, L), np.int32)
    tokens[np.arange(n)[:, None], perm] = slot_tokens
    labels = np.asarray(GROUP_LABELS)[groups].astype(jnp.result_type(float))
    return Dataset(tokens=jnp.asarray(tokens), labels=jnp.asarray(labels), groups=jnp.asarray(groups))


def training_set(config: Config, key: Any = None) -> Dataset:
    """The training set of Assumption 2.3: exact proportions, samples ordered I_1, I_2, I_3, I_4.

    Drawn from `config.rng("data")`, or from `key` (see `generator`). Shapes: tokens `(n, L)`.
    """
    rng = generator(config, "data", key)
    groups = np.repeat(np.arange(NUM_GROUPS), config.group_sizes).astype(np.int32)
    d = config.d

    def random_tokens(is_random):
        if config.variant == "theory":
            # one distinct random token per random slot (row-major order of the slots)
            order = np.cumsum(is_random.reshape(-1)).reshape(is_random.shape) - 1
            pool = 3 + rng.permutation(d - 3).astype(np.int32)
            return pool[np.clip(order, 0, d - 4)]
        return rng.integers(3, d, is_random.shape, dtype=np.int32)

    return _assemble(rng, groups, config.L, random_tokens)


def sample_test(config: Config, num: int, key: Any = None) -> Dataset:
    """`num` fresh samples from D: groups drawn with probabilities (1/2, 1/6, 1/6, 1/6), random tokens
    i.i.d. uniform over R (both variants). Drawn from `config.rng("test")`, or from `key`."""
    check_int("num", num, 1)
    rng = generator(config, "test", key)
    groups = rng.choice(NUM_GROUPS, size=int(num), p=np.asarray(GROUP_PROBS)).astype(np.int32)
    return _assemble(
        rng, groups, config.L, lambda is_random: rng.integers(3, config.d, is_random.shape, dtype=np.int32)
    )
