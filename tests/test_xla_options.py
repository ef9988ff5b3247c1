"""The library compiles its own programs with `flows._xla.compiler_options()` (the classic CPU emitters: about
half the compile time); the results equal XLA's defaults, and `flows._xla.config.xla_defaults = True` turns the
options off for the programs compiled after it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compiler  # the compile options JAX hands XLA (a check of the flag)

import flows
from flows import _xla, training
from flows._program import build


def _event_program():
    """A flows.solve program with observables, an event and the blow-up guard, and its call."""
    half = flows.Event(lambda t, y, a: y[0] - 0.5)
    run = build(
        lambda t, y, a: -a * jnp.tanh(y) * y,
        solver="tsit5",
        rtol=1e-10,
        atol=1e-12,
        dt0=None,
        max_steps=10_000,
        observables={"s": lambda t, y, a: jnp.sum(jnp.sin(y))},
        save_states=True,
        event=half,
        blowup=1e10,
        progress=False,
    )
    call = (
        jnp.array([1.0, 2.0]),
        jnp.asarray(1.3),
        jnp.asarray(0.0),
        jnp.asarray(5.0),
        jnp.linspace(0.0, 5.0, 9),
        jnp.asarray(True),
    )
    return run, call


@pytest.mark.slow  # the suite's level is pinned by test_suite_optimisation_level_gives_the_default_results
def test_options_change_compile_not_results():
    assert _xla.compiler_options() == {"xla_cpu_use_fusion_emitters": False}
    run, call = _event_program()
    lowered = jax.jit(run).lower(*call)
    # XLA's default explicitly: the suite turns the emitters off for every program (tests/conftest.py)
    default = lowered.compile(compiler_options={"xla_cpu_use_fusion_emitters": True})(*call)
    ours = _xla.compile_lowered(lowered)(*call)
    assert int(ours["code"]) == int(default["code"])
    for key in ("t_event", "t_final", "num_steps"):
        np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(default[key]), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(ours["saved"]["s"]), np.asarray(default["saved"]["s"]), rtol=1e-13)


def _spy_compile_options(monkeypatch) -> list:
    """The compile options of every program compiled from now on (`Lowered.compile` wrapped), in order."""
    seen: list = []
    real_compile = jax.stages.Lowered.compile

    def compile_spy(self, *a, compiler_options=None, **k):
        seen.append(compiler_options)
        return real_compile(self, *a, compiler_options=compiler_options, **k)

    monkeypatch.setattr(jax.stages.Lowered, "compile", compile_spy)
    return seen


def test_config_switch_restores_xla_defaults(monkeypatch):
    """`config.xla_defaults` is read when a program is compiled: the options, the cache keys and the programs
    `jit` compiles after the switch are XLA's defaults'; the same values."""
    seen = _spy_compile_options(monkeypatch)
    double = _xla.jit(lambda x: 2.0 * x)
    key, ours = _xla.options_key(), double(jnp.arange(3.0))
    monkeypatch.setattr(_xla.config, "xla_defaults", True)
    assert _xla.compiler_options() is None and _xla.compiler_options(one_shot=True) is None
    assert _xla.options_key() != key
    np.testing.assert_array_equal(np.asarray(double(jnp.arange(3.0))), np.asarray(ours))
    run, call = _event_program()
    _xla.compile_lowered(jax.jit(run).lower(*call))
    assert seen[-1] is None
    monkeypatch.setattr(_xla.config, "xla_defaults", False)
    _xla.compile_lowered(jax.jit(run).lower(*call))
    assert seen[-1] == {"xla_cpu_use_fusion_emitters": False}


def test_jit_inside_a_trace_with_constant_arguments():
    """A library jit called inside another jit with constants only (no tracer among its arguments) is the plain
    nested jit (JAX refuses compiler options there); at the top level it carries the options."""
    double = _xla.jit(lambda x: 2.0 * x)
    outer = jax.jit(lambda y: double(np.arange(3.0)) + y)
    np.testing.assert_array_equal(np.asarray(outer(jnp.ones(3))), 2.0 * np.arange(3.0) + 1.0)
    np.testing.assert_array_equal(np.asarray(jax.eval_shape(lambda: double(np.ones(2))).shape), (2,))
    assert double.lower(jnp.ones(2)).compile() is not None


def _at_both_levels(fn, *call):
    """`fn(*call)` compiled at the suite's level (jax_disable_most_optimizations, tests/conftest.py) and at
    XLA's default level, from the same lowering."""
    lowered = jax.jit(fn).lower(*call)
    before = jax.config.read("jax_disable_most_optimizations")
    try:
        outs = []
        for flag, level in ((True, 0), (False, 3)):
            jax.config.update("jax_disable_most_optimizations", flag)
            debug = compiler.get_compile_options(num_replicas=1, num_partitions=1).executable_build_options
            assert debug.debug_options.xla_backend_optimization_level == level  # the flag reaches XLA
            outs.append(_xla.compile_lowered(lowered)(*call))
    finally:
        jax.config.update("jax_disable_most_optimizations", before)
    return outs


def _assert_trees_close(a, b, rtol=1e-12):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-14)


def test_suite_optimisation_level_gives_the_default_results():
    """The default suite compiles with `jax_disable_most_optimizations` (tests/conftest.py, for compile time):
    representative programs give XLA's default level's numbers to 1e-12: a flows.solve program with
    observables, an event and the blow-up guard; mean-field GD steps with every summary observable (a depth
    scan, autodiff, optax); the mean-field adjoint velocity."""
    from flows.mean_field import gradients as mf_grad
    from flows.mean_field import model as mf_model
    from flows.mean_field import observables as mf_obs

    run, call = _event_program()
    low, default = _at_both_levels(run, *call)
    assert int(low["code"]) == int(default["code"]) and int(low["num_steps"]) == int(default["num_steps"])
    _assert_trees_close(low, default)

    cfg = flows.mean_field.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, seed=1)
    particles = flows.mean_field.init_particles(cfg)
    data = flows.mean_field.training_set(cfg)
    args = mf_obs.make_args(cfg, data, flows.mean_field.held_out_set(cfg))
    spec = flows.mean_field.system(cfg)  # the loop of flows.train on it: GD at lr M L, lr M_mlp L
    groups = {"attention": "attention", "mlp": "mlp"}
    opt_state = training.make_optimizer("gd", 0.1, labels=groups, scale=dict(spec.rate_scale)).init(
        flows.mean_field.flow.nest(particles)
    )
    template = training.make_optimizer("gd", dict.fromkeys(groups, 1.0), labels=groups)
    gd = training.training_program(lambda p, d, batch: spec.loss(p, d), spec.observe, template)
    call = (
        flows.mean_field.flow.nest(particles),
        opt_state,
        None,
        jnp.asarray([5, 5], jnp.int32),
        args,
        jnp.zeros((0,)),
    )
    low, default = _at_both_levels(gd, *call)
    _assert_trees_close(low, default)
    consts = mf_model.traced_constants(cfg, data.Z0.dtype)
    low, default = _at_both_levels(lambda p: mf_grad.velocity_adjoint(p, data.Z0, data.y, *consts), particles)
    _assert_trees_close(low, default)


def test_one_shot_programs_compile_at_level_zero():
    """`jit(..., one_shot=True)` (the data samplers) compiles at XLA backend level 0 and draws what the library's
    default options draw, to the last bit (level 0 fuses no multiply-adds: here some entries differ by 1 ulp,
    so the bitwise check below tells the two levels apart)."""
    from flows.mean_field import data as mf_data

    assert _xla.compiler_options(one_shot=True) == {**_xla.compiler_options(), "xla_backend_optimization_level": 0}
    cfg = flows.mean_field.Config(d=3, D=4, N=8, L=2, M=4, n_train=64, seed=0)
    key = cfg.keys()[0]
    static = (64, cfg.d, cfg.D, cfg.N)
    before = jax.config.read("jax_disable_most_optimizations")
    try:  # XLA's default level for everything else (the suite compiles at level 0, tests/conftest.py)
        jax.config.update("jax_disable_most_optimizations", False)
        lowered = jax.jit(mf_data._sample, static_argnums=(1, 2, 3, 4, 6)).lower(
            key, *static, cfg.label_noise, jnp.dtype("float64")
        )
        level0 = lowered.compile(compiler_options=_xla.compiler_options(one_shot=True))(key, cfg.label_noise)
        default = _xla.compile_lowered(lowered)(key, cfg.label_noise)
        got = mf_data._sample_jit(key, *static, cfg.label_noise, jnp.dtype("float64"))
    finally:
        jax.config.update("jax_disable_most_optimizations", before)
    for a, b in zip(got, level0, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _assert_trees_close(got, default, rtol=1e-14)


def test_each_workaround_switch(monkeypatch):
    """Every field of `_xla.config` switches its own workaround off (benchmarks/bench_workarounds.py measures
    each on against off) and changes the cache key."""
    base = _xla.options_key()
    monkeypatch.setattr(_xla.config, "one_shot_level0", False)
    assert _xla.compiler_options(one_shot=True) == {"xla_cpu_use_fusion_emitters": False}
    assert _xla.options_key() != base
    monkeypatch.setattr(_xla.config, "classic_emitters", False)
    assert _xla.compiler_options() is None and _xla.compiler_options(one_shot=True) is None
    monkeypatch.setattr(_xla.config, "one_shot_level0", True)
    assert _xla.compiler_options(one_shot=True) == {"xla_backend_optimization_level": 0}
    monkeypatch.setattr(_xla.config, "classic_emitters", True)
    assert _xla.options_key() == base
    monkeypatch.setattr(_xla.config, "ynn_reduce_only", False)
    assert "xla_cpu_experimental_ynn_fusion_type" not in _xla.compiler_options(batched=True)
    assert _xla.options_key() != base
    monkeypatch.setattr(_xla.config, "ynn_reduce_only", True)


def test_sweep_programs_hand_only_reductions_to_ynnpack(monkeypatch):
    """`batched=True` (a sweep's programs: `solve_batch`, `train_sweep`) adds
    `xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE` under `config.ynn_reduce_only`; single
    programs keep XLA's default; a batch's solve is compiled with it, a single solve without; the same values
    either way."""
    reduce_only = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
    assert _xla.compiler_options(batched=True) == {**_xla.compiler_options(), **reduce_only}
    assert "xla_cpu_experimental_ynn_fusion_type" not in _xla.compiler_options(one_shot=True)
    seen = _spy_compile_options(monkeypatch)
    field = lambda t, y, a: -a * jnp.sin(y)  # noqa: E731
    rates = np.array([0.5, 1.25, 2.0])
    kw = dict(t1=1.0, ts=np.array([0.0, 1.0]), rtol=1e-10, atol=1e-12, solver="tsit5")
    batch = flows.solve_batch(field, np.array([1.0, 0.3]), args=rates, **kw)
    assert seen and all(o["xla_cpu_experimental_ynn_fusion_type"] == "LIBRARY_FUSION_TYPE_REDUCE" for o in seen)
    seen.clear()
    ones = [flows.solve(field, np.array([1.0, 0.3]), args=np.asarray(r), **kw) for r in rates]
    assert seen and all("xla_cpu_experimental_ynn_fusion_type" not in o for o in seen)
    for i, one in enumerate(ones):
        np.testing.assert_allclose(np.asarray(batch.ys[i]), np.asarray(one.ys), rtol=1e-9, atol=1e-12)
    monkeypatch.setattr(_xla.config, "ynn_reduce_only", False)
    assert _xla.compiler_options(batched=True) == _xla.compiler_options()
    double = _xla.jit(lambda x: 2.0 * x, batched=True)
    np.testing.assert_array_equal(np.asarray(double(jnp.arange(3.0))), [0.0, 2.0, 4.0])


def test_training_sweeps_compile_with_the_fusion_emitters(monkeypatch):
    """`batched="training"` (the program of `train_sweep`) is a sweep's options with XLA's fusion emitters
    under `config.training_sweep_emitters` (and a sweep's options without it); `train_sweep` compiles its
    program so; `batched` names one of `_xla.BATCHED` or is a ValueError."""
    reduce_only = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
    assert _xla.compiler_options(batched="training") == reduce_only
    seen = _spy_compile_options(monkeypatch)
    from flows.scan_snap import syn_small, train_sweep

    train_sweep(syn_small(), "sgd", lr=np.array([0.5, 1.0]), seeds=np.arange(2), T=8, batch_size=4, steps=2)
    assert seen[-1] == reduce_only  # the training program, compiled last (after its start's draws)
    monkeypatch.setattr(_xla.config, "training_sweep_emitters", False)
    assert _xla.compiler_options(batched="training") == _xla.compiler_options(batched=True)
    with pytest.raises(ValueError, match="batched"):
        _xla.compiler_options(batched="train")


_SCRATCH_CHILD = """
import ctypes, json, resource
from flows import _xla  # importing the library compiles nothing: the thresholds are still glibc's own
assert not _xla._retained
_xla.compiler_options()  # what the library's first compile calls
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 20 * 2**20
def touch():
    block = libc.malloc(size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ctypes.memset(block, 1, size)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
    return faults
first = touch()
print(json.dumps({"first": first, "faults": touch(), "again": _xla.retain_scratch()}))
"""


@pytest.mark.skipif(
    __import__("platform").libc_ver()[0] != "glibc", reason="retain_scratch acts on glibc's malloc only"
)
def test_retain_scratch_keeps_freed_blocks_for_the_next_allocation():
    """`config.retain_scratch`: after the first compile's `compiler_options()`, a freed 20 MiB block stays with
    glibc and the next one of that size faults no page in (the first faults its pages in; without the
    raised thresholds glibc maps each such block afresh, mutation `retain-scratch-block-past-the-max`); it acts
    once per process. A fresh process: the suite's own has raised the thresholds."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SCRATCH_CHILD], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["again"] is False
    assert got["faults"] < 100 and got["first"] > got["faults"], got
