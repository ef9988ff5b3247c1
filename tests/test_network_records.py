"""flows.training: the momentum clock and event times on saved series (network records and flow
Trajectories alike), against closed forms."""

import math
import types

import numpy as np
import pytest

from flows.training import event_time, flow_time
from flows.trajectory import Trajectory


def _record(ts, **observables):
    return types.SimpleNamespace(
        ts=np.asarray(ts, float), observables={k: np.asarray(v, float) for k, v in observables.items()}
    )


def test_event_time_of_an_exponential_decay():
    """exp(-t) crosses 1/2 downward at ln 2; linear interpolation at spacing h errs by <= h^2/8 * max|f''|/|f'|."""
    h = 0.01
    ts = np.arange(0.0, 3.0 + h / 2, h)
    rec = _record(ts, y=np.exp(-ts), up=1.0 - np.exp(-ts))
    tol = h**2 / 8 * 2.0 + 1e-12  # |f''/f'| = 1 on [0, 3]; slack 2 for the crossing's bracket ends
    assert abs(event_time(rec, "y", 0.5, direction=False) - math.log(2)) <= tol
    assert abs(event_time(rec, "up", 0.5, direction=True) - math.log(2)) <= tol
    assert abs(event_time(rec, "y", 0.5, direction=None) - math.log(2)) <= tol
    # never crossed: nan, also when the series starts already past the level (above for an upcrossing, below
    # for a downcrossing), since it never crosses it
    assert math.isnan(event_time(rec, "up", 2.0, direction=True))
    assert math.isnan(event_time(rec, "y", -1.0, direction=False))
    assert math.isnan(event_time(rec, "y", 0.5, direction=True))
    assert math.isnan(event_time(rec, "y", 2.0, direction=False))
    # coarse saving: still exact for a linear series
    lin = _record([0.0, 1.0, 3.0], z=[-1.0, 0.0 - 0.5, 1.5])
    assert event_time(lin, "z", 0.0) == pytest.approx(1.5, abs=1e-14)


def test_event_time_on_a_trajectory_ignores_the_inf_padding():
    ts = np.array([0.0, 1.0, 2.0, np.inf, np.inf])
    traj = Trajectory(
        ts=ts,
        ys=None,
        observables={"m": np.array([-2.0, -1.0, 1.0, np.nan, np.nan])},
        status="event",
        message="",
        t_final=2.0,
        t_event=1.5,
        num_steps=3,
        num_accepted_steps=3,
        num_rejected_steps=0,
        compile_s=0.0,
        run_s=0.0,
        solver="Tsit5",
        rtol=1e-8,
        atol=1e-8,
    )
    assert event_time(traj, "m") == pytest.approx(1.5, abs=1e-14)


def test_event_time_refuses_bad_input_by_name():
    rec = _record([0.0, 1.0], y=[0.0, 1.0], v=[[0.0, 1.0], [1.0, 2.0]])
    for kw, field in (
        (dict(name="nope"), "name"),
        (dict(name="v"), "name"),
        (dict(name="y", level=math.nan), "level"),
        (dict(name="y", direction=1), "direction"),
    ):
        with pytest.raises(ValueError, match=field):
            event_time(rec, **kw)
    with pytest.raises(ValueError, match="record"):
        event_time(object(), "y")


def test_flow_time_is_lr_step_over_one_minus_momentum():
    np.testing.assert_allclose(flow_time(0.1, [0, 10, 20], 0.9), [0.0, 10.0, 20.0], rtol=1e-14)
    np.testing.assert_allclose(flow_time(0.1, [0, 10], None), [0.0, 1.0], rtol=1e-14)
