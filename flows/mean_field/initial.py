"""Initial particles of the mean-field transformer: i.i.d. from rho0, or on depth-smooth curves."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._prng import fused
from .._xla import jit as xla_jit
from .data import Config, Particles
from .model import GROUPS

__all__ = ["init_curves", "init_particles"]


def _uniform(key, shape, radius, dtype):
    """`jax.random.uniform(key, shape, dtype, -radius, radius)`, the same values (tests): a flat draw on the
    `flows._prng.fused` key compiles one small program per size (row `workarounds/fused_prng(mean_field data)`)."""
    if not jax.config.jax_threefry_partitionable:
        return jax.random.uniform(key, shape, dtype, -radius, radius)
    flat = jax.random.uniform(fused(key), (math.prod(shape),), dtype, -radius, radius)
    return jnp.asarray(np.asarray(flat).reshape(shape))


def init_curves(config: Config, depths: Any, key: Any = None, dtype: Any = None) -> Particles:
    """Initial particles of the depth-smooth laws evaluated at arbitrary depths `depths` (k,) in [0, 1].

    `config.init = "tied"`: theta_j(t) = A_j; `"smooth"`: theta_j(t) = (1 - t) A_j + t B_j, with A, B
    i.i.d. uniform on [-a, a]. The same base draws serve the finite network (depths l / L) and the
    continuous-depth reference (its depth nodes), so both start from one law (coupled).
    Returns the particle dict with leading axis k.
    """
    if config.init not in ("tied", "smooth"):
        raise ValueError(f"init_curves needs config.init 'tied' or 'smooth', got {config.init!r}")
    key = config.keys()[1] if key is None else key
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    t = np.asarray(depths, dtype)
    if t.ndim != 1:
        raise ValueError(f"depths must be a 1-D array, got shape {t.shape}")
    D, M, Mm, a = config.D, config.M, config.M_mlp, config.init_radius
    shapes = {"V": (M, D, D), "W": (M, D, D), "W1": (Mm, D), "W2": (Mm, D)}
    keys = dict(zip(GROUPS, jax.random.split(key, 4), strict=True))
    out = {}
    for name, shape in shapes.items():
        kA, kB = jax.random.split(keys[name])
        # the curves are elementwise IEEE operations on the draws, in numpy: no compiled program per shape
        A = np.asarray(_uniform(kA, shape, a, dtype))
        if config.init == "tied":
            curve = np.broadcast_to(A, (t.shape[0],) + shape)
        else:
            B = np.asarray(_uniform(kB, shape, a, dtype))
            w = t.reshape((-1,) + (1,) * len(shape))
            curve = (1.0 - w) * A[None] + w * B[None]
        out[name] = jnp.asarray(curve, dtype)
    return out


def init_particles(config: Config, key: Any = None, dtype: Any = None) -> Particles:
    """The initial particles of the network, i.i.d. from rho0 (see `Config.init`), seeded by `config`.

    Returns `{"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, M_mlp, D), "W2": (L, M_mlp, D)}` (W1 rows and
    W2 columns stored as vectors); every entry lies in [-a, a], a = init_scale / sqrt(D).
    """
    key = config.keys()[1] if key is None else key
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    if config.init != "iid":
        return init_curves(config, np.arange(config.L) / config.L, key=key, dtype=dtype)
    L, D, M, Mm, a = config.L, config.D, config.M, config.M_mlp, config.init_radius
    shapes = {"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, Mm, D), "W2": (L, Mm, D)}
    if not jax.config.jax_threefry_partitionable:  # type: ignore[attr-defined]  # a flag jax's stub omits
        keys = dict(zip(GROUPS, jax.random.split(key, 4), strict=True))
        return {name: _uniform(keys[name], shape, a, dtype) for name, shape in shapes.items()}
    return dict(zip(GROUPS, _draw_particles(key, tuple(shapes[name] for name in GROUPS), dtype, a), strict=True))


@functools.partial(xla_jit, one_shot=True, static_argnums=(1, 2))
def _draw_particles(key, shapes, dtype, radius):
    """The draws of `_uniform` for the groups of `GROUPS` (subkeys split off `key` in that order) as one
    program compiled for compile time (`flows._xla`, one_shot: XLA backend level 0). The values are
    `jax.random.uniform`'s except perhaps in the last bit: level 0 fuses no multiply-add in its
    `u (b - a) + a`, so an entry may differ by 1 ulp from an eager draw compiled at XLA's default level
    (tests: bit for bit at equal levels)."""
    keys = jax.random.split(key, len(shapes))
    return tuple(
        jax.random.uniform(fused(k), (math.prod(shape),), dtype, -radius, radius).reshape(shape)
        for k, shape in zip(keys, shapes, strict=True)
    )
