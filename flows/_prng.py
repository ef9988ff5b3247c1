"""JAX's threefry2x32 PRNG with the hash written out (unrolled), for fast CPU programs with the same draws.

On the CPU backend JAX lowers the threefry2x32 hash as a rolled `fori_loop` (5 iterations of 4 rounds), each
round a pass of its own over the counters, and every draw brings its own while loop to compile; the unrolled
hash compiles and runs faster where draws dominate a compiled program (rows `workarounds/fused_prng(...)` of
`benchmarks/bench_workarounds.py`; switched off by `flows._xla.config.fused_prng`). `fused(key)` rewraps a
threefry key (raw uint32 `(..., 2)` data or a typed threefry key) as a typed key of `THREEFRY_FUSED`, a
`jax.extend.random.define_prng_impl` whose split, random_bits and fold_in are JAX's threefry2x32 in its default
partitionable mode, computed by the unrolled hash: every `jax.random` sampler on the rewrapped key draws bit for
bit what it draws on the original key (tests/test_prng.py). It does so inside a jit trace only: eagerly the
key comes back unchanged (JAX's own threefry is then one dispatch, the unrolled hash one per operation). With
the partitionable flag off, or a key of another implementation, `fused` returns the key unchanged.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random
from jax.extend.core import unsafe_am_i_under_a_jit_DO_NOT_USE as _under_a_jit

from ._xla import config

__all__ = ["THREEFRY_FUSED", "fused", "rewrap", "threefry2x32"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotate_left(x, d):
    return lax.shift_left(x, np.uint32(d)) | lax.shift_right_logical(x, np.uint32(32 - d))


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011; JAX's `threefry2x32_p`) on uint32 arrays `x1`, `x2`
    with the key words `k1`, `k2` (uint32 scalars): the two uint32 output words."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1 = x1 + ks[0]
    x2 = x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ _rotate_left(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def _counters(shape):
    """The (hi, lo) words of the uint64 iota of `shape` (JAX's `iota_2x32_shape`), for < 2**32 entries."""
    size = math.prod(shape)
    if size >= 2**32:
        raise ValueError(f"shape {shape} draws 2**32 or more random words; the fused threefry counts in uint32")
    lo = lax.iota(np.uint32, max(size, 1)).reshape(shape) if size else jnp.zeros(shape, np.uint32)
    return jnp.zeros(shape, np.uint32), lo


def _seed(seed):
    return jax.random.key_data(jax.random.key(seed, impl="threefry2x32"))


def _split(key, shape):
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    return jnp.stack([b1, b2], axis=b1.ndim)


def _random_bits(key, bit_width, shape):
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    if bit_width == 64:
        return (lax.convert_element_type(b1, np.uint64) << np.uint64(32)) | lax.convert_element_type(b2, np.uint64)
    if bit_width == 32:
        return b1 ^ b2
    return lax.convert_element_type(b1 ^ b2, {8: np.uint8, 16: np.uint16}[bit_width])


def _fold_in(key, data):
    d = _seed(jnp.asarray(data, np.uint32))
    b1, b2 = threefry2x32(key[0], key[1], d[:1], d[1:])
    return jnp.concatenate([b1, b2])


THREEFRY_FUSED = jex_random.define_prng_impl(
    key_shape=(2,),
    seed=_seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_fused",
    tag="tff",
)


def fused(key):
    """`key` (raw uint32 data `(..., 2)` or a typed threefry2x32 key) as a typed `THREEFRY_FUSED` key when called
    inside a jit trace (`rewrap`): the same draws from every `jax.random` sampler, faster CPU programs. Outside
    a trace the key comes back unchanged: an eager draw on a rewrapped key runs the hash one operation at a
    time, where JAX's own threefry is one dispatch (the same bits either way). Other keys come back unchanged,
    and so does every key when `jax_threefry_partitionable` is off (the fused functions follow the partitionable
    definitions only), and with `flows._xla.config.fused_prng` off."""
    if not config.fused_prng or not jax.config.jax_threefry_partitionable or not _under_a_jit():
        return key
    return rewrap(key)


def rewrap(key):
    """`key` as a typed `THREEFRY_FUSED` key, traced or not (`fused` without its conditions but the key's
    implementation): a typed threefry2x32 key or raw uint32 data `(..., 2)`; other keys come back unchanged."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":
            return key
        key = jax.random.key_data(key)
    elif key.dtype != np.uint32 or key.ndim < 1 or key.shape[-1] != 2:
        return key
    return jax.random.wrap_key_data(key, impl=THREEFRY_FUSED)
