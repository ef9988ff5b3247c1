"""JoMA's network: the loss against a literal transcription of the official forward pass, the written-out joint
gradients against autodiff, the observables against literal loops, and (where PyTorch is installed) SGD on the
loss against the official Fig. 2/3 training loop, transcribed."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flows import joma
from flows.joma import flow, theory
from flows.optim_limits import run_optax

COMBOS = list(itertools.product(joma.ATTENTIONS, joma.MLPS))


def _random_params(cfg, scale=0.4, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "W": jnp.asarray(scale * rng.normal(size=(cfg.d, cfg.n_classes))),
        "z": jnp.asarray(scale * rng.normal(size=cfg.n_tokens)),
    }


def literal_loss(params, pop, attention, mlp):
    """Per class k: b = attention of x_k, f = U_C b + u_q, h_j = phi(w_j . f), CE against label k; the mean."""
    W, z = np.asarray(params["W"]), np.asarray(params["z"])
    X, U, tau = np.asarray(pop["x"]).T, np.asarray(pop["U"]), float(pop["tau"])
    M, K = X.shape
    phi = {"linear": lambda h: h, "relu": lambda h: max(h, 0.0), "silu": lambda h: h / (1 + math.exp(-h))}[mlp]
    total = 0.0
    for k in range(K):
        a = z / tau
        if attention == "softmax":
            b = X[:, k] * np.exp(a) / np.sum(X[:, k] * np.exp(a))
        elif attention == "exp":
            b = X[:, k] * np.exp(a)
        else:
            b = X[:, k] * a
        f = U[:, :M] @ b + U[:, M]
        h = np.array([phi(float(W[:, j] @ f)) for j in range(K)])
        total += math.log(np.sum(np.exp(h))) - h[k]
    return total / K


@pytest.mark.parametrize("attention, mlp", COMBOS)
def test_loss_is_the_literal_forward_pass(attention, mlp):
    cfg = joma.Config(attention=attention, mlp=mlp)
    p, pop = _random_params(cfg), joma.population(cfg)
    got = float(joma.make_loss(attention, mlp)(p, pop))
    assert got == pytest.approx(literal_loss(p, pop, attention, mlp), rel=1e-12)


@pytest.mark.parametrize("attention, mlp", COMBOS)
def test_joint_gradients_are_the_autodiff_gradients(attention, mlp):
    """JoMA's written-out v_k' and z' (flow.joint_gradients) equal jax.grad of the loss."""
    cfg = joma.Config(attention=attention, mlp=mlp)
    p, pop = _random_params(cfg, seed=1), joma.population(cfg)
    want = jax.grad(joma.make_loss(attention, mlp))(p, pop)
    got = flow.joint_gradients(p, pop, attention, mlp)
    for k in ("W", "z"):
        scale = float(jnp.max(jnp.abs(want[k])))
        assert scale > 1e-4
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-12 * scale, err_msg=k)


def test_init_is_the_official_scale_and_seeded():
    cfg = joma.Config()
    p = joma.init_params(cfg)
    assert p["W"].shape == (30, 20) and p["z"].shape == (20,)
    w = np.asarray(p["W"]).ravel()
    assert abs(w.std() / 0.01 - 1) < 0.15 and abs(w.mean()) < 3 * 0.01 / math.sqrt(w.size)
    np.testing.assert_array_equal(p["W"], joma.init_params(cfg, cfg.key("init"))["W"])
    assert not np.allclose(p["W"], joma.init_params(cfg.replace(seed=1))["W"])
    with pytest.raises(ValueError, match="config"):
        joma.init_params("softmax")


def test_make_loss_is_one_function_per_pair_and_checks_its_names():
    assert joma.make_loss("exp", "relu") is joma.make_loss("exp", "relu")
    with pytest.raises(ValueError, match="attention"):
        joma.make_loss("soft", "linear")
    with pytest.raises(ValueError, match="mlp"):
        joma.make_observe("exp", "gelu")


@pytest.mark.parametrize("attention", joma.ATTENTIONS)
def test_observables_are_the_literal_formulas(attention):
    cfg = joma.Config(attention=attention, mlp="silu")
    p0 = joma.init_params(cfg)
    p = _random_params(cfg, scale=0.3, seed=2)
    if attention == "linear":
        p["z"] = p["z"].at[3].set(-p["z"][3])  # a component on the other branch
    data = joma.observe_data(cfg, p0)
    got = {k: float(v) for k, v in joma.make_observe(attention, "silu")(p, data).items()}
    X, tau = np.asarray(data["x"]).T, cfg.tau
    W, z, W0, z0 = (np.asarray(a) for a in (p["W"], p["z"], p0["W"], p0["z"]))
    V, V0 = W[:20], W0[:20]
    ents = []
    for k in range(20):
        b = X[:, k] * (np.exp(z / tau) if attention != "linear" else z / tau)
        q = np.abs(b) / np.abs(b).sum()
        ents.append(-sum(x * math.log(x) for x in q if x > 0))
    assert got["entropy"] == pytest.approx(np.mean(ents), rel=1e-12)
    assert got["loss"] == pytest.approx(literal_loss(p, data, attention, "silu"), rel=1e-12)
    if attention == "softmax":  # draw_figure_2_3.py: C at the start, then z_est = z_est1 + z_est2 + C
        xbar = X.mean(axis=1)
        C = z0 - ((V0**2).sum(axis=1) - xbar * (W0**2).sum()) / 2 / tau
        est, zz = (V**2).sum(axis=1) / 2 / tau - xbar * (W**2).sum() / 2 / tau + C, z
    elif attention == "exp":
        est, zz = z0 - (V0**2).sum(axis=1) / (2 * tau) + (V**2).sum(axis=1) / (2 * tau), z
        inv = z - (V**2).sum(axis=1) / (2 * tau) - (z0 - (V0**2).sum(axis=1) / (2 * tau))
    else:
        est, zz = np.sqrt(z0**2 - (V0**2).sum(axis=1) + (V**2).sum(axis=1)), np.abs(z)
        inv = z**2 - (V**2).sum(axis=1) - (z0**2 - (V0**2).sum(axis=1))
    assert got["z_estimate_corr"] == pytest.approx(float(theory.normalized_correlation(zz, est)), rel=1e-12)
    zc, ec = zz - zz.mean(), est - est.mean()
    assert got["z_estimate_slope"] == pytest.approx(zc @ ec / (ec @ ec), rel=1e-10)
    if attention == "softmax":
        assert "invariant_gap" not in got
    else:
        assert got["invariant_gap"] == pytest.approx(np.max(np.abs(inv)), rel=1e-10)
    at_start = joma.make_observe(attention, "silu")(p0, data)
    assert float(at_start["z_estimate_slope"]) == pytest.approx(1.0, rel=1e-12)
    if attention != "softmax":
        assert float(at_start["invariant_gap"]) == 0.0


def official_training(X, W0, z0, steps, lr=0.1, T=0.5):
    """draw_figure_2_3.py's loop, transcribed (float64 tensors, W0 and z0 given instead of drawn): returns the
    normalised correlations recorded before each step and the final W, z."""
    import torch

    Mc, K = X.shape
    U = torch.zeros(W0.shape[0], Mc + 1, dtype=torch.float64)
    U[: Mc + 1, : Mc + 1] = torch.eye(Mc + 1, dtype=torch.float64)
    X = torch.tensor(X)
    xbar = X.mean(dim=1)
    W = torch.tensor(W0, requires_grad=True)
    z = torch.tensor(z0, requires_grad=True)
    with torch.no_grad():
        W_tilde = U.t() @ W
        z_est = (W_tilde[:Mc, :].pow(2).sum(dim=1) - xbar * W.pow(2).sum()) / 2 / T
        C = z - z_est

    def norm_corr(v1, v2):
        v1_s = v1 - v1.mean()
        v1_s = v1_s / (v1_s.norm() + 1e-8)
        v2_s = v2 - v2.mean()
        v2_s = v2_s / (v2_s.norm() + 1e-8)
        return (v1_s @ v2_s).item()

    ce_loss = torch.nn.CrossEntropyLoss()
    labels = torch.arange(K)
    corrs = []
    optimizer = torch.optim.SGD([W, z], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        B = (z / T).exp()[:, None] * X
        B = B / B.sum(dim=0, keepdim=True)
        F = U[:, :Mc] @ B + U[:, Mc][:, None]
        output = F.t() @ W
        with torch.no_grad():
            W_tilde = U.t() @ W
            z_est = W_tilde[:Mc, :].pow(2).sum(dim=1) / 2 / T - xbar * W.pow(2).sum() / 2 / T + C
            corrs.append(norm_corr(z, z_est))
        loss = ce_loss(output, labels)
        loss.backward()
        optimizer.step()
    return np.array(corrs), W.detach().numpy(), z.detach().numpy()


def test_sgd_on_the_loss_is_the_official_training_loop():
    """run_optax(optax.sgd(0.1)) on make_loss('softmax', 'linear') and the z_estimate_corr observable reproduce
    the official script's W, z and correlation curve (same data and start) to 1e-10."""
    pytest.importorskip("torch")
    cfg = joma.Config()
    p0, pop, data = joma.init_params(cfg), joma.population(cfg), joma.observe_data(cfg)
    steps = 60
    run = run_optax(joma.make_loss("softmax", "linear"), p0, pop, optax.sgd(0.1), steps)
    corrs, W_end, z_end = official_training(np.asarray(pop["x"]).T, np.asarray(p0["W"]), np.asarray(p0["z"]), steps)
    np.testing.assert_allclose(run["params"]["W"][-1], W_end, rtol=0, atol=1e-12)
    np.testing.assert_allclose(run["params"]["z"][-1], z_end, rtol=0, atol=1e-12)
    observe = jax.jit(joma.make_observe("softmax", "linear"))
    ours = [
        float(observe(jax.tree_util.tree_map(lambda a, i=i: a[i], run["params"]), data)["z_estimate_corr"])
        for i in range(steps)
    ]
    np.testing.assert_allclose(ours, corrs, rtol=0, atol=1e-10)
    assert corrs[0] < 1 and corrs[0] > 1 - 1e-5  # the eps of the official normalisation
