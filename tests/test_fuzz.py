"""Property-based tests of the system-independent entry points: `flows.solve`, `flows.solve_batch`, the save
grids, `flows.solve_sde`, `RunRecord.add_prediction`, and the keywords every system's `train` and
`solve_flow` share (`seed`, `init`, `lr` a number or a dict per group, `save_every`, `batch_seed`, `momentum`;
docs/getting_started.md) (see tests/fuzzing.py for the rules).

Valid calls of the solvers run up to the solver stub (nothing is compiled); invalid ones must raise a
`ValueError` naming the field before it. The stub also checks that no NaN or inf reaches a solver.
"""

from __future__ import annotations

import importlib
import math
from contextlib import ExitStack, contextmanager
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flows
from flows import cooccurrence as co
from flows import mean_field as mf
from flows import scan_snap as ss
from flows.experiments.records import FAILS, HOLDS, NOT_TESTED, RunRecord
from tests.fuzzing import (
    ENTRY,
    ENTRY_FEW,
    FIELD,
    INT_MAX,
    SEED_MAX,
    Reached,
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
    stop_at_trainings,
)


def decay(t, y, args):
    return jax.tree_util.tree_map(jnp.negative, y)


_finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
#: floating states: arrays (float64 or float32) and small pytrees of them, every entry finite
good_states = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), elements=_finite),
    hnp.arrays(np.float32, st.integers(1, 3), elements=st.floats(-1e3, 1e3, width=32)),
    st.dictionaries(
        st.sampled_from(["a", "b"]), hnp.arrays(np.float64, st.integers(1, 3), elements=_finite), min_size=1
    ),
    _finite.map(jnp.float64),
)


@st.composite
def nonfinite_arrays(draw, dtype=np.float64):
    """A float array with at least one NaN or inf entry."""
    arr = draw(hnp.arrays(dtype, st.integers(1, 4), elements=st.floats(-10, 10, width=32)))
    arr[draw(st.integers(0, arr.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return arr


bad_states = st.one_of(
    nonfinite_arrays(),
    nonfinite_arrays().map(lambda a: {"a": np.ones(2), "b": a}),
    st.sampled_from([math.nan, math.inf]).map(jnp.float64),
    hnp.arrays(np.int64, st.integers(1, 3)),
    hnp.arrays(np.bool_, st.integers(1, 3)),
    st.just([[1.0], [1.0, 2.0]]),  # a ragged list (a list of numbers is a state: it becomes an array)
    st.just(np.array([1 + 1j])),
    st.text(min_size=1, max_size=3),
    st.none(),
    st.just({}),
)
good_args = st.one_of(
    st.none(),
    hnp.arrays(np.float64, st.integers(1, 3), elements=_finite),
    st.integers(-(2**63), 2**63 - 1),
    st.fixed_dictionaries({"k": _finite, "tokens": hnp.arrays(np.int32, 3), "mask": hnp.arrays(np.bool_, 3)}),
)
bad_args = st.one_of(
    nonfinite_arrays(),
    nonfinite_arrays().map(lambda a: {"rate": a}),
    st.sampled_from([math.nan, math.inf]),
    st.text(min_size=1, max_size=3),
    st.just({"f": object()}),
    st.integers(2**63, 2**80),
)


@st.composite
def good_solve_calls(draw):
    """Keyword arguments of a valid `flows.solve(decay, ...)` call."""
    t0 = draw(st.floats(-1e3, 1e3))
    t1 = t0 + draw(st.floats(1e-3, 1e3))
    ts = draw(st.one_of(st.none(), st.lists(st.floats(t0, t1), min_size=1, max_size=4).map(sorted)))
    kw = dict(
        t0=draw(st.sampled_from([t0, np.float64(t0)])),
        t1=t1,
        ts=ts,
        rtol=draw(good_reals(0.0, 1.0, strict=True)),
        atol=draw(good_reals(0.0, 1.0, strict=True)),
        max_steps=draw(good_ints(1)),
        solver=draw(st.sampled_from(["tsit5", "dopri5", "dopri8", "heun", "kvaerno5"])),
        blowup=draw(st.one_of(st.none(), good_reals(0.0, strict=True), st.just(math.inf))),
        dt0=draw(st.one_of(st.none(), good_reals(1e-6, 1.0))),
        save_states=True,
        progress=False,
        throw=draw(st.booleans()),
    )
    if draw(st.booleans()):  # constant steps: dt0 given and max_steps large enough
        kw.update(constant_step=True, dt0=(t1 - t0) / draw(st.integers(1, 1000)), max_steps=INT_MAX)
        kw["solver"] = draw(st.sampled_from(["euler", "heun", "tsit5"]))
    return kw


#: field -> strategy of invalid values for `flows.solve` (the other fields valid)
BAD_SOLVE = {
    "rtol": bad_reals(0.0, strict=True),
    "atol": bad_reals(0.0, strict=True),
    "t0": st.one_of(bad_reals(high=1.0, high_strict=True), st.just(np.array(0.0))),
    "t1": st.one_of(bad_reals(low=0.0, strict=True), st.just([1.0])),
    "max_steps": st.one_of(bad_ints(1).filter(lambda v: v is not None), st.just(3.0)),  # None: from the horizon
    "dt0": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
    "blowup": bad_reals(0.0, strict=True, finite=False).filter(lambda v: v is not None),
    "ts": st.one_of(
        st.just([0.0, 2.0]),
        st.just([0.5, 0.2]),
        st.just([[0.5]]),
        st.just([]),
        st.just(["a"]),
        st.just([math.nan]),
        st.just([1 + 1j]),
        st.just({"x": 1.0}),
        st.just("0.5"),
    ),
    "solver": bad_choices(["tsit5", "dopri5"]),
    "save_states": bad_bools(),
    "progress": bad_bools(),
    "throw": bad_bools(),
    "constant_step": bad_bools(),
    "observables": st.one_of(st.integers(), st.just({"a": 1})),
    "event": st.one_of(st.integers(), st.just(decay)),
    "y0": bad_states,
    "args": bad_args,
}


@settings(ENTRY, max_examples=60)
@given(good_solve_calls(), good_states, good_args)
def test_solve_valid_calls_reach_the_solver(kw, y0, args):
    with stop_at_solvers(), pytest.raises(Reached) as info:
        flows.solve(decay, y0, args=args, **kw)
    ts = np.asarray(info.value.inputs["ts"])
    want = [kw["t1"]] if kw["ts"] is None else kw["ts"]
    np.testing.assert_array_equal(ts, np.asarray(want, dtype=ts.dtype))  # save times in the state's dtype
    options = info.value.inputs["options"]
    assert options["rtol"] == float(kw["rtol"]) and options["max_steps"] == int(kw["max_steps"])


@pytest.mark.parametrize("field", sorted(BAD_SOLVE))
@FIELD
@given(data=st.data())
def test_solve_invalid_values_raise_naming_the_field(field, data):
    value = data.draw(BAD_SOLVE[field], label=field)
    if field == "constant_step" and value is True:  # a real bool is valid here
        return
    with raises_naming(field):
        _solve_with(field, value)


def _solve_with(field, value):
    """`flows.solve(decay, ...)` (up to the solver stub) with one field set to `value`."""
    kw = dict(t1=1.0, args=None, observables=None)
    y0 = jnp.ones(2)
    if field == "y0":
        y0 = value
    else:
        kw[field] = value
    with stop_at_solvers():
        flows.solve(decay, y0, **kw)


@settings(ENTRY, max_examples=40)
@given(st.integers(1, 3), st.data())
def test_solve_batch_rejects_a_nonfinite_member_before_the_solver(size, data):
    y0 = np.ones((size, 2))
    args = np.ones((size,))
    which = data.draw(st.sampled_from(["y0", "args"]))
    bad = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    (y0 if which == "y0" else args)[data.draw(st.integers(0, size - 1))] = bad
    with stop_at_solvers(), raises_naming(which):
        flows.solve_batch(decay, y0, t1=1.0, args=args, batch_y0=True)
    with stop_at_solvers(), pytest.raises(Reached):  # the same call with finite members reaches the solver
        flows.solve_batch(decay, np.ones((size, 2)), t1=1.0, args=np.ones((size,)), batch_y0=True)
    field = data.draw(st.sampled_from(["throw", "batch_y0", "batch_args"]))
    with stop_at_solvers(), raises_naming(field):
        flows.solve_batch(decay, np.ones((size, 2)), t1=1.0, args=np.ones((size,)), **{field: data.draw(bad_bools())})


@ENTRY
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6), good_ints(2, 500), st.data())
def test_grids_valid_and_invalid(t0, span, num, data):
    t1 = t0 + span
    span = t1 - t0  # the span the grids see (t0 + span - t0 may round away from span)
    lin = flows.linear_grid(t0, t1, num)
    assert lin.shape == (int(num),) and lin[0] == t0 and lin[-1] == t1 and np.all(np.diff(lin) >= 0)
    first = data.draw(st.one_of(st.none(), st.floats(1e-9 * span, 0.5 * span)))
    log = flows.log_grid(t0, t1, num, first=first)
    assert log.shape == (int(num),) and log[0] == t0 and log[-1] == t1 and np.all(np.diff(log) >= 0)
    field = data.draw(st.sampled_from(["t0", "t1", "num", "first"]))
    kw = dict(t0=t0, t1=t1, num=num)
    kw[field] = data.draw(
        {
            "t0": bad_reals(high=t1, high_strict=True),
            "t1": bad_reals(low=t0, strict=True),
            "num": bad_ints(2, integral_float=True),
            "first": bad_reals(0.0, span, strict=True, high_strict=True).filter(lambda v: v is not None),
        }[field]
    )
    with raises_naming(field):
        (flows.log_grid if field == "first" else data.draw(st.sampled_from([flows.linear_grid, flows.log_grid])))(
            kw["t0"], kw["t1"], kw["num"], **({"first": kw["first"]} if field == "first" else {})
        )


# --------------------------------------------------------------------------- solve_sde


@st.composite
def good_sde_calls(draw):
    t0 = draw(st.floats(-10, 10))
    t1 = t0 + draw(st.floats(1e-2, 10))
    dt = (t1 - t0) / draw(st.integers(1, 200))
    kw = dict(
        t0=t0,
        t1=t1,
        dt=dt,
        sigma=draw(good_reals(0.0, 1e3)),
        solver=draw(st.sampled_from(["euler", "heun", "sea", "sra1", "shark"])),
        tol=draw(st.one_of(st.none(), good_reals(0.0, 1.0, strict=True))),
        ts=draw(st.one_of(st.none(), st.lists(st.floats(t0, t1), min_size=1, max_size=3).map(sorted))),
        num_paths=draw(st.sampled_from([None, 1, 2])),
        save_states=True,
        throw=draw(st.booleans()),
    )
    kw["seed"] = draw(st.integers(-(2**63), SEED_MAX))
    return kw


BAD_SDE = {
    "dt": bad_reals(0.0, strict=True),
    "tol": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
    "sigma": st.one_of(
        st.just(-1.0),
        st.just(math.nan),
        st.just(1 + 1j),
        st.just(np.array([1.0, 2.0, 3.0])),
        st.booleans(),
        st.text(min_size=1, max_size=2),
        st.sampled_from([np.array([np.nan]), np.array([np.inf]), -np.inf]),
    ),
    "t1": bad_reals(low=0.0, strict=True),
    "t0": bad_reals(high=1.0, high_strict=True),
    "max_steps": st.one_of(st.integers(-5, 9), st.integers(INT_MAX + 1, 2**70), st.booleans(), st.just(20.0)),
    "seed": st.one_of(
        st.integers(SEED_MAX + 1, 2**80), st.integers(-(2**80), -(2**63) - 1), st.just(1.5), st.booleans()
    ),
    "num_paths": bad_ints(1).filter(lambda v: v is not None),
    "solver": bad_choices(["euler"]),
    "ts": st.one_of(st.just([2.0]), st.just([0.5, 0.1]), st.just(["a"]), st.just([1j])),
    "save_states": bad_bools(),
    "throw": bad_bools(),
    "y0": bad_states,
    "args": bad_args,
}


@settings(ENTRY, max_examples=40)  # each call splits keys and casts sigma on the device
@given(good_sde_calls(), good_states)
def test_solve_sde_valid_calls_reach_the_solver(kw, y0):
    with stop_at_solvers(), pytest.raises(Reached) as info:
        flows.solve_sde(decay, y0, **kw)
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(y0))
    assert np.asarray(info.value.inputs["dt"]) == np.asarray(kw["dt"], dtype)  # the step in the state's dtype
    keys = info.value.inputs["keys"]
    assert np.shape(keys) == (() if kw["num_paths"] is None else (kw["num_paths"],))


@pytest.mark.parametrize("field", sorted(BAD_SDE))
@FIELD
@given(data=st.data())
def test_solve_sde_invalid_values_raise_naming_the_field(field, data):
    with raises_naming(field):
        _solve_sde_with(field, data.draw(BAD_SDE[field], label=field))


def _solve_sde_with(field, value):
    kw = dict(sigma=0.1, t1=1.0, dt=0.1, seed=0)
    y0 = jnp.ones(2)
    if field == "y0":
        y0 = value
    else:
        kw[field] = value
    with stop_at_solvers():
        flows.solve_sde(decay, y0, **kw)


#: the boundary values of every numeric field, run deterministically (t1 = 1 in the base call)
EDGES = {
    "solve": {
        "rtol": real_edges(0.0, strict=True),
        "atol": real_edges(0.0, strict=True),
        "t0": real_edges(high=1.0, high_strict=True),
        "t1": real_edges(0.0, strict=True),
        "max_steps": int_edges(1),
        "dt0": [x for x in real_edges(0.0, strict=True) if x is not None],
        "blowup": [x for x in real_edges(0.0, strict=True, finite=False) if x is not None],
    },
    "solve_sde": {
        "dt": real_edges(0.0, strict=True),
        "tol": [x for x in real_edges(0.0, strict=True) if x is not None],
        "max_steps": [9, INT_MAX + 1, True, 10.0],
        "seed": [SEED_MAX + 1, -(2**63) - 1, True, 1.5],
        "num_paths": [x for x in int_edges(1) if x is not None],
        "sigma": [-1e-300, math.nan, math.inf, 1j],
    },
}


@pytest.mark.parametrize("entry", sorted(EDGES))
def test_edges_raise_naming_the_field(entry):
    check_edges(EDGES[entry], _solve_with if entry == "solve" else _solve_sde_with)


# --------------------------------------------------------------------------- RunRecord.add_prediction

_names = st.text(min_size=1, max_size=12).filter(str.strip)
_measured = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**60), 2**60),
    st.none(),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4),
    hnp.arrays(np.float64, st.integers(0, 3)),
    st.booleans(),
    st.text(max_size=5),
)


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    return RunRecord(tmp_path_factory.mktemp("fuzz_record"), name="fuzz", config={"a": 1}, seed=0)


@ENTRY
@given(
    _names,
    _measured,
    st.text(max_size=20),
    st.one_of(st.booleans(), st.just(np.bool_(True)), st.just(jnp.asarray(False)), st.just(np.array([True]))),
    st.data(),
)
def test_add_prediction_valid_and_invalid(record, name, measured, expected, holds, data):
    record.add_prediction(name, measured, expected, holds, tol=0.1)
    entry = record._metrics[name]
    assert entry["holds"] is bool(np.asarray(holds).reshape(())) and entry["verdict"] in (HOLDS, FAILS)
    assert entry["tol"] == 0.1
    record.add_prediction(name, measured, expected, None, tested_at="the full run")
    assert record._metrics[name]["verdict"] == NOT_TESTED
    field = data.draw(st.sampled_from(["holds", "expected", "name", "measured", "tested_at", "tol"]))
    call = dict(name=name, measured=measured, expected=expected, holds=holds)
    extra = {}
    if field == "holds":
        call["holds"] = data.draw(
            st.one_of(
                st.floats(),
                st.integers(),
                st.text(max_size=3),
                st.just([True, False]),
                st.just(np.array([True, False])),
            )
        )
    elif field == "expected":
        call["expected"] = data.draw(st.one_of(st.floats(), st.none(), st.just(["x"])))
    elif field == "name":
        call["name"] = data.draw(st.one_of(st.just(""), st.just("  "), st.integers(), st.none()))
    elif field == "measured":
        call["measured"] = object()
    elif field == "tested_at":
        call.update(holds=None)
        extra["tested_at"] = data.draw(st.one_of(st.none(), st.just(""), st.integers()))
    else:
        extra["tol"] = object()
    with raises_naming(field):
        record.add_prediction(call["name"], call["measured"], call["expected"], call["holds"], **extra)


# --------------------------------------------------------------------------- the keywords the three systems share

SS_CLASSES = ss.syn_small()
CO_TINY = co.Config(n=6, L=3, d=3 + co.num_random_slots(6, 3), m=2, m1=2)
MF_TINY = mf.Config(d=1, D=2, N=1, L=1, M=2, M_mlp=2, n_train=2, n_test=2)
#: the parameter groups of `lr={...}` in each system
LR_GROUPS = {"scan_snap": ("Y", "Z"), "cooccurrence": ("W", "W_V", "W_K", "W_Q"), "mean_field": ("attention", "mlp")}
_SEED_HIGH = {"scan_snap": 2**32 - 1, "cooccurrence": SEED_MAX, "mean_field": SEED_MAX}
_INITS = {"scan_snap": ("zero", "random"), "cooccurrence": ("theory", "kaiming"), "mean_field": mf.INITS}
#: the optimisers with heavy-ball momentum, and one without it
_MOMENTUM = {"scan_snap": ("sgd", "adam"), "cooccurrence": ("sgd", "gd"), "mean_field": ("sgd", "gd")}
#: which shared keywords each system's train takes (batch_seed: the minibatch order, co-occurrence only)
SHARED_TRAIN = {
    "scan_snap": ("seed", "init", "lr", "save_every", "momentum"),
    "cooccurrence": ("seed", "init", "lr", "save_every", "batch_seed", "momentum"),
    "mean_field": ("seed", "init", "lr", "save_every", "momentum"),
}


@contextmanager
def mean_field_draws():
    """The mean field's particle and prompt draws replaced by numpy arrays of `MF_TINY`'s shapes (the jax.random
    draws would compile a few programs); the configs they are drawn for are collected in the yielded list."""
    seen = []
    rng = np.random.default_rng(0)
    dtype = np.dtype(jnp.result_type(float))
    L, M, Mm, D, N = MF_TINY.L, MF_TINY.M, MF_TINY.M_mlp, MF_TINY.D, MF_TINY.N
    shapes = {"V": (L, M, D, D), "W": (L, M, D, D), "W1": (L, Mm, D), "W2": (L, Mm, D)}
    particles = {k: rng.uniform(-0.5, 0.5, v).astype(dtype) for k, v in shapes.items()}
    prompts = mf.Prompts(rng.uniform(-1, 1, (2, D, N + 1)).astype(dtype), rng.uniform(-1, 1, 2).astype(dtype))

    def draw_particles(config):
        seen.append(config)
        return particles

    stubs = dict(
        init_particles=draw_particles, training_set=lambda config: prompts, held_out_set=lambda config: prompts
    )
    with ExitStack() as stack:
        for name in ("flows.mean_field.spec", "flows.mean_field.network", "flows.mean_field.flow"):  # the draws
            module = importlib.import_module(name)
            present = {k: v for k, v in stubs.items() if hasattr(module, k)}
            if present:
                stack.enter_context(mock.patch.multiple(module, **present))
        yield seen


def _lr(system):
    rate = good_reals(1e-6, 1e3)
    return st.one_of(rate, st.fixed_dictionaries({k: rate for k in LR_GROUPS[system]}))


@st.composite
def _bad_lr(draw, system):
    """A bad rate, or a dict of rates with a bad value, a missing group or an unknown group."""
    groups = LR_GROUPS[system]
    kind = draw(st.sampled_from(["number", "value", "missing", "extra"]))
    if kind == "number":
        return draw(bad_reals(0.0, strict=True))
    lr = {k: 0.1 for k in groups}
    if kind == "value":
        lr[draw(st.sampled_from(groups))] = draw(bad_reals(0.0, strict=True))
    elif kind == "missing":
        lr.pop(draw(st.sampled_from(groups)))
    else:
        lr["b"] = 0.1
    return lr


@st.composite
def good_train_calls(draw, system):
    """Valid shared keywords of `system`'s train (the other arguments small and fixed)."""
    heavy, plain = _MOMENTUM[system]
    optimizer = draw(st.sampled_from([heavy, plain]))
    kw = dict(
        optimizer=optimizer,
        lr=draw(_lr(system)),
        steps=draw(good_ints(1, 10**6)),
        save_every=draw(good_ints(1, 10**7)),
        seed=draw(st.one_of(good_ints(0, _SEED_HIGH[system]), st.none() if system != "scan_snap" else st.nothing())),
        init=draw(st.sampled_from(_INITS[system] + ((None,) if system != "scan_snap" else ()))),
    )
    if optimizer == heavy:
        kw["momentum"] = draw(good_reals(0.0, 1.0, high_strict=True))
    if system == "cooccurrence":
        kw["batch_seed"] = draw(st.one_of(st.none(), good_ints(0, 2**32 - 1)))
        kw["batch_size"] = 3 if optimizer == "sgd" else None
    return kw


def _train(system, kw):
    if system == "scan_snap":
        return ss.train(SS_CLASSES, T=4, batch_size=2, **kw)
    if system == "cooccurrence":
        return co.train(CO_TINY, num_test=2, **kw)
    return mf.train(MF_TINY, observables="basic", **kw)


def _check_reached(system, kw, inputs, seen):
    """What reached the compile (the call of `flows.training.run_training`) is what was asked for."""
    params, opt_state, keys, increments, *_ = inputs["call"]
    increments = np.asarray(increments)
    assert increments.sum() == int(kw["steps"]) and np.all(increments >= 1)
    assert increments.size == -(-int(kw["steps"]) // int(kw["save_every"]))  # ceil(steps / save_every)
    if system == "scan_snap":
        lr = kw["lr"] if isinstance(kw["lr"], dict) else {"Y": kw["lr"], "Z": kw["lr"]}
        rates = {
            path[1].key: float(v) for path, v in optax.tree_utils.tree_get_all_with_path(opt_state, "learning_rate")
        }
        np.testing.assert_allclose([rates["Y"], rates["Z"]], [lr["Y"], lr["Z"]], rtol=1e-6)
        assert np.asarray(keys).shape[0] == int(kw["steps"])  # one batch key per step
        assert bool(np.all(np.asarray(params["Z"]) == 0)) == (kw["init"] == "zero")
    if system == "mean_field":
        config = seen[-1]
        assert config.seed == (MF_TINY.seed if kw["seed"] is None else int(kw["seed"]))
        assert config.init == (MF_TINY.init if kw["init"] is None else kw["init"])


def _bad_train_value(system, field, data):
    """(value, optimizer) for one bad shared keyword; `optimizer` is None or the one to use (momentum with an
    optimizer that has none is bad too)."""
    heavy, plain = _MOMENTUM[system]
    if field == "seed":
        return data.draw(bad_ints(0, _SEED_HIGH[system]).filter(lambda v: v is not None), label=field), None
    if field == "init":
        return data.draw(bad_choices(_INITS[system]).filter(lambda v: v is not None), label=field), None
    if field == "lr":
        return data.draw(_bad_lr(system), label=field), None
    if field == "save_every":
        return data.draw(bad_ints(1, None), label=field), None
    if field == "batch_seed":
        return data.draw(bad_ints(0, 2**32 - 1).filter(lambda v: v is not None), label=field), None
    if data.draw(st.booleans(), label="momentum with an optimizer without it"):
        return data.draw(good_reals(0.0, 1.0, strict=True, high_strict=True), label=field), plain
    bad = bad_reals(0.0, 1.0, high_strict=True)
    return data.draw(bad.filter(lambda v: v is not None) if system == "cooccurrence" else bad, label=field), heavy


@pytest.mark.parametrize("system, field", [(s, f) for s in SHARED_TRAIN for f in SHARED_TRAIN[s]])
@settings(ENTRY, max_examples=2)  # x 16 (system, field) pairs; nothing compiles
@given(data=st.data())
def test_shared_train_keywords_valid_and_invalid(system, field, data):
    kw = data.draw(good_train_calls(system), label="valid call")
    with stop_at_trainings(), mean_field_draws() as seen, pytest.raises(Reached) as info:
        _train(system, kw)
    _check_reached(system, kw, info.value.inputs, seen)
    value, optimizer = _bad_train_value(system, field, data)
    kw[field] = value
    if optimizer is not None:
        kw["optimizer"] = optimizer
        if system == "cooccurrence":
            kw["batch_size"] = 3 if optimizer == "sgd" else None
    with stop_at_trainings(), mean_field_draws(), raises_naming("lr") if field == "lr" else raises_naming(field):
        _train(system, kw)


def _solve_flow(system, seed, init):
    if system == "scan_snap":
        return ss.solve_flow(SS_CLASSES, 1.0, 1.0, [0.0, 1.0], seed=seed, init=init)
    if system == "cooccurrence":
        return co.solve_flow(CO_TINY, [0.0, 1.0], seed=seed, init=init, num_test=2)
    return mf.solve_flow(MF_TINY, [0.0, 1.0], seed=seed, init=init, observables="basic")


@pytest.mark.parametrize("system, field", [(s, f) for s in SHARED_TRAIN for f in ("seed", "init")])
@settings(ENTRY_FEW, max_examples=4)
@given(data=st.data())
def test_shared_solve_flow_keywords_valid_and_invalid(system, field, data):
    optional = st.none() if system != "scan_snap" else st.nothing()
    seed = data.draw(st.one_of(good_ints(0, _SEED_HIGH[system]), optional), label="seed")
    init = data.draw(st.one_of(st.sampled_from(_INITS[system]), optional), label="init")
    with stop_at_solvers(), mean_field_draws() as seen, pytest.raises(Reached):
        _solve_flow(system, seed, init)
    if system == "mean_field":
        assert seen[-1].seed == (MF_TINY.seed if seed is None else int(seed))
        assert seen[-1].init == (MF_TINY.init if init is None else init)
    bad = bad_ints(0, _SEED_HIGH[system]) if field == "seed" else bad_choices(_INITS[system])
    value = data.draw(bad.filter(lambda v: v is not None), label=field)
    with stop_at_solvers(), mean_field_draws(), raises_naming(field):
        _solve_flow(system, **{"seed": seed, "init": init, field: value})
