"""flows.solve at its entry: a vector field of the wrong output shape or one that fails is a ValueError
before the solve is traced; lists become arrays; non-finite y0 is refused; the failure messages name the
right remedies; a tolerance finer than the state's dtype can give is a warning naming jax_enable_x64."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import FlowError, _inputs, solve, solve_batch


def decay(t, y, args):
    return -args * y


def test_wrong_output_shape_is_a_value_error_naming_both_shapes():
    with pytest.raises(ValueError, match=r"returned shape \(3,\) for y0 of shape \(2,\)"):
        solve(lambda t, y, a: jnp.zeros(3), jnp.ones(2), t1=1.0)
    with pytest.raises(ValueError, match=r"returned shape \(2, 2\)"):
        solve_batch(lambda t, y, a: jnp.outer(y, y), jnp.ones(2), t1=1.0, args=jnp.ones(3))


def test_wrong_output_structure_and_dtype():
    with pytest.raises(ValueError, match="structured like y0"):
        solve(lambda t, y, a: y["x"], {"x": jnp.ones(2)}, t1=1.0)
    with pytest.raises(ValueError, match=r"\['v'\] of shape \(2,\)"):
        solve(lambda t, y, a: {"u": y["u"], "v": jnp.zeros(4)}, {"u": jnp.ones(1), "v": jnp.ones(2)}, t1=1.0)
    with pytest.raises(ValueError, match="dtype float32"):
        solve(lambda t, y, a: y.astype(jnp.float32), jnp.ones(2), t1=1.0)


def test_a_failing_vector_field_is_reported_with_the_state_shape():
    W = jnp.ones((3, 4))
    with pytest.raises(ValueError, match=r"vector_field\(t0, y0, args\) failed for y0 of shape \(5,\)"):
        solve(lambda t, y, a: W @ y, jnp.ones(5), t1=1.0)


def test_lists_become_arrays():
    traj = solve(decay, [1.0, 2.0], t1=1.0, args=0.5)
    np.testing.assert_allclose(np.asarray(traj.ys)[-1], np.exp(-0.5) * np.array([1.0, 2.0]), rtol=1e-7)
    traj = solve(decay, [1, 2], t1=1.0, args=0.5)  # integers: floats of the default precision
    assert np.asarray(traj.ys).dtype == np.float64
    with pytest.raises(ValueError, match="ragged"):
        solve(decay, [[1.0], [1.0, 2.0]], t1=1.0, args=0.5)


def test_non_finite_y0_is_a_value_error_not_a_blow_up():
    for bad in (jnp.array([1.0, jnp.nan]), jnp.array([jnp.inf]), [1.0, float("nan")]):
        with pytest.raises(ValueError, match="y0"):
            solve(decay, bad, t1=1.0, args=0.5)


def test_blow_up_message_names_the_remedies():
    with pytest.raises(FlowError) as err:
        solve(lambda t, y, a: y**2, jnp.ones(1), t1=2.0)
    text = str(err.value)
    assert "diverged" in text and "finite-time blow-up" in text and "end the solve before t = 1" in text
    assert "kvaerno5" not in text
    traj = solve(lambda t, y, a: y**2, jnp.ones(1), t1=2.0, blowup=None, max_steps=200, throw=False)
    assert traj.status in ("max_steps", "nonfinite")
    if traj.status == "max_steps":
        assert "blow-up" in traj.message and "stiff solver does not help" in traj.message


def rotation(t, y, args):
    return jnp.stack([-y[1], y[0]]) * args


def test_a_tolerance_finer_than_float32_warns_once_naming_x64():
    """Without jax_enable_x64 the state is float32 (machine epsilon 1.2e-7): rtol 1e-8 cannot be met, and the
    error of the rotation y = (cos t, sin t) at t = 10 is indeed 10x the tolerance or more (rounding). The
    first such solve warns, naming jax_enable_x64; a second one does not; an attainable rtol (1e-5) and a
    float64 solve at 1e-8 never warn."""
    _inputs._PRECISION_WARNED.clear()
    with jax.enable_x64(False), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        y0, one = jnp.array([1.0, 0.0]), jnp.float32(1.0)
        assert y0.dtype == jnp.float32
        tight = solve(rotation, y0, t1=10.0, args=one, rtol=1e-8, atol=1e-10)
        solve(rotation, y0, t1=10.0, args=one, rtol=1e-8, atol=1e-10)
        solve(rotation, y0, t1=10.0, args=one, rtol=1e-5, atol=1e-7)
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages
    assert "jax_enable_x64" in messages[0] and "rtol = 1e-08" in messages[0] and "float32" in messages[0]
    exact = np.array([np.cos(10.0), np.sin(10.0)])
    assert np.max(np.abs(np.asarray(tight.ys[-1]) - exact)) > 1e-7  # not a false alarm
    _inputs._PRECISION_WARNED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float64 at the same rtol: no warning
        solve(rotation, jnp.array([1.0, 0.0]), t1=10.0, args=jnp.asarray(1.0), rtol=1e-8, atol=1e-10)


def test_solve_batch_takes_the_options_of_solve_with_its_defaults():
    """`solve_batch(**options)` forwards to the options `solve` defines: an unknown one (or one a batch does not
    take) is a TypeError naming it, a missing `t1` too, and the defaults are `solve`'s own (a drifted default
    would change the batch's tolerance, its budget or its save grid)."""
    y0, rates = jnp.ones(2), jnp.array([0.5, 2.0])
    for bad in ("rtl", "progress", "constant_step"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{bad}'.*solve: t1, t0, ts, solver"):
            solve_batch(decay, y0, t1=1.0, args=rates, **{bad: True})
    with pytest.raises(TypeError, match="missing required keyword argument 't1'"):
        solve_batch(decay, y0, args=rates)
    default = solve_batch(decay, y0, t1=1.0, args=rates)
    explicit = solve_batch(
        decay, y0, t1=1.0, t0=0.0, ts=None, args=rates, solver="auto", rtol=1e-8, atol=1e-10, blowup=1e10
    )
    np.testing.assert_array_equal(default.ys, explicit.ys)
    np.testing.assert_array_equal(default.ts, explicit.ts)
    assert default.num_steps.tolist() == explicit.num_steps.tolist()
    loose = solve_batch(decay, y0, t1=1.0, args=rates, rtol=1e-4, atol=1e-6)
    assert np.sum(loose.num_steps) < np.sum(default.num_steps)  # the options reach the solver
    for i, rate in enumerate(rates):
        np.testing.assert_allclose(default.ys[i, -1], np.exp(-float(rate)) * np.ones(2), rtol=1e-7)
