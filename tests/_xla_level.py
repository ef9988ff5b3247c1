"""XLA's default optimisation level for one block of a test.

tests/conftest.py compiles the default suite at XLA level 0 and switches whole tests (or modules) marked
`xla_default` to the default level. A Monte Carlo test often has ONE run-bound program (the SDE over many
paths: level 0 runs it several times slower) next to compile-bound ones (the reference ODE, the vmapped SGD
runs: level 0 halves their compile and runs them as fast). Such a test is left unmarked and compiles only the
run-bound program at the default level, in `with default_level():` -- also in module fixtures, which are built
before the function-level switch of conftest.py. The library's program caches are keyed on the level
(`flows._xla.options_key`), so every call of that program must be made inside the block to reuse it.
"""

import contextlib

import jax


@contextlib.contextmanager
def default_level():
    """Compile at XLA's default level inside the block (`jax_disable_most_optimizations` off), then restore."""
    level0 = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", level0)
