"""Property-based tests of the mean-field transformer: `Config`, `sample_prompts`, `solve_flow`,
`solve_particles_sde`, `solve_reference`, `train`, `train_gd_seeds` and the particle / data checks (rules in
tests/fuzzing.py). The flows run up to the solver stub, GD up to its compile.
"""

from __future__ import annotations

import importlib
import math
from unittest import mock

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flows import mean_field as mf
from tests.fuzzing import (
    CONFIG,
    ENTRY,
    ENTRY_FEW,
    SEED_MAX,
    Reached,
    assert_finite_inputs,
    bad_bools,
    bad_choices,
    bad_ints,
    bad_reals,
    check_edges,
    good_ints,
    good_reals,
    int_edges,
    raises_naming,
    real_edges,
    stop_at_solvers,
)

_INT_FIELDS = {"d": 1, "N": 1, "L": 1, "M": 1, "M_mlp": 1, "n_train": 1, "n_test": 1}
_REAL_FIELDS = {"lam": (0.0, False), "label_noise": (0.0, False), "threshold": (0.0, True), "init_scale": (0.0, True)}


_GOOD_INT = good_ints(1)
_GOOD_REAL = {k: good_reals(low, 1e300, strict=strict) for k, (low, strict) in _REAL_FIELDS.items()}


@st.composite
def config_fields(draw):
    fields = {k: draw(_GOOD_INT) for k in _INT_FIELDS}
    fields["d"] = draw(st.integers(1, 2**31 - 2))  # room for D >= d + 1
    fields["D"] = draw(st.integers(fields["d"] + 1, 2**31 - 1))
    if draw(st.booleans()):
        fields["M_mlp"] = None
    for k in _REAL_FIELDS:
        fields[k] = draw(_GOOD_REAL[k])
    fields["init"] = draw(st.sampled_from(mf.INITS))
    fields["seed"] = draw(_GOOD_SEED)
    return fields


_GOOD_SEED = good_ints(0, SEED_MAX)
#: invalid values per field (D: also any integer below d + 1, drawn in the test)
_BAD_CONFIG = {
    **{k: bad_ints(low) for k, low in _INT_FIELDS.items()},
    "D": bad_ints(1),
    **{k: bad_reals(low, strict=strict) for k, (low, strict) in _REAL_FIELDS.items()},
    "seed": bad_ints(0, SEED_MAX),
    "init": bad_choices(mf.INITS),
}


@pytest.mark.parametrize("field", sorted(_BAD_CONFIG))
@settings(CONFIG, max_examples=15)  # x 14 fields
@given(fields=config_fields(), data=st.data())
def test_config_valid_and_invalid_values(field, fields, data):
    cfg = mf.Config(**fields)
    for k, v in fields.items():
        if v is not None:
            want = str if k == "init" else float if k in _REAL_FIELDS else int
            assert getattr(cfg, k) == want(v) and type(getattr(cfg, k)) is want
    assert cfg.M_mlp == (fields["M"] if fields["M_mlp"] is None else fields["M_mlp"])
    assert cfg.init_radius == pytest.approx(float(fields["init_scale"]) / math.sqrt(int(fields["D"])), rel=1e-15)
    assert cfg.replace(seed=1).seed == 1
    if field == "D" and data.draw(st.booleans()):
        value = data.draw(st.integers(-(2**40), fields["d"]), label="D")
    else:
        value = data.draw(_BAD_CONFIG[field], label=field)
    if field == "M_mlp" and value is None:
        return  # None is valid here (M_mlp = M)
    fields[field] = value
    with raises_naming(field):
        mf.Config(**fields)


# --------------------------------------------------------------------------- one tiny network, shared

CFG = mf.Config(d=1, D=2, N=1, L=1, M=2, M_mlp=2, n_train=2, n_test=2, init="smooth")


@pytest.fixture(scope="module")
def tiny():
    """Particles, prompts and reference nodes of `CFG` drawn with numpy (the jax.random draws of
    `init_particles` and `training_set` would compile a few programs: seconds on a busy machine)."""
    rng = np.random.default_rng(0)
    L, M, Mm, D, N = CFG.L, CFG.M, CFG.M_mlp, CFG.D, CFG.N
    shapes = {"V": (M, D, D), "W": (M, D, D), "W1": (Mm, D), "W2": (Mm, D)}
    particles = {k: rng.uniform(-0.5, 0.5, (L, *shape)) for k, shape in shapes.items()}
    nodes = {k: rng.uniform(-0.5, 0.5, (2, *shape)) for k, shape in shapes.items()}
    data, test = (mf.Prompts(rng.standard_normal((n, D, N + 1)), rng.standard_normal(n)) for n in (2, 3))
    return particles, data, test, nodes


def _bad_particles(particles, data, name="particles"):
    """A particle (or node) dict with one NaN/inf entry, a wrong shape, a wrong dtype, a missing key or junk."""
    kind = data.draw(st.sampled_from(["nonfinite"] * 4 + ["shape", "dtype", "keys", "junk", "strings"]))
    key = data.draw(st.sampled_from(sorted(particles)))
    out = dict(particles)
    if kind == "nonfinite":
        arr = np.array(particles[key])
        arr.reshape(-1)[data.draw(st.integers(0, arr.size - 1))] = data.draw(st.sampled_from([np.nan, np.inf]))
        out[key] = arr
    elif kind == "shape":
        out[key] = np.array(particles[key])[..., :1]
    elif kind == "dtype":
        out[key] = np.ones(np.shape(particles[key]), np.int32)
    elif kind == "keys":
        out.pop(key)
    elif kind == "strings":
        out[key] = "ones"
    else:
        return data.draw(st.one_of(st.integers(), st.just([particles])))  # (None means: the default)
    return out


def _bad_prompts(data_set, data):
    kind = data.draw(st.sampled_from(["nonfinite"] * 3 + ["shape", "dtype", "junk"]))
    Z0, y = np.array(data_set.Z0), np.array(data_set.y)
    if kind == "nonfinite":
        (Z0 if data.draw(st.booleans()) else y).reshape(-1)[0] = data.draw(st.sampled_from([np.nan, np.inf]))
    elif kind == "shape":
        Z0 = Z0[:, :1]
    elif kind == "dtype":
        Z0 = Z0.astype(np.int32)
    else:
        return data.draw(st.one_of(st.integers(), st.just("prompts"), st.just((Z0,))))
    return mf.Prompts(Z0, y)


_ts = st.lists(st.floats(0.0, 1e4), min_size=1, max_size=3).map(lambda t: [0.0, *sorted(t)]).filter(lambda t: t[-1] > 0)
_bad_ts = st.sampled_from(
    [[0.0], [0.5, 1.0], [0.0, 2.0, 1.0], [0.0, math.nan], [0.0, math.inf], [[0.0, 1.0]], ["0", "1"], "1", [0.0, 1j]]
)


@ENTRY_FEW
@given(
    _ts,
    st.sampled_from(["tsit5", "dopri5", "kvaerno5"]),
    good_reals(0.0, 1e-2, strict=True),
    st.one_of(st.none(), good_reals(1e-3, 1.0)),
    st.sampled_from(["all", "basic"]),
    st.booleans(),
    st.sampled_from(["particles", "reference"]),
)
def test_particle_and_reference_flows_valid_calls_reach_the_solver(
    tiny, ts, solver, rtol, dt, observables, save_states, which
):
    particles, data, test, nodes = tiny
    common = dict(
        solver=solver,
        rtol=rtol,
        atol=rtol,
        dt=dt,
        observables=observables,
        save_states=save_states,
        max_steps=2**31 - 1,
    )
    with stop_at_solvers(), pytest.raises(Reached) as info:
        if which == "particles":
            mf.solve_flow(CFG, ts, particles=particles, data=data, test=test, **common)
        else:
            mf.solve_reference(CFG, ts, nodes=nodes, data=data, test=test, **common)
    assert sorted(info.value.inputs["y0"]) == ["V", "W", "W1", "W2"]
    assert info.value.inputs["options"]["constant_step"] == (dt is not None)


@pytest.mark.parametrize(
    "field",
    [
        "ts",
        "particles",
        "data",
        "test",
        "solver",
        "rtol",
        "dt",
        "max_steps",
        "observables",
        "save_states",
        "progress",
        "throw",
        "nodes",
        "K",
        "substeps",
    ],
)
@settings(ENTRY, max_examples=15)
@given(data=st.data())
def test_particle_and_reference_flows_invalid_values_raise_naming_the_field(tiny, field, data):
    particles, prompts, test, nodes = tiny
    reference = field in ("nodes", "K", "substeps") or (field not in ("particles",) and data.draw(st.booleans()))
    kw = dict(data=prompts, test=test, **({"nodes": nodes} if reference else {"particles": particles}))
    ts = [0.0, 1.0]
    bad = {
        "ts": _bad_ts,
        "solver": bad_choices(["tsit5"]),
        "rtol": bad_reals(0.0, strict=True),
        "dt": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
        "max_steps": bad_ints(1).filter(lambda v: v is not None),  # None: from the horizon
        "observables": st.one_of(st.text(max_size=3), st.integers(), st.just({"Q": 1})),
        "save_states": bad_bools(),
        "progress": bad_bools(),
        "throw": bad_bools(),
        "K": st.one_of(bad_ints(2).filter(lambda v: v is not None), st.just(3)),
        "substeps": bad_ints(1),
    }
    if field == "ts":
        ts = data.draw(bad[field], label=field)
    elif field in ("particles", "nodes"):
        kw[field] = _bad_particles(particles if field == "particles" else nodes, data)
    elif field in ("data", "test"):
        kw[field] = _bad_prompts(prompts, data)
    else:
        kw[field] = data.draw(bad[field], label=field)
    with stop_at_solvers(), raises_naming(field):
        if reference:
            mf.solve_reference(CFG, ts, **kw)
        else:
            mf.solve_flow(CFG, ts, **kw)


@pytest.mark.parametrize("field", ["temperature", "dt", "solver", "seed", "particles", "ts", "num_paths"])
@settings(ENTRY, max_examples=6)
@given(
    ts=_ts,
    temperature=st.one_of(st.just(0.0), good_reals(1e-300, 1e3)),
    dt=good_reals(1e-3, 1.0),
    solver=st.sampled_from(["euler", "heun", "sea", "shark"]),
    seed=st.integers(0, SEED_MAX),
    num_paths=st.sampled_from([None, 2]),
    data=st.data(),
)
def test_particle_sde_valid_and_invalid(tiny, field, ts, temperature, dt, solver, seed, num_paths, data):
    particles, prompts, test, _ = tiny
    kw = dict(
        temperature=temperature,
        dt=dt,
        solver=solver,
        seed=seed,
        num_paths=num_paths,
        particles=particles,
        data=prompts,
        test=test,
        max_steps=2**31 - 1,
    )
    with stop_at_solvers(), pytest.raises(Reached) as info:
        mf.solve_particles_sde(CFG, ts, **kw)
    sigma = info.value.inputs["sigma"]
    np.testing.assert_allclose(np.asarray(sigma["V"]), math.sqrt(2 * float(temperature)), rtol=1e-15)
    bad = {
        "temperature": bad_reals(0.0),
        "dt": bad_reals(0.0, strict=True),
        "solver": bad_choices(["euler"]),
        "seed": st.one_of(st.integers(SEED_MAX + 1, 2**80), st.just(1.5)),
        "ts": _bad_ts,
        "num_paths": bad_ints(1).filter(lambda v: v is not None),
    }
    if field == "ts":
        ts = data.draw(bad["ts"])
    elif field == "particles":
        kw["particles"] = _bad_particles(particles, data)
    else:
        kw[field] = data.draw(bad[field], label=field)
    with stop_at_solvers(), raises_naming(field):
        mf.solve_particles_sde(CFG, ts, **kw)


# --------------------------------------------------------------------------- GD (up to the compile)


def _compile_stub(key, build, call, batched=False):
    particles, opt_state, _, increments, args, _ = call
    assert_finite_inputs(particles=particles, args=args)
    raise Reached({"call": call})


@pytest.fixture(scope="module")
def stop_at_compile():
    """The compile hook of the training layer (`flows.training.run_training` compiles through it)."""
    return mock.patch.object(importlib.import_module("flows.training"), "compiled", _compile_stub), None


@pytest.mark.parametrize("field", ["lr", "steps", "save_every", "observables", "particles", "data", "test"])
@settings(ENTRY, max_examples=9)
@given(
    lr=good_reals(0.0, 1e3, strict=True),
    steps=good_ints(1, 10**6),
    save_every=good_ints(1, 10**7),
    observables=st.sampled_from(["all", "basic"]),
    data=st.data(),
)
def test_train_valid_and_invalid(tiny, stop_at_compile, field, lr, steps, save_every, observables, data):
    particles, prompts, test, _ = tiny
    patch_network, _ = stop_at_compile
    kw = dict(particles=particles, data=prompts, test=test, observables=observables)
    with patch_network, pytest.raises(Reached) as info:
        mf.train(CFG, "gd", lr, steps, save_every, **kw)
    increments = np.asarray(info.value.inputs["call"][3])
    assert increments.sum() == int(steps) and np.all(increments >= 1)
    args = [lr, steps, save_every]
    bad = {
        "lr": bad_reals(0.0, strict=True),
        "steps": bad_ints(1),
        "save_every": bad_ints(1, None),
        "observables": bad_choices(["all", "basic"]),
    }
    if field in ("lr", "steps", "save_every"):
        args[["lr", "steps", "save_every"].index(field)] = data.draw(bad[field], label=field)
    elif field == "particles":
        kw["particles"] = _bad_particles(particles, data)
    elif field in ("data", "test"):
        kw[field] = _bad_prompts(prompts, data)
    else:
        kw[field] = data.draw(bad[field], label=field)
    with patch_network, raises_naming(field):
        mf.train(CFG, "gd", *args, **kw)


@settings(ENTRY, max_examples=60)
@given(st.lists(st.integers(0, SEED_MAX), min_size=1, max_size=3, unique=True), st.data())
def test_train_gd_seeds_valid_and_invalid(seeds, data):
    """Valid seeds reach the batched GD with one config per seed (the per-seed draws are stubbed: they compile
    jax.random programs); invalid seeds raise first."""
    sweep = importlib.import_module("flows.mean_field.sweep")

    def batch_stub(config, eta_tau, steps, particles, data, test, save_every, *, labels, label_name):
        raise Reached({"labels": labels, "particles": particles})

    stubs = dict(
        train_gd_batch=batch_stub,
        init_particles=lambda c: c.seed,
        training_set=lambda c: c.seed,
        held_out_set=lambda c: c.seed,
    )
    with mock.patch.multiple(sweep, **stubs), pytest.raises(Reached) as info:
        mf.train_gd_seeds(CFG, 0.1, 3, seeds)
    assert info.value.inputs["labels"] == tuple(seeds) == tuple(info.value.inputs["particles"])
    bad = data.draw(
        st.one_of(
            st.just([]),
            st.just([1, 1]),
            st.just([-1]),
            st.just([0.5]),
            st.just(["a"]),
            st.just([math.nan]),
            st.just([2**64]),
            st.just([[1], [2, 3]]),
            st.none(),
        )
    )
    with mock.patch.multiple(sweep, **stubs), raises_naming("seeds"):
        mf.train_gd_seeds(CFG, 0.1, 3, bad)


@settings(ENTRY, max_examples=30)
@given(st.data())
def test_sample_prompts_and_particle_checks(tiny, data):
    particles, prompts, _, nodes = tiny
    assert mf.check_particles(CFG, particles).keys() == particles.keys()
    with raises_naming("n"):
        mf.sample_prompts(CFG, jax.random.PRNGKey(0), data.draw(bad_ints(1)))
    with raises_naming("particles"):
        mf.check_particles(CFG, _bad_particles(particles, data))
    with raises_naming("nodes"):
        mf.reference.check_nodes(CFG, _bad_particles(nodes, data))
    with raises_naming(data.draw(st.sampled_from(["data"]))):
        mf.risk(CFG, particles, _bad_prompts(prompts, data))


# --------------------------------------------------------------------------- boundary values, deterministic

_nonneg = [x for x in real_edges(0.0) if x is not None]
_pos = [x for x in real_edges(0.0, strict=True) if x is not None]
EDGES = {
    "Config": {
        **{k: [x for x in int_edges(low) if x is not None] for k, low in _INT_FIELDS.items()},
        "D": int_edges(1) + [1],
        "lam": _nonneg,
        "label_noise": _nonneg,
        "threshold": _pos,
        "init_scale": _pos,
        "seed": int_edges(0, SEED_MAX),
    },
    "solve_flow": {"dt": _pos, "rtol": real_edges(0.0, strict=True), "max_steps": int_edges(1)},
    "solve_reference": {"K": [x for x in int_edges(2) if x is not None] + [3], "substeps": int_edges(1), "dt": _pos},
    "solve_particles_sde": {
        "temperature": real_edges(0.0),
        "dt": real_edges(0.0, strict=True),
        "num_paths": [x for x in int_edges(1) if x is not None],
    },
    "train": {"lr": real_edges(0.0, strict=True), "steps": int_edges(1), "save_every": int_edges(1, None)},
    "sample_prompts": {"n": int_edges(1)},
}


@pytest.mark.parametrize("entry", sorted(EDGES))
def test_edges_raise_naming_the_field(tiny, stop_at_compile, entry):
    particles, data, test, nodes = tiny
    common = dict(data=data, test=test)

    def call(field, value):
        with stop_at_solvers(), stop_at_compile[0]:
            if entry == "Config":
                mf.Config(**{"d": 1, "D": 2, field: value})
            elif entry == "solve_flow":
                mf.solve_flow(CFG, [0.0, 1.0], particles=particles, **common, **{field: value})
            elif entry == "solve_reference":
                mf.solve_reference(CFG, [0.0, 1.0], nodes=nodes, **common, **{field: value})
            elif entry == "solve_particles_sde":
                kw = {"temperature": 0.1, "dt": 0.1, "seed": 0, field: value}
                mf.solve_particles_sde(CFG, [0.0, 1.0], particles=particles, **common, **kw)
            elif entry == "train":
                kw = {"lr": 0.1, "steps": 3, "save_every": 1, field: value}
                mf.train(CFG, "gd", kw["lr"], kw["steps"], kw["save_every"], particles=particles, **common)
            else:
                mf.sample_prompts(CFG, jax.random.PRNGKey(0), value)

    check_edges(EDGES[entry], call)
