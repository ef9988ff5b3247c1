"""JoMA as a spec (flows.joma.system) on the shared driver: the exp invariant along the driver's gradient flow
(1e-8) and along GD at first order in lr (flows.compare, with its interval), training through the driver against
a literal optax loop (full batch and minibatches of classes, the seeds' streams), the named limit "w_flow"
against the joint flow for nonlinear MLPs, the start `params0` and its invariant constant, and the bad input.
The generic driver contracts (seed, per-group lr, momentum clock, failed runs, optimiser limits) run over the
registered demo in tests/test_vocabulary.py and tests/test_optimizer_contract.py."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flows
from flows import joma, registry
from flows.joma import flow, spec

SMALL = dict(n_distinct=3, n_common=3, n_classes=5, d=8, init_scale=0.3)
T_END = 20.0


@pytest.fixture(scope="module")
def exp_compare():
    """GD on the official exp-attention network at three rates to t = 20 beside the driver's gradient flow."""
    return flows.compare(
        joma.system(joma.Config(attention="exp")),
        lrs=(0.1, 0.05, 0.025),
        t_end=T_END,
        saves=10,
        observables=("invariant_gap", "loss"),
    )


def test_exp_invariant_is_exact_along_the_drivers_flow(exp_compare):
    flow_gap = np.asarray(exp_compare.flow.observables["invariant_gap"])
    z = np.asarray(exp_compare.flow.ys["z"])
    assert np.max(np.abs(z[-1] - z[0])) > 1e-3  # z moved: the invariant is not trivially constant
    assert np.max(flow_gap) < 1e-8
    pred = exp_compare.predictions["invariant_exact_along_flow"]
    assert pred["holds"] is True and pred["measured"] == pytest.approx(np.max(flow_gap), rel=1e-12)


def test_exp_invariant_gap_along_gd_is_first_order_in_lr(exp_compare):
    """The network's invariant gap (the flow's is < 1e-8) at lr = 0.1, 0.05, 0.025: order 1 within its 95%
    interval, which is narrower than 0.2 (order 2 or 1/2 would fail)."""
    fit = exp_compare.orders["invariant_gap"]
    lo, hi = fit.slope_ci
    assert lo <= 1.0 <= hi and hi - lo < 0.2, (fit.slope, fit.slope_ci)
    gaps = exp_compare.gaps["invariant_gap"]
    assert np.all(gaps > 1e4 * np.max(np.asarray(exp_compare.flow.observables["invariant_gap"])))
    assert exp_compare.verdicts["invariant_gap"] is True and exp_compare.verdicts["loss"] is True


def _literal_loop(cfg, optimizer, lr, steps, batch_size=None):
    """Training written out: jax.grad of the loss, optax's update, the minibatch of step i drawn with the i-th
    split of the config's "batch" key (permutation of the classes, the first batch_size), observables by
    model.observe on the full batch at every step."""
    loss = joma.make_loss(cfg.attention, cfg.mlp)
    observe = jax.jit(joma.make_observe(cfg.attention, cfg.mlp))
    grad = jax.jit(jax.grad(loss))
    params, data = joma.init_params(cfg), joma.observe_data(cfg)
    opt_state = optimizer.init(params)
    key = cfg.key("batch")
    out = [observe(params, data)]
    for _ in range(steps):
        batch = data
        if batch_size is not None:
            key, sub = jax.random.split(key)
            idx = jax.random.permutation(sub, cfg.n_classes)[:batch_size]
            batch = {**data, "x": data["x"][idx], "y": data["y"][idx]}
        updates, opt_state = optimizer.update(grad(params, batch), opt_state, params)
        params = optax.apply_updates(params, updates)
        out.append(observe(params, data))
    return {k: np.array([float(o[k]) for o in out]) for k in out[0]}, params


@pytest.mark.parametrize(
    "attention, mlp, optimizer, batch_size",
    [
        ("softmax", "relu", "gd", None),
        pytest.param("exp", "silu", "sgd", 2, marks=pytest.mark.slow),
        ("linear", "linear", "adam", 3),
    ],
)
def test_train_through_the_driver_is_a_literal_optax_loop(attention, mlp, optimizer, batch_size):
    cfg = joma.Config(attention=attention, mlp=mlp, seed=3, **SMALL)
    lr, steps = 0.2, 12
    rec = joma.train(cfg, optimizer, lr, steps, save_every=1, batch_size=batch_size)
    opt = optax.adam(lr) if optimizer == "adam" else optax.sgd(lr)
    with jax.numpy_dtype_promotion("standard"):  # optax.adam's bias correction: float ** int32 step count
        want, final = _literal_loop(cfg, opt, lr, steps, batch_size)
    np.testing.assert_allclose(rec.ts, lr * np.arange(steps + 1), rtol=1e-15)
    assert set(rec.observables) == set(want)
    for k, v in want.items():
        np.testing.assert_allclose(rec[k], v, rtol=1e-12, atol=1e-14, err_msg=k)
    for k in ("W", "z"):
        np.testing.assert_allclose(rec.params[k], final[k], rtol=1e-12, atol=1e-14, err_msg=k)
    assert np.max(np.abs(np.diff(want["loss"]))) > 1e-4  # it trained
    other = joma.train(cfg.replace(seed=4), optimizer, lr, steps, save_every=1, batch_size=batch_size)
    same = flows.train(joma.system(cfg), optimizer, lr, steps, save_every=1, batch_size=batch_size, seed=4)
    np.testing.assert_array_equal(same["loss"], other["loss"])  # the driver's seed re-seeds the config
    assert np.max(np.abs(other["loss"] - rec["loss"])) > 1e-6


@pytest.mark.slow  # the joint flow is held against autodiff in test_flow.py
def test_w_flow_is_the_joint_flow_for_a_nonlinear_mlp():
    """The named limit "w_flow" (flow.reduced_field: W alone, z = c + sum v^2 / (2 tau)) from the start's W and
    the driver's joint gradient flow of (W, z) are one trajectory (exp attention, SiLU MLP; the official size
    with a linear MLP in test_flow.py)."""
    system = joma.system(joma.Config(attention="exp", mlp="silu", **SMALL))
    ts = np.linspace(0.0, 10.0, 6)
    joint = flows.solve_flow(system, ts)
    red = flows.solve_flow(system, ts, reduced="w_flow")
    W = np.asarray(joint.ys["W"])
    scale = float(np.max(np.abs(W[-1] - W[0])))
    assert scale > 1e-2
    np.testing.assert_allclose(red.ys, W, rtol=0, atol=1e-8 * scale)
    for k in ("loss", "entropy", "invariant_gap"):
        np.testing.assert_allclose(red.observables[k], joint.observables[k], rtol=1e-8, atol=1e-10, err_msg=k)
    z = jax.vmap(lambda w: flow.z_of_W(w, joma.observe_data(system.config), "exp"))(red.ys)
    np.testing.assert_allclose(z, joint.ys["z"], rtol=0, atol=1e-8)


def test_minibatch_loss_and_gradients_are_those_of_its_classes():
    """A batch of some rows of ("x", "y"): the loss is the mean of the full batch's per-class losses over those
    classes, and flow.joint_gradients (G divided by the batch's size) equals autodiff on it."""
    cfg = joma.Config(attention="softmax", mlp="silu", **SMALL)
    rng = np.random.default_rng(0)
    p = {"W": jnp.asarray(0.5 * rng.normal(size=(8, 5))), "z": jnp.asarray(0.5 * rng.normal(size=6))}
    pop = joma.population(cfg)
    loss = jax.jit(joma.make_loss("softmax", "silu"))
    per_class = [float(loss(p, {**pop, "x": pop["x"][k : k + 1], "y": pop["y"][k : k + 1]})) for k in range(5)]
    assert np.mean(per_class) == pytest.approx(float(loss(p, pop)), rel=1e-13)
    idx = jnp.array([4, 1])
    batch = {**pop, "x": pop["x"][idx], "y": pop["y"][idx]}
    assert float(loss(p, batch)) == pytest.approx((per_class[4] + per_class[1]) / 2, rel=1e-13)
    want, got = jax.grad(loss)(p, batch), flow.joint_gradients(p, batch, "softmax", "silu")
    for k in ("W", "z"):
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(want[k]))))


def test_params0_is_the_start_and_the_invariants_constant():
    cfg = joma.Config(attention="exp", **SMALL)
    p0 = {"W": joma.init_params(cfg)["W"] + 0.1, "z": joma.init_params(cfg)["z"] - 0.2}
    traj = joma.solve_flow(cfg, [0.0, 1.0], params0=p0)
    np.testing.assert_array_equal(traj.ys["z"][0], p0["z"])
    assert float(traj.observables["invariant_gap"][0]) == 0.0 and float(traj.observables["invariant_gap"][1]) < 1e-9
    rec = joma.train(cfg, "gd", 0.1, 2, save_every=1, params0=p0)
    assert float(rec["invariant_gap"][0]) == 0.0
    default = joma.train(cfg, "gd", 0.1, 2, save_every=1)
    assert abs(float(default["loss"][0]) - float(rec["loss"][0])) > 1e-3
    data = joma.system(cfg, p0).dataset(joma.system(cfg, p0).keys()["data"])
    np.testing.assert_allclose(data["z_offset"], joma.observe_data(cfg, p0)["z_offset"], rtol=0, atol=0)


def test_system_is_cached_registered_and_checks_its_input():
    cfg = joma.Config(attention="exp", **SMALL)
    system = joma.system(cfg)
    assert system is joma.system(cfg) and system.name == "joma" and system.config == cfg
    assert tuple(system.reduced) == joma.REDUCED and system.rows == joma.ROWS
    assert registry.entry("joma").demo.system == "flows.joma.spec:demo"
    assert registry.entry("joma").derivations == ("derivations.joma:ExpReducedDerivation",)
    assert spec.demo().config.attention == "linear"
    with pytest.raises(ValueError, match="config"):
        joma.system("exp")
    with pytest.raises(ValueError, match="params0"):
        joma.system(cfg, {"W": np.zeros((3, 3)), "z": np.zeros(6)})
    with pytest.raises(ValueError, match="params0"):
        joma.solve_flow(cfg, [0.0, 1.0], y0=joma.init_params(cfg))
    with pytest.raises(ValueError, match="reduced"):
        joma.solve_flow(cfg, [0.0, 1.0], reduced="v_flow")
    with pytest.raises(ValueError, match="batch_size"):
        joma.train(cfg, "sgd", 0.1, 2, batch_size=6)  # more than the 5 classes


def test_sgd_sde_over_the_classes_runs():
    """noise=True: the SGD SDE over the rows (one per class) of the data, finite, the loss falling."""
    cfg = joma.Config(attention="softmax", **SMALL)
    traj = joma.solve_flow(cfg, np.linspace(0.0, 2.0, 3), noise=True, optim_args={"lr": 0.1}, batch_size=2)
    loss = np.asarray(traj.observables["loss"])
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]


def test_predictions_are_empty_for_softmax_and_fail_above_the_tolerance():
    traj = joma.solve_flow(joma.Config(attention="softmax", **SMALL), [0.0, 1.0])
    assert "invariant_gap" not in traj.observables and joma.system(joma.Config(**SMALL)).predictions(traj) == {}
    broken = types.SimpleNamespace(observables={"invariant_gap": np.array([0.0, 2 * spec.INVARIANT_TOL])})
    pred = spec.demo().predictions(broken)["invariant_exact_along_flow"]
    assert pred["holds"] is False and pred["measured"] == 2 * spec.INVARIANT_TOL
