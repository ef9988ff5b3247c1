"""Seeds of one shape in one vmapped GD program: every member equals its own `train_gd` run."""

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
        single = mf.train_gd(CFG.replace(seed=s), 0.1, 20, save_every=5)
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
    with pytest.raises(flows.FlowError, match="seed"):
        train_gd_seeds(CFG.replace(init_scale=40.0), 50.0, 20, seeds=[0, 1], save_every=5)
