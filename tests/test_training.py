"""flows.training: the shared loop against closed forms (GD and heavy ball on a quadratic), the optimiser factory's
per-group rates and scales, the saved steps, and the one rule for a failed run."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from flows import training


def _quadratic_run(optimizer, lr, momentum, save, *, labels=None, scale=None, x0=1.0, batch_loss=False):
    params = {"a": jnp.asarray([x0, 2 * x0]), "b": jnp.asarray([3 * x0])}
    opt = training.make_optimizer(optimizer, lr, momentum, labels=labels, scale=scale)

    def build():
        return training.training_program(
            lambda p, data, batch: 0.5 * sum(jnp.sum(v**2) for v in p.values()),
            lambda p, data: {"x": p["a"][0], "sq": p["b"]},
            opt,
            snapshot=lambda p: {"a": p["a"]},
        )

    structure = (optimizer, momentum is not None, labels is not None)
    return training.run_training(
        "test.quadratic",
        structure,
        build,
        params,
        opt.init(params),
        jnp.zeros(2, jnp.uint32),
        np.asarray(save),
        {},
        batch_loss=batch_loss,
    )


def test_gd_on_a_quadratic_is_geometric_at_the_saved_steps():
    save = training.save_steps(10, 3)
    assert save.tolist() == [0, 3, 6, 9, 10]
    final, series, snaps, losses, bad, _, _ = _quadratic_run("gd", 0.1, None, save, batch_loss=True)
    assert bad == -1
    np.testing.assert_allclose(series["x"], 0.9**save, rtol=1e-14)
    np.testing.assert_allclose(snaps["a"][:, 1], 2 * 0.9**save, rtol=1e-14)
    np.testing.assert_allclose(losses, 0.5 * 14 * 0.81 ** np.arange(10), rtol=1e-13)
    np.testing.assert_allclose(final["b"], 3 * 0.9**10, rtol=1e-14)


def test_heavy_ball_recursion_and_per_group_scaled_rates():
    """Heavy ball v <- beta v + g, x <- x - lr v; group "b" at rate lr * 2 * scale 3."""
    lr, beta, steps = 0.05, 0.5, 6
    labels = {"a": "first", "b": "second"}
    save = training.save_steps(steps, 1)
    _, series, _, _, _, _, _ = _quadratic_run(
        "sgd", {"first": lr, "second": 2 * lr}, beta, save, labels=labels, scale={"second": 3.0}
    )

    def literal(rate):
        x, v, out = 1.0, 0.0, [1.0]
        for _ in range(steps):
            v = beta * v + x
            x -= rate * v
            out.append(x)
        return np.asarray(out)

    np.testing.assert_allclose(series["x"], literal(lr), rtol=1e-14)
    np.testing.assert_allclose(series["sq"][:, 0], 3 * literal(6 * lr), rtol=1e-13)
    np.testing.assert_allclose(training.flow_time(lr, save, beta), lr * save / (1 - beta), rtol=0, atol=0)


def test_a_failed_run_is_truncated_and_carries_its_record_as_trajectory_too():
    """GD at lr = 3 on 0.5 x^2 multiplies x by -2 a step (exactly): the update 3 x of the entry x_0 = 3 overflows
    (9 * 2^1021 > the largest float64) in step 1022, the first non-finite one."""
    save = training.save_steps(1100, explicit=[*range(0, 1101, 100), 1022])  # the first non-finite step saved too
    final, series, _, losses, bad, _, _ = _quadratic_run("gd", 3.0, None, save, batch_loss=True)
    assert bad == 1022
    with pytest.raises(training.TrainingError, match="non-finite at step") as info:
        training.finish(save, series, bad, params=final, clock=3.0, batch_loss=losses, optimizer="gd", lr=3.0)
    err = info.value
    assert err.step == bad and err.record is err.trajectory
    assert err.record.steps.tolist() == list(range(0, 1001, 100))
    assert len(err.record.batch_loss) == bad and np.all(np.isfinite(err.record.x))
    np.testing.assert_allclose(err.record.ts, 3.0 * err.record.steps, rtol=0, atol=0)


def test_record_vocabulary_and_validation():
    rec = training.NetworkRecord(
        ts=np.arange(2.0),
        steps=np.arange(2),
        observables={"loss": np.ones(2)},
        params={},
        optimizer="gd",
        lr=0.1,
        extras={"batch_loss": np.zeros(1)},
    )
    assert rec["loss"] is rec.loss and rec.batch_loss.shape == (1,)
    with pytest.raises(AttributeError):
        _ = rec.nothing
    assert training.check_lr({"Y": 1, "Z": 2.0}, ("Y", "Z")) == {"Y": 1.0, "Z": 2.0}
    assert training.clock_rate({"Y": 1.0, "Z": 2.0}) == 2.0
    with pytest.raises(ValueError, match="lr must be a number or a dict with the keys"):
        training.check_lr({"Y": 1.0}, ("Y", "Z"))
    with pytest.raises(ValueError, match="lr"):
        training.check_lr(-1.0, ("Y", "Z"))
    with pytest.raises(ValueError, match="momentum is for optimizer='sgd' only"):
        training.check_momentum("adam", 0.5)
    assert training.check_momentum("gd", None) == 0.0
    assert training.save_steps(10, explicit=[5, 2, 5]).tolist() == [0, 2, 5]
    with pytest.raises(ValueError, match="save_steps"):
        training.save_steps(10, explicit=[11])
    with pytest.raises(ValueError, match="save_every"):
        training.save_steps(10, 0)
    assert math.isnan(
        training.NetworkRecord(ts=0, steps=0, observables={}, params={}, optimizer="gd", lr=1.0).compile_s
    )


def test_a_save_grid_beyond_max_saves_is_refused_before_it_is_built():
    from flows.training import MAX_SAVES, save_steps

    assert save_steps(10, 5).tolist() == [0, 5, 10]
    assert save_steps(MAX_SAVES - 2, 1).size == MAX_SAVES - 1
    with pytest.raises(ValueError, match="save_every"):
        save_steps(10**9 + 1, 1)  # 8 GB of step numbers if it were built
