"""Test configuration: float64, strict promotion, two CPU devices (see docs/DESIGN.md, Tests)."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
try:
    jax.config.update("jax_num_cpu_devices", 2)
except RuntimeError:  # backend already initialised by another plugin; keep what we have
    pass

# The suite runs cold: no persistent compilation cache (flows.compile_cache), so that timings and files are
# those of a first run on a new machine. tests/test_compile_cache.py turns it on in its own subprocesses.
os.environ["FLOWS_NO_COMPILE_CACHE"] = "1"
