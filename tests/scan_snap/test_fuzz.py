"""Property-based tests of Scan and Snap: `SequenceClasses`, `syn_small`, `syn_medium`, `zipfian`, `solve_flow`,
`solve_single_common_token`, `solve_decoder`, `train`, `train_embedding`, `train_sweep` and `theory.*` (rules in
tests/fuzzing.py). The flows run up to the solver stub, the trainings up to their jitted program.
"""

from __future__ import annotations

import functools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from flows import _sweep
from flows import scan_snap as ss
from flows.scan_snap import theory
from tests.fuzzing import (
    CONFIG,
    ENTRY,
    ENTRY_FEW,
    FIELD,
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

# --------------------------------------------------------------------------- SequenceClasses and generators


@st.composite
def class_fields(draw):
    """Keyword arguments of a valid `SequenceClasses`: K classes over M tokens."""
    K, M = draw(st.integers(1, 5)), draw(st.integers(2, 8))
    M = max(M, K)  # K distinct next tokens
    weights = draw(hnp.arrays(np.float64, (K, M), elements=st.floats(0.0, 1e6)))
    weights[np.arange(K), draw(st.lists(st.integers(0, M - 1), min_size=K, max_size=K))] += 1.0  # rows > 0
    cond = weights / weights.sum(axis=1, keepdims=True)
    query = draw(st.lists(st.integers(0, M - 1), min_size=K, max_size=K))
    nxt = draw(st.permutations(range(M)))[:K]
    probs = draw(
        st.one_of(st.none(), hnp.arrays(np.float64, K, elements=st.floats(1e-3, 1.0)).map(lambda p: p / p.sum()))
    )
    query = draw(st.sampled_from([tuple(query), np.asarray(query), list(map(float, query))]))
    return dict(
        cond_probs=cond,
        query=query,
        next_token=tuple(nxt),
        class_probs=probs,
        name=draw(st.text(min_size=1, max_size=5)),
    )


def _bad_class_value(field, fields, data):
    K, M = np.shape(fields["cond_probs"])
    if field == "cond_probs":
        bad = np.array(fields["cond_probs"])
        choice = data.draw(st.sampled_from(["nan", "negative", "sum", "shape", "junk"]))
        if choice == "nan":
            bad[0, 0] = np.nan
        elif choice == "negative":
            bad[0, 0] = -0.5
        elif choice == "sum":
            bad = 2.0 * bad
        elif choice == "shape":
            bad = bad[0]
        else:
            bad = data.draw(
                st.one_of(
                    st.text(max_size=2),
                    st.just([[1.0], [0.5, 0.5]]),
                    st.just(np.ones((K, M)) + 1j),
                    st.none(),
                    st.just({"a": 1}),
                )
            )
        return bad
    if field in ("query", "next_token"):
        return data.draw(
            st.one_of(
                st.just([M] * K),
                st.just([-1] * K),
                st.just([0.5] * K),
                st.just([0] * (K + 1)),
                st.just([math.nan] * K),
                st.just(["a"] * K),
                st.none(),
                st.just([1j] * K),
                st.just([0] * K) if field == "next_token" and K > 1 else st.nothing(),
            )
        )
    if field == "class_probs":
        return data.draw(
            st.one_of(
                st.just(np.full(K, 2.0 / K)),
                st.just(np.zeros(K)),
                st.just(np.full(K + 1, 1.0)),
                st.just([math.nan] * K),
                st.just("uniform"),
                st.just([1j] * K),
            )
        )
    return data.draw(st.one_of(st.just(""), st.integers(), st.none()))


@pytest.mark.parametrize("field", ["cond_probs", "query", "next_token", "class_probs", "name"])
@settings(CONFIG, max_examples=40)  # x 5 fields
@given(fields=class_fields(), data=st.data())
def test_sequence_classes_valid_and_invalid(field, fields, data):
    classes = ss.SequenceClasses(**fields)
    K, M = np.shape(fields["cond_probs"])
    assert classes.num_classes == K and classes.vocab_size == M
    assert classes.query == tuple(int(q) for q in fields["query"])
    np.testing.assert_allclose(classes.cond_probs.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(classes.class_probs.sum(), 1.0, rtol=0, atol=1e-12)
    fields[field] = _bad_class_value(field, fields, data)
    with raises_naming(field):
        ss.SequenceClasses(**fields)


@pytest.mark.parametrize("which", ["syn_medium", "zipfian"])
@settings(CONFIG, max_examples=100)  # x 2 generators
@given(data=st.data())
def test_class_generators_valid_and_invalid(which, data):
    if which == "syn_medium":
        L = data.draw(st.one_of(st.integers(1, 6), st.sampled_from([2.0, np.int64(3)])))
        classes = ss.syn_medium(L)
        assert classes.num_classes == 2 * int(L) and classes.vocab_size == 10 + 23 * int(L)
        bad = data.draw(st.one_of(bad_ints(1, integral_float=True), st.just(10**5)))
        with raises_naming("num_queries"):
            ss.syn_medium(bad)
        return
    kw = dict(
        num_queries=data.draw(st.integers(1, 3)),
        next_per_query=data.draw(st.integers(1, 3)),
        num_distinct=data.draw(st.integers(1, 6)),
        num_common=data.draw(st.integers(0, 6)),
        exponent=data.draw(good_reals(0.0, 20.0)),
    )
    classes = ss.zipfian(**kw)
    K = kw["num_queries"] * kw["next_per_query"]
    assert classes.num_classes == K
    assert classes.vocab_size == kw["num_common"] + K * kw["num_distinct"] + kw["num_queries"] + K
    field = data.draw(st.sampled_from(sorted(kw)))
    low = 0 if field == "num_common" else 1
    kw[field] = data.draw(
        bad_reals(0.0) if field == "exponent" else st.one_of(bad_ints(low, integral_float=True), st.just(10**9))
    )  # 10**9: a (K, M) table past 2**28 entries
    with raises_naming(field):
        ss.zipfian(**kw)


def test_syn_small():
    classes = ss.syn_small()
    assert (classes.num_classes, classes.vocab_size) == (2, 34)


# --------------------------------------------------------------------------- flows (up to the solver)

CLASSES = ss.syn_small()
M = CLASSES.vocab_size
_rate = good_reals(1e-6, 1e6)
_not_array = lambda v: not isinstance(v, (list, np.ndarray))  # noqa: E731 - arrays of rates are sweeps
_bad_rate = st.one_of(
    bad_reals(0.0, strict=True).filter(_not_array),
    st.just(np.array([1.0, -1.0])),
    st.just(np.ones((2, 2))),
    st.just([]),
    st.just(["a"]),
)
_ts = st.lists(st.floats(0.0, 1e6), min_size=1, max_size=4).map(sorted).filter(lambda t: t[-1] > 0)
_bad_ts = st.sampled_from(
    [[], [0.0], [-1.0, 1.0], [2.0, 1.0], [0.0, math.nan], [0.0, math.inf], [[1.0]], ["a"], "1.0", [1j]]
)


@ENTRY_FEW
@given(
    st.one_of(_rate, st.lists(_rate, min_size=2, max_size=2).map(np.asarray)),
    _rate,
    _ts,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), good_reals(1.0, 1e6, strict=True)),
    st.one_of(st.none(), hnp.arrays(np.float64, (M, M), elements=st.floats(-10, 10))),
)
def test_solve_flow_valid_calls_reach_the_solver(
    eta_Y, eta_Z, ts, reduced, paper_time, exact_slaving, decoder_size, Z0
):
    # a sweep's members as the vmapped program takes them (the lockstep one stacks the same: tests/test_sweep.py)
    vmapped = mock.patch.object(_sweep.config, "strategy", "vmap")
    with vmapped, stop_at_solvers(), pytest.raises(Reached) as info:
        ss.solve_flow(
            CLASSES,
            eta_Y,
            eta_Z,
            ts,
            reduced,
            Z0=Z0,
            paper_time=paper_time,
            exact_slaving=exact_slaving,
            decoder_size=decoder_size,
            rtol=1e-6,
            atol=1e-8,
        )
    inputs = info.value.inputs
    assert sorted(inputs["y0"]) == (["B", "Z", "h"] if reduced else ["Y", "Z"])
    if decoder_size is not None:
        args = inputs["args"].get("field", inputs["args"])  # the named limit's args on the driver
        Md = np.asarray(args["Md"])
        assert np.all(Md == decoder_size)
    assert (inputs["in_axes"] is not None) == (np.ndim(eta_Y) > 0)


BAD_FLOW = {
    "eta_Y": _bad_rate,
    "eta_Z": _bad_rate,
    "ts": _bad_ts,
    "reduced": bad_bools(),
    "paper_time": bad_bools().filter(lambda v: v is not None),  # None: each flow's own time
    "exact_slaving": bad_bools(),
    "decoder_size": st.one_of(
        bad_reals(1.0, strict=True).filter(lambda v: v is not None), st.just(np.array([10.0, 20.0]))
    ),
    "Z0": st.one_of(
        st.just(np.full((M, M), math.nan)),
        st.just(np.ones((M, M - 1))),
        st.just("zeros"),
        st.just(np.ones((M, M)) * 1j),
    ),
    "Y0": st.one_of(st.just(np.full((M, M), math.inf)), st.just(np.ones(M))),
    "solver": bad_choices(["tsit5"]),
    "rtol": bad_reals(0.0, strict=True),
    "max_steps": bad_ints(1).filter(lambda v: v is not None),  # None: from the horizon
    "throw": bad_bools(),
}


@pytest.mark.parametrize("field", sorted(BAD_FLOW))
@FIELD
@given(data=st.data())
def test_solve_flow_invalid_values_raise_naming_the_field(field, data):
    kw = dict(eta_Y=1.0, eta_Z=1.0, ts=[0.0, 1.0])
    kw[field] = data.draw(BAD_FLOW[field], label=field)
    with stop_at_solvers(), raises_naming(field):
        ss.solve_flow(CLASSES, **kw)


@settings(ENTRY, max_examples=20)
@given(st.data())
def test_single_common_token_and_decoder(data):
    kw = dict(
        M=data.draw(good_reals(1.0, 1e6, strict=True)),
        K=data.draw(good_reals(0.0, 1e3, strict=True)),
        eta_Y=data.draw(_rate),
        eta_Z=data.draw(_rate),
        C0=data.draw(good_reals(0.0, 1e3, strict=True)),
        ts=data.draw(_ts),
    )
    with stop_at_solvers(), pytest.raises(Reached):
        ss.solve_single_common_token(**kw)
    field = data.draw(st.sampled_from(sorted(kw)))
    kw[field] = data.draw(_bad_ts if field == "ts" else bad_reals(1.0 if field == "M" else 0.0, strict=True))
    with stop_at_solvers(), raises_naming(field):
        ss.solve_single_common_token(**kw)
    # the decoder h-flow: M > 1 and eta_Y > 0, scalars or 1-D sweeps
    dkw = dict(
        M=data.draw(st.one_of(good_reals(1.0, 1e6, strict=True), st.just(np.array([2.0, 30.0])))),
        eta_Y=data.draw(_rate),
        ts=data.draw(_ts),
        dtype=data.draw(st.sampled_from([None, np.float64])),
    )
    with stop_at_solvers(), pytest.raises(Reached):
        ss.solve_decoder(**dkw)
    field = data.draw(st.sampled_from(["M", "eta_Y", "ts", "dtype", "rtol", "solver"]))
    dkw[field] = data.draw(
        {
            "M": st.one_of(bad_reals(1.0, strict=True).filter(_not_array), st.just(np.ones((2, 2)) * 5)),
            "eta_Y": bad_reals(0.0, strict=True).filter(_not_array),
            "ts": _bad_ts.filter(lambda t: t != [0.0]),
            "dtype": st.sampled_from([np.int32, "complex64", "nope", 3]),
            "rtol": bad_reals(0.0, strict=True),
            "solver": bad_choices(["dopri8"]),
        }[field]
    )
    with stop_at_solvers(), raises_naming(field):
        ss.solve_decoder(**dkw)


# --------------------------------------------------------------------------- trainings (up to the jit)


class _StopAtTrainings:
    """A reusable `with`: `fuzzing.stop_at_trainings()` (train stops at the training layer's compile)."""

    def __enter__(self):
        self._cm = stop_at_trainings()
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


@pytest.fixture(scope="module")
def stop_at_jit():
    return _StopAtTrainings()


def _reached(info):
    """(params, per-step keys, the context length T of the sampler) of the call that reached the compile."""
    params, _, keys, *_ = info.value.inputs["call"]
    structure = info.value.inputs["key"][1]
    (sample,) = [s for s in structure if isinstance(s, functools.partial)]  # the spec's sampler, partial(T, ...)
    return params, keys, sample.args[0]


@st.composite
def train_calls(draw):
    optimizer = draw(st.sampled_from(["sgd", "adam"]))
    return dict(
        optimizer=optimizer,
        eta_Y=draw(_rate),
        eta_Z=draw(_rate),
        T=draw(good_ints(2, 10**4)),
        batch_size=draw(good_ints(1, 10**4)),
        steps=draw(st.one_of(good_ints(1, 10**6), st.just(5.0))),
        momentum=0.0 if optimizer == "adam" else draw(good_reals(0.0, 1.0, high_strict=True)),
        seed=draw(good_ints(0, 2**32 - 1)),
    )


BAD_TRAIN = {
    "optimizer": bad_choices(["sgd", "adam"]),
    "eta_Y": _bad_rate,
    "eta_Z": _bad_rate,
    "T": bad_ints(2, integral_float=True),
    "batch_size": bad_ints(1, integral_float=True),
    "steps": bad_ints(1, integral_float=True),
    "momentum": bad_reals(0.0, 1.0, high_strict=True),
    "seed": bad_ints(0, 2**32 - 1, integral_float=True),
    "init": bad_choices(["zero", "random"]),
    "form": bad_choices(["counts", "tokens"]),
    "history": bad_bools(),
}


@pytest.mark.parametrize("field", sorted(BAD_TRAIN))
@settings(ENTRY, max_examples=2)  # x 11 fields
@given(kw=train_calls(), data=st.data())
def test_train_valid_and_invalid(stop_at_jit, field, kw, data):
    with stop_at_jit, pytest.raises(Reached) as info:
        ss.train(
            CLASSES,
            **kw,
            init=data.draw(st.sampled_from(["zero", "random"])),
            form=data.draw(st.sampled_from(["counts", "tokens"])),
            history=data.draw(st.booleans()),
        )
    params, keys, T = _reached(info)
    assert T == int(kw["T"]) and keys.shape[0] == int(kw["steps"]) and params["Y"].shape == (M, M)
    kw[field] = data.draw(BAD_TRAIN[field], label=field)
    if field == "momentum" or (field == "optimizer" and kw["momentum"]):
        kw["optimizer"] = "sgd" if field == "momentum" else kw["optimizer"]
    with stop_at_jit, raises_naming(field):
        ss.train(CLASSES, **kw)


@pytest.mark.parametrize("field", ["d", "eta_U", "init_scale", "history", "seeds"])
@settings(ENTRY, max_examples=2)
@given(
    kw=train_calls(),
    d=st.integers(1, 64),
    eta_U=st.one_of(st.none(), good_reals(0.0, 1e3)),
    init_scale=good_reals(0.0, 1e3, strict=True),
    data=st.data(),
)
def test_train_embedding_and_sweep_valid_and_invalid(stop_at_jit, field, kw, d, eta_U, init_scale, data):
    with stop_at_jit, pytest.raises(Reached) as info:
        ss.train_embedding(CLASSES, **kw, d=d, eta_U=eta_U, init_scale=init_scale)
    params = _reached(info)[0]
    assert params["W_V"].shape == (d, d) and ("U" not in params if eta_U == 0 else params["U"].shape == (M, d))
    R = data.draw(st.integers(1, 3))
    sweep = dict(
        eta_Y=np.full(R, float(kw["eta_Y"])),
        eta_Z=np.full(R, float(kw["eta_Z"])),
        seeds=np.arange(R),
        T=kw["T"],
        batch_size=kw["batch_size"],
        steps=kw["steps"],
    )
    with stop_at_jit, pytest.raises(Reached):
        ss.train_sweep(CLASSES, kw["optimizer"], momentum=kw["momentum"], **sweep)
    if field == "seeds":
        sweep["seeds"] = data.draw(
            st.sampled_from(
                [np.full(R, -1), np.full(R, 0.5), np.full(R, 2**40), np.array(["a"] * R), np.full(R, math.nan)]
            )
        )
        with stop_at_jit, raises_naming("seeds"):
            ss.train_sweep(CLASSES, kw["optimizer"], momentum=kw["momentum"], **sweep)
        return
    bad = {
        "d": bad_ints(1, integral_float=True),
        "eta_U": bad_reals(0.0).filter(lambda v: v is not None),
        "init_scale": bad_reals(0.0, strict=True),
        "history": bad_bools(),
    }[field]
    extra = dict(d=d, eta_U=eta_U, init_scale=init_scale)
    extra[field] = data.draw(bad, label=field)
    with stop_at_jit, raises_naming(field):
        ss.train_embedding(CLASSES, **kw, **extra)


# --------------------------------------------------------------------------- theory closed forms

_M = st.floats(2.0, 1e3)
_eta = st.floats(1e-3, 10.0)
_t = st.one_of(st.just(0.0), st.floats(1e-6, 1e3))


@settings(ENTRY, max_examples=3)  # theory.h compiles its Newton loop on every call (about 0.25 s)
@given(_t, _M, _eta, st.floats(1.0, 100.0), st.data())
def test_theory_valid_values(t, M, eta_Y, K, data):
    """h solves its defining equation e^{M h} + (M-1) M h = M eta_Y t + 1 (eq. 45), and the closed forms that
    need no Newton loop are finite on valid inputs."""
    h = float(theory.h(t, M, eta_Y))
    x = M * h
    residual = math.expm1(x) + (M - 1) * x - M * eta_Y * t
    assert abs(residual) <= 1e-12 * (M * eta_Y * t + 1.0)
    values = [
        theory.scan_time(M, K, eta_Y),
        theory.snap_time(M, K, eta_Y),
        theory.gamma_early(t, K, eta_Y),
        theory.chi_bounds(data.draw(st.floats(-10, 10)), data.draw(st.floats(0.0, 1.0))),
        theory.pair_invariant_rhs(data.draw(st.floats(-10, 10)), data.draw(st.floats(-1.0, 10))),
    ]
    if t > 0:
        values.append(theory.gamma_late(t, M, K, eta_Y))
    if M > math.e:
        values.append(theory.regime_times(M, K, eta_Y))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in values)


#: function -> (its arguments in order, valid values, {field: bad values})
_THEORY = {
    "h": (("t", "M", "eta_Y"), (1.0, 10.0, 1.0)),
    "gamma": (("t", "M", "K", "eta_Y"), (1.0, 10.0, 2.0, 1.0)),
    "Gamma": (("t", "M", "K", "eta_Y", "eta_Z"), (1.0, 10.0, 2.0, 1.0, 1.0)),
    "B": (("t", "M", "K", "eta_Y", "eta_Z", "C0"), (1.0, 10.0, 2.0, 1.0, 1.0, 1.0)),
    "scan_time": (("M", "K", "eta_Y"), (10.0, 2.0, 1.0)),
    "snap_time": (("M", "K", "eta_Y"), (10.0, 2.0, 1.0)),
    "regime_times": (("M", "K", "eta_Y"), (10.0, 2.0, 1.0)),
    "gamma_early": (("t", "K", "eta_Y"), (1.0, 2.0, 1.0)),
    "gamma_late": (("t", "M", "K", "eta_Y"), (1.0, 10.0, 2.0, 1.0)),
    "h_discrete": (("s", "M", "eta_Y"), ([0, 1, 2], 10.0, 1.0)),
    "chi_bounds": (("B_n", "f0_sq"), (1.0, 0.5)),
    "pair_invariant_rhs": (("dz_lp", "r0"), (0.5, 1.0)),
}
#: the lower bound of each argument (None: any finite real) and whether it is strict
_LOWER = {
    "t": (0.0, False),
    "M": (1.0, True),
    "K": (0.0, True),
    "eta_Y": (0.0, True),
    "eta_Z": (0.0, True),
    "C0": (0.0, True),
    "s": (0.0, False),
    "f0_sq": (0.0, False),
    "B_n": (None, False),
    "dz_lp": (None, False),
    "r0": (None, False),
}


@pytest.mark.parametrize("name", sorted(_THEORY))
@settings(ENTRY, max_examples=15)
@given(data=st.data())
def test_theory_invalid_values_raise_naming_the_field(name, data):
    fields, values = _THEORY[name]
    i = data.draw(st.integers(0, len(fields) - 1))
    field = fields[i]
    low, strict = _LOWER[field]
    if name == "gamma_late" and field == "t":
        low, strict = 0.0, True
    if name == "regime_times" and field == "M":
        low, strict = math.e, True
    bad = data.draw(
        st.one_of(bad_reals(low, strict=strict).filter(_not_array), st.just(np.array([1.0, math.nan])), st.just([1j])),
        label=field,
    )
    if field == "s":
        bad = data.draw(st.sampled_from([[-1], [0.5], [math.nan], ["a"], [True]]))
    args = list(values)
    args[i] = bad
    with raises_naming(field):
        getattr(theory, name)(*args)


# --------------------------------------------------------------------------- boundary values, deterministic

_pos = [x for x in real_edges(0.0, strict=True) if x is not None]
EDGES = {
    "syn_medium": {"num_queries": int_edges(1) + [10**5]},
    "zipfian": {
        "num_queries": int_edges(1) + [10**9],
        "next_per_query": int_edges(1),
        "num_distinct": int_edges(1),
        "num_common": int_edges(0) + [10**9],
        "exponent": [x for x in real_edges(0.0) if x is not None],
    },
    "solve_flow": {
        "eta_Y": _pos,
        "eta_Z": _pos,
        "decoder_size": [x for x in real_edges(1.0, strict=True) if x is not None],
        "rtol": real_edges(0.0, strict=True),
        "max_steps": int_edges(1),
    },
    "solve_decoder": {"M": real_edges(1.0, strict=True), "eta_Y": real_edges(0.0, strict=True)},
    "solve_single_common_token": {
        "M": real_edges(1.0, strict=True),
        "K": _pos,
        "eta_Y": _pos,
        "eta_Z": _pos,
        "C0": _pos,
    },
    "train": {
        "T": int_edges(2),
        "batch_size": int_edges(1),
        "steps": int_edges(1),
        "seed": int_edges(0, 2**32 - 1),
        "momentum": [x for x in real_edges(0.0, 1.0, high_strict=True) if x is not None],
        "eta_Y": _pos,
    },
    "train_embedding": {
        "d": int_edges(1),
        "eta_U": [x for x in real_edges(0.0) if x is not None],
        "init_scale": real_edges(0.0, strict=True),
    },
}
_EDGE_CALLS = {
    "syn_medium": lambda kw: ss.syn_medium(**kw),
    "zipfian": lambda kw: ss.zipfian(**kw),
    "solve_flow": lambda kw: ss.solve_flow(CLASSES, **{"eta_Y": 1.0, "eta_Z": 1.0, "ts": [0.0, 1.0], **kw}),
    "solve_decoder": lambda kw: ss.solve_decoder(**{"M": 10, "eta_Y": 1.0, "ts": [0.0, 1.0], **kw}),
    "solve_single_common_token": lambda kw: ss.solve_single_common_token(
        **{"M": 10, "K": 2, "eta_Y": 1.0, "eta_Z": 1.0, "ts": [0.0, 1.0], **kw}
    ),
    "train": lambda kw: ss.train(
        CLASSES, **{"optimizer": "sgd", "eta_Y": 1.0, "eta_Z": 1.0, "T": 4, "batch_size": 2, "steps": 3, **kw}
    ),
    "train_embedding": lambda kw: ss.train_embedding(
        CLASSES, **{"optimizer": "sgd", "eta_Y": 1.0, "eta_Z": 1.0, "T": 4, "batch_size": 2, "steps": 3, "d": 4, **kw}
    ),
}


@pytest.mark.parametrize("entry", sorted(EDGES))
def test_edges_raise_naming_the_field(stop_at_jit, entry):
    def call(field, value):
        with stop_at_solvers(), stop_at_jit:
            _EDGE_CALLS[entry]({field: value})

    check_edges(EDGES[entry], call)
