"""Coupled initialisations (flows.mean_field.coupling): width subsamples are rows of the reference cloud
without duplicates, seeded; depth sampling is exact at the nodes and for the linear curves of
init="smooth" (against init_curves at l / L)."""

import jax
import numpy as np
import pytest

from flows import mean_field as mf
from flows.mean_field import coupling
from flows.mean_field import reference as ref

CFG = mf.Config(d=2, D=3, N=2, L=4, M=24, M_mlp=20, init="smooth", seed=3)
K = 9
DEPTHS = (1, 2, 3, 5, 6, 8, 16, 17)


@pytest.fixture(scope="module")
def nodes():
    return ref.init_reference(CFG, K)


@pytest.fixture(scope="module")
def curves(nodes):
    """init_curves at l / L for every L in DEPTHS, from one call (one set of compiled shapes)."""
    t = np.concatenate([np.arange(L) / L for L in DEPTHS])
    allc = {k: np.asarray(v) for k, v in mf.init_curves(CFG, t).items()}
    ends = np.cumsum((0,) + DEPTHS)
    return {L: {k: v[ends[i] : ends[i + 1]] for k, v in allc.items()} for i, L in enumerate(DEPTHS)}


def _random_cloud(rng, depth, M, Mm, D=3):
    return {
        "V": rng.normal(size=(depth, M, D, D)),
        "W": rng.normal(size=(depth, M, D, D)),
        "W1": rng.normal(size=(depth, Mm, D)),
        "W2": rng.normal(size=(depth, Mm, D)),
    }


def _rows(x):
    """(depth, width, features) as numpy."""
    x = np.asarray(x)
    return x.reshape(x.shape[0], x.shape[1], -1)


@pytest.mark.parametrize("per_layer", [False, True])
def test_subsample_is_rows_of_the_reference_without_duplicates(nodes, per_layer):
    sub, idx = mf.subsample_particles(nodes, 7, 5, key=1, per_layer=per_layer, return_indices=True)
    assert {k: v.shape for k, v in sub.items()} == {
        "V": (K, 7, 3, 3),
        "W": (K, 7, 3, 3),
        "W1": (K, 5, 3),
        "W2": (K, 5, 3),
    }
    for group, names, width, width_ref in (("attention", ("V", "W"), 7, 24), ("mlp", ("W1", "W2"), 5, 20)):
        ix = np.asarray(idx[group])
        assert ix.shape == ((K, width) if per_layer else (width,))
        ix = np.broadcast_to(ix, (K, width))
        for l in range(K):  # noqa: E741
            assert len(set(ix[l].tolist())) == width and ix[l].min() >= 0 and ix[l].max() < width_ref
        for name in names:
            s, r = _rows(sub[name]), _rows(nodes[name])
            np.testing.assert_array_equal(s, np.take_along_axis(r, ix[:, :, None], axis=1))
            # every subsampled particle equals some reference particle exactly, found by search
            for l in (0, K - 1):  # noqa: E741
                matches = [np.flatnonzero(np.all(r[l] == row, axis=1)) for row in s[l]]
                assert all(m.size == 1 for m in matches)
                assert len({int(m[0]) for m in matches}) == width  # no duplicates
    if per_layer:  # independent index sets per slice differ (24 choose 7 permutations: a clash is negligible)
        assert not np.array_equal(np.asarray(idx["attention"])[0], np.asarray(idx["attention"])[1])


def test_subsample_is_seeded_and_keeps_curves(nodes):
    a = mf.subsample_particles(nodes, 6, key=4)
    b = mf.subsample_particles(nodes, 6, key=4)
    c = mf.subsample_particles(nodes, 6, key=5)
    d = mf.subsample_particles(nodes, 6, key=jax.random.PRNGKey(4))
    e = mf.subsample_particles(nodes, 6, key=jax.random.key(4))
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
        np.testing.assert_array_equal(a[name], d[name])
        np.testing.assert_array_equal(a[name], e[name])  # typed key with the same bits
    assert a["W1"].shape == (K, 6, 3)  # M_mlp defaults to M
    assert not np.array_equal(a["V"], c["V"])
    # one index set for every node: each subsampled curve is linear in s (a smooth-law curve)
    s = np.asarray(ref.reference_nodes(CFG, K)).reshape(K, 1, 1, 1)
    V = np.asarray(a["V"])
    np.testing.assert_allclose(V, (1 - s) * V[:1] + s * V[-1:], atol=1e-15)
    # M = M_ref is a permutation of the whole cloud
    full = mf.subsample_particles(nodes, 24, 20, key=0)
    np.testing.assert_array_equal(np.sort(_rows(full["W"]), axis=1), np.sort(_rows(nodes["W"]), axis=1))


@pytest.mark.parametrize("per_layer", [False, True])
def test_subsets_are_uniform(per_layer):
    """Every reference index is kept with probability M / M_ref: 4000 draws of 6 of 24 (expected count 1000
    per index, binomial sd 27; bound 5 sd), and each subset has distinct entries."""
    rng = np.random.default_rng(0)
    draws = np.stack([coupling._indices(rng, 2, 24, 6, per_layer) for _ in range(4000)])
    draws = draws.reshape(4000, -1, 6)
    assert all(len(set(row.tolist())) == 6 for row in draws[:200].reshape(-1, 6))
    counts = np.bincount(draws[:, 0].ravel(), minlength=24)
    assert np.abs(counts - 1000).max() < 135, counts


@pytest.mark.parametrize("per_layer", [False, True])
def test_replace_draws_iid_rows_with_1_over_M_variance(nodes, per_layer):
    """With replacement: rows of the reference, M may exceed M_ref, duplicates occur, and the mean of a
    coordinate over the subsample has variance Var / M about the reference mean (no finite-population factor
    1 - M/M_ref, which sampling without replacement shows): 3000 subsamples of 12 of 24."""
    sub, idx = mf.subsample_particles(nodes, 40, 30, key=2, per_layer=per_layer, replace=True, return_indices=True)
    assert sub["V"].shape == (K, 40, 3, 3) and sub["W2"].shape == (K, 30, 3)
    ix = np.broadcast_to(np.asarray(idx["attention"]), (K, 40))
    np.testing.assert_array_equal(_rows(sub["V"]), np.take_along_axis(_rows(nodes["V"]), ix[:, :, None], axis=1))
    assert len(set(ix[0].tolist())) < 40  # 40 draws of 24: duplicates
    x = np.asarray(nodes["V"])[0, :, 0, 0]
    rng = np.random.default_rng(1)
    for replace, factor in ((True, 1.0), (False, 1 - 12 / 24)):
        means = np.array([x[coupling._indices(rng, 1, 24, 12, False, replace)].mean() for _ in range(3000)])
        expected = x.var() / 12 * factor * (24 / 23 if not replace else 1.0)
        assert abs(means.var() / expected - 1) < 0.1, (replace, means.var(), expected)


def test_subsample_of_a_network_cloud():
    """A large iid network as the reference: per-layer subsamples, depth axis L kept."""
    big = _random_cloud(np.random.default_rng(1), 4, 32, 32)
    sub = mf.subsample_particles(big, 8, 4, key=2, per_layer=True)
    assert sub["V"].shape == (4, 8, 3, 3) and sub["W2"].shape == (4, 4, 3)
    mf.check_particles(CFG.replace(init="iid", M=8, M_mlp=4), sub)


@pytest.mark.parametrize("L", DEPTHS)
def test_sample_depth_is_exact_for_smooth_curves(nodes, curves, L):
    """init="smooth" curves are linear in t: interpolation from K nodes reproduces init_curves at l / L."""
    got = mf.sample_depth(nodes, L)
    want = curves[L]
    for name in got:
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-15)
    if L == 5:  # the network init of depth L with the same seed is the same cloud
        net = mf.init_particles(CFG.replace(L=L))
        for name in got:
            np.testing.assert_allclose(got[name], net[name], rtol=0, atol=1e-15)


def test_sample_depth_at_nodes_is_exact_and_interpolates_linearly():
    rng = np.random.default_rng(0)
    Kn = 5  # nodes at 0, 1/4, 1/2, 3/4, 1; arbitrary (non-linear) node values
    arb = _random_cloud(rng, Kn, 3, 2, D=2)
    for L, step in ((4, 1), (2, 2), (1, 4)):  # t_l = l / L falls on node l * step
        got = mf.sample_depth(arb, L)
        for name in arb:
            np.testing.assert_array_equal(got[name], arb[name][: Kn - 1 : step][:L])
    got = mf.sample_depth(arb, 8)  # t = l/8: odd l midway between nodes
    for name in arb:
        np.testing.assert_array_equal(got[name][0::2], arb[name][:4])
        np.testing.assert_allclose(got[name][1::2], 0.5 * (arb[name][:4] + arb[name][1:]), rtol=0, atol=1e-15)
    got = mf.sample_depth(arb, 3)  # t = 1/3: node 1 (s = 1/4) + u = 1/3 towards node 2
    np.testing.assert_allclose(got["V"][1], (2 / 3) * arb["V"][1] + (1 / 3) * arb["V"][2], rtol=0, atol=1e-15)
    # layout "layers": the input's slices sit at l / 5
    got = mf.sample_depth(arb, 2, layout="layers")  # t = 1/2 -> position 2.5 between layers 2 and 3
    np.testing.assert_allclose(got["W"][1], 0.5 * (arb["W"][2] + arb["W"][3]), rtol=0, atol=1e-15)
    net = _random_cloud(rng, 8, 3, 2)  # a depth-8 network: L = 4 takes every other layer exactly
    sub = mf.sample_depth(net, 4, layout="layers")
    for name in net:
        np.testing.assert_array_equal(sub[name], np.asarray(net[name])[::2])


def test_coupled_network_composes_width_and_depth(nodes, curves):
    """sample_depth(subsample(nodes)) = the subsampled curves evaluated at l / L."""
    sub, idx = mf.subsample_particles(nodes, 5, 6, key=9, return_indices=True)
    net = mf.sample_depth(sub, 6)
    full = curves[6]
    np.testing.assert_allclose(net["V"], np.asarray(full["V"])[:, np.asarray(idx["attention"])], atol=1e-15)
    np.testing.assert_allclose(net["W2"], np.asarray(full["W2"])[:, np.asarray(idx["mlp"])], atol=1e-15)
    mf.check_particles(CFG.replace(L=6, M=5, M_mlp=6), net)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda n: mf.subsample_particles(n, 25, key=0), "M must be <="),
        (lambda n: mf.subsample_particles(n, 4, 21, key=0), "M_mlp must be <="),
        (lambda n: mf.subsample_particles(n, 0, key=0), "M must be an integer"),
        (lambda n: mf.subsample_particles(n, 4.0, key=0), "M must be an integer"),
        (lambda n: mf.subsample_particles(n, 4, key=-1), "key"),
        (lambda n: mf.subsample_particles(n, 4, key=1.5), "key"),
        (lambda n: mf.subsample_particles(n, 4, key=np.array([0.5, 1.0])), "key"),
        (lambda n: mf.subsample_particles(n, 4, key=0, per_layer="yes"), "per_layer"),
        (lambda n: mf.subsample_particles(n, 4, key=0, replace=1), "replace"),
        (lambda n: mf.subsample_particles({k: n[k] for k in ("V", "W", "W1")}, 4, key=0), "particles must be a dict"),
        (lambda n: mf.subsample_particles(n | {"b": n["V"]}, 4, key=0), "particles must be a dict"),
        (lambda n: mf.subsample_particles(n | {"W": n["V"][:, :3]}, 2, key=0), r"particles\['W'\]"),
        (lambda n: mf.subsample_particles(n | {"W2": n["W2"][:4]}, 2, key=0), r"particles\['W2'\]"),
        (lambda n: mf.subsample_particles(n | {"W1": n["W1"].astype(int)}, 2, key=0), r"particles\['W1'\]"),
        (lambda n: mf.sample_depth(n, 0), "L must be"),
        (lambda n: mf.sample_depth(n, 4, layout="grid"), "layout"),
        (lambda n: mf.sample_depth(n, 10, layout="layers"), "L must be <="),
        (lambda n: mf.sample_depth({k: v[:1] for k, v in n.items()}, 2), "K >= 2"),
        (lambda n: mf.sample_depth(n | {"V": n["V"][..., 0]}, 2), r"nodes\['V'\]"),
    ],
)
def test_bad_input_raises_naming_the_field(nodes, call, match):
    with pytest.raises(ValueError, match=match):
        call({k: np.asarray(v) for k, v in nodes.items()})


def test_exports():
    assert mf.coupling is coupling
    assert mf.subsample_particles is coupling.subsample_particles and mf.sample_depth is coupling.sample_depth
