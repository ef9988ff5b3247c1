"""Cloud distances: W2 per depth slice (POT exact against an assignment oracle, ott-jax Sinkhorn against
the exact value), the coupled RMS distance, and the observables' names shared by GD and the flow. The Sinkhorn
checks here are `slow` (larger clouds, smaller eps); which quantity the Sinkhorn path returns is pinned in the
default run by tests/mean_field/test_sinkhorn_pin.py."""

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from flows import mean_field as mf
from flows.mean_field import observables as obs
from tests.mean_field.literal import literal_objective

CFG = mf.Config(d=2, D=3, N=2, L=3, M=6, M_mlp=8, init_scale=1.5, seed=4)
# the shapes of tests/mean_field/test_flow.py (its compiled GD program, data sampler and velocity are reused)
FLOW_CFG = mf.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)


@pytest.fixture(scope="module")
def clouds():
    a = mf.init_particles(CFG)
    b = mf.init_particles(CFG.replace(seed=5))
    return a, b


def _assignment_w2(x, y):
    cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    return np.sqrt(cost[r, c].mean())


def test_exact_w2_equals_assignment_oracle(clouds):
    a, b = clouds
    w = obs.w2_per_slice(a, b, method="exact")
    att_a = np.concatenate([np.asarray(a["V"]).reshape(3, 6, -1), np.asarray(a["W"]).reshape(3, 6, -1)], -1)
    att_b = np.concatenate([np.asarray(b["V"]).reshape(3, 6, -1), np.asarray(b["W"]).reshape(3, 6, -1)], -1)
    mlp_a = np.concatenate([np.asarray(a["W1"]), np.asarray(a["W2"])], -1)
    mlp_b = np.concatenate([np.asarray(b["W1"]), np.asarray(b["W2"])], -1)
    for layer in range(3):
        assert abs(w["attention"][layer] - _assignment_w2(att_a[layer], att_b[layer])) < 1e-12
        assert abs(w["mlp"][layer] - _assignment_w2(mlp_a[layer], mlp_b[layer])) < 1e-12


def test_w2_of_a_cloud_with_itself_and_with_a_shift(clouds):
    a, _ = clouds
    same = obs.w2_per_slice(a, a, method="exact")
    assert np.all(same["attention"] == 0.0) and np.all(same["mlp"] == 0.0)
    shift_v = 0.3  # every V entry moves by 0.3: |shift| = 0.3 * D
    shifted = dict(a, V=a["V"] + shift_v)
    w = obs.w2_per_slice(a, shifted, method="exact")
    assert np.allclose(w["attention"], shift_v * CFG.D, rtol=0, atol=1e-12)
    assert np.all(w["mlp"] == 0.0)
    # a different shift per slice is seen per slice
    per = dict(a, W2=a["W2"] + np.array([0.0, 0.1, 0.2])[:, None, None])
    w = obs.w2_per_slice(a, per, method="exact")
    assert np.allclose(w["mlp"], [0.0, 0.1 * np.sqrt(CFG.D), 0.2 * np.sqrt(CFG.D)], atol=1e-7)


@pytest.mark.slow
def test_sinkhorn_w2_of_a_shifted_cloud_is_the_shift(clouds):
    """ott-jax inside jit (slow: the Sinkhorn loop compiles in about 10 s)."""
    a, _ = clouds
    shift_v = 0.3
    ws = obs.w2_per_slice(a, dict(a, V=a["V"] + shift_v), method="sinkhorn", epsilon=1e-2)
    # the debiased Sinkhorn divergence of a translated cloud is exactly |shift|^2
    assert np.allclose(ws["attention"], shift_v * CFG.D, rtol=1e-3)
    assert np.all(ws["mlp"] < 1e-3)


@pytest.mark.slow
def test_sinkhorn_approaches_exact_w2(clouds):
    a, b = clouds
    exact = obs.w2_per_slice(a, b, method="exact")
    sink = obs.w2_per_slice(a, b, method="sinkhorn", epsilon=1e-3)
    for g in ("attention", "mlp"):
        rel = np.max(np.abs(sink[g] - exact[g]) / exact[g])
        assert rel < 0.05, (g, rel)


def test_sinkhorn_bias_bound_value_and_validation():
    # eps (log n + log m) / 2
    assert obs.sinkhorn_bias_bound(0.02, 64, 256) == pytest.approx(0.02 * (np.log(64) + np.log(256)) / 2, rel=1e-15)
    assert obs.sinkhorn_bias_bound(1.0, 1, 1) == 0.0
    for bad in (0.0, -1.0, float("nan"), "0.1"):
        with pytest.raises(ValueError, match="epsilon"):
            obs.sinkhorn_bias_bound(bad, 4, 4)
    with pytest.raises(ValueError, match="n must"):
        obs.sinkhorn_bias_bound(0.1, 0, 4)
    with pytest.raises(ValueError, match="m must"):
        obs.sinkhorn_bias_bound(0.1, 4, 2.5)


@pytest.mark.slow
def test_sinkhorn_of_clouds_of_different_widths_is_within_the_bias_bound():
    """A subsample against its reference cloud (the widths differ, and the attention and MLP widths differ
    too, so two vmapped programs run): |W2_eps^2 - W2^2| <= eps (log n + log m) / 2 per slice and group."""
    from flows.mean_field import coupling

    ref = mf.init_particles(CFG.replace(M=24, M_mlp=20))
    sub = coupling.subsample_particles(ref, 8, 6, key=3, per_layer=True)
    exact = obs.w2_per_slice(sub, ref, method="exact")
    for eps in (0.05, 0.2):
        sink = obs.w2_per_slice(sub, ref, method="sinkhorn", epsilon=eps)
        for g, (n, m) in (("attention", (8, 24)), ("mlp", (6, 20))):
            assert sink[g].shape == (CFG.L,)
            gap = np.abs(sink[g] ** 2 - exact[g] ** 2)
            assert np.all(gap <= obs.sinkhorn_bias_bound(eps, n, m)), (g, eps, gap)
            assert np.all(gap > 0.0)  # an entropic value, not the exact one


def test_coupled_rms_bounds_w2(clouds):
    a, b = clouds
    w = obs.w2_per_slice(a, b)
    rms = obs.coupled_rms(a, b)
    assert rms**2 >= np.mean(w["attention"] ** 2) + np.mean(w["mlp"] ** 2) - 1e-12
    assert obs.coupled_rms(a, a) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        obs.coupled_rms(a, {k: v[:, :4] for k, v in a.items()})  # a cloud of M = 4
    with pytest.raises(ValueError, match="method"):
        obs.w2_per_slice(a, b, method="emd")
    with pytest.raises(ValueError, match="epsilon"):
        obs.w2_per_slice(a, b, method="sinkhorn", epsilon=0.0)
    with pytest.raises(ValueError, match="depth"):
        obs.w2_per_slice(a, {k: v[:2] for k, v in a.items()})  # a cloud of depth L = 2


def test_gd_record_and_trajectory_share_observable_names():
    cfg = FLOW_CFG
    rec = mf.train(cfg, "gd", 0.05, 20, save_every=5)
    assert set(rec.observables) == set(obs.OBSERVABLES)
    assert rec["Q"].shape == (5,) and rec.tau[0] == 0.0 and np.array_equal(rec.ts, rec.tau)
    data = mf.training_set(cfg)
    assert rec["Q"][0] == pytest.approx(float(mf.objective(cfg, mf.init_particles(cfg), data)), rel=1e-14)
    assert rec["R"][0] == pytest.approx(float(mf.risk(cfg, mf.init_particles(cfg), data)), rel=1e-14)
    assert rec["train_rmse"][0] == pytest.approx(np.sqrt(2 * rec["R"][0]), rel=1e-12)


def test_first_variation_is_homogeneous_along_value_rays():
    """g(cV, W) = c g(V, W): the P7 certificate scans rays in the homogeneous coordinates."""
    cfg = FLOW_CFG
    data = mf.training_set(cfg)
    p = mf.init_particles(cfg)
    rng = np.random.default_rng(0)
    probes = {
        "V": rng.normal(size=(5, 3, 3)),
        "W": rng.normal(size=(5, 3, 3)),
        "W1": rng.normal(size=(4, 3)),
        "W2": rng.normal(size=(4, 3)),
    }
    g = obs.first_variation(cfg, p, data, probes)
    g2 = obs.first_variation(cfg, p, data, dict(probes, V=2.5 * probes["V"], W2=2.5 * probes["W2"]))
    assert g["attention"].shape == (2, 5) and g["mlp"].shape == (2, 4)
    assert np.allclose(np.asarray(g2["attention"]), 2.5 * np.asarray(g["attention"]), rtol=1e-12, atol=1e-15)
    assert np.allclose(np.asarray(g2["mlp"]), 2.5 * np.asarray(g["mlp"]), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="probes"):
        obs.first_variation(cfg, p, data, {"V": probes["V"][:, :2], "W": probes["W"]})


def test_summary_observables_equal_literal_computations():
    """Every entry of `summary` (what GD records and the flow saves) against a direct computation."""
    import jax

    cfg = FLOW_CFG
    data, test = mf.training_set(cfg), mf.held_out_set(cfg)
    p = mf.init_particles(cfg)
    out = jax.jit(obs.summary)(0.0, p, obs.make_args(cfg, data, test))
    v = {k: np.asarray(a) for k, a in mf.velocity(cfg, p, data).items()}
    speeds = np.concatenate(
        [
            np.sqrt((v["V"] ** 2).sum(axis=(2, 3)) + (v["W"] ** 2).sum(axis=(2, 3))).ravel(),
            np.sqrt((v["W1"] ** 2).sum(axis=2) + (v["W2"] ** 2).sum(axis=2)).ravel(),
        ]
    )
    diss = ((v["V"] ** 2).sum() + (v["W"] ** 2).sum()) / (cfg.M * cfg.L) + (
        (v["W1"] ** 2).sum() + (v["W2"] ** 2).sum()
    ) / (cfg.M_mlp * cfg.L)
    # Q, R and the errors from the loops of tests/mean_field/literal.py (no compiled program): rmse = sqrt(2 R)
    Q, R = literal_objective(cfg, p, data.Z0, data.y)
    _, R_test = literal_objective(cfg, p, test.Z0, test.y)
    want = {
        "Q": Q,
        "R": R,
        "dissipation": diss,
        "max_speed": speeds.max(),
        "mean_speed": speeds.mean(),
        "train_rmse": np.sqrt(2 * R),
        "test_rmse": np.sqrt(2 * R_test),
    }
    assert set(out) == set(want) == set(obs.OBSERVABLES)
    for k in want:
        assert abs(float(out[k]) - want[k]) <= 1e-12 * abs(want[k]), k
    assert want["test_rmse"] != want["train_rmse"]


def test_coupled_rms_of_a_shifted_cloud_is_the_shift(clouds):
    a, _ = clouds
    s = 0.25
    shifted = dict(a, V=a["V"] + s, W1=a["W1"] - s)
    # attention particles move by |s| in each of the D^2 entries of V, MLP particles in each of D entries of W1
    want = np.sqrt((s * CFG.D) ** 2 + s * s * CFG.D)
    assert abs(obs.coupled_rms(a, shifted) - want) < 1e-12
