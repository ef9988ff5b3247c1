"""The V-flow of Fig. 4 (flows.joma.flow.solve_v_flow): its Euler iteration against the official loop of
draw_figure_4.py, transcribed; the flow as its small-step limit; sparse then dense with a nonlinear MLP, only
sparser with a linear one; the convergence order; the blow-up event against the closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flows.joma import flow, theory

MU = np.array(theory.FIG4_MU)


def official_fig4(mu, niter=5000, eta=0.02, T=3.0):
    """draw_figure_4.py's loop, transcribed (float64): the iterates and the entropies recorded before each step
    (its 1e-8 inside the log, a shift of -1e-8 in H, kept)."""
    w = np.ones(mu.shape[0]) * 0.05
    ws, entropies = [w.copy()], []
    for _ in range(niter):
        sa = np.exp(w**2 / T)
        sa = sa / sa.sum()
        entropies.append(-(sa * (np.log(sa) + 1e-8)).sum())
        dw = (mu - w) * sa
        w = w + eta * dw
        ws.append(w.copy())
    return np.array(ws), np.array(entropies)


@pytest.fixture(scope="module")
def fig4():
    ts = np.linspace(0.0, 100.0, 501)
    return ts, flow.solve_v_flow(MU, ts), flow.euler_v_flow(MU)


def test_euler_iteration_is_the_official_loop(fig4):
    _, _, euler = fig4
    ws, ent = official_fig4(MU)
    np.testing.assert_allclose(euler.ys, ws[::50], rtol=0, atol=1e-12)
    np.testing.assert_allclose(euler.observables["entropy"][:-1], ent[::50] + 1e-8, rtol=0, atol=1e-12)
    np.testing.assert_allclose(euler.ts, 0.02 * np.arange(0, 5001, 50), rtol=1e-14)


def test_every_iterate_saved_is_the_official_loop():
    """save_every=1: 1001 save points (16 save chunks of the solve), still the official loop's steps."""
    ws, _ = official_fig4(MU, niter=1000)
    euler = flow.euler_v_flow(MU, steps=1000, save_every=1)
    assert int(euler.num_steps) == 1000
    np.testing.assert_allclose(euler.ys, ws, rtol=0, atol=1e-12)


def test_flow_and_euler_differ_at_first_order_in_the_step(fig4):
    """The flow is the eta -> 0 limit of the official iteration: the entropy gap halves with eta."""
    ts, traj, euler = fig4
    assert (traj.rtol, traj.atol) == (1e-10, 1e-12)  # solve_v_flow's own tolerances over flows.solve's
    H = np.asarray(traj.observables["entropy"])
    gaps = []
    for eta, every in ((0.02, 50), (0.01, 100)):
        e = flow.euler_v_flow(MU, steps=int(round(100 / eta)), eta=eta, save_every=every)
        gaps.append(float(np.max(np.abs(np.asarray(e.observables["entropy"]) - H[::5]))))
    assert 1e-4 < gaps[1] < gaps[0] and 1.8 < gaps[0] / gaps[1] < 2.2, gaps


def test_nonlinear_entropy_falls_then_rises_towards_the_limit(fig4):
    ts, traj, _ = fig4
    H = np.asarray(traj.observables["entropy"])
    i = int(np.argmin(H))
    assert H[0] == pytest.approx(math.log(10), rel=1e-12)
    limit = theory.limit_entropy(MU, 3.0)
    assert 5.0 < ts[i] < 30.0 and H[i] < limit - 0.5  # sparse first ...
    assert np.all(np.diff(H[: i + 1]) <= 1e-12) and np.all(np.diff(H[i:]) >= -1e-12)  # ... then dense
    assert H[i] + 0.5 < H[-1] < limit  # still rising towards H(softmax(mu^2 / T)) at t = 100
    v = np.asarray(traj.ys)
    np.testing.assert_allclose(v[-1, -2:], MU[-2:], rtol=1e-6)  # the two largest mu have converged


def test_components_converge_in_the_order_of_mu(fig4):
    """v_j reaches 0.9 mu_j in decreasing order of mu_j (the rate carries e^{mu_j^2 / T})."""
    ts, traj, _ = fig4
    v = np.asarray(traj.ys)
    reach = np.array([ts[np.argmax(v[:, j] > 0.9 * MU[j])] if v[-1, j] > 0.9 * MU[j] else np.inf for j in range(10)])
    done = np.isfinite(reach)
    assert done.sum() >= 6
    assert np.all(np.diff(reach[done]) < 0)  # mu sorted increasing: times decreasing


def test_linear_entropy_only_falls():
    ts = np.linspace(0.0, 100.0, 201)
    H = np.asarray(flow.solve_v_flow(MU, ts, mlp="linear").observables["entropy"])
    assert np.all(np.diff(H) <= 1e-12) and H[-1] < 1e-10 and H[0] == pytest.approx(math.log(10))


@pytest.mark.parametrize("v0", [pytest.param(0.0, marks=pytest.mark.slow), 0.05])
def test_exp_linear_blowup_event_is_the_closed_form(v0):
    """v' = mu e^{v^2/2} stops at max v = 6 (flows.Event) at the closed-form time to reach 6 (1e-9), within
    5e-9 of the blow-up time sqrt(pi/2) (1 - erf(v0/sqrt 2)) / max(mu)."""
    traj = flow.solve_v_flow(
        MU, np.linspace(0.0, 1.0, 11), temperature=2.0, v0=v0, mlp="linear", attention="exp", blowup_level=6.0
    )
    assert traj.status == "event"
    t_star = float(theory.blowup_time(MU.max(), 2.0, v0))
    assert float(traj.t_event) == pytest.approx(float(theory.blowup_time(MU.max(), 2.0, v0, level=6.0)), rel=1e-9)
    assert float(traj.t_event) == pytest.approx(t_star, rel=5e-9)
    if v0 == 0.0:
        assert t_star == pytest.approx(math.sqrt(math.pi / 2) / MU.max(), rel=1e-15)


def test_v_flow_rejects_bad_input():
    ts = np.linspace(0.0, 1.0, 3)
    with pytest.raises(ValueError, match="mu"):
        flow.solve_v_flow([[1.0, 2.0]], ts)
    with pytest.raises(ValueError, match="mlp"):
        flow.solve_v_flow(MU, ts, mlp="relu")
    with pytest.raises(ValueError, match="attention"):
        flow.solve_v_flow(MU, ts, attention="linear")
    with pytest.raises(ValueError, match="temperature"):
        flow.solve_v_flow(MU, ts, temperature=0.0)
    with pytest.raises(ValueError, match="v0"):
        flow.solve_v_flow(MU, ts, v0=[0.1, 0.2])
    with pytest.raises(ValueError, match="ts"):
        flow.solve_v_flow(MU, [0.5, 1.0])
    with pytest.raises(TypeError, match="tolerance"):  # flows.solve's keywords are forwarded, and checked there
        flow.solve_v_flow(MU, ts, tolerance=1e-6)
    with pytest.raises(ValueError, match="rtol"):
        flow.solve_v_flow(MU, ts, rtol=-1.0)
    with pytest.raises(ValueError, match="save_every"):
        flow.euler_v_flow(MU, steps=100, save_every=7)
    with pytest.raises(ValueError, match="level"):
        flow.blowup_event(0.0)
