"""`solver="auto"` (the default of `flows.solve`): Tsit5, switching to Kvaerno5 where the flow turns stiff and
back where it stops being stiff (`flows._stiffness`), one compiled program per solver, and the step budget
from the horizon.

Every solve below but two integrates one vector field, dy/dt = exp(-c t) A y + q cos(w t), so that the
tests share its two programs (the watching Tsit5 and Kvaerno5): a constant stiff A (a gradient flow with
Hessian eigenvalues 1e4 and 1: the closed form expm(A t) y0), a rotation (not stiff: Tsit5 throughout, the
same steps as a plain Tsit5 solve), and a stiffness that decays with time (Kvaerno5 in the middle, back to
Tsit5 when the fast rate has fallen and the slow coordinate's forcing sets the step; a Radau solve by scipy
is the reference).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
import scipy.optimize

import flows
from flows import _chunked, _stiffness, _sweep, solve, solve_batch
from flows._solve import horizon_steps


def field(t, y, a):
    return jnp.exp(-a["c"] * t) * (a["A"] @ y) + a["q"] * jnp.cos(a["w"] * t)


def problem(A, c=0.0, q=(0.0, 0.0), w=0.0):
    return {"A": jnp.asarray(A), "c": jnp.asarray(c), "q": jnp.asarray(q), "w": jnp.asarray(w)}


#: a gradient flow y' = -H y with Hessian eigenvalues 1e4 and 1 (H symmetric, eigenvectors rotated); pinned at
#: Tsit5's stability bound, the rest of the horizon is 100 * 1e4 / 3.51 = 285,000 steps, far more than
#: flows._stiffness.MIN_REMAINING: auto switches
ROT = np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
STIFF = problem(-ROT @ np.diag([1e4, 1.0]) @ ROT.T)
SPIN = problem([[0.0, -1.0], [1.0, 0.0]])
#: a relaxation at the rate 1e4 e^{-t} beside a slow coordinate driven by cos 3t: stiff until t ~ 5
FADING = problem(np.diag([-1e4, -1.0]), c=1.0, q=(0.0, 1.0), w=3.0)
Y0 = jnp.array([1.0, 1.0])
TS = np.linspace(0.0, 100.0, 11)


def test_a_stiff_gradient_flow_switches_to_kvaerno5_and_matches_the_closed_form():
    traj = solve(field, Y0, t1=100.0, ts=TS, args=STIFF)
    assert traj.status == "ok" and traj.solver == "auto"
    (first, t0, t_switch), (second, t_from, t_end) = traj.segments
    assert (first, second) == ("tsit5", "kvaerno5") and t0 == 0.0 and t_from == t_switch and t_end == 100.0
    # after the fast mode has relaxed (e^{-1e4 t}: 5e-4), long before the slow one (t ~ 1)
    assert 5e-4 < t_switch < 0.5, t_switch
    exact = np.stack([scipy.linalg.expm(np.asarray(STIFF["A"]) * t) @ np.asarray(Y0) for t in TS])
    np.testing.assert_allclose(np.asarray(traj.ys), exact, rtol=1e-6, atol=5e-9)  # atol 1e-10 per step
    # Tsit5 alone needs at least 100 * 1e4 / 3.51 = 285,000 steps (its stability bound)
    assert int(traj.num_steps) < 1000, int(traj.num_steps)
    again = solve(field, Y0, t1=100.0, ts=TS, args=STIFF)
    assert again.compile_s == 0.0 and again.segments == traj.segments  # both programs cached, no recompile
    # to t1 = 1 the pinned Tsit5 needs 2,900 more steps, fewer than MIN_REMAINING: it finishes, explicit
    soon = solve(field, Y0, t1=1.0, args=STIFF)
    assert soon.status == "ok" and soon.segments == (("tsit5", 0.0, 1.0),) and 2800 < int(soon.num_steps) < 4000


def test_a_flow_that_is_not_stiff_stays_explicit_with_tsit5s_steps():
    auto = solve(field, Y0, t1=20.0, ts=TS / 5, args=SPIN)
    plain = solve(field, Y0, t1=20.0, ts=TS / 5, args=SPIN, solver="tsit5")
    assert auto.segments == (("tsit5", 0.0, 20.0),)
    assert int(auto.num_steps) == int(plain.num_steps)
    np.testing.assert_allclose(np.asarray(auto.ys), np.asarray(plain.ys), rtol=0, atol=1e-14)
    exact = np.stack([np.cos(TS / 5) - np.sin(TS / 5), np.sin(TS / 5) + np.cos(TS / 5)], axis=1)
    np.testing.assert_allclose(np.asarray(auto.ys), exact, atol=1e-7)


def _radau(args, t1, ts):
    A, c, q, w = (np.asarray(args[k]) for k in ("A", "c", "q", "w"))

    def rhs(t, y):
        return np.exp(-c * t) * (A @ y) + q * np.cos(w * t)

    sol = scipy.integrate.solve_ivp(rhs, (0.0, t1), np.asarray(Y0), method="Radau", t_eval=ts, rtol=1e-12, atol=1e-14)
    return sol.y.T


def test_stiffness_that_fades_switches_back_to_tsit5():
    """Kvaerno5 while the rate 1e4 e^{-t} pins Tsit5's step at its stability bound, Tsit5 again once it has
    fallen (Kvaerno5's steps, limited by the forcing cos 3t, would then be stable for Tsit5 too: h rho < 1.75
    for rho = 1e4 e^{-t} and h ~ 0.05 from t ~ 5.6); the solution matches scipy's Radau."""
    ts = np.linspace(0.0, 12.0, 25)
    traj = solve(field, Y0, t1=12.0, ts=ts, args=FADING)
    names = [s[0] for s in traj.segments]
    assert names == ["tsit5", "kvaerno5", "tsit5"], traj.segments
    t_back = traj.segments[2][1]
    # h rho = 1e4 e^{-t} h < 1.75 with Kvaerno5's h ~ 0.05: t ~ 5.6 (rho alone < 1.75 only from t = 8.7)
    assert traj.segments[1][1] < 0.1 and 4.0 < t_back < 7.5, traj.segments
    # at rtol 1e-8: the save points inside the Kvaerno5 segment carry its third-order Hermite interpolation
    ref = _radau(FADING, 12.0, ts)
    np.testing.assert_allclose(np.asarray(traj.ys), ref, rtol=2e-5, atol=1e-8)
    np.testing.assert_allclose(np.asarray(traj.ys)[-1], ref[-1], rtol=1e-6, atol=1e-7)


def _check_stiff_and_spin(batch):
    exact = np.stack([scipy.linalg.expm(np.asarray(STIFF["A"]) * t) @ np.asarray(Y0) for t in TS])
    np.testing.assert_allclose(np.asarray(batch.ys)[0], exact, rtol=1e-6, atol=5e-9)
    spin = np.stack([np.cos(TS) - np.sin(TS), np.sin(TS) + np.cos(TS)], axis=1)
    np.testing.assert_allclose(np.asarray(batch.ys)[1], spin, atol=1e-6)


def test_a_vmapped_batch_switches_each_member_on_its_own(monkeypatch):
    monkeypatch.setattr(_sweep.config, "strategy", "vmap")
    args = jax.tree_util.tree_map(lambda *a: jnp.stack(a), STIFF, SPIN)
    batch = solve_batch(field, Y0, t1=100.0, ts=TS, args=args)
    assert batch.status == ("ok", "ok")
    assert [s[0] for s in batch.segments[0]] == ["tsit5", "kvaerno5"]
    assert batch.segments[1] == (("tsit5", 0.0, 100.0),)
    assert batch[1].segments == (("tsit5", 0.0, 100.0),)
    _check_stiff_and_spin(batch)


def test_a_lockstep_batch_switches_all_members_together():
    """The stacked solve is stiff where one member is: every member reports the one switch it shared."""
    args = jax.tree_util.tree_map(lambda *a: jnp.stack(a), STIFF, SPIN)
    batch = solve_batch(field, Y0, t1=100.0, ts=TS, args=args)
    assert batch.status == ("ok", "ok")
    assert [s[0] for s in batch.segments[0]] == ["tsit5", "kvaerno5"]
    assert batch.segments[1] == batch.segments[0] and batch[1].segments == batch.segments[0]
    # Kvaerno5 at the rotation's accuracy after the switch: about 1,300 steps; Tsit5 alone 285,000 (the stiff member)
    assert int(batch.num_steps[0]) < 3000, batch.num_steps
    _check_stiff_and_spin(batch)


def test_an_event_after_the_switch_is_located():
    """y_2 of the stiff flow falls through 0.2 at a time found on the closed form (scipy's brentq); the solve
    goes on to t1 (a non-stopping event) in Kvaerno5."""
    A = np.asarray(STIFF["A"])
    y2 = lambda t: (scipy.linalg.expm(A * t) @ np.asarray(Y0))[1] - 0.2  # noqa: E731
    t_cross = scipy.optimize.brentq(y2, 0.1, 10.0, xtol=1e-14)
    event = flows.Event(lambda t, y, a: y[1] - 0.2, stop=False)
    traj = solve(field, Y0, t1=100.0, ts=TS, args=STIFF, event=event)
    assert traj.status == "ok" and traj.segments[-1][0] == "kvaerno5" and traj.segments[-1][1] < t_cross
    assert abs(float(traj.t_event) - t_cross) < 1e-6 * t_cross


def test_a_field_without_forward_derivatives_runs_tsit5():
    """A `jax.custom_vjp` vector field has no Jacobian-vector product for Kvaerno5's Newton iterations: auto
    stays with Tsit5 and succeeds where Tsit5 does."""

    @jax.custom_vjp
    def decay(y):
        return -y

    decay.defvjp(lambda y: (-y, None), lambda _, g: (-g,))
    traj = solve(lambda t, y, a: decay(y), Y0, t1=2.0)
    assert traj.status == "ok" and traj.segments == (("tsit5", 0.0, 2.0),)
    np.testing.assert_allclose(np.asarray(traj.ys)[-1], np.exp(-2.0) * np.ones(2), rtol=1e-7)


def test_the_default_budget_follows_the_horizon():
    assert horizon_steps(0.0, 0.5) == 100_000 and horizon_steps(0.0, 1.0) == 100_000
    assert horizon_steps(0.0, 10.0) == 200_000 and horizon_steps(3.0, 13.0) == 200_000
    assert horizon_steps(0.0, 1e5) == 600_000 and horizon_steps(0.0, 2e5) == 700_000


def test_a_budget_beyond_one_call_continues_where_the_call_stopped(monkeypatch):
    """With at most 40 steps per call of the program, the stiff solve runs in several calls and gives the
    same solution (the step-size controller restarts at each call: to the tolerance, not bit for bit); a
    budget of 100 steps over the calls stops it with status max_steps."""
    whole = solve(field, Y0, t1=100.0, ts=TS, args=STIFF, solver="kvaerno5", max_steps=5000)
    monkeypatch.setattr(_chunked, "CALL_STEPS", 40)
    pieces = solve(field, Y0, t1=100.0, ts=TS, args=STIFF, solver="kvaerno5", max_steps=5000)
    assert pieces.status == "ok" and int(pieces.num_steps) > 40
    assert pieces.segments == (("kvaerno5", 0.0, 100.0),)
    np.testing.assert_allclose(np.asarray(pieces.ys), np.asarray(whole.ys), rtol=1e-6, atol=5e-9)
    short = solve(field, Y0, t1=100.0, ts=TS, args=STIFF, solver="kvaerno5", max_steps=100, throw=False)
    assert short.status == "max_steps" and 100 <= int(short.num_steps) < 140 and float(short.t_final) < 100.0


def test_the_stability_bound_and_the_estimate():
    """Tsit5's stability interval on the negative real axis ends at 3.51 (Dormand-Prince 5: 3.31, Heun: 2);
    on y' = -lambda y a step's estimate of h rho is h lambda exactly (a linear field)."""
    import diffrax

    assert abs(_stiffness.BOUND - 3.507) < 2e-3
    assert abs(_stiffness.stability_bound(diffrax.Dopri5.tableau) - 3.307) < 2e-3
    assert abs(_stiffness.stability_bound(diffrax.Heun.tableau) - 2.0) < 2e-3
    solver = diffrax.Tsit5()
    term = diffrax.ODETerm(lambda t, y, a: -a * y)
    y0, lam, h = jnp.array([1.0, -0.5]), jnp.asarray(70.0), 0.04
    state = solver.init(term, 0.0, h, y0, lam)
    _, y_error, dense, _, _ = solver.step(term, 0.0, h, y0, lam, state, False)
    h_rho, dot = _stiffness._h_rho(y_error, dense["k"], _stiffness.StiffnessWatch.coeffs)
    assert math.isclose(float(h_rho), h * 70.0, rel_tol=1e-9) and float(dot) < 0


@pytest.mark.slow
def test_linear_attention_to_t_1e5_at_default_settings():
    """The measured case of the stiff long run: linear attention (d = 3, N = 12) to t = 1e5 with the defaults
    solves, in at most 1.5x the steps of Kvaerno5 (Tsit5 needs 802,520)."""
    from flows import linear_attention as la

    config = la.Config(d=3, N=12, eigenvalues=(1.0, 0.5, 0.25))
    ts = np.array([0.0, 1e3, 1e5])
    auto = la.solve_flow(config, ts)
    implicit = la.solve_flow(config, ts, solver="kvaerno5")
    assert auto.status == "ok" and [s[0] for s in auto.segments] == ["tsit5", "kvaerno5"]
    assert int(auto.num_steps) <= 1.5 * int(implicit.num_steps)
    np.testing.assert_allclose(
        np.asarray(auto.observables["loss"]), np.asarray(implicit.observables["loss"]), rtol=1e-6
    )
