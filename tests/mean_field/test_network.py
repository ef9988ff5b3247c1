"""The mean-field network: objective against a literal loop implementation, the first-variation velocity
against autodiff, partial homogeneity (P8), the initial law, and the data model."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import mean_field as mf
from tests.mean_field.literal import literal_objective

# n_test = n_train: the test prompts are drawn by the training set's compiled sampler (one program per size)
CFG = mf.Config(
    d=2,
    D=4,
    N=3,
    L=3,
    M=4,
    M_mlp=5,
    lam=0.3,
    n_train=5,
    n_test=5,
    init_scale=2.0,
    threshold=0.7,
    label_noise=0.1,
    seed=3,
)


@pytest.fixture(scope="module")
def setup():
    data = mf.training_set(CFG)
    p = mf.init_particles(CFG)
    # move off the initial law so that all HuberizedReLU pieces are visited
    p = {k: v * (3.0 if k in ("W1", "W2") else 1.0) for k, v in p.items()}
    return data, p


def test_objective_equals_literal_loops(setup):
    data, p = setup
    Q_lit, R_lit = literal_objective(CFG, p, data.Z0, data.y)
    Q = float(mf.objective(CFG, p, data))
    R = float(mf.risk(CFG, p, data))
    assert abs(Q / Q_lit - 1) < 1e-12
    assert abs(R / R_lit - 1) < 1e-12
    assert Q - R > 0.01 * Q  # the weight decay term is not negligible here, so its factor is pinned too
    pre = np.einsum("ljd,ndk->", np.asarray(p["W1"]), np.asarray(data.Z0))
    assert np.isfinite(pre)


def test_forward_reads_label_row_of_query_column(setup):
    data, p = setup
    yhat = np.asarray(mf.forward(CFG, p, data.Z0))
    zero = {k: jnp.zeros_like(v) for k, v in p.items()}
    # with all particles zero, Z_2L = Z0 and the query's label slot is 0
    assert np.all(np.asarray(mf.forward(CFG, zero, data.Z0)) == 0.0)
    assert yhat.shape == (CFG.n_train,) and np.all(np.isfinite(yhat))


def test_velocity_equals_ML_times_grad_of_objective(setup):
    data, p = setup
    v = mf.velocity(CFG, p, data, method="adjoint")  # first-variation form: adjoints + closed-form gradients
    g = jax.grad(lambda q: mf.objective(CFG, q, data))(p)
    scale = {"V": CFG.M * CFG.L, "W": CFG.M * CFG.L, "W1": CFG.M_mlp * CFG.L, "W2": CFG.M_mlp * CFG.L}
    for k in v:
        ref = -scale[k] * np.asarray(g[k])
        err = np.max(np.abs(np.asarray(v[k]) - ref)) / np.max(np.abs(ref))
        assert err < 1e-12, (k, err)
    v2 = mf.velocity(CFG, p, data, method="autodiff")
    for k in v:
        assert np.max(np.abs(np.asarray(v2[k]) - np.asarray(v[k]))) < 1e-12 * np.max(np.abs(np.asarray(v[k])))


def test_velocity_of_a_probe_head_is_its_first_variation_gradient(setup):
    """grad_theta g(theta, t_l) at the network's own particles = -v - lam theta (first variation, P7)."""
    data, p = setup
    v = mf.velocity(CFG, p, data)
    layer = 1
    probes = {"V": p["V"][layer], "W": p["W"][layer], "W1": p["W1"][layer], "W2": p["W2"][layer]}

    @jax.jit
    def grad_g_total(q):  # one compiled program (eagerly, every operation of the gradient compiles alone)
        def g_total(q):
            out = mf.observables.first_variation(CFG, p, data, q)
            return jnp.sum(out["attention"][layer]) + jnp.sum(out["mlp"][layer])

        return jax.grad(g_total)(q)

    grad = grad_g_total(probes)
    for k in probes:
        want = -np.asarray(v[k][layer]) - CFG.lam * np.asarray(p[k][layer])
        assert np.max(np.abs(np.asarray(grad[k]) - want)) < 1e-12 * max(1.0, np.max(np.abs(want)))


@jax.jit
def _scaled_maps(Z, V, W, W1, W2, c):
    """f(Z, (V, W)), f(Z, (c V, W)), f(Z, (V, c W)) and h(Z, (W1, W2)), h(Z, (W1, c W2)), h(Z, (c W1, W2)) in one
    compiled program (c traced: every scale reuses it)."""
    return (
        mf.attention_update(Z, V, W),
        mf.attention_update(Z, c * V, W),
        mf.attention_update(Z, V, c * W),
        mf.mlp_update(Z, W1, W2),
        mf.mlp_update(Z, W1, c * W2),
        mf.mlp_update(Z, c * W1, W2),
    )


def test_partial_homogeneity_P8():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(2, 4, 5))
    V, W = rng.normal(size=(1, 4, 4)), rng.normal(size=(1, 4, 4))
    W1, W2 = rng.normal(size=(1, 4)), rng.normal(size=(1, 4))
    for c in (2.5, -0.7, 1e-3):
        f, fc, _, h, hc, _ = (np.asarray(x) for x in _scaled_maps(Z, V, W, W1, W2, c))
        assert np.max(np.abs(fc - c * f)) <= 1e-14 * np.max(np.abs(f))
        assert np.max(np.abs(hc - c * h)) <= 1e-14 * np.max(np.abs(h))
    # not homogeneous in W or W1 (softmax, Huberized kink)
    f, _, f2, h, _, h2 = (np.asarray(x) for x in _scaled_maps(Z, V, W, W1, W2, 2.0))
    assert np.max(np.abs(f2 - 2.0 * f)) > 1e-2
    assert np.max(np.abs(h2 - 2.0 * h)) > 1e-2


def test_huberized_relu_pieces():
    z = jnp.array([-1.0, 0.0, 0.25, 0.5, 1.0, 3.0])
    # one compiled program: sigma at h0 = 0.5 and at the default h0 = 1, and sigma' (autodiff) near h0 = 0.5
    values = jax.jit(
        lambda z, x: (
            mf.huberized_relu(z, 0.5),
            mf.huberized_relu(z),
            jax.vmap(jax.grad(lambda u: mf.huberized_relu(u, 0.5)))(x),
        )
    )
    got, got_default, dz = (np.asarray(a) for a in values(z, jnp.array([0.5 - 1e-9, 0.5 + 1e-9, 0.2])))
    want = np.array([0.0, 0.0, 0.0625, 0.25, 0.75, 2.75])
    assert np.allclose(got, want, rtol=0, atol=1e-15)
    assert np.allclose(got_default, [0, 0, 0.03125, 0.125, 0.5, 2.5], atol=1e-15)
    # C^1: the derivative (autodiff) is continuous at the threshold and equals z/h0 below it
    assert np.allclose(dz, [1.0, 1.0, 0.4], atol=1e-8)


def test_initial_law_bounded_iid_tied_smooth():
    cfg = mf.Config(d=2, D=4, N=2, L=5, M=64, init_scale=1.5)
    a = 1.5 / math.sqrt(4)
    as_np = lambda q: {k: np.asarray(v) for k, v in q.items()}  # noqa: E731  (host checks: no compiles)
    p = as_np(mf.init_particles(cfg))
    assert p["V"].shape == (5, 64, 4, 4) and p["W1"].shape == (5, 64, 4)
    for v in p.values():
        assert np.max(np.abs(v)) <= a
    # uniform on [-a, a]: variance a^2/3
    assert abs(np.var(p["V"]) / (a * a / 3) - 1) < 0.05
    assert np.max(np.abs(p["V"][0] - p["V"][1])) > 0.1  # iid: layers differ
    tied = as_np(mf.init_particles(cfg.replace(init="tied")))
    assert np.max(np.abs(tied["W"][0] - tied["W"][4])) == 0.0
    smooth = as_np(mf.init_particles(cfg.replace(init="smooth")))
    curves = as_np(mf.init_curves(cfg.replace(init="smooth"), np.array([0.0, 0.4, 1.0])))
    # layer 2 sits at t = 2/5, and the curve is linear in t
    assert np.allclose(smooth["V"][2], curves["V"][1], atol=1e-15)
    lin = 0.6 * curves["W2"][0] + 0.4 * curves["W2"][2]
    assert np.allclose(curves["W2"][1], lin, atol=1e-15)
    # one set of base draws: the smooth curves start at the tied particles (t = 0)
    assert all(np.array_equal(smooth[k][0], tied[k][0]) for k in smooth)
    # same seed, same particles
    again = as_np(mf.init_particles(cfg))
    assert all(np.array_equal(again[k], p[k]) for k in p)


def test_iid_particles_are_jax_random_uniform_on_the_config_key():
    """The iid initial particles are `jax.random.uniform(k, shape, dtype, -a, a)` on the plain split keys
    of `config.keys()[1]`, bit for bit (np.array_equal): the flat draw reshaped and the unrolled threefry
    hash of flows._prng.fused draw the same values. Both sides compile at the suite's level 0 (the particles'
    one-shot program always does, initial._draw_particles; at XLA's default level the eager draw may fuse a
    multiply-add and differ by 1 ulp)."""
    cfg = mf.Config(d=2, D=4, N=2, L=2, M=3, M_mlp=2, init_scale=1.5)
    a = cfg.init_radius
    p = mf.init_particles(cfg)
    keys = jax.random.split(cfg.keys()[1], 4)
    for name, k in zip(("V", "W", "W1", "W2"), keys, strict=True):
        want = jax.random.uniform(k, p[name].shape, p[name].dtype, -a, a)
        assert np.array_equal(np.asarray(p[name]), np.asarray(want)), name


def test_prompts_embedding_and_bounded_support():
    """On CFG's prompt shapes (d = 2, D = 4: one padding row; N = 3): the sampler program of the fixture (the
    noise level is traced)."""
    cfg = CFG.replace(label_noise=0.2, seed=1)
    n, d, N = cfg.n_train, cfg.d, cfg.N
    data = mf.training_set(cfg)
    Z0 = np.asarray(data.Z0)
    assert Z0.shape == (n, 4, N + 1) and data.y.shape == (n,)
    assert np.allclose(np.linalg.norm(Z0[:, :d, :], axis=1), 1.0)  # x on the unit sphere
    assert np.all(Z0[:, d + 1 :, :] == 0.0) and np.all(Z0[:, d, N] == 0.0)  # padding, empty query label
    assert np.max(np.abs(Z0[:, d, :N])) <= 1.2 + 1e-12 and np.max(np.abs(np.asarray(data.y))) <= 1.2 + 1e-12
    clean = mf.training_set(cfg.replace(label_noise=0.0))
    Zc = np.asarray(clean.Z0)
    noise = Z0[:, d, :N] - Zc[:, d, :N]  # the same x and beta: the labels differ by the noise alone
    assert 0.05 < np.max(np.abs(noise)) <= 0.2 + 1e-12 and np.array_equal(Z0[:, :d], Zc[:, :d])
    # noiseless labels are y = beta^T x for one beta per prompt: solve from the context and predict the query
    for i in range(n):
        X = Zc[i, :d, :N].T
        beta, *_ = np.linalg.lstsq(X, Zc[i, d, :N], rcond=None)
        assert abs(np.linalg.norm(beta) - 1) < 1e-10
        assert abs(Zc[i, :d, N] @ beta - float(clean.y[i])) < 1e-10
    fresh = mf.held_out_set(cfg)
    assert fresh.Z0.shape == (cfg.n_test, 4, N + 1)
    assert np.max(np.abs(np.asarray(fresh.Z0[:3]) - Z0[:3])) > 0.1


BAD = [
    (dict(d=3, D=3), "D"),
    (dict(N=0), "N"),
    (dict(L=0), "L"),
    (dict(M=0), "M"),
    (dict(M_mlp=0), "M_mlp"),
    (dict(lam=-1e-3), "lam"),
    (dict(lam=float("nan")), "lam"),
    (dict(threshold=0.0), "threshold"),
    (dict(threshold=float("inf")), "threshold"),
    (dict(n_train=0), "n_train"),
    (dict(n_test=0), "n_test"),
    (dict(init_scale=0.0), "init_scale"),
    (dict(init="gauss"), "init"),
    (dict(label_noise=-0.1), "label_noise"),
    (dict(seed=-1), "seed"),
    (dict(d=1.5), "d"),
    (dict(M=True), "M"),
]


@pytest.mark.parametrize("kw,field", BAD, ids=[f for _, f in BAD])
def test_bad_config_raises_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=rf"^{field} "):
        mf.Config(**kw)


def test_bad_calls_raise_value_errors(setup):
    data, p = setup
    with pytest.raises(ValueError, match="lr"):
        mf.train(CFG, "gd", 0.0, 10)
    with pytest.raises(ValueError, match="lr"):
        mf.train(CFG, "gd", float("nan"), 10)
    with pytest.raises(ValueError, match="steps"):
        mf.train(CFG, "gd", 0.1, 0)
    with pytest.raises(ValueError, match="save_every"):
        mf.train(CFG, "gd", 0.1, 5, save_every=0)
    bad = dict(p, V=p["V"][:, :2])
    with pytest.raises(ValueError, match=r"particles\['V'\]"):
        mf.objective(CFG, bad, data)
    with pytest.raises(ValueError, match="data.Z0"):
        mf.objective(CFG, p, mf.Prompts(data.Z0[:, :3], data.y))
    with pytest.raises(ValueError, match="data.y"):
        mf.risk(CFG, p, mf.Prompts(data.Z0, data.y[:2]))
    with pytest.raises(ValueError, match="method"):
        mf.velocity(CFG, p, data, method="fd")
    with pytest.raises(ValueError, match="ts"):
        mf.solve_flow(CFG, [1.0, 2.0])
    with pytest.raises(ValueError, match="dt"):
        mf.solve_flow(CFG, [0.0, 1.0], dt=-0.1)
    with pytest.raises(ValueError, match="init_curves"):
        mf.init_curves(CFG, [0.0, 0.5])


def _attention_pair_products(Z, V, W):
    """The head-major formulation of the attention sublayer (pair products, S[n, m, k, i]): the reference
    the heads-last `attention_update` is held against."""
    n, D, K = Z.shape
    ZZ = jnp.einsum("ndk,nei->ndeki", Z, Z).reshape(n, D * D, K * K)
    logits = jnp.einsum("mx,nxy->nmy", W.reshape(W.shape[0], D * D), ZZ).reshape(n, W.shape[0], K, K)
    S = jax.nn.softmax(logits, axis=2)  # S[n, m, k, i] = softmax_k(z_k^T W_m z_i)
    T = jnp.einsum("ndk,nmki->nmdi", Z, S)  # (n, M, D, K) = Z S_m
    return jnp.einsum("mcd,nmdi->nci", V, T)


def test_attention_layouts_and_reverse_rule_agree(setup):
    """attention_update (heads last) equals the head-major formulation; the hand-written reverse-mode rule
    of attention_update_rev (attention_vjp) equals autodiff of attention_update; forward mode works on the
    public map."""
    from flows.mean_field.model import attention_update_rev

    rng = np.random.default_rng(5)
    Z = jnp.asarray(rng.normal(size=(3, 4, 5)))
    V, W = jnp.asarray(rng.normal(size=(6, 4, 4))), jnp.asarray(rng.normal(size=(6, 4, 4)))
    P = jnp.asarray(rng.normal(size=(3, 4, 5)))

    @jax.jit
    def everything(Z, V, W, P):  # one compiled program (eagerly, each einsum and VJP compiles on its own)
        _, vjp_ref = jax.vjp(mf.attention_update, Z, V, W)
        _, vjp_rev = jax.vjp(attention_update_rev, Z, V, W)
        _, tangent = jax.jvp(mf.attention_update, (Z, V, W), (P, V, W))  # forward mode still works
        return (
            mf.attention_update(Z, V, W),
            _attention_pair_products(Z, V, W),
            attention_update_rev(Z, V, W),
            vjp_ref(P),
            vjp_rev(P),
            tangent,
        )

    out, pairs, rev, grads_ref, grads_rev, tangent = everything(Z, V, W, P)
    np.testing.assert_allclose(out, pairs, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(rev, out, rtol=0, atol=0)
    for a, b in zip(grads_ref, grads_rev, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(np.asarray(tangent)))


def test_gd_velocity_paths_agree(setup):
    """The reverse-rule velocity (GD, explicit solves) equals the forward-mode-capable one, and the
    flow picks the forward-mode field for implicit solvers only (the spec's particle limit: the reverse-mode
    field; `solve_flow` swaps in the forward-mode one for implicit solvers)."""
    from flows.mean_field import flow
    from flows.mean_field.gradients import velocity_autodiff

    data, p = setup
    a = mf.velocity(CFG, p, data)  # rev=True: the program of test_velocity_equals_ML_times_grad_of_objective
    b = jax.jit(velocity_autodiff, static_argnames=("rev",))(
        p, data.Z0, data.y, CFG.lam, CFG.threshold, CFG.d, rev=False
    )
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-14)
    assert flow.field_for("kvaerno5") is flow.vector_field
    assert flow.field_for("tsit5") is flow._vector_field_rev
    assert mf.system(CFG).reduced["particles"].vector_field is flow._vector_field_rev
    assert flow.particle_limit(implicit=True).vector_field is flow.vector_field
