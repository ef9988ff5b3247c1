"""`flows.compare`: the saved steps lined up with the flow's times on the optimiser's clock, the gap per
learning rate against an independent computation (each run held against its own solve at its own times), the
fitted order of gradient descent (first order in lr) and of heavy ball at a fixed beta, a verdict that can fail,
the figure and the run record."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows.experiments.records import is_complete


def _data(key):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (16, 2))
    return {"x": x, "y": jnp.tanh(x @ jax.random.normal(kw, (2,)))}


def _init(key):
    return {"W": 0.5 * jax.random.normal(key, (3, 2)), "a": jnp.full((3,), 0.3)}


def _loss(params, batch):
    return 0.5 * jnp.mean((jnp.tanh(batch["x"] @ params["W"].T) @ params["a"] - batch["y"]) ** 2)


def _observe(params, data):
    return {"loss": _loss(params, data), "a": params["a"], "W": params["W"]}


NET = flows.System(name="tiny", init=_init, loss=_loss, data=_data, observe=_observe)
LRS = (0.2, 0.1, 0.05)


@pytest.fixture(scope="module")
def gd(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    return flows.compare(NET, LRS, 2.0, saves=8, out=out), out


def test_the_saved_steps_sit_on_the_flows_clock_and_the_gaps_are_each_runs_own(gd):
    cmp, _ = gd
    assert set(cmp.observables) == {"loss", "a", "W"} and cmp.optimizer == "gd"
    for lr, rec, aligned in zip(LRS, cmp.records, cmp.aligned, strict=True):
        steps = round(2.0 / lr)
        assert rec.steps[-1] == steps and len(rec.steps) == 9
        np.testing.assert_allclose(rec.ts, lr * rec.steps, rtol=1e-15)
        own = flows.solve_flow(NET, rec.ts)  # the flow at this run's times alone
        for k in cmp.observables:
            # one solve saved at every run's times, another at this run's: equal to the solver's tolerance (a
            # misaligned time would be off by the change of the flow over a save interval, ~1e-2)
            np.testing.assert_allclose(aligned[k], own.observables[k], rtol=1e-6, atol=1e-8, err_msg=k)
            gap = np.max(np.abs(np.asarray(rec[k]) - np.asarray(own.observables[k])))
            assert cmp.gaps[k][LRS.index(lr)] == pytest.approx(gap, rel=1e-3, abs=1e-8), k
    assert np.all(np.diff(cmp.gaps["loss"]) < 0)  # a smaller lr, a smaller gap


def test_gradient_descent_is_first_order_in_lr_and_the_verdict_can_fail(gd):
    cmp, _ = gd
    for k, fit in cmp.orders.items():
        assert 0.85 < fit.slope < 1.15, (k, fit.slope)
        assert fit.slope_ci[0] <= fit.slope <= fit.slope_ci[1]
    assert cmp.holds and all(cmp.verdicts.values())
    strict = flows.comparison.Comparison(**{**cmp.__dict__, "expected_order": 2.0})
    assert not strict.holds and not any(strict.verdicts.values())


def test_the_record_and_the_figure(gd):
    cmp, out = gd
    assert is_complete(out)
    metrics = json.loads((out / "metrics.json").read_text())
    order = metrics["order_loss"]
    assert order["holds"] is True and order["measured"] == pytest.approx(cmp.orders["loss"].slope)
    assert order["interval"] == pytest.approx(list(cmp.orders["loss"].slope_ci))
    series = np.load(out / "series.npz")
    np.testing.assert_allclose(series["gap_loss"], cmp.gaps["loss"])
    np.testing.assert_allclose(series["net1_ts"], cmp.records[1].ts)
    assert (out / "compare.png").stat().st_size > 10_000
    fig = cmp.figure()
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 4  # loss, a, W (6 entries), the gap panel
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert len(panels["loss"].get_lines()) == len(LRS) + 1  # the network at each lr, the flow
    assert len(panels["W"].get_lines()) == 6 * (len(LRS) + 1)
    with pytest.raises(ValueError, match="observables"):
        cmp.figure(["nope"])


def test_heavy_ball_at_a_fixed_beta_approaches_the_gradient_flow_on_its_clock():
    cmp = flows.compare(NET, (0.04, 0.02, 0.01), 1.0, optimizer="momentum", optim_args={"beta": 0.5}, saves=4)
    for lr, rec in zip(cmp.lrs, cmp.records, strict=True):
        assert rec.steps[-1] == round(0.5 / lr) and rec.optimizer == "momentum"
        np.testing.assert_allclose(rec.ts, lr * rec.steps / 0.5, rtol=1e-15)
    assert 0.8 < cmp.orders["loss"].slope < 1.2 and cmp.holds


def test_adam_at_fixed_c_approaches_the_adam_ode():
    """optax.adam(lr, b1 = 1 - c1 lr, b2 = 1 - c2 lr) against the Adam ODE of (c1, c2): first order in lr."""
    cmp = flows.compare(
        NET, (0.02, 0.01, 0.005), 1.0, optimizer="adam", optim_args={"c1": 5.0, "c2": 2.0}, saves=4, observables="loss"
    )
    assert [rec.optimizer for rec in cmp.records] == ["adam"] * 3
    assert 0.8 < cmp.orders["loss"].slope < 1.2 and cmp.holds, (cmp.gaps, cmp.orders["loss"].slope)


def _predictions(flow):
    final = float(flow.observables["loss"][-1])
    return {
        "loss_falls": {"measured": final, "expected": "below the initial loss", "holds": final < 0.2},
        "later": {"measured": None, "expected": "decided at a larger width", "holds": None, "tested_at": "m = 64"},
    }


def test_two_learning_rates_give_gaps_without_an_order_and_the_predictions_are_recorded(tmp_path):
    cmp = flows.compare(NET.replace(predictions=_predictions), (0.2, 0.1), 0.5, saves=2, observables=["loss"])
    assert cmp.observables == ("loss",) and cmp.orders == {"loss": None} and cmp.verdicts == {"loss": None}
    assert cmp.holds and cmp.predictions == _predictions(cmp.flow)
    metrics = json.loads((cmp.save(tmp_path) / "metrics.json").read_text())
    assert metrics["order_loss"]["holds"] is None and metrics["later"]["tested_at"] == "m = 64"
    assert metrics["loss_falls"]["holds"] is (float(cmp.flow.observables["loss"][-1]) < 0.2)
    with pytest.raises(ValueError, match="System.predictions"):
        flows.compare(NET.replace(predictions=lambda flow: {"x": 1.0}), (0.2, 0.1), 0.5, saves=2)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(lrs=(0.1,)), "lrs"),
        (dict(lrs=(0.1, 0.1)), "lrs"),
        (dict(lrs=(0.1, -0.05)), "lrs"),
        (dict(t_end=0.0), "t_end"),
        (dict(optimizer="sign"), "optimizer"),
        (dict(optimizer="momentum"), "beta"),
        (dict(optimizer="adam", optim_args={"c1": 1.0}), "c2"),
        (dict(optimizer="gd", optim_args={"beta": 0.5}), "optim_args"),
        (dict(optimizer="sgd"), "batch_size"),
        (dict(saves=0), "saves"),
        (dict(tolerance=-1.0), "tolerance"),
        (dict(expected_order=0.0), "expected_order"),
    ],
)
def test_bad_arguments_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        flows.compare(NET, **{"lrs": LRS, "t_end": 1.0, **kw})
    with pytest.raises(ValueError, match="system"):
        flows.compare(_loss, LRS, 1.0)
