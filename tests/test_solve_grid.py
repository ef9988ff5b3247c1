"""flows.solve with save grids of any length: one compiled program (the grid runs in chunks of
`flows._chunked.SAVE_CHUNK` save points; a batch's, one per power of two of save slots), the same results as
closed forms across chunk boundaries, stops and events in a later chunk, and the step budget counted over the
whole grid."""

import jax.numpy as jnp
import numpy as np
import pytest

from flows import Event, FlowError, _sweep, linear_grid, solve, solve_batch
from flows._chunked import SAVE_CHUNK, batch_slots
from flows._program import COMPILED as _COMPILED


def decay(t, y, args):
    return -args * y


def logistic(t, y, args):
    return y * (1.0 - y)


def square(t, y, args):
    return y**2


LENGTHS = (2, SAVE_CHUNK - 1, SAVE_CHUNK, SAVE_CHUNK + 1, 3 * SAVE_CHUNK + 5)


def test_every_grid_length_is_one_program_and_matches_the_closed_form():
    y0 = jnp.array([1.0, 2.0])
    before, steps = set(_COMPILED), {}
    for n in LENGTHS:
        ts = linear_grid(0.0, 4.0, n)
        traj = solve(decay, y0, t1=4.0, ts=ts, args=jnp.asarray(0.7), rtol=1e-10, atol=1e-12)
        assert traj.status == "ok" and np.asarray(traj.ys).shape == (n, 2)
        np.testing.assert_array_equal(np.asarray(traj.ts), ts)
        exact = np.exp(-0.7 * ts)[:, None] * np.array([1.0, 2.0])
        np.testing.assert_allclose(np.asarray(traj.ys), exact, rtol=1e-8)
        steps[n] = int(traj.num_steps)
    assert len(set(_COMPILED) - before) == 1, "a new number of save points compiled a new program"
    # the chunks' step counts add up to about one solve's (each chunk restarts the step-size controller)
    assert steps[2] <= steps[3 * SAVE_CHUNK + 5] <= steps[2] + 4 * 10


def test_observables_run_only_at_the_real_save_points():
    """A short grid fills the rest of its chunk's save slots with NaN times, which diffrax never reaches: the
    observables run once per save point, not once per slot (with the last time repeated they ran
    SAVE_CHUNK times; the mean-field particle solve spent 8 of its 14 s there)."""
    import jax

    calls = []

    def counted(t, y, args):
        jax.debug.callback(lambda tt: calls.append(float(tt)), t)
        return y[0] ** 2

    ts = np.array([0.0, 0.5, 1.0])
    traj = solve(
        decay,
        jnp.array([1.0, 2.0]),
        t1=1.0,
        ts=ts,
        args=jnp.asarray(0.7),
        observables={"sq": counted},
        rtol=1e-10,
        atol=1e-12,
    )
    np.testing.assert_allclose(np.asarray(traj.observables["sq"]), np.exp(-1.4 * ts), rtol=1e-8)
    assert sorted(calls) == pytest.approx(list(ts), abs=1e-12), calls


# vmapped in -m slow: `_chunked.execute` pads a vmapped and a lockstep batch's grid alike (`auto` is lockstep here)
@pytest.mark.parametrize("strategy", ["auto", pytest.param("vmap", marks=pytest.mark.slow)])
def test_batch_grid_lengths_share_a_program_per_power_of_two(strategy, monkeypatch):
    """A batch pads its grid to a power of two of save slots (`batch_slots`), at most SAVE_CHUNK: grids of 5
    and 7 points share one program, in lockstep and vmapped alike; one of SAVE_CHUNK + 3 runs as two chunks of
    SAVE_CHUNK; the results are the closed form's either way."""
    rates = jnp.array([0.5, 1.0, 2.0])
    assert [batch_slots(n) for n in (1, 4, 5, 8, 9, 33, SAVE_CHUNK, SAVE_CHUNK + 1, 10**6)] == [
        4, 4, 8, 8, 16, 64, SAVE_CHUNK, SAVE_CHUNK, SAVE_CHUNK]  # fmt: skip
    monkeypatch.setattr(_sweep.config, "strategy", strategy)
    programs = []
    for n in (5, 7, SAVE_CHUNK + 3):
        before = set(_COMPILED)
        ts = linear_grid(0.0, 2.0, n)
        batch = solve_batch(decay, jnp.array([1.0]), t1=2.0, ts=ts, args=rates, rtol=1e-10, atol=1e-12)
        assert batch.status == ("ok",) * 3 and np.asarray(batch.ys).shape == (3, n, 1)
        np.testing.assert_allclose(np.asarray(batch.ys)[..., 0], np.exp(-np.outer(rates, ts)), rtol=1e-8)
        programs.append(len(set(_COMPILED) - before))
    assert programs[1] == 0, programs


def test_stopping_event_in_a_later_chunk_marks_the_rest_unreached():
    n = 3 * SAVE_CHUNK
    ts = linear_grid(0.0, 3.0, n)
    half = Event(lambda t, y, a: y[0] - 0.5, name="half")
    traj = solve(decay, jnp.array([1.0]), t1=3.0, ts=ts, args=jnp.asarray(0.3), event=half)
    t_half = np.log(2.0) / 0.3  # 2.31: in the third chunk
    assert traj.status == "event"
    assert abs(float(traj.t_event) - t_half) < 1e-8 and abs(float(traj.t_final) - t_half) < 1e-8
    reached = np.asarray(traj.ts) <= t_half
    np.testing.assert_array_equal(np.asarray(traj.ts)[reached], ts[ts <= t_half])
    assert np.all(np.isinf(np.asarray(traj.ts)[~reached])) and np.all(np.isinf(np.asarray(traj.ys)[~reached]))
    np.testing.assert_allclose(np.asarray(traj.ys)[reached, 0], np.exp(-0.3 * ts[ts <= t_half]), rtol=1e-7)


def test_non_stopping_event_in_a_later_chunk_is_located_once():
    n = 3 * SAVE_CHUNK
    ts = linear_grid(0.0, 3.0, n)
    half = Event(lambda t, y, a: y[0] - 0.5, stop=False)
    traj = solve(decay, jnp.array([1.0]), t1=3.0, ts=ts, args=jnp.asarray(0.3), event=half, rtol=1e-10, atol=1e-12)
    assert traj.status == "ok" and abs(float(traj.t_event) - np.log(2.0) / 0.3) < 1e-8
    np.testing.assert_allclose(np.asarray(traj.ys)[:, 0], np.exp(-0.3 * ts), rtol=1e-8)
    rates = jnp.array([0.3, 1.0, 0.1])  # events in chunk 3, chunk 1, none
    batch = solve_batch(decay, jnp.array([1.0]), t1=3.0, ts=ts, args=rates, event=half, rtol=1e-10, atol=1e-12)
    assert batch.status == ("ok",) * 3
    np.testing.assert_allclose(np.asarray(batch.t_event)[:2], np.log(2.0) / np.array([0.3, 1.0]), rtol=1e-8)
    assert np.isnan(np.asarray(batch.t_event)[2])
    np.testing.assert_allclose(np.asarray(batch.ys)[..., 0], np.exp(-np.outer(rates, ts)), rtol=1e-8)


def test_batch_member_that_stops_early_keeps_its_stop_and_the_others_go_on():
    """y' = y^2 from y0 blows up at 1/y0: member 0 (y0 = 1) diverges in the first chunk, member 1 (y0 = 0.25)
    in the third, member 2 (y0 = 0.1) never before t1 = 3."""
    n = 3 * SAVE_CHUNK
    ts = linear_grid(0.0, 3.0, n)
    y0 = jnp.array([[1.0], [0.25], [0.1]])
    batch = solve_batch(square, y0, t1=3.0, ts=ts, batch_y0=True, batch_args=False, blowup=1e6)
    programs = set(_COMPILED)
    assert batch.status == ("diverged", "ok", "ok")
    t_final = np.asarray(batch.t_final)
    assert 0.99 < t_final[0] < 1.0 and t_final[1] == 3.0 and t_final[2] == 3.0
    ys = np.asarray(batch.ys)[..., 0]
    ok = ts < 0.99
    np.testing.assert_allclose(ys[0, ok], 1.0 / (1.0 - ts[ok]), rtol=1e-6)
    assert np.all(np.isinf(ys[0, ts > 1.0]))
    np.testing.assert_allclose(ys[1], 0.25 / (1.0 - 0.25 * ts), rtol=1e-6)
    np.testing.assert_allclose(ys[2], 0.1 / (1.0 - 0.1 * ts), rtol=1e-6)
    y0 = jnp.array([[1.0], [0.5], [0.1]])  # member 1 now blows up at t = 2: in the third chunk
    batch = solve_batch(square, y0, t1=3.0, ts=ts, batch_y0=True, batch_args=False, blowup=1e6)
    assert set(_COMPILED) == programs  # one vector field object: the second batch reuses the program
    assert batch.status == ("diverged", "diverged", "ok")
    assert 1.99 < float(np.asarray(batch.t_final)[1]) < 2.0
    assert np.all(np.isinf(np.asarray(batch.ys)[1, ts > 2.0]))


def test_step_budget_counts_every_chunk():
    n = 4 * SAVE_CHUNK
    ts = linear_grid(0.0, 40.0, n)
    full = solve(logistic, jnp.array([0.01]), t1=40.0, ts=ts, rtol=1e-10, atol=1e-12)
    budget = int(full.num_steps) // 2
    with pytest.raises(FlowError, match="max_steps"):
        solve(logistic, jnp.array([0.01]), t1=40.0, ts=ts, rtol=1e-10, atol=1e-12, max_steps=budget)
    traj = solve(logistic, jnp.array([0.01]), t1=40.0, ts=ts, rtol=1e-10, atol=1e-12, max_steps=budget, throw=False)
    assert traj.status == "max_steps" and float(traj.t_final) < 40.0
    assert budget <= int(traj.num_steps) <= budget + int(full.num_steps)


def forced(t, y, args):
    return -y * (1.0 + 0.5 * jnp.sin(3.0 * t)) + args * jnp.cos(t)


def _euler_loop(y0, T, dt, ts, c):
    """A literal Euler loop over [0, T] in ceil(T / dt) equal steps (as diffrax spreads constant steps over the
    horizon), read at `ts` by linear interpolation between the steps (Euler's dense output)."""
    n = int(np.ceil(T / dt - 1e-9))
    h, ys = T / n, [np.asarray(y0, float)]
    for k in range(n):
        t = k * h
        ys.append(ys[-1] + h * (-ys[-1] * (1.0 + 0.5 * np.sin(3.0 * t)) + c * np.cos(t)))
    knots, ys = h * np.arange(n + 1), np.array(ys)
    return n, np.stack([np.interp(ts, knots, ys[:, i]) for i in range(ys.shape[1])], axis=1)


@pytest.mark.parametrize("dt", [0.01, 0.003])  # save times on the step grid, and between its steps
def test_constant_step_euler_over_several_chunks_equals_a_literal_loop(dt):
    """200 save points (4 chunks): every chunk starts on the step grid, so the steps are those of one solve
    (a chunk ending at a save time between two steps restarted the constant steps there: one step more and
    the steps of each chunk stretched to fit it, an error of the order of dt^2)."""
    T, ts, y0 = 2.0, np.linspace(0.0, 2.0, 200), np.array([1.0, -2.0])
    n, exact = _euler_loop(y0, T, dt, ts, 1.0)
    traj = solve(forced, jnp.asarray(y0), t1=T, ts=ts, args=1.0, solver="euler", constant_step=True, dt0=dt)
    assert traj.status == "ok" and int(traj.num_steps) == n
    np.testing.assert_allclose(np.asarray(traj.ys), exact, rtol=0, atol=1e-13)


def test_constant_steps_beyond_the_default_budget_run_by_default():
    """max_steps=None with constant steps covers the steps the horizon needs (150,000 Euler steps: more than
    the 100,000 of the horizon's default and one call's cap), the literal loop's (1 - dt)^n."""
    traj = solve(decay, jnp.array([1.0]), t1=1.5, args=1.0, solver="euler", constant_step=True, dt0=1e-5)
    assert traj.status == "ok" and int(traj.num_steps) == 150_000
    np.testing.assert_allclose(np.asarray(traj.ys)[-1], [(1.0 - 1e-5) ** 150_000], rtol=1e-10)
