"""`run_optax` and `run_sgd` follow the failed-run rule of `flows.training.finish` (a `TrainingError` carrying
the record truncated before the first non-finite step), and every bad input of the limits and the discrete runs
is a `ValueError` naming the argument and the fix (not a JAX `TypeError`, a `KeyError` or a silent NaN).

The diverging runs are exact: GD at lr = 3 on 1/2 w^2 multiplies w by -2 a step, so the entry w = 3 reaches
3 * 2^1021 at step 1021 and its update 9 * 2^1021 overflows float64 in step 1022, the first non-finite step;
saving every 73 steps saves step 1022 itself (14 * 73), so a record that kept it would show.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flows import TrainingError
from flows import optim_limits as ol
from flows.optim_limits.noise import run_sgd, sgd_sde, solve_sgd_sde
from tests.fuzzing import raises_naming

LR, STEPS, EVERY, FIRST_BAD = 3.0, 1095, 73, 1022
KEPT = np.arange(0, FIRST_BAD, EVERY)  # the saved steps before the first non-finite one (0, 73, ..., 949)
THETA0 = {"w": jnp.asarray([3.0, 0.75]), "b": jnp.asarray(0.0)}


def loss(theta, batch):
    return 0.5 * jnp.sum(theta["w"] ** 2) + 0.5 * theta["b"] ** 2 * batch


def per_sample_loss(theta, sample):
    return 0.5 * jnp.sum((theta["w"] - sample) ** 2) + 0.5 * theta["b"] ** 2


def gd_closed_form(steps):
    """w after `steps` GD steps at lr = 3: w0 (-2)^steps (exact in float64 below the overflow)."""
    return np.asarray(THETA0["w"])[None, :] * (-2.0) ** np.asarray(steps, dtype=float)[:, None]


@pytest.mark.parametrize("hyper", [None, LR])
def test_run_optax_diverging_raises_with_the_truncated_record(hyper):
    """A diverging learning rate raises TrainingError at step 1022 (not a silent NaN); its record is run_optax's
    dict at the saved steps before it, equal to the closed form, and the message says what to do."""
    optimizer = optax.sgd(LR) if hyper is None else optax.sgd
    with pytest.raises(TrainingError, match=f"non-finite at step {FIRST_BAD}") as info:
        ol.run_optax(loss, THETA0, jnp.asarray(1.0), optimizer, STEPS, EVERY, hyper=hyper)
    err = info.value
    assert err.step == FIRST_BAD and err.record is err.trajectory
    assert "lower the learning rate" in str(err) and f"{len(KEPT)} saved steps" in str(err)
    np.testing.assert_array_equal(err.record["steps"], KEPT)
    np.testing.assert_array_equal(err.record["params"]["w"], gd_closed_form(KEPT))
    np.testing.assert_array_equal(err.record["params"]["b"], np.zeros(len(KEPT)))
    ok = ol.run_optax(loss, THETA0, jnp.asarray(1.0), optimizer, EVERY * 13, EVERY, hyper=hyper)  # stops before
    np.testing.assert_array_equal(ok["params"]["w"], gd_closed_form(ok["steps"]))


def test_run_sgd_diverging_or_a_nan_observable_raises_with_the_truncated_record():
    """run_sgd (two runs, data all 0: every batch mean is 0, so SGD at lr = 3 is the GD above): TrainingError at
    step 1022 with the record of both runs truncated before it; an observable that turns NaN at step 146 (the
    parameters still finite) stops the record there, on the same compiled program."""
    data = jnp.zeros((4, 2))

    def probe(t, theta, args):  # NaN from the time args["nan_from"] on
        return jnp.where(t >= args["nan_from"], jnp.nan, 0.0)

    obs = {"w": lambda t, theta, args: theta["w"], "probe": probe}
    opts = dict(num_runs=2, seed=0, save_every=EVERY, observables=obs)
    with pytest.raises(TrainingError, match=f"non-finite at step {FIRST_BAD}") as info:
        run_sgd(per_sample_loss, THETA0, data, 2, LR, STEPS, extra_args={"nan_from": 1e300}, **opts)
    err = info.value
    assert err.step == FIRST_BAD and "run 0 of 2" in str(err)
    np.testing.assert_array_equal(err.record["steps"], KEPT)
    np.testing.assert_array_equal(err.record["ts"], LR * KEPT)
    np.testing.assert_array_equal(err.record["w"], np.stack([gd_closed_form(KEPT)] * 2))
    assert err.record["probe"].shape == (2, len(KEPT))

    with pytest.raises(TrainingError, match=f"non-finite at step {2 * EVERY}") as info:
        run_sgd(per_sample_loss, THETA0, data, 2, LR, STEPS, extra_args={"nan_from": LR * 2 * EVERY}, **opts)
    np.testing.assert_array_equal(info.value.record["steps"], [0, EVERY])


DATA = {"x": jnp.eye(3), "y": jnp.ones(3)}
THETA = {"w": jnp.zeros(3)}


def regression(theta, batch):
    return 0.5 * jnp.sum((batch["x"] @ theta["w"] - batch["y"]) ** 2)


def regression_sample(theta, sample):
    return 0.5 * (sample["x"] @ theta["w"] - sample["y"]) ** 2


GF = ol.gradient_flow(regression)
NAN_DATA = {"x": jnp.eye(3), "y": jnp.asarray([1.0, math.nan, 1.0])}
WIDE_DATA = {"x": jnp.ones((3, 4)), "y": jnp.ones(3)}  # 4 features for a w of 3
OBS = {"w0": lambda t, theta, args: theta["w"][0]}


@pytest.mark.parametrize(
    ("call", "name", "fix"),
    [
        # run_optax: NaN input refused up front, a wrong data shape, a loss that is no scalar, bad parameters
        (
            lambda: ol.run_optax(regression, {"w": jnp.asarray([0.0, math.nan, 0.0])}, DATA, optax.sgd(0.1), 5),
            "theta0",
            "finite",
        ),
        (lambda: ol.run_optax(regression, THETA, NAN_DATA, optax.sgd(0.1), 5), "batch", "finite"),
        (lambda: ol.run_optax(regression, THETA, WIDE_DATA, optax.sgd(0.1), 5), "batch", "shapes"),
        (lambda: ol.run_optax(lambda th, b: th["w"], THETA, DATA, optax.sgd(0.1), 5), "loss", "scalar"),
        (lambda: ol.run_optax(regression, THETA, GF.make_args(DATA), optax.sgd(0.1), 5), "batch", "not a limit's"),
        (lambda: ol.run_optax(regression, {"w": jnp.zeros(3, complex)}, DATA, optax.sgd(0.1), 5), "theta0", "real"),
        (lambda: ol.run_optax(regression, {"w": "abc"}, DATA, optax.sgd(0.1), 5), "theta0", "real"),
        (lambda: ol.run_optax(regression, {"w": True}, DATA, optax.sgd(0.1), 5), "theta0", "real"),
        (
            lambda: ol.run_optax(regression, THETA, DATA, optax.multi_transform({"a": optax.sgd(0.1)}, {"v": "a"}), 5),
            "optimizer",
            "structure",
        ),
        # make_args: a keyword of another limit, a missing rate, rates given positionally, no data
        (lambda: GF.make_args(DATA, c1=1.0), "c1", "adam"),
        (lambda: ol.heavy_ball(regression).make_args(DATA, eps=0.1), "eps", "friction"),
        (lambda: ol.sign_descent(regression).make_args(DATA), "eps", "sign_descent"),
        (lambda: ol.adam(regression).make_args(DATA, 10.0, 1.0), "batch", "by name"),
        (lambda: ol.adam(regression).make_args(c1=10.0, c2=1.0), "batch", "positional"),
        (lambda: GF.make_args(NAN_DATA), "batch", "finite"),
        # solve_limit: the data as args, another limit's args, an uncalled factory, rates unlike theta, bad theta0
        (lambda: ol.solve_limit(GF, THETA, DATA, [0.0, 1.0]), "args", "make_args"),
        (lambda: ol.solve_limit(ol.adam(regression), THETA, GF.make_args(DATA), [0.0, 1.0]), "args", "make_args"),
        (lambda: ol.solve_limit(ol.gradient_flow, THETA, DATA, [0.0, 1.0]), "limit", "gradient_flow(loss)"),
        (lambda: ol.solve_limit(GF, THETA, GF.make_args(DATA, rates={"v": 2.0}), [0.0, 1.0]), "rates", "theta"),
        (
            lambda: ol.solve_limit(GF, {"w": jnp.asarray([0.0, math.inf, 0.0])}, GF.make_args(DATA), [0.0, 1.0]),
            "theta0",
            "finite",
        ),
        (lambda: ol.solve_limit(GF, THETA, GF.make_args(WIDE_DATA), [0.0, 1.0]), "batch", "shapes"),
        # run_sgd and the SGD SDE: NaN data or parameters, a wrong data shape, a failing observable
        (lambda: run_sgd(regression_sample, THETA, NAN_DATA, 2, 0.1, 5, num_runs=2, observables=OBS), "data", "finite"),
        (
            lambda: run_sgd(
                regression_sample, {"w": jnp.full(3, math.nan)}, DATA, 2, 0.1, 5, num_runs=2, observables=OBS
            ),
            "theta0",
            "finite",
        ),
        (
            lambda: run_sgd(regression_sample, THETA, WIDE_DATA, 2, 0.1, 5, num_runs=2, observables=OBS),
            "data",
            "shapes",
        ),
        (
            lambda: run_sgd(
                regression_sample, THETA, DATA, 2, 0.1, 5, num_runs=2, observables={"v": lambda t, th, a: th["v"]}
            ),
            "observables",
            "KeyError",
        ),
        (
            lambda: run_sgd(
                regression_sample, THETA, DATA, 2, 0.1, 5, num_runs=2, observables=OBS, extra_args={"a": math.nan}
            ),
            "extra_args",
            "finite",
        ),
        (lambda: sgd_sde(regression_sample, NAN_DATA, 2, 0.1), "data", "finite"),
        (
            lambda: solve_sgd_sde(sgd_sde(regression_sample, DATA, 2, 0.1), {"w": jnp.zeros(4)}, [1.0], dt=0.1, seed=0),
            "theta0",
            "shapes",
        ),
        (
            lambda: solve_sgd_sde(
                sgd_sde(lambda th, s: regression_sample({"w": th["w"].astype(jnp.float64)}, s), DATA, 2, 0.1),
                {"w": jnp.zeros(3, jnp.float32), "b": jnp.zeros(())},
                [1.0],
                dt=0.1,
                seed=0,
            ),
            "theta0",
            "one dtype",
        ),
        (
            lambda: ol.adam_sde(regression_sample, DATA, c1=1.0, c2=1.0, sigma0=0.1, eps0=0.1).initial_state(
                {"w": jnp.full(3, math.nan)}
            ),
            "theta0",
            "finite",
        ),
    ],
)
def test_bad_inputs_are_value_errors_naming_the_argument_and_the_fix(call, name, fix):
    with raises_naming(name) as info:
        call()
    assert fix in str(info.value), str(info.value)


def test_jax_errors_of_the_loss_are_not_what_the_user_sees():
    """The wrong-shape error carries the JAX error as its cause (for debugging) but is a ValueError."""
    with pytest.raises(ValueError, match="dot_general") as info:
        ol.run_optax(regression, THETA, WIDE_DATA, optax.sgd(0.1), 5)
    assert isinstance(info.value.__cause__, TypeError)
    assert not isinstance(info.value, TypeError)


def test_a_pytree_rate_like_theta_and_one_number_both_work():
    """rates: one number for every leaf, or a pytree like theta (the tightened broadcast keeps both)."""
    ts = [0.0, 1.0]
    one = GF.params(ol.solve_limit(GF, THETA, GF.make_args(DATA, rates=2.0), ts).ys)
    tree = GF.params(ol.solve_limit(GF, THETA, GF.make_args(DATA, rates={"w": 2.0}), ts).ys)
    np.testing.assert_allclose(np.asarray(one["w"]), np.asarray(tree["w"]), rtol=0, atol=1e-14)
    # x = I: dw/dt = -2 (w - 1) from 0, so w(1) = 1 - exp(-2)
    np.testing.assert_allclose(np.asarray(one["w"][-1]), 1.0 - np.exp(-2.0), rtol=1e-8)
    assert jax.tree_util.tree_structure(one) == jax.tree_util.tree_structure(THETA)
