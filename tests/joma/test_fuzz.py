"""Property-based tests of JoMA's `Config` and its entry points (rules in tests/fuzzing.py): `solve_v_flow`,
`euler_v_flow` and the spec's `solve_flow` run up to the solver stub, `train` up to the training stub, and a bad
argument is a ValueError naming it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows import joma
from flows.joma import flow
from tests.fuzzing import (
    ENTRY,
    FIELD,
    SEED_MAX,
    Reached,
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

_SIZE = 100_000
_REALS = ("tau", "bump_width", "common_scale", "init_scale")


@st.composite
def config_fields(draw):
    n_distinct, n_common = draw(good_ints(1, _SIZE)), draw(good_ints(1, _SIZE))
    return dict(
        attention=draw(st.sampled_from(joma.ATTENTIONS)),
        mlp=draw(st.sampled_from(joma.MLPS)),
        n_distinct=n_distinct,
        n_common=n_common,
        n_classes=draw(good_ints(2, _SIZE)),
        d=draw(good_ints(int(n_distinct) + int(n_common) + 1, 1_000_000)),
        **{k: draw(good_reals(0.0, 1e300, strict=True)) for k in _REALS},
        seed=draw(good_ints(0, SEED_MAX)),
    )


_BAD = {
    "attention": bad_choices(joma.ATTENTIONS),
    "mlp": bad_choices(joma.MLPS),
    "n_distinct": bad_ints(1, _SIZE),
    "n_common": bad_ints(1, _SIZE),
    "n_classes": bad_ints(2, _SIZE),
    "seed": bad_ints(0, SEED_MAX),
    **{k: bad_reals(0.0, strict=True) for k in _REALS},
}


@pytest.mark.parametrize("field", [*_BAD, "d"])
@FIELD
@given(fields=config_fields(), data=st.data())
def test_config_valid_and_invalid_values(field, fields, data):
    cfg = joma.Config(**fields)
    assert cfg.n_tokens == int(fields["n_distinct"]) + int(fields["n_common"])
    assert all(isinstance(getattr(cfg, k), float) for k in _REALS)
    if field == "d":
        fields["d"] = data.draw(st.one_of(st.integers(-3, cfg.n_tokens), bad_ints(cfg.n_tokens + 1, 1_000_000)))
    else:
        fields[field] = data.draw(_BAD[field], label=field)
    with raises_naming(field):
        joma.Config(**fields)


def test_config_edges():
    edges = {
        "n_distinct": int_edges(1, _SIZE),
        "n_classes": int_edges(2, _SIZE),
        "d": int_edges(21, 1_000_000),
        "seed": int_edges(0, SEED_MAX),
        **{k: real_edges(0.0, strict=True) for k in _REALS},
    }
    check_edges(edges, lambda field, value: joma.Config(**{field: value}))


@ENTRY
@given(
    n=st.integers(1, 12),
    T=good_reals(1e-3, 1e3),
    v0=good_reals(-3.0, 3.0),
    mlp=st.sampled_from(flow.V_MLPS),
    attention=st.sampled_from(flow.V_ATTENTIONS),
    data=st.data(),
)
def test_v_flow_entry_points_reach_the_solver_or_name_the_argument(n, T, v0, mlp, attention, data):
    mu = np.linspace(1.0, 3.0, n)
    with stop_at_solvers(), pytest.raises(Reached):
        flow.solve_v_flow(mu, [0.0, 1.0], T, v0, mlp, attention=attention)
    with stop_at_solvers(), pytest.raises(Reached):
        flow.euler_v_flow(mu, 10, 0.1, T, v0, mlp, attention=attention, save_every=5)
    field = data.draw(st.sampled_from(["temperature", "v0", "mu", "steps", "eta", "mlp"]))
    kwargs = dict(mu=mu, temperature=T, v0=v0, mlp=mlp)
    kwargs[field] = data.draw(
        {
            "temperature": bad_reals(0.0, strict=True),
            "v0": st.one_of(st.just(np.ones(n + 1)), st.just(np.nan), st.just("0.1")),
            "mu": st.one_of(st.just(np.ones((2, 2))), st.just([]), st.just([np.inf])),
            "steps": bad_ints(1, 10_000_000),
            "eta": bad_reals(0.0, strict=True),
            "mlp": bad_choices(flow.V_MLPS),
        }[field]
    )
    with stop_at_solvers(), raises_naming(field):
        if field in ("steps", "eta"):
            steps, eta = kwargs.pop("steps", 10), kwargs.pop("eta", 0.1)
            flow.euler_v_flow(steps=steps, eta=eta, save_every=1, **kwargs)
        else:
            flow.solve_v_flow(ts=[0.0, 1.0], **kwargs)


_SMALL = joma.Config(attention="exp", n_distinct=2, n_common=2, n_classes=3, d=5)


@ENTRY
@given(
    optimizer=st.sampled_from(["gd", "sgd", "momentum", "adam"]),
    lr=good_reals(1e-6, 10.0),
    steps=st.integers(1, 50),
    reduced=st.sampled_from([None, "w_flow"]),
    t1=good_reals(1e-3, 100.0),
    data=st.data(),
)
def test_spec_entry_points_reach_the_driver_or_name_the_argument(optimizer, lr, steps, reduced, t1, data):
    optim_args = {"beta": 0.5} if optimizer == "momentum" else None
    batch_size = 2 if optimizer == "sgd" else None
    with stop_at_trainings(), pytest.raises(Reached):
        joma.train(_SMALL, optimizer, lr, steps, save_every=1, batch_size=batch_size, optim_args=optim_args)
    with stop_at_solvers(), pytest.raises(Reached):
        joma.solve_flow(_SMALL, [0.0, t1], reduced=reduced)
    field = data.draw(st.sampled_from(["lr", "steps", "save_every", "ts", "params0", "reduced", "batch_size"]))
    bad = data.draw(
        {
            "lr": bad_reals(0.0, strict=True),
            "steps": bad_ints(1, 10**9),
            "save_every": st.one_of(st.integers(-3, 0), st.just(1.5)),
            "ts": st.one_of(st.just([1.0, 2.0]), st.just([0.0, np.nan]), st.just([[0.0, 1.0]])),
            "params0": st.one_of(st.just({"W": np.zeros((2, 2)), "z": np.zeros(4)}), st.just({"W": np.zeros(3)})),
            "reduced": st.one_of(st.just("v_flow"), st.just(3)),
            "batch_size": st.one_of(st.integers(-2, 0), st.integers(4, 10)),
        }[field]
    )
    with stop_at_solvers(), stop_at_trainings(), raises_naming(field):
        if field in ("ts", "reduced"):
            joma.solve_flow(_SMALL, **({"ts": bad} if field == "ts" else {"ts": [0.0, 1.0], "reduced": bad}))
        elif field == "params0":
            joma.solve_flow(_SMALL, [0.0, 1.0], params0=bad)
        else:
            kw = {"lr": lr, "steps": steps, "save_every": 1, "batch_size": None}
            joma.train(_SMALL, "sgd", **{**kw, field: bad})
