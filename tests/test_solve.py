"""flows.solve: accuracy against closed forms, failure reporting, events, observables, vmapped sweeps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows import Event, FlowError, linear_grid, log_grid, solve, solve_batch
from flows._program import COMPILED as _COMPILED


def decay(t, y, args):
    return -args * y


def square(t, y, args):
    return y**2


# one compile per solver; dopri8 runs in -m slow only: the default run pins it against closed forms elsewhere
# (solve_decoder against theory.h to 1e-9 in tests/scan_snap/test_decoder.py, solve_single_common_token against
# theory.B in tests/scan_snap/test_theory_closed_forms.py)
@pytest.mark.parametrize(
    "solver, rtol, tol",
    [
        ("tsit5", 1e-8, 1e-6),
        ("dopri5", 1e-8, 1e-6),
        pytest.param("dopri8", 1e-12, 1e-10, marks=pytest.mark.slow),
        ("kvaerno5", 1e-8, 1e-6),
    ],
)
def test_exponential_decay_matches_closed_form(solver, rtol, tol):
    ts = linear_grid(0.0, 3.0, 7)
    traj = solve(
        decay, jnp.array([1.0, 2.0]), t1=3.0, ts=ts, args=jnp.array(1.5), solver=solver, rtol=rtol, atol=rtol * 1e-2
    )
    exact = np.exp(-1.5 * ts)[:, None] * np.array([1.0, 2.0])
    assert traj.status == "ok" and traj.ok
    assert np.max(np.abs(np.asarray(traj.ys) - exact) / exact) < tol
    assert int(traj.num_steps) > 0 and traj.run_s > 0 and traj.solver == solver


def test_grids():
    g = log_grid(0.0, 100.0, 5, first=1e-2)
    assert g[0] == 0.0 and g[-1] == 100.0 and np.all(np.diff(g) > 0)
    np.testing.assert_allclose(g[1:], np.geomspace(1e-2, 100.0, 4))
    assert np.all(np.diff(log_grid(1.0, 2.0, 10)) > 0)
    with pytest.raises(ValueError, match="num"):
        linear_grid(0, 1, 1)
    with pytest.raises(ValueError, match="first"):
        log_grid(0.0, 1.0, 5, first=2.0)


def test_finite_time_blowup_is_reported():
    # dy/dt = y^2, y(0) = 1 blows up at t = 1.
    with pytest.raises(FlowError, match="diverged") as info:
        solve(square, jnp.array([1.0]), t1=2.0, ts=linear_grid(0, 2, 5))
    traj = info.value.trajectory
    assert traj.status == "diverged"
    assert abs(float(traj.t_final) - 1.0) < 1e-6
    assert "t = 1" in traj.message
    # Without the blow-up guard the solver stalls at t = 1 and says max_steps, with the size of the state.
    traj = solve(square, jnp.array([1.0]), t1=2.0, blowup=None, max_steps=4096, throw=False)
    assert traj.status == "max_steps"
    assert "max_steps = 4096" in traj.message and "max |y|" in traj.message
    assert abs(float(traj.t_final) - 1.0) < 1e-6


def test_exhausted_max_steps_is_reported():
    traj = solve(decay, jnp.array([1.0]), t1=100.0, args=jnp.array(1.0), max_steps=10, throw=False)
    assert traj.status == "max_steps" and not traj.ok
    assert "max_steps = 10 reached" in traj.message and "before t1 = 100" in traj.message
    with pytest.raises(FlowError, match="max_steps"):
        solve(decay, jnp.array([1.0]), t1=100.0, args=jnp.array(1.0), max_steps=10)


def test_nonfinite_vector_field_is_reported():
    traj = solve(lambda t, y, a: jnp.sqrt(y - 2.0), jnp.array([1.0]), t1=1.0, max_steps=500, throw=False)
    assert traj.status == "nonfinite"
    assert "NaN or inf" in traj.message


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(solver="rk4"), "solver"),
        (dict(rtol=0.0), "rtol"),
        (dict(atol=-1.0), "atol"),
        (dict(rtol=float("nan")), "rtol"),
        (dict(t1=0.0), "t1"),
        (dict(t1=float("inf")), "t1"),
        (dict(ts=[0.0, 5.0]), "ts"),
        (dict(ts=[0.5, 0.2]), "ts"),
        (dict(max_steps=0), "max_steps"),
        (dict(blowup=-1.0), "blowup"),
        (dict(event=lambda t, y, a: y), "event"),
        (dict(save_states=False), "save_states"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, name):
    call = dict(t1=1.0, args=jnp.array(1.0))
    call.update(kwargs)
    with pytest.raises(ValueError, match=name):
        solve(decay, jnp.array([1.0]), **call)


def test_integer_state_rejected():
    with pytest.raises(ValueError, match="y0"):
        solve(decay, jnp.array([1]), t1=1.0, args=jnp.array(1.0))


def test_event_stops_at_located_time():
    ev = Event(lambda t, y, a: y[0] - 0.5, name="half")
    traj = solve(
        decay, jnp.array([1.0]), t1=2.0, ts=linear_grid(0, 2, 5), args=jnp.array(1.0), event=ev, rtol=1e-10, atol=1e-12
    )
    assert traj.status == "event" and traj.ok
    assert abs(float(traj.t_event) - np.log(2.0)) < 1e-8
    assert "half" in traj.message
    assert np.all(np.isinf(np.asarray(traj.ts)[3:]))  # not reached


def test_event_located_without_stopping():
    ts = linear_grid(0, 2, 9)
    ev = Event(lambda t, y, a: y[0] - 0.5, stop=False, direction=False)
    traj = solve(decay, jnp.array([1.0]), t1=2.0, ts=ts, args=jnp.array(1.0), event=ev, rtol=1e-10, atol=1e-12)
    assert traj.status == "ok"
    assert abs(float(traj.t_event) - np.log(2.0)) < 1e-8
    np.testing.assert_allclose(np.asarray(traj.ts), ts)
    np.testing.assert_allclose(np.asarray(traj.ys)[:, 0], np.exp(-ts), rtol=1e-8)


def test_observables_without_states():
    obs = {"energy": lambda t, y, a: jnp.sum(y**2), "t": lambda t, y, a: t}
    traj = solve(
        decay, jnp.ones(3), t1=1.0, ts=linear_grid(0, 1, 4), args=jnp.array(1.0), observables=obs, save_states=False
    )
    assert traj.ys is None
    ts = np.linspace(0, 1, 4)
    np.testing.assert_allclose(traj.observables["energy"], 3 * np.exp(-2 * ts), rtol=1e-7)
    np.testing.assert_allclose(traj.observables["t"], ts)


def test_state_dtype_follows_y0():
    traj = solve(decay, jnp.ones(2, dtype=jnp.float32), t1=1.0, args=jnp.array(1.0, jnp.float32), rtol=1e-5, atol=1e-6)
    assert traj.ys.dtype == jnp.float32


def test_vmapped_sweep_compiles_once():
    rates = jnp.linspace(0.1, 2.0, 64)
    ts = linear_grid(0.0, 1.0, 5)
    before = set(_COMPILED)
    batch = solve_batch(decay, jnp.array([1.0]), t1=1.0, ts=ts, args=rates)
    assert len(set(_COMPILED) - before) == 1
    assert len(batch.status) == 64 and batch.ok
    assert batch.ys.shape == (64, 5, 1)
    np.testing.assert_allclose(np.asarray(batch.ys)[:, :, 0], np.exp(-np.outer(rates, ts)), rtol=1e-6)
    again = solve_batch(decay, jnp.array([1.0]), t1=1.0, ts=ts, args=rates * 2)
    assert again.compile_s == 0.0 and len(set(_COMPILED) - before) == 1
    member = batch[7]
    assert member.status == "ok" and member.ys.shape == (5, 1)


def test_cached_call_skips_the_field_check(monkeypatch):
    """A call that reuses a compiled program does not check the vector field again: the check (an abstract
    trace through jax.eval_shape) cost more than the run of a small solve."""
    from flows import _chunked

    checks = []
    real = _chunked.check_field
    monkeypatch.setattr(_chunked, "check_field", lambda *a: (checks.append(1), real(*a))[1])

    def field(t, y, args):
        return -args * y

    solve(field, jnp.ones(3), t1=1.0, args=jnp.array(0.5))
    assert checks == [1]
    again = solve(field, jnp.ones(3), t1=1.0, args=jnp.array(0.7))
    assert again.compile_s == 0.0 and checks == [1]
    np.testing.assert_allclose(np.asarray(again.ys[-1]), np.exp(-0.7) * np.ones(3), rtol=1e-7)


def test_batch_reports_failed_members():
    ys0 = jnp.array([[0.5], [1.0]])
    batch = solve_batch(square, ys0, t1=1.5, batch_y0=True, batch_args=False, max_steps=4096)
    assert batch.status == ("ok", "diverged")
    assert not batch.ok
    np.testing.assert_allclose(float(batch.ys[0, -1, 0]), 0.5 / (1 - 0.5 * 1.5), rtol=1e-6)
    programs = set(_COMPILED)
    with pytest.raises(FlowError, match="1 of 2"):  # the same program: `throw` is applied on the host
        solve_batch(square, ys0, t1=1.5, batch_y0=True, batch_args=False, max_steps=4096, throw=True)
    assert set(_COMPILED) == programs  # nothing compiled (nor evicted)


def test_public_names():
    for name in ("solve", "solve_batch", "Trajectory", "FlowError", "Event", "log_grid", "linear_grid"):
        assert hasattr(flows, name)


def test_progress_meter_runs(capsys):
    traj = solve(decay, jnp.array([1.0]), t1=1.0, args=jnp.array(1.0), progress=True)
    assert traj.status == "ok"
    err = capsys.readouterr().err
    assert "100.00%|" in err, err  # the bar was drawn and closed at 100% (TqdmProgressMeter)


def _half(t, y, a):
    return y[0] - 0.5


# a non-stopping event in a batch of 5 (a member without an event: rate 0.1), observables only: the same
# program for the two tests below (the unsharded batch)
HALF_CONTINUE = Event(_half, stop=False)
BATCH_EVENT = dict(
    t1=3.0,
    ts=linear_grid(0.0, 3.0, 13),
    args=jnp.array([0.5, 1.0, 2.0, 0.1, 3.0]),
    event=HALF_CONTINUE,
    observables={"y": lambda t, y, a: y[0]},
    save_states=False,
    rtol=1e-10,
    atol=1e-12,
)


def test_event_without_stopping_in_a_batch_and_without_states():
    """Each member continues past its own event time; observables only; one compiled program."""
    rates, ts = BATCH_EVENT["args"], BATCH_EVENT["ts"]
    before = set(_COMPILED)
    batch = solve_batch(decay, jnp.array([1.0]), **BATCH_EVENT)
    again = solve_batch(decay, jnp.array([1.0]), **BATCH_EVENT)
    assert len(set(_COMPILED) - before) <= 1 and again.compile_s == 0.0  # (+0: test_batch_sharded compiled it)
    assert batch.status == ("ok",) * 5
    t_ev = np.asarray(batch.t_event)
    has_event = np.asarray(rates) != 0.1
    np.testing.assert_allclose(t_ev[has_event], np.log(2.0) / np.asarray(rates)[has_event], rtol=1e-8)
    assert np.isnan(t_ev[~has_event]).all()  # y = exp(-0.3) > 0.5 at t1: no event
    np.testing.assert_allclose(batch.observables["y"], np.exp(-np.outer(rates, ts)), rtol=1e-8)


def test_batch_sharded_over_two_devices_equals_unsharded():
    """A sweep split over a mesh of the two CPU devices (5 members: padded to 6, padding dropped) gives the
    unsharded results, also past a non-stopping event; bad meshes are refused."""
    assert jax.device_count() >= 2
    kw = BATCH_EVENT
    plain = solve_batch(decay, jnp.array([1.0]), **kw)
    mesh = flows.batch_mesh(2)
    sharded = solve_batch(decay, jnp.array([1.0]), mesh=mesh, **kw)
    assert sharded.status == plain.status and len(sharded.status) == 5
    np.testing.assert_allclose(sharded.observables["y"], plain.observables["y"], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(np.asarray(sharded.t_event), np.asarray(plain.t_event), rtol=1e-13)
    np.testing.assert_array_equal(np.asarray(sharded.num_steps), np.asarray(plain.num_steps))
    with pytest.raises(ValueError, match="num_devices"):
        flows.batch_mesh(99)
    with pytest.raises(ValueError, match="one axis"):
        solve_batch(decay, jnp.array([1.0]), mesh="two devices", **kw)
