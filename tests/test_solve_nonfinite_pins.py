"""A non-finite value exactly at the last save time of a solve (and of a chunk of the save grid) is a failed
solve, for `flows.solve` and `flows.solve_sde`, with the status and the time said.

The vector fields are linear decays with closed forms; the non-finite values are put in by hand at known
times: an observable 1 / (t_bad - t) that is inf only at t = t_bad, one entry of an array observable NaN only
there, and a state made inf by the last constant step (Euler from t1 - dt).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from flows import FlowError, solve, solve_sde
from flows._solve import SAVE_CHUNK

T1 = 2.0


def decay(t, y, args):
    return -y


def pole(t, y, args):
    """Finite everywhere but at t = t_bad (inf there): 1 / (t_bad - t) (t_bad in args: one compile for all)."""
    return 1.0 / (args["t_bad"] - t) + 0.0 * y[0]


def one_entry_nan(t, y, args):
    """A (2,) observable whose second entry (only) is NaN at t = t_bad: an any-finite check would pass it."""
    return jnp.stack([y[0], jnp.where(t == args["t_bad"], jnp.nan, y[0])])


def at(t_bad):
    return {"t_bad": jnp.asarray(t_bad)}


Y0 = jnp.asarray([1.0, -0.5])


def test_an_observable_finite_up_to_the_last_save_time_and_inf_there_fails():
    ts = np.linspace(0.0, T1, 5)
    traj = solve(decay, Y0, t1=T1, ts=ts, args=at(T1), observables={"pole": pole}, throw=False, rtol=1e-10, atol=1e-12)
    assert traj.status == "nonfinite", traj.message
    assert f"t = {T1:.6g}" in traj.message
    values = np.asarray(traj.observables["pole"])
    np.testing.assert_allclose(values[:-1], 1.0 / (T1 - ts[:-1]), rtol=1e-14)  # the earlier saves, as computed
    assert np.isinf(values[-1])
    np.testing.assert_allclose(traj.ys[:, 0], np.exp(-ts), rtol=1e-8)  # the state itself stayed finite
    with pytest.raises(FlowError, match="non-finite"):
        solve(decay, Y0, t1=T1, ts=ts, args=at(T1), observables={"pole": pole}, rtol=1e-10, atol=1e-12)
    # the same observable one save earlier than its pole, and finite there: ok
    ok = solve(decay, Y0, t1=T1, ts=ts, args=at(2 * T1), observables={"pole": pole}, rtol=1e-10, atol=1e-12)
    assert ok.status == "ok"


def test_one_nan_entry_of_an_array_observable_at_the_last_save_time_fails():
    ts = np.linspace(0.0, T1, 5)
    traj = solve(decay, Y0, t1=T1, ts=ts, args=at(T1), observables={"pair": one_entry_nan}, throw=False)
    assert traj.status == "nonfinite", traj.message
    assert np.all(np.isfinite(np.asarray(traj.observables["pair"])[:, 0]))


def test_a_state_made_non_finite_by_the_last_step_fails_even_when_no_save_sees_it():
    """Constant Euler steps: the field is inf at t1 - dt, so y(t1) = inf after the last step; the save
    times stop before t1, so only the final state shows it (no blow-up guard: the non-finite check itself)."""
    dt = 0.25

    def field(t, y, args):
        return jnp.where(t >= T1 - 1.5 * dt, jnp.inf, -y)  # only the last step, from t1 - dt

    traj = solve(field, Y0, t1=T1, ts=[0.0, 1.0], solver="euler", dt0=dt, constant_step=True, blowup=None, throw=False)
    assert traj.status == "nonfinite", traj.message
    np.testing.assert_allclose(traj.ys[-1], np.asarray(Y0) * (1 - dt) ** 4, rtol=1e-14)  # Euler at t = 1


def test_an_inf_exactly_at_the_end_of_a_save_chunk_fails():
    """A grid of more than SAVE_CHUNK points runs as chunks, each ending at its last save time: an observable
    inf only at the end of the first chunk stops the solve there, with that time in the message."""
    ts = np.linspace(0.0, T1, SAVE_CHUNK + 9)
    t_bad = float(ts[SAVE_CHUNK - 1])
    traj = solve(
        decay, Y0, t1=T1, ts=ts, args=at(t_bad), observables={"pole": pole}, throw=False, rtol=1e-10, atol=1e-12
    )
    assert traj.status == "nonfinite", traj.message
    assert f"t = {t_bad:.6g}" in traj.message
    values = np.asarray(traj.observables["pole"])
    np.testing.assert_allclose(values[: SAVE_CHUNK - 1], 1.0 / (t_bad - ts[: SAVE_CHUNK - 1]), rtol=1e-14)


@pytest.mark.parametrize("where", ["last", "middle"])
def test_sde_nan_in_one_entry_at_a_save_time_is_reported_there(where):
    """solve_sde (additive noise): one NaN entry of an array observable at the last save time (or a middle one)
    gives "nonfinite" and names that time."""
    ts = np.linspace(0.0, T1, 5)
    t_bad = float(ts[-1] if where == "last" else ts[2])
    kw = dict(sigma=0.1, t1=T1, dt=0.05, ts=ts, seed=0, args=at(t_bad), observables={"pair": one_entry_nan})
    traj = solve_sde(decay, Y0, throw=False, **kw)
    assert traj.status == "nonfinite", traj.message
    assert f"by t = {t_bad:.6g}" in traj.message
    with pytest.raises(FlowError, match="non-finite"):
        solve_sde(decay, Y0, **kw)
