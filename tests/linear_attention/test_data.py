"""The data model of in-context linear regression: Config validation, covariance, sampler shapes, seeding and
moments."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from flows.linear_attention import data


def _rotation(d, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q


def test_defaults_and_replace():
    cfg = data.Config()
    assert (cfg.d, cfg.N, cfg.eigenvalues, cfg.form, cfg.heads, cfg.rank, cfg.init) == (
        4,
        20,
        (1.0, 0.5, 0.25, 0.1),
        "single",
        1,
        1,
        "paper",
    )
    other = cfg.replace(seed=3, form="merged", heads=4)
    assert other.seed == 3 and other.heads == 4 and cfg.seed == 0
    assert hash(cfg) == hash(data.Config())  # hashable, rotation stored as tuples
    with pytest.raises(ValueError, match="heads"):
        cfg.replace(heads=2)  # the single form has one head


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(d=0), "d"),
        (dict(N=0), "N"),
        (dict(N=2.5), "N"),
        (dict(eigenvalues=(1.0, 0.5, 0.25)), "eigenvalues"),
        (dict(eigenvalues=(1.0, 0.5, 0.25, -0.1)), "eigenvalues"),
        (dict(eigenvalues=(1.0, 0.5, 0.25, float("nan"))), "eigenvalues"),
        (dict(eigenvalues="abcd"), "eigenvalues"),
        (dict(rotation=np.ones((4, 4))), "rotation"),
        (dict(rotation=np.eye(3)), "rotation"),
        (dict(form="other"), "form"),
        (dict(form="merged", heads=0), "heads"),
        (dict(form="separate", heads=2, rank=0), "rank"),
        (dict(form="separate", heads=2, rank=6), "rank"),
        (dict(init="zero"), "init"),
        (dict(init_scale=0.0), "init_scale"),
        (dict(init_scale=float("inf")), "init_scale"),
        (dict(seed=-1), "seed"),
        (dict(seed=True), "seed"),
    ],
)
def test_bad_values_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        data.Config(**kw)


def test_covariance_and_its_root():
    R = _rotation(4)
    cfg = data.Config(rotation=R)
    lam = np.asarray(data.covariance(cfg))
    np.testing.assert_allclose(lam, R @ np.diag(cfg.eigenvalues) @ R.T, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.eigvalsh(lam), sorted(cfg.eigenvalues), rtol=1e-13)
    root = np.asarray(data.sqrt_covariance(cfg))
    np.testing.assert_allclose(root @ root, lam, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(data.covariance(data.Config())), np.diag(cfg.eigenvalues), atol=0)


def test_sample_shapes_labels_and_seeding():
    cfg = data.Config(d=3, N=7, eigenvalues=(2.0, 1.0, 0.5))
    p = data.sample(cfg, jax.random.PRNGKey(1), 5)
    assert p.X.shape == (5, 7, 3) and p.y.shape == (5, 7) and p.xq.shape == (5, 3) and p.yq.shape == (5,)
    assert p.w.shape == (5, 3) and p.X.dtype == np.float64
    np.testing.assert_allclose(p.y, np.einsum("bnd,bd->bn", p.X, p.w), rtol=1e-14)
    np.testing.assert_allclose(p.yq, np.einsum("bd,bd->b", p.xq, p.w), rtol=1e-14)
    again = data.sample(cfg, jax.random.PRNGKey(1), 5)
    for a, b in zip(p, again, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(data.sample(cfg, 1, 5).X, p.X)  # an integer seed is PRNGKey(seed)
    assert not np.allclose(data.sample(cfg, 2, 5).X, p.X)
    np.testing.assert_array_equal(data.sample(cfg, batch=2).X, data.sample(cfg.replace(N=7), None, 2).X)
    assert not np.allclose(data.sample(cfg, batch=2).X, data.sample(cfg.replace(seed=1), batch=2).X)
    for kw, field in ((dict(batch=0), "batch"), (dict(key="k"), "key"), (dict(key=-1), "key")):
        with pytest.raises(ValueError, match=field):
            data.sample(cfg, **kw)
    with pytest.raises(ValueError, match="config"):
        data.sample("config", 1, 2)


def test_sample_moments():
    """Inputs ~ N(0, Lambda) (a rotated Lambda), w ~ N(0, I): sample covariances within 5 standard errors."""
    R = _rotation(3, 2)
    cfg = data.Config(d=3, N=4, eigenvalues=(2.0, 1.0, 0.25), rotation=R)
    B = 40000
    p = data.sample(cfg, 3, B)
    lam = np.asarray(data.covariance(cfg))
    for x, n in ((np.asarray(p.X).reshape(-1, 3), B * 4), (np.asarray(p.xq), B)):
        emp = x.T @ x / n
        se = np.sqrt((lam**2 + np.outer(np.diag(lam), np.diag(lam))) / n)  # Var x_i x_j = L_ij^2 + L_ii L_jj
        assert np.all(np.abs(emp - lam) < 5 * se)
    w = np.asarray(p.w)
    assert np.all(np.abs(w.T @ w / B - np.eye(3)) < 5 * np.sqrt((1 + np.eye(3)) / B))
    assert abs(np.mean(p.X)) < 5 * np.sqrt(np.trace(lam) / 3 / (B * 4 * 3))
