"""The symbolic JoMA (derivations.joma): Theorem 1's invariants have zero rate along the joint flow for any
MLP nonlinearity (sympy), the softmax estimate has not, and the generated reduced flow equals
flows.joma.flow.reduced_field on the same instance."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
from derivations import codegen
from derivations import joma as dj
from flows import joma
from flows._generated import joma_exp_reduced as generated
from flows.joma import flow


@pytest.mark.parametrize("attention", ["exp", "linear"])
@pytest.mark.parametrize("phi", [None, lambda h: h, sp.tanh], ids=["any-phi", "linear", "tanh"])
def test_invariant_rates_vanish(attention, phi):
    assert dj.invariant_rates(attention, phi) == [0] * dj.TOKENS


def test_softmax_estimate_is_not_invariant():
    """The same push-forward of z - sum_j w_j^2 / (2 tau) with softmax attention is not zero: the check above
    can fail."""
    rates = dj.invariant_rates("softmax", lambda h: h, simplify=False)
    X, W, z, _, tau = dj.joma_symbols()
    point = {s: 0.3 + 0.1 * i for i, s in enumerate([*X, *W, *z])} | {tau: 0.5}
    assert any(abs(float(r.subs(point))) > 1e-3 for r in rates)


def test_registered_and_generated_module_is_current():
    """The derivation is the registry's `joma-exp-reduced` and its module is a fresh emission."""
    d = derivations.derive("joma-exp-reduced")
    assert isinstance(d, dj.ExpReducedDerivation)
    assert not codegen.diff(d.system, module=d.module, source=d.source)


def test_generated_reduced_flow_is_the_hand_written_one():
    """At the symbolic instance (2 tokens, 2 classes, U = I_3) the generated field equals
    flow.reduced_field('exp', 'linear') at random weights and constants."""
    cfg = joma.Config(attention="exp", n_distinct=1, n_common=1, n_classes=2, d=3, tau=0.7, seed=4)
    rng = np.random.default_rng(0)
    pop = joma.population(cfg)
    X = np.asarray(pop["x"]).T
    field = flow.reduced_field("exp", "linear")
    for _ in range(4):
        W, c = rng.normal(size=(3, 2)), 0.3 * rng.normal(size=2)
        args = {**pop, "z_offset": jnp.asarray(c), "z_sign": jnp.ones(2)}
        want = np.asarray(field(0.0, jnp.asarray(W), args))
        gen_args = {f"x{i + 1}{j + 1}": X[i, j] for i in range(2) for j in range(2)} | {
            "tau": 0.7,
            "c1": c[0],
            "c2": c[1],
        }
        got = np.asarray(generated.vector_field(0.0, jnp.asarray(W.reshape(-1)), gen_args)).reshape(3, 2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        assert np.max(np.abs(want)) > 1e-3
