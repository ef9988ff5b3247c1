"""Linear attention, data and maps: which prompts each minibatch step of `train` uses (read off the trained
parameters, not off the sampler), and the separate heads' reduced state mapped to the full parameters under a
rotated eigenbasis (against the closed form G = R diag(s^3) R^T, the theory's loss and autodiff)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows._generated import linear_attention_separate as gen_separate
from flows.linear_attention import data, flow, model, network, theory

SEPARATE = data.Config(d=2, N=4, eigenvalues=(1.0, 0.4), init_scale=0.3, form="separate", heads=2, init="random")
N_SAMPLE, BATCH, STEPS = 8, 4, 6


def _flat(tree):
    return np.concatenate([np.asarray(tree[k]).ravel() for k in sorted(tree)])


@pytest.fixture(scope="module")
def used_counts():
    """counts[k, i]: how many times prompt i entered the minibatch of step k + 1, recovered from the parameters.

    At lr = 1e-7 a step moves theta by -(lr / B) sum_{i in batch} g_i(theta) with g_i the gradient of prompt i's
    loss; theta hardly moves in STEPS steps (relative 1e-6), so theta_k - theta_{k-1} = -(lr / B) sum_i c_ki
    g_i(theta_0) + O(lr^2): least squares on the per-prompt gradients (30 parameters, 8 prompts) gives c_ki."""
    lr = 1e-7
    prompts = data.sample(SEPARATE, SEPARATE.key("data"), N_SAMPLE)
    params0 = model.init_params(SEPARATE)
    grad_i = jax.jit(jax.grad(model.sample_loss), static_argnums=1)
    one = lambda i: jax.tree_util.tree_map(lambda a: a[i : i + 1], prompts)  # noqa: E731
    basis = np.stack([_flat(grad_i(params0, SEPARATE, one(i))) for i in range(N_SAMPLE)], axis=1)
    assert np.linalg.matrix_rank(basis) == N_SAMPLE
    thetas = [_flat(params0)]
    for k in range(1, STEPS + 1):
        rec = network.train(SEPARATE, "sgd", lr=lr, steps=k, sample_size=N_SAMPLE, batch_size=BATCH, save_every=k)
        thetas.append(_flat(rec.params))
    steps = -np.diff(np.stack(thetas), axis=0) * BATCH / lr
    counts = np.linalg.lstsq(basis, steps.T, rcond=None)[0].T
    return counts


def test_each_minibatch_is_batch_size_distinct_prompts(used_counts):
    """Drawn without replacement: every step uses B distinct prompts once each (no prompt twice)."""
    np.testing.assert_allclose(used_counts, np.round(used_counts), atol=1e-3)
    counts = np.round(used_counts).astype(int)
    assert np.all((counts == 0) | (counts == 1)), counts
    np.testing.assert_array_equal(counts.sum(axis=1), BATCH)


def test_successive_steps_draw_new_minibatches(used_counts):
    """A new draw every step: the STEPS batches are not one batch repeated (the key advances), and together they
    reach more than one batch's worth of prompts."""
    batches = {tuple(np.flatnonzero(np.round(row))) for row in used_counts}
    assert len(batches) >= STEPS - 1, batches
    assert np.count_nonzero(np.round(used_counts).sum(axis=0)) > BATCH + 2


def test_a_minibatch_of_the_whole_sample_is_full_batch_gd():
    """batch_size = sample_size: each step is a permutation of the whole sample, the full-batch gradient (GD on
    the sample) to rounding; a draw with replacement would repeat some prompts and miss others."""
    lr = 0.05
    full = network.train(SEPARATE, "gd", lr=lr, steps=3, sample_size=N_SAMPLE, save_every=1)
    perm = network.train(SEPARATE, "sgd", lr=lr, steps=3, sample_size=N_SAMPLE, batch_size=N_SAMPLE, save_every=1)
    for k in full.params:
        np.testing.assert_allclose(perm.params[k], full.params[k], rtol=1e-12, atol=1e-15, err_msg=k)


# -- the separate heads' reduced state under a rotated eigenbasis ------------------------------------------------


def _rotation(d, seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


ROT = _rotation(3, 8)
ROTATED = data.Config(
    d=3, N=5, eigenvalues=(0.9, 0.35, 0.6), rotation=ROT, form="separate", heads=4, rank=1, init_scale=0.1
)
S = jnp.asarray([[0.7], [0.45], [0.9]])


def test_separate_reduced_params_put_head_i_on_eigen_direction_i():
    """Head i: value s_i, W_K = W_Q = s_i (r_i; 0) with r_i the i-th column of R, so K_i = s_i^2 r_i r_i^T and
    G = sum_i s_i^3 r_i r_i^T = R diag(s^3) R^T; the extra head is zero."""
    params = flow.reduced_params(ROTATED, "separate", S)
    s = np.asarray(S[:, 0])
    bl = model.blocks(params)
    for i in range(3):
        r = ROT[:, i]
        assert float(bl["v"][i]) == pytest.approx(s[i], rel=1e-15)
        np.testing.assert_allclose(bl["A"][i], s[i] ** 2 * np.outer(r, r), atol=1e-15)
    assert float(jnp.max(jnp.abs(params["W_K"][3]))) == 0.0 and float(bl["v"][3]) == 0.0
    assert float(jnp.max(jnp.abs(bl["u"]))) == 0.0 and float(jnp.max(jnp.abs(bl["b"]))) == 0.0
    G = (ROT * s**3) @ ROT.T
    np.testing.assert_allclose(model.effective_G(params, ROTATED), G, atol=1e-15)
    # the loss of the full model there is the theory's L(G) in the rotated frame
    np.testing.assert_allclose(
        jax.jit(model.population_loss, static_argnums=1)(params, ROTATED),
        theory.loss_of_G(G, ROTATED.eigenvalues, ROTATED.N, ROT),
        rtol=1e-12,
    )


def test_separate_flow_is_the_full_gradient_in_the_rotated_frame():
    """-dL/dv_i and the k, q components along r_i of the full model's autodiff gradient, at the mapped state, are
    the generated scalar rate of direction i (ZSLS eq 21 with lambda_i); the components off r_i vanish."""
    params = flow.reduced_params(ROTATED, "separate", S)
    g = jax.jit(jax.grad(model.population_loss), static_argnums=1)(params, ROTATED)
    lam = np.asarray(ROTATED.eigenvalues)
    rate = np.asarray(
        gen_separate.vector_field(0.0, S, {"lam": lam, "N": float(ROTATED.N), "trace": float(lam.sum())})
    )[:, 0]
    for i in range(3):
        r = ROT[:, i]
        np.testing.assert_allclose(-float(g["W_PV"][i, 3, 3]), rate[i], rtol=1e-11)
        for name in ("W_K", "W_Q"):
            col = np.asarray(g[name][i, :3, 0])
            np.testing.assert_allclose(-col @ r, rate[i], rtol=1e-11)
            assert np.max(np.abs(col - (col @ r) * r)) < 1e-12 * max(1.0, abs(rate[i]))
