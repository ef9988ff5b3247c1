"""Test configuration: float64, strict promotion, two CPU devices (see docs/DESIGN.md, Tests)."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402
import pytest  # noqa: E402

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


# Examples whose --quick run alone takes more than a minute on 2 cores (mean_field_rates about 165 s,
# mean_field_collapse about 80 s, mean_field_noise about 65 s): their quick run is in `pytest -m slow` only,
# to keep the default suite within 5 minutes. `python -m flows reproduce --quick` still runs them, and their
# building blocks (particle flow, GD, noise, reference, observables) are tested in tests/mean_field.
SLOW_EXAMPLES = frozenset({"mean_field_rates", "mean_field_collapse", "mean_field_noise"})


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        script = getattr(getattr(item, "callspec", None), "params", {}).get("script")
        if (getattr(item, "originalname", None) == "test_example_quick_writes_a_complete_record"
                and getattr(script, "stem", None) in SLOW_EXAMPLES):
            item.add_marker(pytest.mark.slow)
