"""Mean-field first variation: the velocity derived by sympy equals the closed matrix forms (exactly), the
hand-written `particle_gradients` and `jax.grad` (numerically), and `python -m flows derive` prints it."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
from derivations.mean_field import HUBER_PIECES, MeanFieldAttentionDerivation, MeanFieldMLPDerivation
from flows.__main__ import main
from flows.mean_field.gradients import particle_gradients
from flows.mean_field.model import attention_update, mlp_update

RTOL = 1e-12  # max |a - b| / max |b| over a gradient block (float64)
# jitted: one compiled program per shape for all random points (eagerly, every operation compiles alone)
_particle_gradients = jax.jit(particle_gradients)


@pytest.fixture(scope="module")
def attention():
    return MeanFieldAttentionDerivation()


@pytest.fixture(scope="module")
def mlp():
    return MeanFieldMLPDerivation()


def _all_zero(exprs):
    return all(sp.sympify(e) == 0 for e in exprs)


def _rel_err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# --------------------------------------------------------------------------- symbolic identities


def test_attention_derived_equals_closed_form(attention):
    d = attention
    assert d.module is None and d.name == "mean_field-attention"
    assert d.system.state == (*d.V, *d.W)
    assert _all_zero(d.residual_V) and _all_zero(d.residual_W)  # grad_V = P (Z S)^T, grad_W = Z G Z^T
    assert _all_zero(d.residual_velocity)  # -grad g (gradient_flow, lr 1, with lam) = -closed - lam theta
    assert _all_zero(d.residual_softmax_form)  # the printed softmax-entry form agrees too
    assert _all_zero(d.homogeneity) and d.euler == 0  # f(Z, (cV, W)) = c f, <V, grad_V> = <P, f>
    assert d.identities_hold
    # the velocity is exactly -d g/d theta with the weight decay: d/dV11 of the decay term is lam V11
    assert sp.expand(d.system.rhs[0] + sp.diff(d.pairing, d.V[0, 0]) + d.lam * d.V[0, 0]) == 0


def test_attention_not_homogeneous_in_W(attention):
    """Only partial homogeneity: f(Z, (V, cW)) != c f (checked at one rational point)."""
    d = attention
    c = sp.Symbol("c")
    diff = d.f[0, 0].subs({w: c * w for w in d.W}, simultaneous=True) - c * d.f[0, 0]
    point = {s: sp.Rational(k + 1, 7) for k, s in enumerate(sorted(diff.free_symbols - {c}, key=str))}
    assert abs(float(diff.subs(point).subs(c, 2))) > 1e-3


def test_mlp_derived_equals_closed_form_on_every_piece(mlp):
    d = mlp
    assert d.module is None and d.name == "mean_field-mlp"
    assert set(d.piece_residuals) == set(itertools.product(range(3), repeat=d.K))  # 3^K piece combinations
    for combo, res in d.piece_residuals.items():
        assert _all_zero(res), combo
    assert _all_zero(d.sigma_derivative_residual) and _all_zero(d.junctions)  # sigma' = d sigma, C^1
    assert _all_zero(d.homogeneity) and d.euler == 0  # h(Z, (W1, c W2)) = c h
    assert d.identities_hold


def test_mlp_select_picks_the_named_piece(mlp):
    d = mlp
    u1 = d.pre[0]
    for j, (_, sigma, _) in enumerate(HUBER_PIECES):
        assert sp.expand(d.select(d.sigma[0], (j, 0)) - sigma(u1, d.h0)) == 0


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="D must be an integer"):
        MeanFieldAttentionDerivation(D=0)
    with pytest.raises(ValueError, match="K must be an integer"):
        MeanFieldMLPDerivation(K=1.5)


# --------------------------------------------------------------------------- numeric checks


def _attention_point(rng, D, K):
    return (
        rng.normal(size=(D, K)),
        rng.normal(size=(D, K)),
        rng.normal(scale=0.7, size=(D, D)),
        rng.normal(scale=0.7, size=(D, D)),
    )


@jax.jit
def _pairing_grad_attention(Z, P, V, W):
    def pairing(V, W):
        return jnp.sum(P[None] * attention_update(Z[None], V[None], W[None]))

    return jax.grad(pairing, argnums=(0, 1))(V, W)


def test_attention_numeric_against_network_and_autodiff(attention):
    d = attention
    args = [*d.Z, *d.P, *d.V, *d.W, d.lam]
    derived = sp.lambdify(args, [list(d.grad_V), list(d.grad_W), list(d.system.rhs)], modules="numpy")
    rng = np.random.default_rng(0)
    D, K, lam = d.D, d.K, 0.3
    errs = {"network": 0.0, "autodiff": 0.0, "velocity": 0.0}
    for _ in range(10):
        Z, P, V, W = _attention_point(rng, D, K)
        gV, gW, vel = derived(*Z.ravel(), *P.ravel(), *V.ravel(), *W.ravel(), lam)
        gV, gW, vel = np.reshape(gV, (D, D)), np.reshape(gW, (D, D)), np.asarray(vel)
        j = {k: jnp.asarray(x) for k, x in zip("ZPVW", (Z, P, V, W), strict=True)}
        zeros = jnp.zeros((1, D))
        nV, nW, _, _ = _particle_gradients(
            j["Z"][None], j["P"][None], j["Z"][None], j["P"][None], (j["V"][None], j["W"][None], zeros, zeros), 1.0
        )
        aV, aW = _pairing_grad_attention(j["Z"], j["P"], j["V"], j["W"])
        errs["network"] = max(errs["network"], _rel_err(gV, nV[0]), _rel_err(gW, nW[0]))
        errs["autodiff"] = max(errs["autodiff"], _rel_err(gV, aV), _rel_err(gW, aW))
        want = np.concatenate([(-nV[0] - lam * V).ravel(), (-nW[0] - lam * W).ravel()])
        errs["velocity"] = max(errs["velocity"], _rel_err(vel, want))
    print(f"attention max rel err: {errs}")
    assert max(errs.values()) < RTOL, errs


@jax.jit
def _pairing_grad_mlp(Z, P, W1, W2, h0):
    def pairing(W1, W2):
        return jnp.sum(P[None] * mlp_update(Z[None], W1[None], W2[None], h0))

    return jax.grad(pairing, argnums=(0, 1))(W1, W2)


def _mlp_point(rng, D, K, h0, combo):
    """Z, P, W1, W2 with the preactivation of column i on piece combo[i] (0: <= 0, 1: (0, h0], 2: > h0)."""
    W1, W2 = rng.normal(size=D), rng.normal(size=D)
    Z, P = rng.normal(size=(D, K)), rng.normal(size=(D, K))
    ranges = ((-2.0 * h0, -0.05 * h0), (0.05 * h0, 0.95 * h0), (1.05 * h0, 3.0 * h0))
    for i, piece in enumerate(combo):
        target = rng.uniform(*ranges[piece])
        Z[:, i] += (target - W1 @ Z[:, i]) * W1 / (W1 @ W1)
    return Z, P, W1, W2


def test_mlp_numeric_on_every_piece_against_network_and_autodiff(mlp):
    d = mlp
    args = [*d.Z, *d.P, *d.W1, *d.W2, d.lam, d.h0]
    derived = sp.lambdify(args, [list(d.grad_W1), list(d.grad_W2), list(d.system.rhs)], modules="numpy")
    rng = np.random.default_rng(1)
    D, K, lam = d.D, d.K, 0.3
    errs = {"network": 0.0, "autodiff": 0.0, "velocity": 0.0}
    seen = set()
    for h0 in (1.0, 0.5):
        for combo in itertools.product(range(3), repeat=K):
            Z, P, W1, W2 = _mlp_point(rng, D, K, h0, combo)
            u = W1 @ Z
            seen.add(tuple(int(np.searchsorted([0.0, h0], x, side="left")) for x in u))
            g1, g2, vel = derived(*Z.ravel(), *P.ravel(), *W1, *W2, lam, h0)
            g1, g2, vel = np.asarray(g1, float), np.asarray(g2, float), np.asarray(vel, float)
            jZ, jP, j1, j2 = (jnp.asarray(x) for x in (Z, P, W1, W2))
            zeros = jnp.zeros((1, D, D))
            _, _, n1, n2 = _particle_gradients(
                jZ[None], jP[None], jZ[None], jP[None], (zeros, zeros, j1[None], j2[None]), h0
            )
            a1, a2 = _pairing_grad_mlp(jZ, jP, j1, j2, h0)
            errs["network"] = max(errs["network"], _rel_err(g1, n1[0]), _rel_err(g2, n2[0]))
            errs["autodiff"] = max(errs["autodiff"], _rel_err(g1, a1), _rel_err(g2, a2))
            want = np.concatenate([-n1[0] - lam * W1, -n2[0] - lam * W2])
            errs["velocity"] = max(errs["velocity"], _rel_err(vel, want))
    assert seen == set(itertools.product(range(3), repeat=K))  # every piece combination was visited
    print(f"mlp max rel err: {errs}")
    assert max(errs.values()) < RTOL, errs


# --------------------------------------------------------------------------- registry and CLI


def test_registered_without_generated_module(monkeypatch):
    names = ("mean_field-attention", "mean_field-mlp")
    assert set(names) <= set(derivations.available())
    assert not set(names) & set(derivations.generated_names())
    # write_all / check_generated skip them without deriving (only these two registered here)
    monkeypatch.setattr(derivations, "_REGISTRY", {n: derivations._REGISTRY[n] for n in names})
    monkeypatch.setattr(derivations, "derive", lambda name: pytest.fail(f"derived {name}"))
    assert derivations.write_all() == [] and derivations.check_generated() == {}


def test_cli_prints_attention_velocity(attention, monkeypatch, capsys):
    # the CLI prints what `derivations.derive` returns; the derivation itself (seconds of sympy) is the one
    # the tests above check, not derived a second time
    monkeypatch.setitem(derivations._REGISTRY, "mean_field-attention", lambda: attention)
    assert main(["derive", "mean_field-attention"]) == 0
    out = capsys.readouterr().out
    assert "grad_V <P, V Z S> = P (Z S)^T" in out and "grad_W <P, V Z S> = Z G Z^T" in out
    assert "dV/dtau = -P (Z S)^T - lam V" in out and "dW/dtau = -Z G Z^T - lam W" in out
    assert "G = S o (B - 1 1^T (S o B))" in out and "dV11/dtau =" in out


def test_cli_prints_mlp_latex(mlp, monkeypatch, capsys):
    monkeypatch.setitem(derivations._REGISTRY, "mean_field-mlp", lambda: mlp)  # as above
    assert main(["derive", "mean_field-mlp"]) == 0
    out = capsys.readouterr().out
    assert "dW2/dtau = -P sigma(W1 Z)^T - lam W2" in out and "piece 22 = " in out
    assert main(["derive", "mean_field-mlp", "--latex"]) == 0
    out = capsys.readouterr().out
    assert r"\frac{dW_1}{d\tau}" in out and r"\circ" in out and r"\begin{aligned}" in out
