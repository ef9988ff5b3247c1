"""The explicit step of the noisy particle flow: `noise.step_rate` (Lambda = the largest particle speed over the
largest particle norm) against a literal loop, the bound it states (an explicit step with h Lambda beyond the
monomial edge diverges on the mean-field drift, one at `MAX_STEP_RATIO` descends), and
`solve_particles_sde_stable`: it halves an unstable step on the same Brownian paths, keeps a stable one, and
says when no step is stable.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import FlowError
from flows import mean_field as mf
from flows.mean_field import noise
from flows.mean_field.flow import particles_and_args, vector_field

CFG = mf.Config(d=2, D=3, N=4, L=1, M=4, n_train=8, n_test=8, lam=1e-2, init_scale=2.0, seed=0)


def _scaled(s):
    p0, args = particles_and_args(CFG)
    return {k: v * s for k, v in p0.items()}, args


def test_step_rate_is_the_largest_speed_over_the_largest_norm():
    cfg = CFG.replace(L=2, M=3, M_mlp=5)
    particles, args = particles_and_args(cfg)
    particles = {k: v * 3.0 for k, v in particles.items()}
    v = {k: np.asarray(x) for k, x in vector_field(0.0, particles, args).items()}
    p = {k: np.asarray(x) for k, x in particles.items()}
    speeds, norms = [], []
    for layer in range(cfg.L):
        for j in range(cfg.M):  # a head: its V and W together
            speeds.append(np.sqrt(np.sum(v["V"][layer, j] ** 2) + np.sum(v["W"][layer, j] ** 2)))
            norms.append(np.sqrt(np.sum(p["V"][layer, j] ** 2) + np.sum(p["W"][layer, j] ** 2)))
        for j in range(cfg.M_mlp):  # a neuron: its W1 and W2 together
            speeds.append(np.sqrt(np.sum(v["W1"][layer, j] ** 2) + np.sum(v["W2"][layer, j] ** 2)))
            norms.append(np.sqrt(np.sum(p["W1"][layer, j] ** 2) + np.sum(p["W2"][layer, j] ** 2)))
    got = float(noise.step_rate(0.0, particles, args))
    assert got == pytest.approx(max(speeds) / max(norms), rel=1e-12)
    assert got != pytest.approx(max(s / n for s, n in zip(speeds, norms, strict=True)), rel=1e-3)  # not per particle


# every solve below is one compiled program: two paths, 33 saves, one tree tolerance and max_steps, the states
SAVES = 33
PROGRAM = dict(num_paths=2, solver="sea", tol=1e-3, max_steps=600)
_rates = jax.jit(jax.vmap(noise.step_rate, in_axes=(None, 0, None)))


def _max_ratio(h, traj, args):
    """max h Lambda over the saved states of every path (an independent reading of what the stable solve
    checks)."""
    flat = {k: jnp.reshape(v, (-1, *v.shape[2:])) for k, v in traj.ys.items()}
    return h * float(jnp.max(_rates(0.0, flat, args)))


@pytest.mark.slow  # the bound's use is pinned in the default run by test_stable_solve_halves_on_the_same_brownian_paths
def test_an_explicit_step_beyond_the_bound_diverges_and_one_within_it_descends():
    """T = 0 (the SDE is the particle ODE) from weights grown 6x, where the drift grows faster than linearly:
    Euler at h Lambda(theta0) = 4 (beyond the monomial edge 2) leaves the reals within 20 steps; at
    h Lambda <= MAX_STEP_RATIO at every step it stays finite and ends far below the initial Q (the ratio guards
    against the runaway, not against the oscillation of a stiff direction, which need not diverge)."""
    particles, args = _scaled(6.0)
    rate = float(noise.step_rate(0.0, particles, args))
    assert rate > 1.0  # the superlinear regime: the speed exceeds the size
    for ratio, ok in ((4.0, False), (noise.MAX_STEP_RATIO, True)):
        h = ratio / rate
        ts = np.linspace(0.0, 20 * h, SAVES)
        tr = noise.solve_particles_sde(
            CFG, ts, 0.0, dt=h, seed=0, particles=particles, throw=False, save_states=True, **PROGRAM
        )
        assert tr.ok == ok, (ratio, tr.status)
        if ok:
            assert _max_ratio(h, tr, args) <= noise.MAX_STEP_RATIO
            Q = np.asarray(tr.observables["Q"])[0]
            assert Q[-1] < 0.1 * Q[0] and np.max(Q) <= Q[0], Q


def test_stable_solve_halves_on_the_same_brownian_paths():
    """At T = 1 from weights grown 4x, a first step of 4 / Lambda is halved until every path is finite and
    h Lambda <= MAX_STEP_RATIO at every save; the accepted solve is `solve_particles_sde` at that step with the
    same keys (the same Brownian paths, refined), its ratio is Lambda at the saved states, and the step before
    it was not stable."""
    particles, args = _scaled(4.0)
    dt = 4.0 / float(noise.step_rate(0.0, particles, args))
    ts = np.linspace(0.0, 4 * dt, SAVES)
    opts = dict(seed=3, particles=particles, **PROGRAM)
    traj, h, ratio = noise.solve_particles_sde_stable(CFG, ts, 1.0, dt=dt, halvings=7, **opts)
    assert h < dt and h * 2**7 >= dt and np.log2(dt / h) == pytest.approx(round(np.log2(dt / h)), abs=1e-12)
    again = noise.solve_particles_sde(CFG, ts, 1.0, dt=h, save_states=True, **opts)
    np.testing.assert_array_equal(np.asarray(again.ys["V"]), np.asarray(traj.ys["V"]))  # the same paths
    assert traj.ok and ratio == pytest.approx(_max_ratio(h, traj, args), rel=1e-12)
    assert ratio <= noise.MAX_STEP_RATIO
    coarser = noise.solve_particles_sde(CFG, ts, 1.0, dt=2 * h, throw=False, save_states=True, **opts)
    assert not coarser.ok or _max_ratio(2 * h, coarser, args) > noise.MAX_STEP_RATIO


def test_stable_solve_keeps_a_stable_step_and_says_when_none_is():
    particles, args = _scaled(1.0)
    dt = 0.01 / float(noise.step_rate(0.0, particles, args))
    ts = np.linspace(0.0, 1.0, SAVES)
    traj, h, ratio = noise.solve_particles_sde_stable(CFG, ts, 1e-3, dt=dt, seed=0, particles=particles, **PROGRAM)
    assert h == dt and traj.ok and ratio <= noise.MAX_STEP_RATIO and set(traj.observables) == {"Q", "R"}
    assert traj.ys["V"].shape == (2, SAVES, *particles["V"].shape)  # the states the check read
    big, _ = _scaled(6.0)
    with pytest.raises(FlowError, match="no stable step down to dt") as err:
        noise.solve_particles_sde_stable(CFG, ts, 1.0, dt=0.5, halvings=0, seed=0, particles=big, **PROGRAM)
    assert err.value.trajectory is not None


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(dt=0.0), "dt"),
        (dict(dt=0.1, max_step_ratio=2.5), "max_step_ratio"),
        (dict(dt=0.1, max_step_ratio=0.0), "max_step_ratio"),
        (dict(dt=0.1, halvings=-1), "halvings"),
        (dict(dt=0.1, throw=True), "throw"),
        (dict(dt=0.1, save_states=False), "save_states"),
    ],
)
def test_stable_solve_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        noise.solve_particles_sde_stable(CFG, [0.0, 1.0], 0.1, seed=0, **kw)
