"""Test configuration: float64, strict promotion, two CPU devices (see docs/DESIGN.md, Tests)."""

import atexit
import contextlib
import gc
import os
import sys

os.environ.setdefault("MPLBACKEND", "Agg")

# The default suite is compile-bound: about 2/3 of its CPU is XLA backend compilation (measured with JAX's
# monitoring events over the whole suite: 658 s of backend compile, 138 s tracing, 71 s lowering), of programs
# that then run for milliseconds. So it compiles with `jax_disable_most_optimizations` (XLA backend
# optimisation level 0, no expensive LLVM passes): the same programs, results equal to rounding, about 60%
# less compile time and slower runs (measured: the mean-field summary observables compile 1.2 -> 0.48 s, run
# 3.5x slower). Subprocesses (examples, CLI) inherit it through the environment. Tests whose cost is running
# (Monte Carlo over many paths) are marked `xla_default` and compile at XLA's default level (the fixture below;
# or, where a test has one run-bound program beside compile-bound ones, only that program, in
# `tests/_xla_level.default_level()`),
# as are agreements of two different programs stated to 1e-10 at the default level (level 0 rounds differently).
# The library, the examples and the benchmarks run at the default level; tests/test_xla_options.py checks
# that representative programs give the same numbers at both levels (1e-12, one lowering compiled twice).
# FLOWS_TEST_XLA_DEFAULT_OPT=1 runs the whole suite at the default level, and so does a `-m slow` run (its
# long agreements were measured at the default level; pytest_configure below).
# The same goes for XLA's CPU fusion emitters: the library compiles its own programs without them
# (flows._xla.compiler_options()), but the tests' own jitted and eager computations (references, observables
# on the host, autodiff checks) compiled with them, at about twice the backend compile time (measured: 18
# small programs 0.83-0.89 s -> 0.38-0.39 s). XLA_FLAGS applies to every program of the process and of its
# subprocesses; it is read when the backend starts (after pytest_configure below, which drops it for -m slow).
# And each program's LLVM code is generated in one piece: XLA splits it into parts compiled on its thread pool,
# which pays on an idle machine but not with a suite worker per core (the default run's CPU time falls; the
# generated code is the same).
_EMITTERS_OFF = "--xla_cpu_use_fusion_emitters=false"
_ONE_PIECE = "--xla_cpu_parallel_codegen_split_count=1"
_SUITE_FLAGS = {"xla_cpu_use_fusion_emitters": _EMITTERS_OFF, "xla_cpu_parallel_codegen_split_count": _ONE_PIECE}
if os.environ.get("FLOWS_TEST_XLA_DEFAULT_OPT") != "1":
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    for _name, _flag in _SUITE_FLAGS.items():
        if _name not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
try:
    jax.config.update("jax_num_cpu_devices", 2)
except RuntimeError:  # backend already initialised by another plugin; keep what we have
    pass

# The suite runs cold: no persistent compilation cache (flows.experiments.compile_cache), so that timings and files are
# those of a first run on a new machine. tests/test_compile_cache.py turns it on in its own subprocesses.
os.environ["FLOWS_NO_COMPILE_CACHE"] = "1"


# Examples whose --quick run is among the longest: their quick run (and its verdict check) is in `pytest -m slow`
# only, to keep the default suite within 5 minutes. The default run keeps scan_snap_fig3
# (fig4 and fig5 decide on means over 8 runs, fig9 is a sweep); the building blocks of the others are checked in
# the default run by tests/<system>/ (flows vs closed forms, flow vs GD to first order in the learning rate, the
# mean-field flow vs GD in tests/test_readme.py), and `python -m flows reproduce --quick` still runs them all.
SLOW_EXAMPLES = frozenset(
    {
        "mean_field_rates",
        "mean_field_collapse",
        "mean_field_noise",
        "mean_field_gd_vs_flow",
        "mean_field_lambda",
        "mean_field_w2",
        "mean_field_pde",
        "scan_snap_finite_T",
        "scan_snap_predictions",
        "scan_snap_decoder_h",
        "scan_snap_fig6",
        "cooccurrence_predictions",
        "cooccurrence_fig1",
        "linear_attention_saddles",
        "linear_attention_convergence",
        "scan_snap_adam",
        "cooccurrence_sgd_noise",
        "joma_invariant",
        "scan_snap_fig4",
        "scan_snap_fig5",
        "scan_snap_fig9",
        "joma_sparse_dense",
    }
)


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        script = getattr(getattr(item, "callspec", None), "params", {}).get("script")
        if (
            getattr(item, "originalname", None) == "test_example_quick_writes_a_complete_record"
            and getattr(script, "stem", None) in SLOW_EXAMPLES
        ):
            item.add_marker(pytest.mark.slow)


@contextlib.contextmanager
def _default_xla_level(marked):
    if not marked or not jax.config.read("jax_disable_most_optimizations"):
        yield
        return
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)


def _marked_xla_default(obj):
    marks = getattr(obj, "pytestmark", [])
    return any(m.name == "xla_default" for m in (marks if isinstance(marks, list) else [marks]))


@pytest.fixture(scope="module", autouse=True)
def _xla_level_module(request):
    """A module marked `pytestmark = pytest.mark.xla_default` (its module fixtures too) compiles at XLA's default
    optimisation level (see the top of this file)."""
    with _default_xla_level(_marked_xla_default(request.module)):
        yield


@pytest.fixture(autouse=True)
def _xla_level(request):
    """`@pytest.mark.xla_default` tests compile at XLA's default optimisation level (see the top of this file)."""
    with _default_xla_level(request.node.get_closest_marker("xla_default") is not None):
        yield


def pytest_configure(config):
    markexpr = config.getoption("markexpr", "") or ""
    if "slow" in markexpr and "not slow" not in markexpr:  # `-m slow`: XLA's default level (see the top)
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "0"
        jax.config.update("jax_disable_most_optimizations", False)
        flags = os.environ.get("XLA_FLAGS", "")
        for flag in _SUITE_FLAGS.values():
            flags = flags.replace(flag, "")
        flags = " ".join(flags.split())
        if flags:
            os.environ["XLA_FLAGS"] = flags
        else:
            os.environ.pop("XLA_FLAGS", None)


def _exit_worker_now():
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """After the last test, skip the clean-up of a heap that holds thousands of compiled programs (measured: the
    ~10 s between the last test and the summary of a whole-suite run, and 5.4 s after a 36 s single-file run).
    `gc.freeze()` makes pytest's final garbage collections (its unraisable-exception check collects several
    times) cheap; an xdist worker, whose results have all been sent by the time its interpreter exits, then
    exits without tearing down the XLA client and every executable one by one. The controller process (and
    a run without xdist) exits normally, with pytest's exit status."""
    gc.freeze()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        atexit.register(_exit_worker_now)  # registered last: runs first
