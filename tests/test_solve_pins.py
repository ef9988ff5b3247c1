"""flows.solve events and statuses pinned against closed forms.

One vector field, switched by traced args (so that each Event configuration compiles once):

    y' = w (y_1, -y_0) - k y - lam (y - cos t)

- the oscillator (w = 1, k = lam = 0) from y(t0) = (c, s): y_0 = c cos(tau) + s sin(tau), tau = t - t0. The
  level y_0 = 1/2 is crossed downwards first from (1, 0) (tau = pi/3, then upwards at 5 pi/3) and upwards
  first from (0, -1) (tau = 7 pi/6, then downwards at 11 pi/6);
- the decay (k = 1, w = lam = 0) from (1, 0): y_0 = e^{-tau}, one downcrossing of 1/2 at tau = ln 2;
- lam = 1e8: stiff (an explicit solver needs steps ~ 3e-8).

All solves start at t0 = 2 (not 0), so every saved time, event time and final state is also a check of the
time origin. A piecewise-constant condition (the sign of the level: same crossings, zero derivative) is
located at its jump by the event's bisection. Statuses that a smooth problem never reaches are triggered for
real where the public API can reach them: `dt_min` by the stiff member under a step-size controller with a
minimum step. `flows.solve` itself never gives its PIDController
a dtmin, so the test patches one in (that status is otherwise unreachable from the public API).
"""

import functools
import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import Event, solve
from flows.trajectory import DIVERGED, DT_MIN, EVENT, MAX_STEPS, NONFINITE, OK, OTHER, STATUS_NAMES, decode, message

T0, T1 = 2.0, 9.0
TS = np.linspace(T0, T1, 15)
TOL = dict(rtol=1e-10, atol=1e-12, blowup=None)
T_EV_TOL = 1e-7  # event time (bisection on the dense interpolant, EVENT_RTOL = 1e-14; solver rtol 1e-10)
Y_TOL = 1e-7  # saved states against the closed forms

DOWN_FIRST = (1.0, 0.0)  # y_0 = cos(tau): down at pi/3, up at 5 pi/3
UP_FIRST = (0.0, -1.0)  # y_0 = -sin(tau): up at 7 pi/6, down at 11 pi/6


def field(t, y, a):
    return a["w"] * jnp.stack([y[1], -y[0]]) - a["k"] * y - a["lam"] * (y - jnp.cos(t))


def _args(kind, smooth=1.0, lam=0.0):
    w, k = {"osc": (1.0, 0.0), "decay": (0.0, 1.0)}[kind]
    return {k_: jnp.asarray(v, jnp.float64) for k_, v in dict(w=w, k=k, lam=lam, smooth=smooth).items()}


def closed_form(kind, y_start, t):
    tau = np.asarray(t) - T0
    c, s = y_start
    if kind == "osc":
        return np.stack([c * np.cos(tau) + s * np.sin(tau), -c * np.sin(tau) + s * np.cos(tau)], axis=-1)
    return np.stack([c * np.exp(-tau), s * np.exp(-tau)], axis=-1)


def level(t, y, a):
    return y[0] - 0.5


def level_or_step(t, y, a):
    """y_0 - 1/2, or (smooth = 0) its sign: the same crossings, but a zero derivative (no Newton step)."""
    return jnp.where(a["smooth"] > 0, y[0] - 0.5, jnp.sign(y[0] - 0.5))


def below(t, y, a):
    return y[0] < 0.5


UP = Event(level_or_step, direction=True, name="up")
DOWN_CONTINUE = Event(level, direction=False, stop=False, name="down")
ANY = Event(level, direction=None, name="any")
BELOW_CONTINUE = Event(below, stop=False, name="below")


def run(kind, y_start, event, **kw):
    return solve(
        field,
        jnp.asarray(y_start, jnp.float64),
        t0=T0,
        t1=T1,
        ts=TS,
        args=_args(kind, **kw),
        event=event,
        throw=False,
        **TOL,
    )


def _check_saved_until(traj, kind, y_start, t_stop):
    """States at the saved times up to t_stop equal the closed form; times after it are inf (not reached)."""
    ts = np.asarray(traj.ts)
    reached = TS <= t_stop
    np.testing.assert_array_equal(ts[reached], TS[reached])
    assert np.all(np.isinf(ts[~reached]))
    np.testing.assert_allclose(
        np.asarray(traj.ys)[reached], closed_form(kind, y_start, TS[reached]), rtol=0, atol=Y_TOL
    )


def test_upcrossing_only_skips_the_downcrossing_and_a_step_condition_is_located():
    # from (1, 0): the downcrossing at pi/3 is ignored, the upcrossing at 5 pi/3 stops the solve
    traj = run("osc", DOWN_FIRST, UP)
    t_up = T0 + 5 * math.pi / 3
    assert traj.status == "event" and traj.ok
    assert abs(float(traj.t_event) - t_up) <= T_EV_TOL and float(traj.t_final) == float(traj.t_event)
    assert traj.message == f"event 'up' at t = {float(traj.t_event):.10g}"
    _check_saved_until(traj, "osc", DOWN_FIRST, t_up)
    # from (0, -1) the first crossing is the upcrossing
    traj = run("osc", UP_FIRST, UP)
    assert abs(float(traj.t_event) - (T0 + 7 * math.pi / 6)) <= T_EV_TOL
    # the decay only crosses downwards: no event, integrated to t1
    traj = run("decay", DOWN_FIRST, UP)
    assert traj.status == "ok" and np.isnan(float(traj.t_event)) and float(traj.t_final) == T1
    _check_saved_until(traj, "decay", DOWN_FIRST, T1)
    # the same upcrossing with a piecewise-constant condition: bisection locates its jump (a Newton root finder
    # cannot: it reports "failed" here)
    traj = run("osc", UP_FIRST, UP, smooth=0.0)
    assert traj.status == "event" and traj.ok
    assert abs(float(traj.t_event) - (T0 + 7 * math.pi / 6)) <= T_EV_TOL
    _check_saved_until(traj, "osc", UP_FIRST, T0 + 7 * math.pi / 6)


def test_downcrossing_only_without_stopping_continues_to_t1():
    # decay y' = -y from t0 = 2: event at 2 + ln 2, the whole grid saved, final state e^{-(t1 - 2)}
    traj = run("decay", DOWN_FIRST, DOWN_CONTINUE)
    assert traj.status == "ok" and traj.message == "ok: integrated to t1"
    assert abs(float(traj.t_event) - (T0 + math.log(2.0))) <= T_EV_TOL
    assert float(traj.t_final) == T1
    _check_saved_until(traj, "decay", DOWN_FIRST, T1)
    assert abs(float(np.asarray(traj.ys)[-1, 0]) - math.exp(-(T1 - T0))) <= Y_TOL
    # oscillator from (0, -1): the upcrossing at 7 pi/6 is ignored, the downcrossing at 11 pi/6 located,
    # and the continuation past it still follows the closed form to t1
    traj = run("osc", UP_FIRST, DOWN_CONTINUE)
    assert traj.status == "ok" and abs(float(traj.t_event) - (T0 + 11 * math.pi / 6)) <= T_EV_TOL
    _check_saved_until(traj, "osc", UP_FIRST, T1)
    traj = run("osc", DOWN_FIRST, DOWN_CONTINUE)
    assert abs(float(traj.t_event) - (T0 + math.pi / 3)) <= T_EV_TOL


@pytest.mark.slow
def test_either_direction_takes_the_first_crossing():
    """direction=None (one more compile; test_solve.py checks it on a downcrossing in the default run)."""
    for y_start, tau in ((DOWN_FIRST, math.pi / 3), (UP_FIRST, 7 * math.pi / 6)):
        traj = run("osc", y_start, ANY)
        assert traj.status == "event", traj.message
        assert abs(float(traj.t_event) - (T0 + tau)) <= T_EV_TOL
        _check_saved_until(traj, "osc", y_start, T0 + tau)


def test_boolean_condition_and_dt_min_status(monkeypatch):
    """A boolean condition triggers at the end of the first step on which it holds (not at the root); a
    stiff member under a controller with dtmin ends with status dt_min."""
    monkeypatch.setattr(
        diffrax, "PIDController", functools.partial(diffrax.PIDController, dtmin=1e-6, force_dtmin=False)
    )
    traj = run("decay", DOWN_FIRST, BELOW_CONTINUE)
    t_cross = T0 + math.log(2.0)
    assert traj.status == "ok"
    assert t_cross <= float(traj.t_event) <= t_cross + 0.5  # end of the step past the crossing
    assert float(traj.t_event) - t_cross > 1e-6  # not located by root finding
    _check_saved_until(traj, "decay", DOWN_FIRST, T1)  # the continuation is undisturbed
    # already true at t0 (y_0 = 0 < 1/2): triggers at t0 itself
    traj = run("osc", UP_FIRST, BELOW_CONTINUE)
    assert float(traj.t_event) == T0 and traj.status == "ok"
    _check_saved_until(traj, "osc", UP_FIRST, T1)
    # y' = -1e8 (y - cos t): an explicit solver needs dt ~ 3e-8 < dtmin = 1e-6
    traj = run("decay", (0.0, 0.0), BELOW_CONTINUE, lam=1e8)
    assert traj.status == "dt_min" and not traj.ok
    assert float(traj.t_final) < T1
    assert np.all(np.isinf(np.asarray(traj.ys)[TS > float(traj.t_final)]))  # save times never reached
    assert traj.message.startswith(f"step size collapsed at t = {float(traj.t_final):.6g} (max |y| = ")


def _raw(codes, t_final, rhs_finite):
    n = len(codes)
    return {
        "saved": {"__y__": np.zeros((n, 1, 1))},
        "code": np.asarray(codes),
        "t_final": np.asarray(t_final),
        "y_end_max": np.full(n, 2.5),
        "rhs_finite": np.asarray(rhs_finite),
        "ts": np.zeros((n, 1)),
        "t_event": np.full(n, np.nan),
        "num_steps": np.ones(n),
        "num_accepted_steps": np.ones(n),
        "num_rejected_steps": np.zeros(n),
    }


def test_status_codes_decode_to_names_and_messages():
    assert STATUS_NAMES[DT_MIN] == "dt_min" and STATUS_NAMES[OTHER] == "failed"
    assert [STATUS_NAMES[c] for c in (OK, EVENT, MAX_STEPS, NONFINITE, DIVERGED)] == [
        "ok",
        "event",
        "max_steps",
        "nonfinite",
        "diverged",
    ]
    options = dict(
        save_states=True,
        max_steps=77,
        event=Event(level, name="lvl"),
        blowup=1e10,
        solver="tsit5",
        rtol=1e-8,
        atol=1e-10,
    )
    # a stuck solve (max_steps, dt_min, failed) whose vector field is non-finite there is "nonfinite"
    codes = [OK, EVENT, MAX_STEPS, DT_MIN, NONFINITE, DIVERGED, OTHER, DT_MIN, OTHER, MAX_STEPS]
    finite = [True] * 7 + [False] * 3
    traj = decode(_raw(codes, [1.5] * 10, finite), options, 4.0, True, 0.0, 0.0)
    assert traj.status == (
        "ok",
        "event",
        "max_steps",
        "dt_min",
        "nonfinite",
        "diverged",
        "failed",
        "nonfinite",
        "nonfinite",
        "nonfinite",
    )
    msg = traj.message
    assert msg[0] == "ok: integrated to t1" and msg[1] == "event 'lvl' at t = 1.5"
    assert msg[2].startswith("max_steps = 77 reached at t = 1.5 before t1 = 4 (max |y| = 2.5)")
    assert msg[3] == "step size collapsed at t = 1.5 (max |y| = 2.5)"
    assert msg[5].startswith("diverged: max |y| passed blowup = 1e+10 at t = 1.5")
    assert msg[6] == "solver failed at t = 1.5"
    assert msg[7].startswith("the vector field returned NaN or inf near t = 1.5")
    assert message(NONFINITE, 1.5, 4.0, 2.5, 77, None, 1e10, "tsit5") == "non-finite state (NaN or inf) by t = 1.5"


def test_blowup_guard_fires_at_its_threshold():
    """y' = y from 1 with blowup = 100 stops as `diverged` in the step where |y| first passes 100 (t = ln 100),
    not later (a guard at 10x the threshold would stop at ln 1000)."""
    tr = solve(lambda t, y, a: y, jnp.ones(1), t1=10.0, blowup=100.0, throw=False)
    assert tr.status == "diverged"
    assert np.log(100.0) <= float(tr.t_final) < np.log(100.0) + 0.2, tr.t_final


def test_float32_event_is_located_to_the_last_ulp():
    """A float32 solve (as a user's default JAX, without x64): the event's bisection stops when its bracket is
    one ulp wide (the 1e-14 tolerance is below float32's resolution) instead of running out of iterations
    ("failed"), and the crossing is the closed form's to float32 accuracy: the oscillator from (1, 0) crosses
    y_0 = 1/2 downwards at t0 + pi/3, and the solve continues past it to t1 on the closed form."""
    with jax.enable_x64(False):
        y0 = jnp.asarray(DOWN_FIRST, jnp.float32)
        args = {k: jnp.asarray(v, jnp.float32) for k, v in _args("osc").items()}
        traj = solve(
            field,
            y0,
            t0=T0,
            t1=T1,
            ts=TS.astype(np.float32),
            args=args,
            event=DOWN_CONTINUE,
            throw=False,
            rtol=1e-6,
            atol=1e-6,
            blowup=None,
        )
        assert traj.status == "ok", traj.message
        assert abs(float(traj.t_event) - (T0 + math.pi / 3)) <= 2e-5
        np.testing.assert_allclose(np.asarray(traj.ys)[:, 0], np.cos(TS - T0), atol=1e-4)
