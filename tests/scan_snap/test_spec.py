"""Scan and Snap as a `flows.System`: its loss on the full data is the population loss of the flows, its named
limits are the flows of the same network (the hand-written population flow against the driver's autodiff
gradient flow; the decoder h-flow against the population flow on classes with disjoint supports and against
the closed form of h; the class-symmetric reduction against the reduced flow), each refused with a ValueError
where it is not a limit of the network, and its failed-run bound."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows import scan_snap as ss
from flows.scan_snap import theory
from flows.scan_snap.flow import flow_args, population_loss
from flows.scan_snap.model import blowup_bound, count_loss
from tests.scan_snap.test_pins import ETA_Y, ETA_Z, symmetric_classes

TIGHT = dict(rtol=1e-11, atol=1e-13)


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_the_loss_is_the_flows_population_loss_on_the_data_and_the_count_loss_on_a_batch():
    classes = ss.syn_small()
    system = ss.system(classes, T=12)
    rng = np.random.default_rng(0)
    L, M = len(classes.query_tokens), classes.vocab_size
    params = {"Y": jnp.asarray(rng.normal(size=(M, M))), "Z": jnp.asarray(rng.normal(size=(L, M)))}
    data = system.dataset(None)
    want = population_loss(params, flow_args(classes, 1.0, 1.0, query_rows=True))
    np.testing.assert_allclose(system.loss(params, data), want, rtol=1e-14)
    batch = system.batch(jax.random.PRNGKey(3), data, 5)
    assert batch["counts"].shape == (5, M) and np.all(np.asarray(batch["counts"]).sum(1) == 11)
    np.testing.assert_allclose(
        system.loss(params, batch), count_loss(params, data["arrays"], batch["cls"], batch["counts"]), rtol=1e-14
    )


def test_the_population_limit_is_the_gradient_flow_of_the_spec():
    """The hand-written population flow (Lemmas 1-2) and the driver's gradient flow of the spec's loss by
    autodiff, each group at its rate, from the random initialisation: the same trajectory to the solvers'
    tolerance."""
    system = ss.system(ss.syn_small(), 1.5, 0.5, init="random", seed=1)
    ts = np.array([0.0, 2.0, 8.0])
    closed = flows.solve_flow(system, ts, reduced="population", **TIGHT)
    autodiff = flows.solve_flow(system, ts, "gd", **TIGHT)
    for name in ("Y", "Z"):
        assert _rel(closed.ys[name], autodiff.ys[name]) <= 1e-8, name
    for name in ("loss", "entropy", "common_mass"):
        assert _rel(closed.observables[name], autodiff.observables[name]) <= 1e-8, name
    assert closed.observables["loss"][-1] < closed.observables["loss"][0] - 0.1  # it moved


def test_the_decoder_limit_is_the_network_flow_on_disjoint_supports():
    """Classes without a common token (two classes per query, so z_m is shared): the population flow keeps Z
    frozen and its Y, loss and target probabilities are those of the decoder limit, whose h_n is the closed form
    h(P(n) t) of eq. 45."""
    classes = ss.zipfian(num_queries=2, next_per_query=2, num_distinct=3, num_common=0)
    system = ss.system(classes, 1.3, 0.7)
    ts = np.array([0.0, 1.0, 5.0, 20.0])
    population = flows.solve_flow(system, ts, reduced="population", **TIGHT)
    decoder = flows.solve_flow(system, ts, reduced="decoder", **TIGHT)
    assert float(np.max(np.abs(population.ys["Z"]))) <= 1e-13  # the attention never moves
    for name in ("loss", "attention", "entropy"):
        assert _rel(decoder.observables[name], population.observables[name]) <= 1e-8, name
    data = system.dataset(None)["arrays"]
    f = np.asarray(ss.observables.normalized_attention(population.observables["attention"]))  # (t, K, M)
    logits = np.einsum("tkm,tml->tkl", f, np.asarray(population.ys["Y"]))
    alpha = np.asarray(jax.nn.softmax(logits, axis=-1))[:, np.arange(4), np.asarray(data.next_token)]
    assert _rel(decoder.observables["alpha"], alpha) <= 1e-8
    p, M = np.asarray(classes.class_probs), classes.vocab_size
    h = np.asarray(theory.h(ts[:, None] * p[None, :], M, 1.3))
    assert _rel(decoder.ys["h"], h) <= 1e-8
    assert float(np.min(decoder.observables["alpha"][-1])) > 0.5  # the decoder learned its targets
    with pytest.raises(ValueError, match="disjoint supports"):
        flows.solve_flow(ss.system(ss.syn_small()), ts, reduced="decoder")
    with pytest.raises(ValueError, match="Y = 0"):
        flows.solve_flow(ss.system(classes, init="random"), ts, reduced="decoder")


def test_the_symmetric_limit_is_the_reduced_flow_on_symmetric_classes():
    """The generated class-symmetric flow (h, z_d, z_c) and the reduced Z-flow on class-symmetric classes, both
    on the paper's time: the same attention, entropies and gamma to the solvers' tolerance."""
    system = ss.system(symmetric_classes(), ETA_Y, ETA_Z)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 100.0, 6)])
    reduced = flows.solve_flow(system, ts, reduced="reduced", **TIGHT)
    symmetric = flows.solve_flow(system, ts, reduced="symmetric", **TIGHT)
    for name in ("attention", "entropy", "entropy_distinct", "common_mass", "gamma"):
        assert _rel(symmetric.observables[name], reduced.observables[name]) <= 1e-8, name
    assert np.ptp(np.asarray(reduced.observables["common_mass"])) > 0.1  # the common tokens were suppressed
    with pytest.raises(ValueError, match="class-symmetric"):
        flows.solve_flow(ss.system(ss.syn_small()), ts, reduced="symmetric")
    with pytest.raises(ValueError, match="symmetric Z"):
        flows.solve_flow(ss.system(symmetric_classes(), init="random"), ts, reduced="symmetric")


def test_a_sweep_over_rates_is_the_solves_of_its_members():
    """`solve_flow` with arrays of rates (one vmapped solve) against one solve per pair, on the paper's time,
    where the population flow's Z runs at K eta_Z."""
    classes, ts = ss.syn_small(), np.array([0.0, 5.0, 20.0])
    sweep = ss.solve_flow(classes, np.array([1.0, 2.0]), np.array([0.5, 3.0]), ts, paper_time=True, **TIGHT)
    for i, (eta_Y, eta_Z) in enumerate(((1.0, 0.5), (2.0, 3.0))):
        one = ss.solve_flow(classes, eta_Y, eta_Z, ts, paper_time=True, **TIGHT)
        for name in ("Y", "Z"):
            assert _rel(sweep.ys[name][i], one.ys[name]) <= 1e-9, (i, name)


def test_a_run_past_the_blowup_bound_fails_at_its_first_step():
    """At an absurd rate the bounded gradients carry Y past ln of the largest float in one step, with every
    entry finite: `System.finite` (`model.within_bound`) fails the run there."""
    with pytest.raises(flows.TrainingError, match="non-finite at step 1") as info:
        flows.train(ss.system(ss.syn_small()), "gd", 1e6, 3, save_every=1)
    assert info.value.record.steps.tolist() == [0]
    assert ss.system(ss.syn_small()).finite({"Y": jnp.full((2,), 0.99 * blowup_bound(np.float64))})
    assert not ss.system(ss.syn_small()).finite({"Y": jnp.full((2,), 1.01 * blowup_bound(np.float64))})


def test_system_arguments_are_checked():
    classes = ss.syn_small()
    for kw, field in (
        (dict(eta_Y=0.0), "eta_Y"),
        (dict(T=1), "T"),
        (dict(init="ones"), "init"),
        (dict(seed=2**32), "seed"),
        (dict(form="words"), "form"),
        (dict(form="embedding"), "d"),
        (dict(d=4), "embedding"),
        (dict(form="embedding", d=4, eta_U=-1.0), "eta_U"),
        (dict(paper_time=1), "paper_time"),
        (dict(decoder_size=1.0), "decoder_size"),
    ):
        with pytest.raises(ValueError, match=field):
            ss.system(classes, **kw)
    with pytest.raises(ValueError, match="classes"):
        ss.system("syn_small")
    assert ss.system(classes, 1.0, 2.0, 8) is ss.system(classes, 1.0, 2.0, 8)
    with pytest.raises(ValueError, match="T"):  # no context length: no minibatches of sequences
        flows.train(ss.system(classes), "sgd", 1.0, 2, batch_size=2)


@pytest.mark.slow
def test_compare_holds_the_network_against_the_population_flow_at_first_order():
    """`flows.compare` on the spec: full-batch GD on the population loss against the gradient flow, eta_Z = 2
    eta_Y, from the random initialisation: the gap of the loss falls first-order in lr (fitted 1.0003, measured)."""
    system = ss.system(ss.syn_small(), 1.0, 2.0, init="random", seed=1)
    check = flows.compare(system, lrs=(0.4, 0.2, 0.1), t_end=4.0, observables=["loss", "common_mass"])
    assert abs(check.orders["loss"].slope - 1.0) < 0.05 and abs(check.orders["common_mass"].slope - 1.0) < 0.1
