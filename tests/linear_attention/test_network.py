"""Training the linear-attention networks through the shared layer: the record, seeding, per-group rates, GD on
the population loss as the explicit Euler scheme of its gradient flow, a fixed sample, online SGD, momentum,
Adam, and a failed run."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

from flows import FlowError
from flows.linear_attention import data, model, network, theory
from flows.training import NetworkRecord, TrainingError, flow_time

CFG = data.Config(d=2, N=4, eigenvalues=(1.0, 0.4), init_scale=0.3)
SEPARATE = CFG.replace(form="separate", heads=2, init="random")


def _loss(config):
    return jax.jit(lambda p: model.population_loss(p, config))


def test_record_observables_and_clock():
    rec = network.train(CFG, "gd", lr=0.05, steps=6, save_every=2)
    assert isinstance(rec, NetworkRecord) and rec.optimizer == "gd" and rec.config == CFG
    np.testing.assert_array_equal(rec.steps, [0, 2, 4, 6])
    np.testing.assert_allclose(rec.ts, flow_time(0.05, rec.steps), rtol=0)
    assert rec.loss is rec["loss"] and rec.loss.shape == (4,) and rec.G.shape == (4, 2, 2)
    assert rec.alignment.shape == (4, 2) and rec.n_learned.shape == (4,)
    np.testing.assert_allclose(rec.loss[-1], _loss(CFG)(rec.params), rtol=1e-13)
    np.testing.assert_allclose(rec.G[-1], model.effective_G(rec.params, CFG), rtol=1e-13)
    np.testing.assert_allclose(rec.G[0], model.effective_G(model.init_params(CFG), CFG), rtol=1e-14)
    assert np.all(np.diff(rec.loss) < 0)
    assert rec.extras == {"batch_size": None, "sample_size": None}


@pytest.mark.parametrize("config", [CFG, SEPARATE], ids=["single", "separate"])
def test_gd_on_the_population_loss_is_euler_on_its_gradient_flow(config):
    """k GD steps = k explicit Euler steps theta <- theta - lr grad L(theta) of the exact population loss."""
    lr, k = 0.05, 5
    rec = network.train(config, "gd", lr=lr, steps=k, save_every=1)
    grad = jax.jit(jax.grad(lambda p: model.population_loss(p, config)))
    params = model.init_params(config)
    losses = [_loss(config)(params)]
    for _ in range(k):
        g = grad(params)
        params = {n: params[n] - lr * g[n] for n in params}
        losses.append(_loss(config)(params))
    for n in params:
        np.testing.assert_allclose(rec.params[n], params[n], rtol=1e-12, atol=1e-15, err_msg=n)
    np.testing.assert_allclose(rec.loss, losses, rtol=1e-12)


def test_seeding_reproducible_and_online_prompts():
    rec = network.train(CFG, "sgd", lr=0.05, steps=4, batch_size=8, save_every=1, seed=2)
    again = network.train(CFG, "sgd", lr=0.05, steps=4, batch_size=8, save_every=1, seed=2)
    for k in rec.observables:
        np.testing.assert_array_equal(rec[k], again[k], err_msg=k)
    other = network.train(CFG, "sgd", lr=0.05, steps=4, batch_size=8, save_every=1, seed=3)
    assert np.max(np.abs(other.loss - rec.loss)) > 1e-8
    other_init = network.train(CFG, "sgd", lr=0.05, steps=4, batch_size=8, save_every=1, seed=2, init="random")
    assert other_init.config.init == "random" and np.max(np.abs(other_init.loss - rec.loss)) > 1e-8
    # each online step is a gradient step of the sample loss on B fresh prompts, the keys split off the data key
    two = network.train(CFG.replace(seed=2), "sgd", lr=0.05, steps=2, batch_size=8, save_every=1)
    key = CFG.replace(seed=2).key("data")
    params = model.init_params(CFG.replace(seed=2))
    sample_grad = jax.jit(jax.grad(model.sample_loss), static_argnums=1)
    for _ in range(2):
        key, sub = jax.random.split(key)
        prompts = data.draw(sub, 8, CFG.N, data.sqrt_covariance(CFG))
        g = sample_grad(params, CFG, prompts)
        params = {n: params[n] - 0.05 * g[n] for n in params}
    for n in params:
        np.testing.assert_allclose(two.params[n], params[n], rtol=1e-12, atol=1e-15, err_msg=n)


def test_fixed_sample_full_batch_and_minibatches():
    n, lr = 16, 0.05
    rec = network.train(SEPARATE, "gd", lr=lr, steps=3, sample_size=n, save_every=1)
    prompts = data.sample(SEPARATE, SEPARATE.key("data"), n)
    params = model.init_params(SEPARATE)
    sample_grad = jax.jit(jax.grad(model.sample_loss), static_argnums=1)
    for _ in range(3):
        g = sample_grad(params, SEPARATE, prompts)
        params = {k: params[k] - lr * g[k] for k in params}
    for k in params:
        np.testing.assert_allclose(rec.params[k], params[k], rtol=1e-12, atol=1e-15, err_msg=k)
    assert rec.extras == {"batch_size": None, "sample_size": n}
    mini = network.train(SEPARATE, "sgd", lr=lr, steps=3, sample_size=n, batch_size=4, save_every=1)
    assert np.max(np.abs(mini.loss - rec.loss)) > 1e-10
    again = network.train(SEPARATE, "sgd", lr=lr, steps=3, sample_size=n, batch_size=4, save_every=1)
    np.testing.assert_array_equal(mini.loss, again.loss)


def test_lr_per_group():
    names = network.groups(SEPARATE)
    assert names == ("W_PV", "W_K", "W_Q") and network.groups(CFG) == ("W_PV", "W_KQ")
    one = network.train(SEPARATE, "gd", lr=0.05, steps=3, save_every=1)
    per = network.train(SEPARATE, "gd", lr=dict.fromkeys(names, 0.05), steps=3, save_every=1)
    np.testing.assert_allclose(per.loss, one.loss, rtol=1e-13)
    slow = network.train(SEPARATE, "gd", lr={"W_PV": 0.05, "W_K": 0.05, "W_Q": 0.005}, steps=3, save_every=1)
    np.testing.assert_array_equal(slow.ts, one.ts)
    params = model.init_params(SEPARATE)
    grad = jax.jit(jax.grad(model.population_loss), static_argnums=1)(params, SEPARATE)
    rates = {"W_PV": 0.05, "W_K": 0.05, "W_Q": 0.005}
    step1 = network.train(SEPARATE, "gd", lr=rates, steps=1, save_every=1)
    for k in params:
        np.testing.assert_allclose(step1.params[k], params[k] - rates[k] * grad[k], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="lr"):
        network.train(SEPARATE, "gd", lr={"W_PV": 0.1, "W_KQ": 0.1}, steps=2)


def test_momentum_and_adam_are_optax_on_the_population_loss():
    lr, beta, k = 0.05, 0.5, 4
    rec = network.train(CFG, "sgd", lr=lr, steps=k, momentum=beta, save_every=1)
    np.testing.assert_allclose(rec.ts, flow_time(lr, np.arange(k + 1), beta), rtol=1e-15)
    grad = jax.jit(jax.grad(lambda p: model.population_loss(p, CFG)))
    params, vel = model.init_params(CFG), None
    for _ in range(k):
        g = grad(params)
        vel = g if vel is None else {n: g[n] + beta * vel[n] for n in g}
        params = {n: params[n] - lr * vel[n] for n in params}
    for n in params:
        np.testing.assert_allclose(rec.params[n], params[n], rtol=1e-12, atol=1e-15, err_msg=n)
    adam = network.train(CFG, "adam", lr=0.01, steps=k, save_every=1)
    opt = optax.adam(0.01)
    params = model.init_params(CFG)
    state = opt.init(params)
    for _ in range(k):
        with jax.numpy_dtype_promotion("standard"):
            updates, state = opt.update(grad(params), state, params)
        params = optax.apply_updates(params, updates)
    for n in params:
        np.testing.assert_allclose(adam.params[n], params[n], rtol=1e-12, atol=1e-15, err_msg=n)


def test_a_failed_run_raises_with_the_record_truncated():
    with pytest.raises(TrainingError, match="non-finite at step") as info:
        network.train(CFG.replace(init="random", init_scale=1.0), "gd", lr=1e3, steps=30, save_every=3)
    err = info.value
    assert isinstance(err, FlowError) and 1 <= err.step <= 30
    rec = err.record
    assert rec is err.trajectory and isinstance(rec, NetworkRecord)
    assert rec.steps.tolist() == [s for s in range(0, 30, 3) if s < err.step]
    for k, v in rec.observables.items():
        assert len(v) == len(rec.steps) and np.all(np.isfinite(v)), k


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(optimizer="lbfgs"), "optimizer"),
        (dict(optimizer="gd", batch_size=4), "batch_size"),
        (dict(optimizer="sgd", batch_size=0), "batch_size"),
        (dict(optimizer="sgd", batch_size=8, sample_size=4), "batch_size"),
        (dict(optimizer="gd", sample_size=0), "sample_size"),
        (dict(optimizer="adam", momentum=0.5), "momentum"),
        (dict(optimizer="sgd", momentum=1.0), "momentum"),
        (dict(optimizer="gd", lr=0.0), "lr"),
        (dict(optimizer="gd", steps=0), "steps"),
        (dict(optimizer="gd", save_every=0), "save_every"),
        (dict(optimizer="gd", seed=-1), "seed"),
        (dict(optimizer="gd", init="nope"), "init"),
    ],
)
def test_bad_arguments_name_the_field(kw, field):
    kw = {"lr": 0.01, "steps": 2, **kw}
    with pytest.raises(ValueError, match=field):
        network.train(CFG, **kw)
    with pytest.raises(ValueError, match="config"):
        network.train("config")  # type: ignore[arg-type]


def test_the_population_loss_converges_to_the_minimum():
    """GD on the exact loss from ZFB's initialisation reaches G = Gamma^{-1} and the minimum loss (a short run
    at a small size; the examples hold the paper's sizes)."""
    rec = network.train(CFG, "gd", lr=0.1, steps=3000, save_every=3000)
    np.testing.assert_allclose(rec.loss[-1], theory.min_loss(CFG.eigenvalues, CFG.N), rtol=1e-8)
    np.testing.assert_allclose(rec.G[-1], theory.optimal_G(CFG.eigenvalues, CFG.N), atol=1e-6)
    assert np.all(rec.n_learned[-1] == 2)


@pytest.mark.parametrize(
    "form, kw", [("merged", dict(heads=3)), pytest.param("separate", dict(heads=2), marks=pytest.mark.slow)]
)
def test_the_reduced_blocks_stay_zero(form, kw):
    """From the papers' initialisation (zero value row u and key-query row b), GD on the population loss keeps
    u = b = 0 (the invariant manifold of ZFB Lemma 5.2 and ZSLS's reduced models) while the rest moves."""
    cfg = CFG.replace(form=form, init_scale=0.5, **kw)
    rec = network.train(cfg, "gd", lr=0.1, steps=40, save_every=40)
    bl = model.blocks(rec.params)
    start = model.blocks(model.init_params(cfg))
    assert np.max(np.abs(bl["u"])) < 1e-14 and np.max(np.abs(bl["b"])) < 1e-14
    assert np.max(np.abs(bl["v"] - start["v"])) > 1e-3 and rec.loss[-1] < 0.9 * rec.loss[0]
