"""Scan and Snap's optimiser limits (`solve_flow(optimizer=...)`, issue 12) against today's flow and optax.

syn_small (K = 2 classes, M = 22 tokens), full flow, float64. The Adam ODE is held against optax Adam on the
T -> inf network (the population loss, full batch: the (Y, Z) model of `train` with T -> inf), each group at its
own learning rate eta_g with b_g = 1 - c eta_g, at two learning-rate scales. The solves are `-m slow`; the
default run checks the same wiring on the vector fields (one small program each).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flows import optim_limits as ol
from flows.scan_snap import solve_flow, syn_small
from flows.scan_snap.flow import _optim_args, flow_args, full_vector_field, limit_problem, population_loss

CLASSES = syn_small()
C1, C2, EPS = 2.0, 5.0, 1e-8
TIGHT = dict(rtol=1e-12, atol=1e-14)


def _random_state(seed):
    rng = np.random.default_rng(seed)
    M, L = CLASSES.vocab_size, len(CLASSES.query_tokens)
    return {"Y": jnp.asarray(rng.normal(size=(M, M))), "Z": jnp.asarray(rng.normal(size=(L, M)))}


def test_gd_limit_field_is_todays_field():
    """The "gd" limit's field (autodiff of the population loss, clocks eta_Y, eta_Z) is the hand-written full
    field at random states, to 1e-12."""
    limit, args = limit_problem(CLASSES, 1.0, 2.0, "gd")
    flow = flow_args(CLASSES, 1.0, 2.0, query_rows=True)
    both = jax.jit(lambda y: (limit.vector_field(0.0, y, args), full_vector_field(0.0, y, flow)))
    for seed in range(2):
        got, want = both(_random_state(seed))
        for name in ("Y", "Z"):
            assert float(jnp.max(jnp.abs(got[name] - want[name]))) < 1e-12 * float(jnp.max(jnp.abs(want[name])))


def test_adam_limit_field_at_t0_is_the_first_adam_step():
    """At t = 0 the Adam limit's field is the first optax Adam step of each group (lr eta_g, one step = one
    unit of flow time): -eta_g g / (|g| + eps), to 1e-12."""
    eta = {"Y": 0.3, "Z": 0.7}
    limit, args = limit_problem(CLASSES, eta["Y"], eta["Z"], "adam", {"c1": C1, "c2": C2, "eps": EPS})
    opt = optax.multi_transform({g: optax.adam(eta[g], b1=1.0 - C1 * eta[g], b2=1.0 - C2 * eta[g], eps=EPS)
                                 for g in eta}, {"Y": "Y", "Z": "Z"})
    batch = flow_args(CLASSES, 1.0, 1.0, query_rows=True)

    @jax.jit
    def both(theta):
        field = limit.vector_field(0.0, limit.initial_state(theta), args)["theta"]
        with jax.numpy_dtype_promotion("standard"):
            updates, _ = opt.update(jax.grad(population_loss)(theta, batch), opt.init(theta), theta)
        return field, updates

    field, updates = both(_random_state(3))
    for name in ("Y", "Z"):
        assert float(jnp.max(jnp.abs(field[name] - updates[name]))) < 1e-12, name


def test_momentum_limit_steps_are_optax_heavy_ball_per_group():
    """Three semi-implicit Euler steps of flow time 1 / (1 - beta) (one optimiser step on the clock
    ts = step / (1 - beta)) of the momentum limit are three steps of optax.sgd(eta_g, momentum=beta) per group,
    to rounding: the per-group clocks and frictions (1 - beta)^2 / eta_g."""
    eta, beta = {"Y": 0.3, "Z": 0.7}, 0.9
    limit, args = limit_problem(CLASSES, eta["Y"], eta["Z"], "momentum", {"beta": beta})
    opt = optax.multi_transform({g: optax.sgd(eta[g], momentum=beta) for g in eta}, {"Y": "Y", "Z": "Z"})
    batch = flow_args(CLASSES, 1.0, 1.0, query_rows=True)
    h = 1.0 / (1.0 - beta)

    @jax.jit
    def both(theta0):
        theta, state, y = theta0, opt.init(theta0), limit.initial_state(theta0)
        for _ in range(3):
            updates, state = opt.update(jax.grad(population_loss)(theta, batch), state, theta)
            theta = optax.apply_updates(theta, updates)
            v = jax.tree_util.tree_map(lambda a, b: a + h * b, y["v"], limit.vector_field(0.0, y, args)["v"])
            dtheta = limit.vector_field(0.0, {"theta": y["theta"], "v": v}, args)["theta"]
            y = {"theta": jax.tree_util.tree_map(lambda a, b: a + h * b, y["theta"], dtheta), "v": v}
        return theta, y["theta"]

    got, want = both(_random_state(4))
    for name in ("Y", "Z"):
        assert float(jnp.max(jnp.abs(got[name] - want[name]))) < 1e-13, name


@pytest.mark.slow
def test_gd_limit_equals_todays_flow():
    """optimizer="gd" (autodiff of the population loss, per-group clocks eta_Y, eta_Z) is today's hand-written
    full flow to 1e-10 (states and observables)."""
    ts = np.linspace(0.0, 20.0, 6)
    today = solve_flow(CLASSES, 1.0, 2.0, ts, **TIGHT)
    gd = solve_flow(CLASSES, 1.0, 2.0, ts, optimizer="gd", **TIGHT)
    for name in ("Y", "Z"):
        assert np.max(np.abs(gd.ys[name] - today.ys[name])) < 1e-10, name
    for name in ("attention", "loss"):
        assert np.max(np.abs(gd.observables[name] - today.observables[name])) < 1e-10, name
    assert np.max(np.abs(today.ys["Z"][-1])) > 0.1  # the flow moved


RATIO = {"Y": 1.0, "Z": 2.0}  # eta_g = lr * RATIO[g]
HORIZON = 2.0  # lr * steps


def _adam_gap(lr):
    steps = round(HORIZON / lr)
    eta = {g: lr * r for g, r in RATIO.items()}
    ts = np.linspace(0.0, steps, 11)
    flow = solve_flow(CLASSES, eta["Y"], eta["Z"], ts, optimizer="adam",
                      optim_args={"c1": C1, "c2": C2, "eps": EPS}, rtol=1e-10, atol=1e-12)
    opt = optax.multi_transform({g: optax.adam(eta[g], b1=1.0 - C1 * eta[g], b2=1.0 - C2 * eta[g], eps=EPS)
                                 for g in RATIO}, {"Y": "Y", "Z": "Z"})
    qt = list(CLASSES.query_tokens)
    M = CLASSES.vocab_size
    batch = flow_args(CLASSES, 1.0, 1.0, query_rows=True)
    theta0 = {"Y": np.zeros((M, M)), "Z": np.zeros((len(qt), M))}
    disc = ol.run_optax(population_loss, theta0, batch, opt, steps, steps // 10)
    M2 = (11, M, M)
    assert flow.ys["Y"].shape == M2 and flow.ys["Z"].shape == M2 and set(flow.ys) >= {"m", "v", "m_weight"}
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(flow.ys))
    assert flow.observables["loss"][-1] < flow.observables["loss"][0]
    gap = max(np.max(np.abs(flow.ys["Y"] - np.asarray(disc["params"]["Y"]))),
              np.max(np.abs(flow.ys["Z"][:, qt] - np.asarray(disc["params"]["Z"]))))
    return float(gap), float(np.max(np.abs(flow.ys["Z"][-1])))


@pytest.mark.slow
def test_adam_limit_against_optax_adam_first_order():
    """sup over 11 saved steps of |(Y, Z)_optax - (Y, Z)_ODE|: lr 1e-2 -> 1e-3 shrinks it 5-20x."""
    (big, moved), (small, _) = _adam_gap(1e-2), _adam_gap(1e-3)
    assert moved > 0.05
    assert 5.0 <= big / small <= 20.0, (big, small)


@pytest.mark.parametrize("kwargs, field", [
    (dict(optimizer="rmsprop"), "optimizer"),
    (dict(optimizer="adam", reduced=True), "reduced"),
    (dict(optimizer="momentum"), "beta"),
    (dict(optimizer="momentum", optim_args={"beta": 1.0}), "beta"),
    (dict(optimizer="adam", optim_args={"c1": 1.0}), "c2"),
    (dict(optimizer="adam", optim_args={"lr": 1.0}), "unknown"),
    (dict(optimizer="sign", optim_args={"eps": 0.0}), "eps"),
    (dict(optim_args={"eps": 1.0}), "optimizer"),
])
def test_bad_optimizer_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        solve_flow(CLASSES, 1.0, 1.0, [0.0, 1.0], **kwargs)


def test_adam_defaults_are_trains():
    """optimizer="adam" without c1, c2 takes optax.adam's defaults b1 = 0.9, b2 = 0.999 (what `train` uses) at
    each group's learning rate: c_g = (1 - b) / eta_g."""
    got = _optim_args("adam", None, 0.1, 0.2)
    assert got["c1"] == pytest.approx({"Y": 1.0, "Z": 0.5}, rel=1e-12)
    assert got["c2"] == pytest.approx({"Y": 0.01, "Z": 0.005}, rel=1e-9)
    assert got["eps"] == 1e-8
