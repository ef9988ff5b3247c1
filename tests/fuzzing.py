"""Shared pieces of the property-based tests (`test_fuzz.py` in tests/ and in each system's folder).

Every config and public entry point gets random valid values (must not raise) and random invalid values
(must raise a `ValueError` whose message names the field, `raises_naming`). Entry points that compile are
exercised up to the solver only: `stop_at_solvers` replaces the single compile hook that `flows.solve`,
`flows.solve_batch` and `flows.solve_sde` go through (`flows._program.compiled`) by a stub that checks that
every floating input is finite (no NaN reaches a solver) and raises `Reached`. A valid call must
end in `Reached`; an invalid one must raise its `ValueError` before it.

The trainings of the three systems stop at their compile the same way (`stop_at_trainings`): the training
layer's single compile hook `flows.training.compiled` is replaced by a stub that checks that every floating
input (parameters, optimiser state, data) is finite and raises `Reached`.

Strategies follow the rules of `flows._checks`: integers are Python or numpy ints (never bool) up to
`INT_MAX`, seeds up to `SEED_MAX`, reals are Python or numpy reals, flags are bools.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import re
from unittest import mock

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from flows._checks import INT_MAX, SEED_MAX

__all__ = [
    "CONFIG",
    "ENTRY",
    "ENTRY_FEW",
    "FIELD",
    "INT_MAX",
    "SEED_MAX",
    "Reached",
    "assert_finite_inputs",
    "bad_bools",
    "bad_choices",
    "bad_ints",
    "bad_reals",
    "check_edges",
    "good_ints",
    "good_reals",
    "int_edges",
    "raises_naming",
    "real_edges",
    "stop_at_solvers",
    "stop_at_trainings",
]

#: settings of the cheap constructors (>= 200 examples each) and of the entry points (validation paths)
#: (derandomized: the same examples on every run; no example database and no "explain" phase, which traces
#: coverage and writes patch files)
_PHASES = (Phase.explicit, Phase.generate, Phase.shrink)
CONFIG = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    phases=_PHASES,
    suppress_health_check=[HealthCheck.too_slow],
)
ENTRY = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    phases=_PHASES,
    suppress_health_check=[HealthCheck.too_slow],
)
#: entry points whose validation path does eager device work per call (data draws, optimiser states)
ENTRY_FEW = settings(ENTRY, max_examples=30)
#: one invalid field of a config or an entry point (the tests are parametrized over the fields, so that every
#: field gets its examples; a config's test then sees 25 x (number of fields) >= 200 valid configs)
FIELD = settings(ENTRY, max_examples=25)


class Reached(Exception):
    """Raised by the solver stub: the call passed every check and reached the solver."""

    def __init__(self, inputs):
        super().__init__("reached the solver")
        self.inputs = inputs


def raises_naming(field: str):
    """`pytest.raises(ValueError)` whose message contains `field` as a whole word."""
    return pytest.raises(ValueError, match=rf"(?<![A-Za-z0-9_]){re.escape(field)}(?![A-Za-z0-9_])")


def assert_finite_inputs(**trees):
    """Every floating leaf of every tree is finite (what reaches a solver)."""
    for name, tree in trees.items():
        for leaf in jax.tree_util.tree_leaves(tree):
            arr = np.asarray(leaf)
            if arr.dtype.kind in "fc":
                assert np.all(np.isfinite(arr)), f"non-finite {name} reached the solver"


def _solve_stub(key, build, call_args, batched=False):
    """`flows._program.compiled` under `stop_at_solvers`: a solve's program is
    `functools.partial(flows._chunked.program, vector_field, options, in_axes, watched)` and its first call
    gets the first chunk of the save grid (an ODE's padded with NaN times, never reached; an SDE's whole grid,
    its traced inputs `(sigma, keys, dt)` last)."""
    options, in_axes = build.args[1], build.args[2]
    y0, args, t0, t1, ts, _, extra = call_args
    if options.get("noise") is not None:
        sigma, keys, dt = extra
        ts = np.asarray(ts).reshape(-1, np.shape(ts)[-1])[0]
        assert_finite_inputs(y0=y0, args=args, sigma=sigma, t0=t0, t1=t1, ts=ts, dt=dt)
        raise Reached({"y0": y0, "args": args, "sigma": sigma, "keys": keys, "ts": ts, "dt": dt, "cache_key": key})
    ts = np.asarray(ts).reshape(-1, np.shape(ts)[-1])[0]  # one member's grid (a batch's are clipped to its horizon)
    ts = ts[~np.isnan(ts)]
    assert_finite_inputs(y0=y0, args=args, t0=t0, t1=t1, ts=ts)
    for name in ("rtol", "atol"):
        assert isinstance(options[name], float) and 0 < options[name] < math.inf
    assert isinstance(options["max_steps"], int) and 1 <= options["max_steps"] <= INT_MAX
    raise Reached({"y0": y0, "args": args, "ts": ts, "options": options, "in_axes": in_axes})


def check_edges(fields: dict, call):
    """`call(field, value)` for every edge value of every field of `fields` = {field: edge values}: each must
    raise a ValueError naming its field (`raises_naming`). Collects every miss and fails listing them all."""
    misses = []
    for field, values in fields.items():
        for value in values:
            try:
                with raises_naming(field):
                    call(field, value)
            except (Exception, pytest.fail.Exception) as err:  # a wrong error, or none (DID NOT RAISE)
                misses.append(f"{field}={value!r:.40}: {type(err).__name__}: {str(err)[:160]}")
    assert not misses, "values that did not raise a ValueError naming their field:\n" + "\n".join(misses)


@contextlib.contextmanager
def stop_at_solvers():
    """Replace the compile hook of `flows.solve`, `flows.solve_batch` and `flows.solve_sde` by a stub that checks
    their inputs and raises `Reached` (see the module docstring)."""
    with mock.patch.object(importlib.import_module("flows._program"), "compiled", _solve_stub):
        yield


def _training_compile_stub(key, build, call, batched=False, donate=()):
    """`flows.training.compiled` under `stop_at_trainings`: checks the call and raises `Reached` (with the
    program's cache key, which names its static options)."""
    assert_finite_inputs(call=call)
    raise Reached({"call": call, "key": key})


@contextlib.contextmanager
def stop_at_trainings():
    """Stop `scan_snap.train`, `cooccurrence.train` and `mean_field.train` (and the batched runs) at their
    compile (see the module docstring)."""
    with mock.patch.object(importlib.import_module("flows.training"), "compiled", _training_compile_stub):
        yield


# --------------------------------------------------------------------------- edges and strategies


def int_edges(low, high=INT_MAX):
    """The invalid values next to the range [low, high] of an integer field, and the usual impostors: every
    invalid-values test also runs these deterministically (random draws may miss a boundary)."""
    return [low - 1, True, 1.5, math.nan, math.inf, "1"] + ([] if high is None else [high + 1, 2**80])


def real_edges(low=None, high=None, *, strict=False, high_strict=False, finite=True):
    """The invalid values at the edges of a real interval, NaN, inf (if `finite`), bools and impostors."""
    out = [math.nan, True, 10**400, "1.0", 1 + 1j, None] + ([math.inf, -math.inf] if finite else [])
    if low is not None:
        out.append(low if strict else math.nextafter(low, -math.inf))
    if high is not None:
        out.append(high if high_strict else math.nextafter(high, math.inf))
    return out


_JUNK = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.just([1.0]),
    st.just({"x": 1}),
    st.just(1 + 2j),
    st.just(np.array([1.0, 2.0])),
    st.just(object()),
)


@functools.cache  # strategies are immutable: build each one once
def good_ints(low, high=INT_MAX):
    """Python and numpy integers in [low, high] (edges included)."""
    ints = st.integers(low, high)
    small = st.integers(low, min(high, low + 64))
    return st.one_of(ints, small, st.sampled_from([low, high]), ints.map(np.int64))


@functools.cache  # strategies are immutable: build each one once
def bad_ints(low, high=INT_MAX, *, integral_float=False):
    """Not an integer in [low, high] (`high=None`: no upper bound): bools, out-of-range or huge ints,
    (non-integral) floats, NaN, inf, junk."""
    floats = st.floats(allow_nan=True, allow_infinity=True)
    if integral_float:
        floats = floats.filter(lambda x: not float(x).is_integer())
    edges = [low - 1, True, math.nan, math.inf] + ([] if high is None else [high + 1])
    out = [
        st.sampled_from(edges),
        st.booleans(),
        floats,
        st.sampled_from([math.nan, math.inf, -math.inf]),
        _JUNK,
        st.integers(-(2**80), low - 1),
    ]
    if high is not None:
        out.append(st.integers(high + 1, 2**80))
    return st.one_of(*out)


@functools.cache  # strategies are immutable: build each one once
def good_reals(low=None, high=None, *, strict=False, high_strict=False):
    """Python floats, ints and numpy float64 in the interval (finite)."""
    lo = -1e300 if low is None else low
    hi = 1e300 if high is None else high
    floats = st.floats(
        lo,
        hi,
        allow_nan=False,
        allow_infinity=False,
        exclude_min=strict and low is not None,
        exclude_max=high_strict and high is not None,
    )
    ints = st.integers(math.ceil(lo), math.floor(hi)).filter(
        lambda i: not (strict and low is not None and i <= low) and not (high_strict and high is not None and i >= high)
    )
    return st.one_of(floats, floats.map(np.float64), ints)


@functools.cache  # strategies are immutable: build each one once
def bad_reals(low=None, high=None, *, strict=False, high_strict=False, finite=True):
    """Not a real number in the interval: bools, NaN, inf (if `finite`), out-of-range values, complex, junk."""
    edges = [math.nan, np.float64("nan"), True, 10**400] + ([math.inf, -math.inf] if finite else [])
    if low is not None:
        edges.append(low if strict else math.nextafter(low, -math.inf))
    if high is not None:
        edges.append(high if high_strict else math.nextafter(high, math.inf))
    out = [st.sampled_from(edges), st.booleans(), _JUNK]
    if finite:
        out.append(st.sampled_from([math.inf, -math.inf]))
    if low is not None:
        below = st.floats(max_value=low, allow_nan=False, allow_infinity=False, exclude_max=not strict)
        out.append(below)
    if high is not None:
        above = st.floats(min_value=high, allow_nan=False, allow_infinity=False, exclude_min=not high_strict)
        out.append(above)
    return st.one_of(*out)


@functools.cache  # strategies are immutable: build each one once
def bad_bools():
    """Anything but True/False: ints, floats, strings, None, arrays."""
    return st.one_of(
        st.integers(), st.floats(), st.text(max_size=3), st.none(), st.just(np.array([True, False])), st.just([True])
    )


def bad_choices(choices):
    """Not one of the strings `choices`: other strings, numbers, None, unhashable values."""
    return _bad_choices(tuple(choices))


@functools.cache
def _bad_choices(choices):
    return st.one_of(
        st.text(max_size=8).filter(lambda s: s not in choices),
        st.integers(),
        st.none(),
        st.just([choices[0]]),
        st.just(np.array(list(choices))),
        st.just({choices[0]: 1}),
    )
