"""Property-based tests of the system-independent entry points: `flows.solve`, `flows.solve_batch`, the save
grids, `flows.solve_sde` and `RunRecord.add_prediction` (see tests/fuzzing.py for the rules).

Valid calls of the solvers run up to the solver stub (nothing is compiled); invalid ones must raise a
`ValueError` naming the field before it. The stub also checks that no NaN or inf reaches a solver.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import flows
from flows.records import FAILS, HOLDS, NOT_TESTED, RunRecord
from tests.fuzzing import (
    ENTRY,
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
)


def decay(t, y, args):
    return -y


_finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
#: floating states: arrays (float64 or float32) and small pytrees of them, every entry finite
good_states = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), elements=_finite),
    hnp.arrays(np.float32, st.integers(1, 3), elements=st.floats(-1e3, 1e3, width=32)),
    st.dictionaries(st.sampled_from(["a", "b"]), hnp.arrays(np.float64, st.integers(1, 3), elements=_finite),
                    min_size=1),
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
    hnp.arrays(np.int64, st.integers(1, 3)), hnp.arrays(np.bool_, st.integers(1, 3)),
    st.just([[1.0], [1.0, 2.0]]),  # a ragged list (a list of numbers is a state: it becomes an array)
    st.just(np.array([1 + 1j])), st.text(min_size=1, max_size=3), st.none(), st.just({}),
)
good_args = st.one_of(
    st.none(), hnp.arrays(np.float64, st.integers(1, 3), elements=_finite), st.integers(-2**63, 2**63 - 1),
    st.fixed_dictionaries({"k": _finite, "tokens": hnp.arrays(np.int32, 3), "mask": hnp.arrays(np.bool_, 3)}),
)
bad_args = st.one_of(nonfinite_arrays(), nonfinite_arrays().map(lambda a: {"rate": a}),
                     st.sampled_from([math.nan, math.inf]), st.text(min_size=1, max_size=3),
                     st.just({"f": object()}), st.integers(2**63, 2**80))


@st.composite
def good_solve_calls(draw):
    """Keyword arguments of a valid `flows.solve(decay, ...)` call."""
    t0 = draw(st.floats(-1e3, 1e3))
    t1 = t0 + draw(st.floats(1e-3, 1e3))
    ts = draw(st.one_of(st.none(), st.lists(st.floats(t0, t1), min_size=1, max_size=4).map(sorted)))
    kw = dict(t0=draw(st.sampled_from([t0, np.float64(t0)])), t1=t1, ts=ts,
              rtol=draw(good_reals(0.0, 1.0, strict=True)), atol=draw(good_reals(0.0, 1.0, strict=True)),
              max_steps=draw(good_ints(1)), solver=draw(st.sampled_from(["tsit5", "dopri5", "dopri8", "heun",
                                                                          "kvaerno5"])),
              blowup=draw(st.one_of(st.none(), good_reals(0.0, strict=True), st.just(math.inf))),
              dt0=draw(st.one_of(st.none(), good_reals(1e-6, 1.0))),
              save_states=True, progress=False, throw=draw(st.booleans()))
    if draw(st.booleans()):  # constant steps: dt0 given and max_steps large enough
        kw.update(constant_step=True, dt0=(t1 - t0) / draw(st.integers(1, 1000)), max_steps=INT_MAX)
        kw["solver"] = draw(st.sampled_from(["euler", "heun", "tsit5"]))
    return kw


#: field -> strategy of invalid values for `flows.solve` (the other fields valid)
BAD_SOLVE = {
    "rtol": bad_reals(0.0, strict=True), "atol": bad_reals(0.0, strict=True),
    "t0": st.one_of(bad_reals(high=1.0, high_strict=True), st.just(np.array(0.0))),
    "t1": st.one_of(bad_reals(low=0.0, strict=True), st.just([1.0])),
    "max_steps": st.one_of(bad_ints(1), st.just(3.0)),
    "dt0": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
    "blowup": bad_reals(0.0, strict=True, finite=False).filter(lambda v: v is not None),
    "ts": st.one_of(st.just([0.0, 2.0]), st.just([0.5, 0.2]), st.just([[0.5]]), st.just([]), st.just(["a"]),
                    st.just([math.nan]), st.just([1 + 1j]), st.just({"x": 1.0}), st.just("0.5")),
    "solver": bad_choices(["tsit5", "dopri5"]), "save_states": bad_bools(), "progress": bad_bools(),
    "throw": bad_bools(), "constant_step": bad_bools(), "observables": st.one_of(st.integers(), st.just({"a": 1})),
    "event": st.one_of(st.integers(), st.just(decay)), "y0": bad_states, "args": bad_args,
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
    lin = flows.linear_grid(t0, t1, num)
    assert lin.shape == (int(num),) and lin[0] == t0 and lin[-1] == t1 and np.all(np.diff(lin) >= 0)
    first = data.draw(st.one_of(st.none(), st.floats(1e-9 * span, 0.5 * span)))
    log = flows.log_grid(t0, t1, num, first=first)
    assert log.shape == (int(num),) and log[0] == t0 and log[-1] == t1 and np.all(np.diff(log) >= 0)
    field = data.draw(st.sampled_from(["t0", "t1", "num", "first"]))
    kw = dict(t0=t0, t1=t1, num=num)
    kw[field] = data.draw({"t0": bad_reals(high=t1, high_strict=True), "t1": bad_reals(low=t0, strict=True),
                           "num": bad_ints(2, integral_float=True),
                           "first": bad_reals(0.0, span, strict=True, high_strict=True).filter(lambda v: v is not None)
                           }[field])
    with raises_naming(field):
        (flows.log_grid if field == "first" else data.draw(st.sampled_from([flows.linear_grid, flows.log_grid])))(
            kw["t0"], kw["t1"], kw["num"], **({"first": kw["first"]} if field == "first" else {}))


# --------------------------------------------------------------------------- solve_sde

@st.composite
def good_sde_calls(draw):
    t0 = draw(st.floats(-10, 10))
    t1 = t0 + draw(st.floats(1e-2, 10))
    dt = (t1 - t0) / draw(st.integers(1, 200))
    kw = dict(t0=t0, t1=t1, dt=dt, sigma=draw(good_reals(0.0, 1e3)),
              solver=draw(st.sampled_from(["euler", "heun", "sea", "sra1", "shark"])),
              tol=draw(st.one_of(st.none(), good_reals(0.0, 1.0, strict=True))),
              ts=draw(st.one_of(st.none(), st.lists(st.floats(t0, t1), min_size=1, max_size=3).map(sorted))),
              num_paths=draw(st.sampled_from([None, 1, 2])), save_states=True, throw=draw(st.booleans()))
    kw["seed"] = draw(st.integers(-2**63, SEED_MAX))
    return kw


BAD_SDE = {
    "dt": bad_reals(0.0, strict=True), "tol": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
    "sigma": st.one_of(st.just(-1.0), st.just(math.nan), st.just(1 + 1j), st.just(np.array([1.0, 2.0, 3.0])),
                       st.booleans(), st.text(min_size=1, max_size=2),
                       st.sampled_from([np.array([np.nan]), np.array([np.inf]), -np.inf])),
    "t1": bad_reals(low=0.0, strict=True), "t0": bad_reals(high=1.0, high_strict=True),
    "max_steps": st.one_of(st.integers(-5, 9), st.integers(INT_MAX + 1, 2**70), st.booleans(), st.just(20.0)),
    "seed": st.one_of(st.integers(SEED_MAX + 1, 2**80), st.integers(-2**80, -2**63 - 1), st.just(1.5), st.booleans()),
    "num_paths": bad_ints(1).filter(lambda v: v is not None), "solver": bad_choices(["euler"]),
    "ts": st.one_of(st.just([2.0]), st.just([0.5, 0.1]), st.just(["a"]), st.just([1j])),
    "save_states": bad_bools(), "throw": bad_bools(), "y0": bad_states, "args": bad_args,
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
    "solve": {"rtol": real_edges(0.0, strict=True), "atol": real_edges(0.0, strict=True),
              "t0": real_edges(high=1.0, high_strict=True), "t1": real_edges(0.0, strict=True),
              "max_steps": int_edges(1), "dt0": [x for x in real_edges(0.0, strict=True) if x is not None],
              "blowup": [x for x in real_edges(0.0, strict=True, finite=False) if x is not None]},
    "solve_sde": {"dt": real_edges(0.0, strict=True), "tol": [x for x in real_edges(0.0, strict=True) if x is not None],
                  "max_steps": [9, INT_MAX + 1, True, 10.0], "seed": [SEED_MAX + 1, -2**63 - 1, True, 1.5],
                  "num_paths": [x for x in int_edges(1) if x is not None], "sigma": [-1e-300, math.nan, math.inf, 1j]},
}


@pytest.mark.parametrize("entry", sorted(EDGES))
def test_edges_raise_naming_the_field(entry):
    check_edges(EDGES[entry], _solve_with if entry == "solve" else _solve_sde_with)


# --------------------------------------------------------------------------- RunRecord.add_prediction

_names = st.text(min_size=1, max_size=12).filter(str.strip)
_measured = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**60, 2**60), st.none(),
                      st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=4),
                      hnp.arrays(np.float64, st.integers(0, 3)), st.booleans(), st.text(max_size=5))


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    return RunRecord(tmp_path_factory.mktemp("fuzz_record"), name="fuzz", config={"a": 1}, seed=0)


@ENTRY
@given(_names, _measured, st.text(max_size=20), st.one_of(st.booleans(), st.just(np.bool_(True)),
                                                          st.just(jnp.asarray(False)), st.just(np.array([True]))),
       st.data())
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
        call["holds"] = data.draw(st.one_of(st.floats(), st.integers(), st.text(max_size=3), st.just([True, False]),
                                            st.just(np.array([True, False]))))
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
