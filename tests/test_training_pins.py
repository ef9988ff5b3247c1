"""The shared training layer's rule for a failed run, against a literal loop: the first non-finite step is the
first saved step at which ANY entry of ANY observable (scalar or array) is NaN or inf, or the first step whose
parameters hold one, whichever comes first; the record is truncated before it."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flows.training import TrainingError, finish, first_nonfinite_step, training_program


def _literal_first_bad(saved, observables, param_step):
    for k, step in enumerate(saved):
        if param_step >= 0 and param_step <= step:
            return param_step
        for v in observables.values():
            if not all(np.isfinite(x) for x in np.asarray(v[k]).ravel()):
                return int(step)
    return param_step


def _series(rng, steps):
    k = len(steps)
    return {"loss": rng.normal(size=k), "G": rng.normal(size=(k, 2, 3)), "alignment": rng.normal(size=(k, 4))}


def test_first_nonfinite_step_is_the_literal_first_bad_entry():
    """One bad entry in one array observable decides (not all of its entries); scalars, arrays, several bad
    saves and a parameter step before or after them: 300 random cases against the literal loop."""
    rng = np.random.default_rng(0)
    steps = np.arange(0, 60, 5)
    for case in range(300):
        obs = _series(rng, steps)
        for _ in range(rng.integers(0, 3)):
            name = ("loss", "G", "alignment")[rng.integers(3)]
            idx = (rng.integers(len(steps)),) + tuple(rng.integers(s) for s in obs[name].shape[1:])
            obs[name][idx] = (np.nan, np.inf, -np.inf)[rng.integers(3)]
        param_step = int(rng.choice([-1, -1, rng.integers(1, 60)]))
        want = _literal_first_bad(steps, obs, param_step)
        assert first_nonfinite_step(steps, obs, param_step) == want, (case, obs, param_step)


def test_one_nan_entry_truncates_the_record_before_its_step():
    steps = np.array([0, 10, 20, 30, 40])
    obs = _series(np.random.default_rng(1), steps)
    obs["G"][3, 1, 2] = np.nan  # one of six entries, at step 30
    with pytest.raises(TrainingError, match="non-finite at step 30") as info:
        finish(steps, obs, -1, params={"w": np.zeros(2)}, clock=0.1, optimizer="gd", lr=0.1)
    rec = info.value.record
    assert info.value.step == 30
    np.testing.assert_array_equal(rec.steps, [0, 10, 20])
    np.testing.assert_allclose(rec.ts, [0.0, 1.0, 2.0], rtol=1e-15)
    np.testing.assert_array_equal(rec.G, obs["G"][:3])
    # a parameter step between two saves comes first: the saves from it on are dropped
    with pytest.raises(TrainingError) as info:
        finish(steps, obs, 17, params={"w": np.zeros(2)}, clock=0.1, optimizer="gd", lr=0.1)
    assert info.value.step == 17
    np.testing.assert_array_equal(info.value.record.steps, [0, 10])


def test_training_loop_marks_the_first_step_with_a_non_finite_parameter():
    """The compiled loop: step k applies the gradient table's row k (loss <theta, row>, SGD lr = 1); row 3 has
    one inf entry, so the parameters after step 4 (steps counted from 1) hold one -inf among three entries; the
    loop reports 4, the first such step, whatever follows."""
    rows = np.ones((8, 3))
    rows[3, 1] = np.inf
    rows[5, 0] = np.nan

    def loss(params, data, batch):
        return jnp.sum(params * batch)

    def sample(data, key, step):
        return key, data[step]

    run = training_program(loss, lambda p, d: {"norm": jnp.sum(p * p)}, optax.sgd(1.0), sample=sample)
    params = jnp.zeros(3)
    opt = optax.sgd(1.0)

    final, series, _, _, bad = jax.jit(run)(
        params, opt.init(params), jax.random.PRNGKey(0), jnp.asarray([2, 2, 2, 2], jnp.int32), jnp.asarray(rows),
        jnp.zeros((0,)),
    )  # fmt: skip
    assert int(bad) == 4
    norm = np.asarray(series["norm"])
    np.testing.assert_allclose(norm[:2], [0.0, 3 * 2.0**2], rtol=1e-15)  # saves at steps 0 and 2
    assert not np.isfinite(norm[2])
