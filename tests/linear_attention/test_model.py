"""The three linear-attention forms against a literal loop over prompts of f(E) = E + W^{PV} E (E^T W^{KQ} E) / N,
their initialisations, and the effective matrix G."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from flows.linear_attention import data, model

FORMS = {
    "single": dict(form="single"),
    "merged": dict(form="merged", heads=3),
    "separate": dict(form="separate", heads=2, rank=2),
}


def _config(form, **kw):
    return data.Config(d=3, N=5, eigenvalues=(1.0, 0.6, 0.3), init="random", init_scale=0.5, **FORMS[form], **kw)


def _literal(params, prompts):
    """y_hat by the definition: embed each prompt as E (columns (x_i; y_i), query column (x_q; 0) last), apply
    every head's update W^{PV} E (E^T W^{KQ} E) / N to the residual stream, read the entry (d+1, N+1).
    Separate heads: scores (W_K^T E)^T (W_Q^T E), keys on the context side, queries on the query side."""
    P = {k: np.asarray(v) for k, v in params.items()}
    X, y, xq = (np.asarray(a) for a in (prompts.X, prompts.y, prompts.xq))
    B, N, d = X.shape
    out = np.zeros(B)
    for i in range(B):
        E = np.zeros((d + 1, N + 1))
        E[:d, :N] = X[i].T
        E[d, :N] = y[i]
        E[:d, N] = xq[i]
        f = E.copy()
        if "W_K" in P:
            for h in range(P["W_PV"].shape[0]):
                scores = (P["W_K"][h].T @ E).T @ (P["W_Q"][h].T @ E)
                f += P["W_PV"][h] @ E @ scores / N
        else:
            W_PV, W_KQ = (P["W_PV"][None], P["W_KQ"][None]) if P["W_PV"].ndim == 2 else (P["W_PV"], P["W_KQ"])
            for h in range(W_PV.shape[0]):
                f += W_PV[h] @ E @ (E.T @ W_KQ[h] @ E) / N
        out[i] = f[d, N]
    return out


@pytest.mark.parametrize("form", sorted(FORMS))
def test_predict_is_the_literal_attention(form):
    cfg = _config(form)
    params = model.init_params(cfg)
    prompts = data.sample(cfg, 4, 6)
    np.testing.assert_allclose(model.predict(params, cfg, prompts), _literal(params, prompts), rtol=1e-12, atol=1e-13)
    loss = model.sample_loss(params, cfg, prompts)
    np.testing.assert_allclose(loss, 0.5 * np.mean((_literal(params, prompts) - prompts.yq) ** 2), rtol=1e-12)


def test_init_shapes_and_seeding():
    shapes = {
        "single": {"W_PV": (4, 4), "W_KQ": (4, 4)},
        "merged": {"W_PV": (3, 4, 4), "W_KQ": (3, 4, 4)},
        "separate": {"W_PV": (2, 4, 4), "W_K": (2, 4, 2), "W_Q": (2, 4, 2)},
    }
    for form, expected in shapes.items():
        for init in data.INITS:
            cfg = _config(form).replace(init=init)
            params = model.init_params(cfg)
            assert {k: v.shape for k, v in params.items()} == expected
            assert all(v.dtype == np.float64 for v in params.values())
            again = model.init_params(cfg)
            other = model.init_params(cfg.replace(seed=1))
            for k in params:
                np.testing.assert_array_equal(params[k], again[k])
            assert any(not np.allclose(params[k], other[k]) for k in params)


def test_zfb_initialisation():
    """ZFB Assumption 3.3: W^{PV} = sigma [[0, 0], [0, 1]], W^{KQ} = sigma [[Theta Theta^T, 0], [0, 0]],
    ||Theta Theta^T||_F = 1; then y_hat = x_q^T G h with G = sigma^2 Theta Theta^T."""
    cfg = data.Config(init_scale=0.3)
    p = {k: np.asarray(v) for k, v in model.init_params(cfg).items()}
    d, s = cfg.d, 0.3
    expected_pv = np.zeros((d + 1, d + 1))
    expected_pv[d, d] = s
    np.testing.assert_array_equal(p["W_PV"], expected_pv)
    top = p["W_KQ"][:d, :d] / s
    np.testing.assert_allclose(np.linalg.norm(top), 1.0, rtol=1e-14)
    np.testing.assert_allclose(top, top.T, atol=1e-15)
    assert np.linalg.eigvalsh(top).min() > -1e-14
    assert np.all(p["W_KQ"][d] == 0) and np.all(p["W_KQ"][:, d] == 0)
    G = np.asarray(model.effective_G(model.init_params(cfg), cfg))
    np.testing.assert_allclose(G, s * s * top, rtol=1e-14)
    prompts = data.sample(cfg, 0, 4)
    h = np.einsum("bnd,bn->bd", np.asarray(prompts.X), np.asarray(prompts.y)) / cfg.N
    np.testing.assert_allclose(
        model.predict(model.init_params(cfg), cfg, prompts), np.einsum("bi,ij,bj->b", prompts.xq, G, h), rtol=1e-12
    )


def test_paper_init_of_the_multi_head_forms_keeps_the_zero_blocks():
    for form in ("merged", "separate"):
        cfg = _config(form).replace(init="paper", init_scale=0.01)
        p = {k: np.asarray(v) for k, v in model.init_params(cfg).items()}
        d = cfg.d
        assert np.all(p["W_PV"][:, :d] == 0) and np.all(p["W_PV"][:, d, :d] == 0)
        assert np.all(p["W_PV"][:, d, d] != 0)
        for k in p:
            if k != "W_PV":
                assert np.all(p[k][:, d] == 0) and np.all(p[k][:, :d] != 0)
        assert np.max(np.abs(p["W_PV"])) < 0.1


@pytest.mark.parametrize("form", sorted(FORMS))
def test_effective_G_is_the_bilinear_part(form):
    """x_q^T G h is the part of y_hat odd in w at a fixed context and query: the other parts are of degree 0
    (u^T (Lh + x_q x_q^T / N) A x_q) and 2 (v s b^T x_q) in w."""
    cfg = _config(form)
    params = model.init_params(cfg)
    pr = data.sample(cfg, 5, 3)
    G = np.asarray(model.effective_G(params, cfg))

    def yhat(w):
        y = np.einsum("bnd,bd->bn", pr.X, w)
        return np.asarray(model.predict(params, cfg, pr._replace(y=jax.numpy.asarray(y))))

    w = np.asarray(pr.w)
    linear = (yhat(w) - yhat(-w)) / 2.0
    h = np.einsum("bnd,bn->bd", np.asarray(pr.X), np.einsum("bnd,bd->bn", np.asarray(pr.X), w)) / cfg.N
    np.testing.assert_allclose(linear, np.einsum("bi,ij,bj->b", pr.xq, G, h), rtol=1e-10, atol=1e-12)


def test_blocks_read_the_value_row_and_key_query_blocks():
    cfg = _config("separate")
    params = model.init_params(cfg)
    bl = model.blocks(params)
    K = np.einsum("hir,hjr->hij", params["W_K"], params["W_Q"])
    np.testing.assert_allclose(bl["A"], K[:, :-1, :-1], rtol=1e-15)
    np.testing.assert_allclose(bl["b"], K[:, -1, :-1], rtol=1e-15)
    np.testing.assert_array_equal(bl["v"], params["W_PV"][:, -1, -1])
    np.testing.assert_array_equal(bl["u"], params["W_PV"][:, -1, :-1])
