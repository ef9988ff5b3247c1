"""Property-based tests of the co-occurrence system: `Config`, `spec.data`, `initial_state`, `solve_flow`, `train`
(rules in tests/fuzzing.py). `solve_flow` runs up to the solver stub; `train` up to its `jax.jit`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows import cooccurrence as co
from tests.fuzzing import (
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

_SIGMA = st.one_of(st.none(), good_reals(0.0, 1e300, strict=True))


@st.composite
def config_fields(draw, small=False):
    """The keyword arguments of a valid `Config` (with `small`, sizes cheap to build data for)."""
    variant = draw(st.sampled_from(["theory", "paper"]))
    if small:  # few shapes: each new one costs eager device work (transfers, casts) on its first use
        n, L, m, m1 = 6, 3, draw(st.sampled_from([1, 2])), 2
    else:
        # theory data need d >= 3 + num_random_slots(n, L) <= INT_MAX: bounded n, L for that variant
        n = 6 * draw(st.integers(1, 1000 if variant == "theory" else INT_MAX // 6))
        L = draw(good_ints(3, 1000 if variant == "theory" else INT_MAX))
        m, m1 = draw(good_ints(1)), draw(good_ints(1))
    need = 3 + co.num_random_slots(int(n), int(L)) if variant == "theory" else 4
    d = draw(st.integers(need, need + 1 if small else INT_MAX))
    return dict(
        n=n,
        L=L,
        d=d,
        m=m,
        m1=m1,
        sigma0=draw(_SIGMA),
        sigma1=draw(_SIGMA),
        variant=variant,
        seed=draw(good_ints(0, SEED_MAX)),
        init=draw(st.sampled_from(["theory", "kaiming"])),
    )


_BAD_CONFIG = {
    "n": bad_ints(6),
    "d": bad_ints(4),
    "L": bad_ints(3),
    "m": bad_ints(1),
    "m1": bad_ints(1),
    "seed": bad_ints(0, SEED_MAX),
    "sigma0": bad_reals(0.0, strict=True).filter(lambda v: v is not None),
    "init": bad_choices(["theory", "kaiming"]),
    "variant": bad_choices(["theory", "paper"]),
}
_BAD_CONFIG["sigma1"] = _BAD_CONFIG["sigma0"]


def _bad_config_value(field, fields, data):
    """An invalid value of one Config field, given the other (valid) fields."""
    if field == "n" and data.draw(st.booleans()):  # not a multiple of 6
        return 6 * data.draw(st.integers(1, 10**6)) + data.draw(st.integers(1, 5))
    if field == "d" and data.draw(st.booleans()):  # too small for the data variant
        need = 3 + co.num_random_slots(int(fields["n"]), int(fields["L"])) if fields["variant"] == "theory" else 4
        return data.draw(st.integers(-5, need - 1))
    return data.draw(_BAD_CONFIG[field], label=field)


@pytest.mark.parametrize("field", ["n", "L", "d", "m", "m1", "sigma0", "sigma1", "variant", "seed", "init"])
@FIELD
@given(fields=config_fields(), data=st.data())
def test_config_valid_and_invalid_values(field, fields, data):
    cfg = co.Config(**fields)
    for k, v in fields.items():
        if v is not None:  # the init stds are stored as floats
            assert getattr(cfg, k) == (float(v) if k in ("sigma0", "sigma1") else v)
    s0, s1 = cfg.init_stds
    assert 0 < s0 < math.inf and 0 < s1 < math.inf
    if fields["sigma0"] is None and fields["init"] == "theory":
        assert s0 == pytest.approx(1 / math.sqrt(int(fields["L"]) * int(fields["m"])), rel=1e-15)
    assert sum(cfg.group_sizes) == cfg.n
    # the same fields with one of them invalid
    fields[field] = _bad_config_value(field, fields, data)
    with raises_naming(field):
        co.Config(**fields)


# --------------------------------------------------------------------------- spec.data, initial_state

TINY = co.Config(n=6, L=3, d=3 + co.num_random_slots(6, 3), m=2, m1=2)
_bad_dtypes = st.one_of(
    st.sampled_from([jnp.int32, np.bool_, "int64", "complex128", "not a dtype", 3, 1.5, True]),
    st.just(np.zeros(2)),
    st.just([1]),
)


@ENTRY_FEW
@given(st.sampled_from([1, 5]), st.sampled_from([None, jnp.float64, np.float32, "float64"]), st.data())
def test_data_and_initial_state(num_test, dtype, data):
    args = co.spec.data(TINY, num_test=num_test)
    assert args["test_tokens"].shape == (num_test, TINY.L) and args["labels"].dtype == np.float64
    assert float(args["sqrt_m"]) == pytest.approx(math.sqrt(TINY.m), rel=1e-15)
    np.testing.assert_array_equal(args["a"], co.init_params(TINY)[1])
    want = np.dtype(dtype or jnp.float64)
    state = co.initial_state(TINY, dtype=dtype)
    assert all(v.dtype == want and np.all(np.isfinite(v)) for v in state.values())
    if data.draw(st.booleans(), label="bad num_test"):
        with raises_naming("num_test"):
            co.spec.data(TINY, num_test=data.draw(bad_ints(1)))
        return
    with raises_naming("dtype"):
        co.initial_state(TINY, dtype=data.draw(_bad_dtypes))


def test_initial_state_overflow_names_the_init_scales():
    cfg = co.Config(n=6, L=3, d=TINY.d, m=2, m1=2, sigma0=1e300)
    with raises_naming("sigma0"):
        co.initial_state(cfg)
    with stop_at_solvers(), raises_naming("sigma1"):
        co.solve_flow(co.Config(n=6, L=3, d=TINY.d, m=2, m1=2, sigma1=1e200), [0.0, 1.0])


# --------------------------------------------------------------------------- solve_flow


@pytest.fixture(scope="module")
def tiny_state():
    return co.initial_state(TINY)


@st.composite
def flow_calls(draw):
    horizon = draw(st.floats(1e-6, 1e6))
    ts = [0.0] + sorted(draw(st.lists(st.floats(0.0, horizon), min_size=0, max_size=3))) + [horizon]
    return dict(
        ts=ts,
        solver=draw(st.sampled_from(["tsit5", "dopri5", "dopri8"])),
        rtol=draw(good_reals(0.0, 1e-2, strict=True)),
        atol=draw(good_reals(0.0, 1e-2, strict=True)),
        max_steps=draw(good_ints(1)),
        locate_T1=draw(st.booleans()),
        save_states=draw(st.booleans()),
        num_test=draw(st.sampled_from([1, 5])),
        throw=draw(st.booleans()),
    )


@ENTRY_FEW
@given(config_fields(small=True), flow_calls())
def test_solve_flow_valid_calls_reach_the_solver(fields, kw):
    cfg = co.Config(**{**fields, "sigma0": None, "sigma1": None})
    with stop_at_solvers(), pytest.raises(Reached) as info:
        co.solve_flow(cfg, **kw)
    y0, args = info.value.inputs["y0"], info.value.inputs["args"]["field"]  # the Gram flow's args: the data
    assert y0["G"].shape == (cfg.d,) and y0["A"].shape == (cfg.d, cfg.d)
    assert args["test_tokens"].shape == (kw["num_test"], cfg.L)
    np.testing.assert_array_equal(np.asarray(info.value.inputs["ts"]), np.asarray(kw["ts"]))
    assert (info.value.inputs["options"]["event"] is not None) == kw["locate_T1"]


def _nan_state(state, data):
    key = data.draw(st.sampled_from(sorted(state)))
    arr = np.array(state[key])
    arr.reshape(-1)[data.draw(st.integers(0, arr.size - 1))] = data.draw(st.sampled_from([np.nan, np.inf]))
    return {**state, key: arr}


@pytest.mark.parametrize(
    "field",
    ["ts", "y0", "reduced", "solver", "rtol", "atol", "max_steps", "locate_T1", "save_states", "num_test", "throw"],
)
@FIELD
@given(data=st.data())
def test_solve_flow_invalid_values_raise_naming_the_field(tiny_state, field, data):
    state = tiny_state
    bad = {
        "ts": st.one_of(
            st.just([0.0]),
            st.just([0.5, 1.0]),
            st.just([0.0, 2.0, 1.0]),
            st.just([0.0, math.inf]),
            st.just([0.0, math.nan]),
            st.just([[0.0, 1.0]]),
            st.just(["0", "a"]),
            st.just(1.0),
        ),
        "y0": st.one_of(st.just("nan"), st.just({"G": state["G"]}), st.just([1.0, 2.0]), st.just(np.ones(3))),
        "reduced": bad_choices(["gram", "three_token", "phase2"]).filter(lambda v: v is not None),
        "solver": bad_choices(["tsit5"]),
        "rtol": bad_reals(0.0, strict=True),
        "atol": bad_reals(0.0, strict=True),
        "max_steps": bad_ints(1).filter(lambda v: v is not None),  # None: from the horizon
        "locate_T1": bad_bools(),
        "save_states": bad_bools(),
        "throw": bad_bools(),
        "num_test": bad_ints(1),
    }[field]
    kw = dict(ts=[0.0, 1.0], y0=state, num_test=4)
    if field == "reduced":
        kw.pop("y0")
    kw[field] = data.draw(bad, label=field)
    if field == "y0" and isinstance(kw[field], str) and kw[field] == "nan":  # one NaN or inf entry in the state
        kw["y0"] = _nan_state(state, data)
    with stop_at_solvers(), raises_naming(field):
        co.solve_flow(TINY, **kw)


# --------------------------------------------------------------------------- train


class _StopAtTrainings:
    """A reusable `with`: `fuzzing.stop_at_trainings()` (train stops at its compile, whichever path it takes)."""

    def __enter__(self):
        self._cm = stop_at_trainings()
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


@pytest.fixture(scope="module")
def stop_at_jit():
    return _StopAtTrainings()


@st.composite
def train_calls(draw):
    optimizer = draw(st.sampled_from(["gd", "sgd", "adam"]))
    steps = draw(good_ints(1, 10**6))
    kw = dict(
        optimizer=optimizer,
        lr=draw(good_reals(0.0, 1e3, strict=True)),
        steps=steps,
        batch_size=None
        if optimizer == "gd"
        else draw(st.one_of(st.none() if optimizer == "adam" else st.nothing(), st.integers(1, TINY.n))),
        momentum=draw(st.one_of(st.none(), good_reals(0.0, 1.0, high_strict=True))) if optimizer == "sgd" else None,
        num_test=4,
        batch_seed=draw(st.one_of(st.none(), st.integers(0, 2**32 - 1))),
    )
    if draw(st.booleans()):
        kw["save_steps"] = draw(st.lists(st.integers(0, int(steps)), min_size=1, max_size=5))
    else:
        kw["save_every"] = draw(good_ints(1, 10**7))
    return kw


@ENTRY_FEW
@given(train_calls())
def test_train_valid_calls_reach_the_compile(stop_at_jit, kw):
    with stop_at_jit, pytest.raises(Reached):
        co.train(TINY, **kw)


@pytest.mark.parametrize(
    "field",
    ["optimizer", "lr", "steps", "batch_size", "save_every", "save_steps", "momentum", "num_test", "batch_seed"],
)
@FIELD
@given(data=st.data())
def test_train_invalid_values_raise_naming_the_field(stop_at_jit, field, data):
    kw = dict(optimizer="sgd", batch_size=3, steps=10)
    bad = {
        "optimizer": bad_choices(["gd", "sgd", "adam"]),
        "lr": bad_reals(0.0, strict=True),
        "steps": bad_ints(1),
        "batch_size": st.one_of(bad_ints(1, TINY.n).filter(lambda v: v is not None), st.integers(TINY.n + 1, 10**6)),
        "save_every": bad_ints(1, None),
        "momentum": bad_reals(0.0, 1.0, high_strict=True).filter(lambda v: v is not None),
        "save_steps": st.one_of(
            st.just([-1]),
            st.just([11]),
            st.just([1.5]),
            st.just([]),
            st.just(["a"]),
            st.just([math.nan]),
            st.just([[1, 2], [3]]),
            st.just(True),
        ),
        "num_test": bad_ints(1),
        "batch_seed": bad_ints(0, 2**32 - 1).filter(lambda v: v is not None),
    }
    kw[field] = data.draw(bad[field], label=field)
    with stop_at_jit, raises_naming(field):
        co.train(TINY, **kw)


# --------------------------------------------------------------------------- boundary values, deterministic

_BASE_CONFIG = dict(n=6, L=3, d=TINY.d, m=2, m1=2)
EDGES = {
    "Config": {
        "n": int_edges(6) + [7, 12 + 3],
        "L": int_edges(3),
        "d": int_edges(4) + [TINY.d - 1],
        "m": int_edges(1),
        "m1": int_edges(1),
        "seed": int_edges(0, SEED_MAX),
        "sigma0": [x for x in real_edges(0.0, strict=True) if x is not None],
        "sigma1": [x for x in real_edges(0.0, strict=True) if x is not None],
    },
    "train": {
        "lr": real_edges(0.0, strict=True),
        "steps": int_edges(1),
        "batch_size": [0, TINY.n + 1, True, 1.5],
        "save_every": int_edges(1, None),
        "momentum": [x for x in real_edges(0.0, 1.0, high_strict=True) if x is not None],
        "num_test": int_edges(1),
    },
    "solve_flow": {"rtol": real_edges(0.0, strict=True), "max_steps": int_edges(1), "num_test": int_edges(1)},
    "data": {"num_test": int_edges(1)},
}


@pytest.mark.parametrize("entry", sorted(EDGES))
def test_edges_raise_naming_the_field(stop_at_jit, entry):
    def call(field, value):
        with stop_at_solvers(), stop_at_jit:
            if entry == "Config":
                co.Config(**{**_BASE_CONFIG, field: value})
            elif entry == "train":
                co.train(TINY, **{"optimizer": "sgd", "batch_size": 3, "steps": 10, field: value})
            elif entry == "solve_flow":
                co.solve_flow(TINY, [0.0, 1.0], **{field: value})
            else:
                co.spec.data(TINY, **{field: value})

    check_edges(EDGES[entry], call)
