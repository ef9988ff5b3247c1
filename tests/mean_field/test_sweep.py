"""Seeds of one shape in one vmapped GD program: every member equals its own `train` run."""

import numpy as np
import pytest

import flows
from flows import mean_field as mf
from flows.mean_field.sweep import train_gd_seeds

# the shapes of test_flow.py (its single-run GD program is reused for the comparison)
CFG = mf.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)


def test_each_seed_equals_its_single_run():
    batch = train_gd_seeds(CFG, 0.1, 20, seeds=[1, 7, 3], save_every=5)
    assert batch["Q"].shape == (3, 5) and batch.particles["V"].shape == (3, 2, 4, 3, 3)
    for i, s in enumerate(batch.seeds):
        single = mf.train(CFG.replace(seed=s), "gd", 0.1, 20, save_every=5)
        for name in single.observables:
            assert np.max(np.abs(batch[name][i] - single[name])) <= 1e-12 * np.max(np.abs(single[name])), name
        for k in single.particles:
            assert np.max(np.abs(np.asarray(batch.particles[k][i]) - np.asarray(single.particles[k]))) < 1e-12
    assert np.ptp(batch["Q"][:, 0]) > 0  # seeds differ
    np.testing.assert_array_equal(batch.tau, 0.1 * batch.steps)


def test_bad_seeds_and_divergence():
    with pytest.raises(ValueError, match="seeds"):
        train_gd_seeds(CFG, 0.1, 4, seeds=[1, 1])
    with pytest.raises(ValueError, match="seeds"):
        train_gd_seeds(CFG, 0.1, 4, seeds=[])
    with pytest.raises(ValueError, match="eta_tau"):
        train_gd_seeds(CFG, -1.0, 4, seeds=[0])
    # from init_scale = 40, eta_tau = 0.1 blows up (the batched program of the test above: 3 seeds, 5 saves)
    # the shared failed-run rule: every run's record truncated before the first non-finite step
    with pytest.raises(flows.TrainingError, match="GD diverged for seed ") as err:
        train_gd_seeds(CFG.replace(init_scale=40.0), 0.1, 20, seeds=[0, 1, 2], save_every=5)
    record = err.value.record
    assert record is err.value.trajectory and np.all(record.steps < err.value.step)
    assert record["Q"].shape == (3, record.steps.size) and np.all(np.isfinite(record["Q"]))
    assert record.seeds == (0, 1, 2) and np.array_equal(record.tau, record.ts)


def test_batch_of_given_particles_equals_single_runs():
    """train_gd_batch on coupled subsamples of one cloud with one shared data set: member i is train (the
    batched and the single GD programs of the test above: 3 runs, 5 saves, CFG's test prompts)."""
    big = CFG.replace(M=12, M_mlp=12)
    cloud = mf.init_particles(big)
    data, test = mf.training_set(CFG), mf.held_out_set(CFG)
    subs = [mf.subsample_particles(cloud, 4, 6, key=k, replace=True) for k in range(3)]
    batch = mf.train_gd_batch(CFG, 0.1, 20, subs, data, test, save_every=5, labels=["a", "b", "c"])
    assert batch.seeds == ("a", "b", "c") and batch["Q"].shape == (3, 5)
    for i, p in enumerate(subs):
        single = mf.train(CFG, "gd", 0.1, 20, save_every=5, particles=p, data=data, test=test)
        np.testing.assert_allclose(batch["Q"][i], single["Q"], rtol=1e-12)
        np.testing.assert_allclose(batch.particles["W"][i], single.particles["W"], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="particles"):
        mf.train_gd_batch(CFG, 0.1, 4, [], data)
    with pytest.raises(ValueError, match="data"):
        mf.train_gd_batch(CFG, 0.1, 4, subs, [data])
    with pytest.raises(ValueError, match="labels"):
        mf.train_gd_batch(CFG, 0.1, 4, subs, data, labels=[1])
    with pytest.raises(ValueError, match="particles"):
        mf.train_gd_batch(CFG, 0.1, 4, [cloud], data)  # wrong width for CFG
