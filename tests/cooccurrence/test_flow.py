"""The exact Gram ODE: against jax.grad of the explicit loss, and against the GD-trained network."""

import jax
import numpy as np
import pytest

from flows import cooccurrence as co
from flows.training import event_time

SMALL = dict(n=12, L=4, d=3 + co.num_random_slots(12, 4), m=16, m1=8)


def _pushed_gradient(params, a, args):
    """-grad of the explicit network loss, pushed forward to the Gram state by jax.jvp."""
    grads = jax.grad(co.network_loss)(params, a, args["tokens"], args["labels"])
    vel = jax.tree_util.tree_map(lambda g: -g, grads)
    _, push = jax.jvp(lambda p: co.gram_state(p, a), (params,), (vel,))
    return push


@jax.jit  # one program per shape (eager, each op of the loss, its gradient and the RHS compiled on its own)
def _rhs_and_reference(params, a, args):
    state = co.gram_state(params, a)
    p = co.observables.attention(state["A"], args["tokens"], args["sqrt_m"])
    return co.vector_field(0.0, state, args), _pushed_gradient(params, a, args), p


@pytest.mark.parametrize(
    "seed, variant, init, scale",
    [(0, "theory", "theory", 1.0), (1, "theory", "theory", 6.0), (2, "paper", "kaiming", 1.0)],
)
def test_rhs_equals_autodiff_pushforward(seed, variant, init, scale):
    d = SMALL["d"] if variant == "theory" else 9
    cfg = co.Config(**{**SMALL, "d": d}, variant=variant, init=init, seed=seed)
    args = co.spec.data(cfg, num_test=8)
    params, a = co.init_params(cfg)
    # larger scores than at init, so that attention is far from uniform
    params = {k: np.asarray(v) for k, v in params.items()}
    params = {**params, "W_K": scale * params["W_K"], "W_Q": scale * params["W_Q"]}
    rhs, ref, p = jax.tree_util.tree_map(np.asarray, _rhs_and_reference(params, a, args))
    if scale > 1:
        assert float(np.max(np.abs(p - 1.0 / cfg.L))) > 0.05  # really non-uniform
    for k in ref:
        err = float(np.max(np.abs(rhs[k] - ref[k])))
        scale_k = max(1.0, float(np.max(np.abs(ref[k]))))
        assert err <= 1e-10 * scale_k, (k, err)


def _rel(traj, rec, name):
    a = np.asarray(traj.observables[name])
    b = np.asarray(rec[name])
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# GD at lr = 1e-2 and 5e-3 and the flow, t in [0, 20]: the session fixture gd_and_flow (conftest.py), shared
# with test_pins.py. GD is the Euler discretisation of the flow: its error is first order in lr, with the
# constant of test_pins.py (C_TOL = 0.5, measured <= 0.28 for every observable)
C_TOL = 0.5


def test_flow_matches_gd_network(gd_and_flow):
    _, _, records, traj = gd_and_flow
    lr = min(records)
    rec = records[lr]
    assert rec.ts[-1] == pytest.approx(20.0)
    # the run does something: zero training error and a loss that fell by >100x
    assert rec["train_error"][-1] == 0.0 and rec["loss"][-1] < 1e-2 * rec["loss"][0]
    for name in ("loss", "G", "S", "test_loss", "group_loss"):
        assert _rel(traj, rec, name) <= C_TOL * lr, name
    # pointwise relative error of the loss curve as well (measured 0.19 lr; max-relative ones <= 0.08 lr here)
    rel_pointwise = np.max(np.abs(np.asarray(traj.observables["loss"]) - rec["loss"]) / rec["loss"])
    assert rel_pointwise <= C_TOL * lr, rel_pointwise


def test_gd_at_a_second_rate_reuses_the_compiled_program(gd_and_flow):
    # the fixture trains lr = 1e-2 (2000 steps) and 5e-3 (4000 steps), 20 saves each: the same shapes, so the
    # second run's program comes from the cache (the rate is in the optimiser state, not in the program)
    _, _, records, _ = gd_and_flow
    first, second = records[max(records)], records[min(records)]
    assert second.compile_s == 0.0 or first.compile_s == 0.0
    assert not np.allclose(first["loss"][1:], second["loss"][1:])  # and it is another run, not a stale one
    assert second.steps[-1] == 2 * first.steps[-1]


def test_flow_vs_gd_error_shrinks_linearly_in_lr(gd_and_flow):
    _, _, records, traj = gd_and_flow
    big_lr, small_lr = max(records), min(records)
    for name in ("loss", "G"):
        big = _rel(traj, records[big_lr], name)
        small = _rel(traj, records[small_lr], name)
        assert 0.8 * big_lr / small_lr <= big / small <= 1.2 * big_lr / small_lr, (name, big, small)


def test_same_observables_and_T1(gd_and_flow):
    cfg, data, records, traj = gd_and_flow
    rec = records[min(records)]
    assert set(traj.observables) == set(rec.observables)
    for name in rec.observables:
        assert np.shape(traj.observables[name]) == np.shape(rec[name]), name
    assert np.shape(rec["group_loss"]) == (len(rec.ts), 4) and np.shape(rec["G"]) == (len(rec.ts), 3)
    # T1 from the flow event vs the first zero-error step of GD (lr = 1e-3)
    T1 = float(traj.t_event)
    assert 0 < T1 < 20
    steps = int(np.ceil(2 * T1 / 1e-3))
    fine = co.train(cfg, "gd", 1e-3, steps, save_every=1, num_test=len(data["test_tokens"]))
    t_gd = fine.ts[np.argmax(fine["train_error"] == 0.0)]
    assert abs(t_gd - T1) <= 0.02 * T1 + 2e-3, (t_gd, T1)
    # the same T1 found on the record by name, as flows.Event finds it on the flow (min_margin up through 0)
    t_rec = event_time(fine, "min_margin", 0.0, direction=True)
    assert abs(t_rec - T1) <= 0.02 * T1 + 2e-3, (t_rec, T1)


def test_sgd_and_adam_train():
    cfg = co.Config(**SMALL, seed=2)
    for opt, bs in (("sgd", 4), ("adam", None)):
        rec = co.train(cfg, opt, 1e-2, 400, batch_size=bs, save_every=100)
        assert rec.steps.tolist() == [0, 100, 200, 300, 400]
        assert np.all(np.isfinite(rec["loss"])) and rec["loss"][-1] < rec["loss"][0]
    with pytest.raises(ValueError, match="batch_size"):
        co.train(cfg, "sgd", 1e-2, 10, batch_size=100)


def test_solve_flow_validates_ts():
    cfg = co.Config(**SMALL)
    with pytest.raises(ValueError, match="ts"):
        co.solve_flow(cfg, [1.0, 2.0])


def test_observe_equals_every_observable():
    """`observe` (one attention evaluation, used at save points) equals the separate observables."""
    cfg = co.Config(**SMALL, seed=4)
    args = co.spec.data(cfg, num_test=16)
    params, a = co.init_params(cfg)
    params = {**params, "W_K": 5.0 * params["W_K"], "W_Q": 5.0 * params["W_Q"]}

    @jax.jit  # one program for both (eager, every op of every observable compiled on its own)
    def both(params):
        state = co.gram_state(params, a)
        return (
            co.observables.observe(0.0, state, args),
            {name: fn(0.0, state, args) for name, fn in co.observables.OBSERVABLES.items()},
        )

    together, separate = jax.tree_util.tree_map(np.asarray, both(params))
    assert set(together) == set(co.observables.OBSERVABLES)
    for name in co.observables.OBSERVABLES:
        np.testing.assert_allclose(together[name], separate[name], rtol=1e-13, atol=1e-15, err_msg=name)
