"""Compile options of the library's own programs.

Compile time dominates a first call here (issue 9): a `flows.solve` of a scalar ODE with an event spends
seconds in XLA and microseconds running. On the CPU backend most of that time is XLA's MLIR fusion
emitters; with `xla_cpu_use_fusion_emitters=False` XLA uses its classic elemental emitters, which compile
the same fused kernels in about half the time and run them as fast (measured in `benchmarks/`, and in the
README's Performance section). The option is passed per program (`jax.jit(..., compiler_options=...)`,
`Lowered.compile(compiler_options=...)`), only to the programs this library compiles: no global JAX or XLA
setting changes. It is a `DebugOptions` field of every backend, and backends other than the CPU ignore it.

`FLOWS_XLA_DEFAULTS=1` in the environment compiles with XLA's defaults instead (read at import).
"""

from __future__ import annotations

import os

import jax

__all__ = ["COMPILER_OPTIONS", "jit"]

COMPILER_OPTIONS: dict | None = (None if os.environ.get("FLOWS_XLA_DEFAULTS") == "1"
                                 else {"xla_cpu_use_fusion_emitters": False})


def jit(fun=None, **kwargs):
    """`jax.jit` with the library's compile options (usable as `@jit` or `@partial(jit, static_argnames=...)`)."""
    if fun is None:
        return lambda f: jit(f, **kwargs)
    return jax.jit(fun, compiler_options=COMPILER_OPTIONS, **kwargs)


def compile_lowered(lowered):
    """`lowered.compile()` with the library's compile options."""
    return lowered.compile(compiler_options=COMPILER_OPTIONS)
