"""Compile options of the library's own programs.

Compile time dominates a first call here (issue 9): a `flows.solve` of a scalar ODE with an event spends
seconds in XLA and microseconds running. On the CPU backend most of that time is XLA's MLIR fusion
emitters; with `xla_cpu_use_fusion_emitters=False` XLA uses its classic elemental emitters, which compile
the same fused kernels in about half the time and run them as fast (measured in `benchmarks/`, and in the
README's Performance section). The option is passed per program (`jax.jit(..., compiler_options=...)`,
`Lowered.compile(compiler_options=...)`), only to the programs this library compiles: no global JAX or XLA
setting changes. It is a `DebugOptions` field of every backend, and backends other than the CPU ignore it.

`jit(..., one_shot=True)` is for small programs that run once per call and microseconds long (the random
draws of a data set): they also get `xla_backend_optimization_level=0`, which halves their compile (the
mean-field prompt sampler: 0.85 s -> 0.43 s) and may change a value in its last bit (no fused multiply-adds).

`device_array(x, dtype)` moves host data (numpy arrays, Python scalars with a dtype) to the device without a
compiled program: `jnp.asarray` of a numpy array runs a small jitted identity (`lax.stage`), and a dtype
conversion a jitted `convert_element_type`, each about 20 ms of compile per new shape on a first call here.

`FLOWS_XLA_DEFAULTS=1` in the environment compiles with XLA's defaults instead (read at import).
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["COMPILER_OPTIONS", "ONE_SHOT_OPTIONS", "compile_lowered", "device_array", "jit", "options_key"]

COMPILER_OPTIONS: dict | None = (None if os.environ.get("FLOWS_XLA_DEFAULTS") == "1"
                                 else {"xla_cpu_use_fusion_emitters": False})
#: the options of `jit(..., one_shot=True)`
ONE_SHOT_OPTIONS: dict | None = (None if COMPILER_OPTIONS is None
                                 else {**COMPILER_OPTIONS, "xla_backend_optimization_level": 0})


class _Jit:
    """A `jax.jit` with the library's compile options at the top level and without them when called inside
    another trace (JAX accepts `compiler_options` only on a top-level jit): the same function either way."""

    def __init__(self, fun, kwargs, options):
        self._top = jax.jit(fun, compiler_options=options, **kwargs)
        self._nested = jax.jit(fun, **kwargs)
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
            return self._nested(*args, **kwargs)
        try:
            return self._top(*args, **kwargs)
        except ValueError as err:  # inside a trace with constant arguments only
            if "top-level" not in str(err):
                raise
            return self._nested(*args, **kwargs)

    def lower(self, *args, **kwargs):
        return self._top.lower(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._top, name)


def jit(fun=None, *, one_shot: bool = False, **kwargs):
    """`jax.jit` with the library's compile options (usable as `@jit` or `@partial(jit, static_argnames=...)`);
    called inside another jit (or vmap, grad) it is the plain `jax.jit` of the same function. `one_shot`:
    `ONE_SHOT_OPTIONS` (module docstring)."""
    if fun is None:
        return lambda f: jit(f, one_shot=one_shot, **kwargs)
    options = ONE_SHOT_OPTIONS if one_shot else COMPILER_OPTIONS
    if options is None:
        return jax.jit(fun, **kwargs)
    return _Jit(fun, kwargs, options)


def compile_lowered(lowered):
    """`lowered.compile()` with the library's compile options."""
    return lowered.compile(compiler_options=COMPILER_OPTIONS)


def options_key():
    """The JAX settings besides the program that decide its compiled code, for the keys of the library's own
    caches of compiled programs: `jax_disable_most_optimizations` (XLA backend level 0, a runtime flag; the
    test suite compiles its compile-bound tests with it). A program compiled under one value is not reused
    under the other."""
    return bool(jax.config.read("jax_disable_most_optimizations"))


def device_array(x, dtype=None):
    """`jnp.asarray(x, dtype)` for host data, converted on the host and moved by `jax.device_put` (module
    docstring): the same values and dtype (JAX's canonical one: float64 is float32 without x64), not weakly
    typed. JAX arrays, tracers, Python scalars without a dtype and non-numeric data (None, strings: its error)
    go to `jnp.asarray`."""
    if isinstance(x, (jax.Array, jax.core.Tracer)) or (dtype is None and not isinstance(x, np.ndarray)):
        return jnp.asarray(x, dtype)
    host = np.asarray(x)
    if host.dtype.kind not in "biufc":  # None, strings, objects: jnp.asarray's own error
        return jnp.asarray(x, dtype)
    target = jax.dtypes.canonicalize_dtype(host.dtype if dtype is None else dtype)
    return jax.device_put(host.astype(target, copy=False))
