"""flows.linear_attention.flow: the generated reduced flows against autodiff of the exact population loss of the
full model (model.population_loss), the reduced flows against the full flow from the reduced initialisation, and
the long-time limits against the closed forms (theory)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import linear_attention as la
from flows._generated import linear_attention_separate as gen_separate
from flows._generated import linear_attention_zfb as gen_zfb
from flows.linear_attention import flow, model, theory
from flows.linear_attention.data import Config


def _rotation(d, seed=4):
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


SINGLE = Config(rotation=tuple(map(tuple, _rotation(4))), init_scale=0.2, seed=3)
SEPARATE = Config(form="separate", heads=5, rank=1, init_scale=0.05, seed=1)


# jitted once per config: the eager gradient dispatches the loss op by op (seconds per call)
_grad_of = jax.jit(jax.grad(model.population_loss), static_argnums=1)


def _grad(config, params):
    return _grad_of(params, config)


def test_zfb_rhs_is_minus_the_autodiff_gradient_of_the_population_loss():
    """At random reduced states (rotated Lambda): the generated (u, U) rates equal -dL/dw_22 and -dL/dW_11 of
    the full model's exact loss, and the gradient of every other block is zero (the zero blocks stay zero)."""
    rng = np.random.default_rng(0)
    args = flow._zfb_args(SINGLE)
    d = SINGLE.d
    for _ in range(3):
        y = {"u": jnp.asarray(rng.normal() * 0.7), "U": jnp.asarray(rng.normal(size=(d, d)) * 0.7)}
        g = _grad(SINGLE, flow.reduced_params(SINGLE, "zfb", y))
        got = gen_zfb.vector_field(0.0, y, args)
        scale = float(np.abs(g["W_KQ"]).max())
        np.testing.assert_allclose(float(got["u"]), -float(g["W_PV"][d, d]), rtol=1e-12, atol=1e-12 * scale)
        np.testing.assert_allclose(np.asarray(got["U"]), -np.asarray(g["W_KQ"][:d, :d]), rtol=1e-12, atol=1e-12 * scale)
        rest_pv = np.asarray(g["W_PV"]).copy()
        rest_pv[d, d] = 0.0
        rest_kq = np.asarray(g["W_KQ"]).copy()
        rest_kq[:d, :d] = 0.0
        assert np.abs(rest_pv).max() < 1e-12 and np.abs(rest_kq).max() < 1e-12


def test_separate_rhs_is_minus_the_autodiff_gradient_of_the_population_loss():
    """Head i balanced on eigen-direction i: v, k and q have the same rate -dL/dv = -dL/dk = -dL/dq, the generated
    ds_i/dt; the idle head and the off-direction entries get zero gradient."""
    rng = np.random.default_rng(1)
    d = SEPARATE.d
    args = flow._separate_args(SEPARATE)
    for _ in range(3):
        s = jnp.asarray(rng.uniform(0.05, 0.9, size=(d, 1)))
        g = _grad(SEPARATE, flow.reduced_params(SEPARATE, "separate", s))
        want = np.asarray(gen_separate.vector_field(0.0, s, args))[:, 0]
        idx = np.arange(d)
        for got in (-g["W_PV"][idx, d, d], -g["W_K"][idx, idx, 0], -g["W_Q"][idx, idx, 0]):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        kq = np.asarray(g["W_K"])[:, :, 0].copy()
        kq[idx, idx] = 0.0
        assert np.abs(kq).max() < 1e-12 and np.abs(np.asarray(g["W_PV"])[d]).max() < 1e-12


@pytest.mark.slow  # the separate RHS is autodiff's in the default run
@pytest.mark.parametrize("reduced", ["separate"])
def test_reduced_flow_equals_the_full_flow_from_the_reduced_initialisation(reduced):
    """(ZFB's reduced flow: `test_zfb_reduced_flow_at_any_d_equals_the_full_flow`.)"""
    config = SEPARATE.replace(init_scale=0.3)
    ts = np.array([0.0, 0.5, 2.0, 8.0, 30.0])
    red = la.solve_flow(config, ts, reduced=reduced, rtol=1e-12, atol=1e-14)
    y0 = flow.reduced_params(config, reduced, flow.initial_reduced_state(config, reduced))
    full = la.solve_flow(config, ts, y0=y0, rtol=1e-12, atol=1e-14)
    for name in ("loss", "G"):
        a, b = np.asarray(red.observables[name]), np.asarray(full.observables[name])
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10, err_msg=name)
    assert float(red.observables["loss"][-1]) < float(red.observables["loss"][0]) - 0.1


def test_zfb_initial_state_is_the_model_initialisation():
    y = flow.initial_reduced_state(SINGLE, "zfb")
    params = model.init_params(SINGLE)
    np.testing.assert_allclose(flow.reduced_params(SINGLE, "zfb", y)["W_KQ"], params["W_KQ"], atol=1e-15)
    np.testing.assert_allclose(flow.reduced_params(SINGLE, "zfb", y)["W_PV"], params["W_PV"], atol=1e-15)
    # G = u U^T of the reduced state is the model's effective G, also at a non-symmetric U
    rng = np.random.default_rng(5)
    y = {"u": jnp.asarray(rng.normal()), "U": jnp.asarray(rng.normal(size=(4, 4)))}
    G = model.effective_G(flow.reduced_params(SINGLE, "zfb", y), SINGLE)
    np.testing.assert_allclose(np.asarray(G), float(y["u"]) * np.asarray(y["U"]).T, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("d", [3, pytest.param(5, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_zfb_reduced_flow_at_any_d_equals_the_full_flow(d):
    """One generated module for every d: from ZFB's initialisation (rotated Lambda), the reduced (u, U) flow and
    the full flow of every parameter (autodiff of the exact population loss) agree in the loss and G to 1e-8."""
    rng = np.random.default_rng(d)
    eig = tuple(float(x) for x in np.sort(rng.uniform(0.1, 1.0, size=d))[::-1])
    config = Config(d=d, N=10, eigenvalues=eig, rotation=tuple(map(tuple, _rotation(d, seed=d))), init_scale=0.3)
    ts = np.array([0.0, 1.0, 4.0, 12.0])
    red = la.solve_flow(config, ts, reduced="zfb", rtol=1e-11, atol=1e-13)
    y0 = flow.reduced_params(config, "zfb", flow.initial_reduced_state(config, "zfb"))
    full = la.solve_flow(config, ts, y0=y0, rtol=1e-11, atol=1e-13)
    for name in ("loss", "G"):
        a, b = np.asarray(red.observables[name]), np.asarray(full.observables[name])
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8, err_msg=name)
    assert float(red.observables["loss"][-1]) < float(red.observables["loss"][0]) - 0.05


@pytest.mark.slow  # the minimum and Gamma^-1 are pinned in test_theory.py; long horizons in test_auto_solver.py
def test_long_time_flow_reaches_gamma_inverse_and_the_minimum_loss():
    traj = la.solve_flow(SINGLE, np.array([0.0, 1e3, 1e4]), reduced="zfb")
    G = np.asarray(traj.observables["G"][-1])
    np.testing.assert_allclose(G, theory.optimal_G(SINGLE.eigenvalues, SINGLE.N, SINGLE.rotation), atol=1e-8)
    assert float(traj.observables["loss"][-1]) == pytest.approx(
        theory.min_loss(SINGLE.eigenvalues, SINGLE.N), abs=1e-12
    )
    np.testing.assert_allclose(traj.observables["alignment"][-1], 1.0, atol=1e-7)


@pytest.mark.slow  # the plateau losses are pinned against closed forms in test_theory.py
def test_separate_heads_plateau_at_the_pcr_losses_in_decreasing_eigenvalue_order():
    """From s_i = 0.01: direction i is half-learned at the closed-form time of ZSLS eq 21 (theory.separate_time,
    1e-6), in the order of decreasing eigenvalue, and between two learning events the loss sits at the PCR plateau
    (geometric midpoint of the half-learned times; within 1% of the gap to the next plateau)."""
    config = SEPARATE.replace(init_scale=0.01, eigenvalues=(0.25, 1.0, 0.1, 0.5))
    lam = np.asarray(config.eigenvalues)
    gam = theory.gamma_values(lam, config.N)
    t_half = np.array(
        [
            float(theory.separate_time((2 * g) ** (-1 / 3), 0.01, li, config.N, lam.sum()))
            for li, g in zip(lam, gam, strict=True)
        ]
    )
    order = np.argsort(t_half)
    np.testing.assert_array_equal(order, np.argsort(-lam))
    t_sorted = t_half[order]
    mids = np.sqrt(t_sorted[:-1] * t_sorted[1:])
    ts = np.concatenate([[0.0], np.sort(np.concatenate([t_sorted, mids, [0.3 * t_sorted[0], 10 * t_sorted[-1]]]))])
    traj = la.solve_flow(config, ts, reduced="separate", rtol=1e-12, atol=1e-14)
    align = np.asarray(traj.observables["alignment"])
    loss = np.asarray(traj.observables["loss"])
    plateaus = theory.plateau_losses(lam, config.N)
    for k, t in enumerate(t_sorted):
        i = order[k]
        row = int(np.searchsorted(ts, t))
        # half-learned: G_ii = 1/(2 gamma_i), alignment 1/2
        assert align[row, i] == pytest.approx(0.5, abs=1e-6)
    for k, t in enumerate([0.3 * t_sorted[0], *mids, 10 * t_sorted[-1]]):
        row = int(np.searchsorted(ts, t))
        gap = plateaus[k] - plateaus[k + 1] if k < len(lam) else plateaus[0] - plateaus[-1]
        assert abs(loss[row] - plateaus[k]) < 0.01 * gap, (k, loss[row], plateaus[k])


def test_optimizer_limits_run_on_the_full_parameters():
    ts = np.linspace(0.0, 0.5, 3)
    traj = la.solve_flow(SINGLE, ts, optimizer="momentum", optim_args={"lr": 0.1, "beta": 0.5})
    loss = np.asarray(traj.observables["loss"])
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]
    with pytest.raises(ValueError, match="optimizer"):
        la.solve_flow(SINGLE, ts, optim_args={"eps": 1e-3})
    with pytest.raises(ValueError, match="reduced"):
        la.solve_flow(SINGLE, ts, reduced="merged")
    with pytest.raises(ValueError, match="form='single'"):
        la.solve_flow(SEPARATE, ts, reduced="zfb")
    with pytest.raises(ValueError, match="ts"):
        la.solve_flow(SINGLE, [1.0, 2.0])
