"""Finite-T Y/Z network: count-vector vs token-sequence training, embedding form, T -> inf tracking."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.scan_snap import solve_flow, syn_small, train, train_sweep
from flows.scan_snap.network import count_loss, embedding_loss, token_loss


@pytest.mark.parametrize("opt,mom,init", [("sgd", 0.9, "zero"), ("adam", 0.0, "random"), ("sgd", 0.0, "random")])
def test_counts_equal_tokens(opt, mom, init):
    c = syn_small()
    kw = dict(T=24, batch_size=8, steps=15, momentum=mom, init=init, seed=5)
    a = train(c, opt, 2.0, 0.5, **kw)
    b = train(c, opt, 2.0, 0.5, form="tokens", **kw)
    assert np.max(np.abs(a.Z - b.Z)) <= 1e-10
    assert np.max(np.abs(a.Y - b.Y)) <= 1e-10
    assert np.max(np.abs(a.loss - b.loss)) <= 1e-10
    assert a.loss[-1] < a.loss[0]


def test_same_seed_same_record_and_sweep_member():
    c = syn_small()
    a = train(c, "sgd", 1.0, 1.0, 16, 8, 10, momentum=0.9, init="random", seed=2, history=False)
    b = train(c, "sgd", 1.0, 1.0, 16, 8, 10, momentum=0.9, init="random", seed=2, history=False)
    assert np.array_equal(a.Z, b.Z)
    loss, p = train_sweep(c, "sgd", [1.0, 3.0], [1.0, 0.5], [2, 7], 16, 8, 10, momentum=0.9, init="random")
    assert np.max(np.abs(p["Z"][0] - a.Z)) <= 1e-12
    assert np.max(np.abs(loss[0] - a.loss)) <= 1e-12


def test_validation():
    c = syn_small()
    with pytest.raises(ValueError, match="eta_Y"):
        train(c, "sgd", -1.0, 1.0, 16, 8, 10)
    with pytest.raises(ValueError, match="optimizer"):
        train(c, "rmsprop", 1.0, 1.0, 16, 8, 10)
    with pytest.raises(ValueError, match="momentum"):
        train(c, "sgd", 1.0, 1.0, 16, 8, 10, momentum=1.0)
    with pytest.raises(ValueError, match="T"):
        train(c, "sgd", 1.0, 1.0, 1, 8, 10)


def test_losses_and_embedding_form_agree():
    c = syn_small()
    a = c.arrays()
    from flows.scan_snap import sample_counts, sample_tokens
    key = jax.random.PRNGKey(0)
    cls, N = sample_counts(a, key, 6, 20)
    _, tok = sample_tokens(a, key, 6, 20)
    k1, k2, k3, k4, k5 = jax.random.split(jax.random.PRNGKey(1), 5)
    M, d = c.vocab_size, 7
    emb = {"U": jax.random.normal(k1, (M, d)), "W_Q": jax.random.normal(k2, (d, d)),
           "W_K": jax.random.normal(k3, (d, d)), "W_V": jax.random.normal(k4, (d, d))}
    Z = emb["U"] @ emb["W_Q"] @ emb["W_K"].T @ emb["U"].T / math.sqrt(d)
    Y = emb["U"] @ emb["W_V"].T @ emb["U"].T
    l1 = embedding_loss(emb, a, cls, N)
    l2 = count_loss({"Y": Y, "Z": Z}, a, cls, N)
    l3 = token_loss({"Y": Y, "Z": Z}, a, cls, tok)
    assert abs(float(l1 - l2)) <= 1e-12 and abs(float(l2 - l3)) <= 1e-12
    # chain rule: dL/dW_V through Y equals the embedding gradient
    gY = jax.grad(count_loss)({"Y": Y, "Z": Z}, a, cls, N)["Y"]
    gV = jax.grad(embedding_loss)(emb, a, cls, N)["W_V"]
    assert float(jnp.max(jnp.abs(gV - emb["U"].T @ gY.T @ emb["U"]))) <= 1e-10


def _tracking_error(c, Zf, T, eta, tau, batch, seeds):
    steps = int(round(tau / eta))
    _, p = train_sweep(c, "sgd", np.full(seeds, eta), np.full(seeds, eta), np.arange(seeds), T, batch, steps)
    return float(np.linalg.norm(p["Z"].mean(axis=0) - Zf) / np.linalg.norm(Zf))


def test_finite_T_tracks_flow_error_shrinks_in_T():
    """Plain SGD (batch mean, lr 0.25) vs the T -> inf flow at t = 16: relative error of Z falls with T."""
    c = syn_small()
    tau = 16.0
    Zf = np.asarray(solve_flow(c, 1.0, 1.0, [0.0, tau], rtol=1e-10, atol=1e-12).ys["Z"][-1])
    e16 = _tracking_error(c, Zf, 16, 0.25, tau, 256, 2)
    e256 = _tracking_error(c, Zf, 256, 0.25, tau, 256, 2)
    rate = math.log(e16 / e256) / math.log(16)
    assert e256 < 0.2 and e256 < e16 / 4, (e16, e256)
    assert rate > 0.5, rate


@pytest.mark.slow
def test_finite_T_tracks_flow_error_shrinks_in_lr():
    """At T = 4096 (finite-T bias small) the error falls with the learning rate (Euler + SGD noise)."""
    c = syn_small()
    tau = 16.0
    Zf = np.asarray(solve_flow(c, 1.0, 1.0, [0.0, tau], rtol=1e-10, atol=1e-12).ys["Z"][-1])
    errs = [_tracking_error(c, Zf, 4096, eta, tau, 256, 4) for eta in (4.0, 2.0, 1.0)]
    assert errs[0] > errs[1] > errs[2], errs
    assert math.log(errs[0] / errs[2]) / math.log(4) > 0.5, errs
