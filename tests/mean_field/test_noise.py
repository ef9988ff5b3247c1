"""The noisy (Fokker-Planck) particle flow: T = 0 is the particle ODE, the noise has variance 2 T tau per
coordinate, seeds reproduce, the Kozachenko-Leonenko entropy against Gaussian closed forms, bad inputs."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows import mean_field as mf
from flows.mean_field.noise import entropic_objective, entropy_knn, entropy_per_slice, solve_particles_sde

# 2 L (M 2 D^2 + M_mlp 2 D) = 6144 coordinates for the variance statistics
CFG = mf.Config(d=2, D=3, N=4, L=2, M=128, M_mlp=128, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)
TAU, DT = 0.01, 0.001
TS = np.linspace(0.0, TAU, 3)


@pytest.fixture(scope="module")
def ode():
    """The particle ODE by explicit Euler with step DT, saved at TS: GD with eta_tau = DT, which is
    `solve_flow(solver="euler", dt=DT)` to 1e-12 (tests/mean_field/test_flow.py). Two runs of 5 steps
    (one compiled program recording Q and R only: about a third of the compile of the solve)."""
    first = mf.train(CFG, "gd", DT, 5, save_every=5, observables="basic")
    second = mf.train(CFG, "gd", DT, 5, save_every=5, observables="basic", particles=first.particles)
    assert np.allclose(first.tau[-1] + second.tau, TS[1:], rtol=1e-15, atol=0)
    start = mf.init_particles(CFG)
    ys = {
        k: np.stack([np.asarray(start[k]), np.asarray(first.particles[k]), np.asarray(second.particles[k])])
        for k in start
    }
    observables = {name: np.concatenate([first[name], second[name][1:]]) for name in ("Q", "R")}
    return types.SimpleNamespace(ys=ys, observables=observables)


@pytest.fixture(scope="module")
def zero_temperature():
    return solve_particles_sde(CFG, TS, 0.0, dt=DT, seed=0, save_states=True)


@pytest.fixture(scope="module")
def noisy():
    """T = 0.1 from seeds 0 and 1 (the program of `zero_temperature`: the temperature is traced), shared by the
    tests below."""
    return {seed: solve_particles_sde(CFG, TS, 0.1, dt=DT, seed=seed, save_states=True) for seed in (0, 1)}


def _flat(particles, i=-1):
    return np.concatenate([np.asarray(particles[k][i]).ravel() for k in ("V", "W", "W1", "W2")])


def test_zero_temperature_is_the_particle_ode(ode, zero_temperature):
    """T = 0: the particle SDE (Euler-Maruyama) equals explicit Euler of the particle ODE (the `ode` fixture)
    to 1e-12."""
    assert zero_temperature.ok and int(zero_temperature.num_steps) == 10
    for k in ode.ys:
        assert np.max(np.abs(np.asarray(zero_temperature.ys[k]) - np.asarray(ode.ys[k]))) <= 1e-12, k
    for name in ("Q", "R"):
        assert (
            np.max(np.abs(np.asarray(zero_temperature.observables[name]) - np.asarray(ode.observables[name]))) <= 1e-12
        ), name


def test_noise_variance_is_two_T_tau_per_coordinate(ode, zero_temperature, noisy):
    """theta_T(tau) - theta_0(tau) over 6144 coordinates at tau = 0.01: mean square / (2 T tau) = 1 within
    6% (standard error 1.8%; the drift's correction is O(tau |grad v|)); measured 0.99 at T = 0.1 and 0.01.
    The temperature is traced: no new compilation."""
    base = _flat(ode.ys)
    for T in (0.1, 0.01):
        tr = noisy[0] if T == 0.1 else solve_particles_sde(CFG, TS, T, dt=DT, seed=0, save_states=True)
        assert tr.compile_s == 0.0
        diff = _flat(tr.ys) - base
        ratio = np.mean(diff**2) / (2 * T * TAU)
        assert abs(ratio - 1.0) < 0.06, (T, ratio)
        assert abs(np.mean(diff)) < 4 * np.sqrt(2 * T * TAU / diff.size)
        # half-way: variance 2 T tau / 2
        half = _flat(tr.ys, 1) - _flat(ode.ys, 1)
        assert abs(np.mean(half**2) / (T * TAU) - 1.0) < 0.06


def test_dt_is_traced_and_the_brownian_path_is_shared(zero_temperature, noisy):
    """dt is a runtime argument: with the tol and max_steps of the fixtures' program (its defaults at DT), the
    step 2 DT reuses it (no compilation). The same key and tol give the same Brownian path at both steps, so the
    two solutions differ by Euler's O(dt) error only, far below the noise displacement sqrt(2 T tau) = 0.045
    (measured: RMS 2.5e-6); another key moves them by about sqrt(2) times the displacement (measured 0.063)."""
    T = 0.1
    fine, other = noisy[0], noisy[1]  # seeds 0 and 1 at T = 0.1, step DT
    coarse = solve_particles_sde(CFG, TS, T, dt=2 * DT, seed=0, save_states=True, tol=DT / 8, max_steps=11)
    assert fine.compile_s == 0.0 and coarse.compile_s == 0.0 and other.compile_s == 0.0
    assert int(coarse.num_steps) == 5 and int(fine.num_steps) == 10
    scale = np.sqrt(2 * T * TAU)

    def rms(a, b):
        return float(np.sqrt(np.mean((_flat(a.ys) - _flat(b.ys)) ** 2)))

    assert rms(fine, coarse) < 1e-3 * scale, rms(fine, coarse)
    assert 1.2 * scale < rms(fine, other) < 1.6 * scale, rms(fine, other)


def test_seeds_reproduce(noisy):
    """A second solve from seed 0 at T = 0.1 equals the first bitwise; seed 1 differs."""
    a, c = noisy[0], noisy[1]
    b = solve_particles_sde(CFG, TS, 0.1, dt=DT, seed=0, save_states=True)
    assert b.compile_s == 0.0
    assert np.array_equal(_flat(a.ys), _flat(b.ys))
    assert not np.array_equal(_flat(a.ys), _flat(c.ys))


def test_arguments_reach_solve_sde(monkeypatch):
    """`solver`, `dt`, the seed and sigma = sqrt(2 T) are passed on to `flows.solve_sde` (a dropped `solver`
    would fall back to its default, Euler-Maruyama, which no other test here tells apart at these sizes)."""
    import flows.mean_field.noise as noise

    seen = {}
    monkeypatch.setattr(noise, "solve_sde", lambda field, y0, **kwargs: seen.update(kwargs, y0=y0) or "solved")
    for solver in ("sea", "heun"):
        assert solve_particles_sde(CFG, TS, 0.1, dt=DT, seed=3, solver=solver, tol=1e-4) == "solved"
        assert (seen["solver"], seen["dt"], seen["seed"], seen["tol"]) == (solver, DT, 3, 1e-4)
        assert abs(float(seen["sigma"]) - np.sqrt(0.2)) <= 1e-15 and seen["t1"] == TAU
    passed = dict(key=jax.random.key(5), num_paths=3, tol=1e-3, max_steps=77, throw=False)
    assert solve_particles_sde(CFG, TS, 0.1, dt=DT, save_states=True, **passed) == "solved"
    assert set(passed) == set(noise.SDE_OPTIONS) - {"seed"} and seen["save_states"] is True
    for name, value in passed.items():
        assert seen[name] is value, name
    # the start overrides go to `flow.particles_and_args` (which defines them), the particles as given
    particles = mf.init_particles(CFG.replace(seed=9))
    data = mf.training_set(CFG.replace(seed=9))
    solve_particles_sde(CFG, TS, 0.1, dt=DT, seed=3, particles=particles, data=data, test=data)
    assert all(seen["y0"][k] is particles[k] for k in particles) and seen["args"]["y"] is data.y
    with pytest.raises(ValueError, match=r"^solve_particles_sde got unknown keyword\(s\) \['rtol'\]"):
        solve_particles_sde(CFG, TS, 0.1, dt=DT, seed=3, rtol=1e-3)


@pytest.mark.slow
def test_many_paths_pool_to_two_T_tau(ode):
    """num_paths = 8 (one vmapped program): 8 x 6144 coordinates, mean square / (2 T tau) within 3%."""
    T = 0.1
    tr = solve_particles_sde(CFG, TS, T, dt=DT, seed=11, num_paths=8, save_states=True)
    assert tr.ok and len(tr.status) == 8 and tr.ys["V"].shape[:2] == (8, 3)
    base = _flat(ode.ys)
    diffs = np.stack([_flat({k: v[p] for k, v in tr.ys.items()}) - base for p in range(8)])
    assert not np.array_equal(diffs[0], diffs[1])
    ratio = np.mean(diffs**2) / (2 * T * TAU)
    assert abs(ratio - 1.0) < 0.03, ratio


def _gaussian(d, n, seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    cov = A @ A.T + np.eye(d)
    x = rng.multivariate_normal(np.zeros(d), cov, size=n)
    return x, 0.5 * np.log((2 * np.pi * np.e) ** d * np.linalg.det(cov))


@pytest.mark.parametrize(("d", "tol"), [(2, 0.05), (5, 0.1)])
def test_knn_entropy_of_gaussians(d, tol):
    """n = 4000, k = 3, anisotropic Gaussians: error vs 0.5 log((2 pi e)^d det Sigma). Measured over 8 seeds:
    d = 2: mean -0.011 (sd 0.016); d = 5: mean -0.050 (sd 0.025) - the estimator's known negative bias in
    higher dimension at this n (-0.068 for an isotropic Gaussian), hence 0.1 nats at d = 5."""
    x, exact = _gaussian(d, 4000, seed=0)
    err = entropy_knn(x, k=3) - exact
    assert abs(err) < tol, err
    # exact equivariance: H(a x + b) = H(x) + d log a
    assert entropy_knn(2.5 * x + 1.0, k=3) == pytest.approx(entropy_knn(x, k=3) + d * np.log(2.5), abs=1e-10)


def test_knn_entropy_stack_and_slices():
    x, exact = _gaussian(2, 4000, seed=1)
    stack = np.stack([x, 2.0 * x])
    h = entropy_knn(stack, k=3)
    assert h.shape == (2,) and h[1] - h[0] == pytest.approx(2 * np.log(2.0), abs=1e-10)
    assert abs(h[0] - exact) < 0.05
    p = mf.init_particles(CFG)
    H = entropy_per_slice(p)
    assert H["attention"].shape == (2,) and H["mlp"].shape == (2,)
    out = entropic_objective(CFG, p, 0.2)
    assert out["F"] == pytest.approx(out["Q"] - 0.2 * np.mean(H["attention"] + H["mlp"]), rel=1e-12)
    assert entropic_objective(CFG, p, 0.0)["F"] == pytest.approx(out["Q"], rel=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(dt=0.0), "dt"),
        (dict(dt=-1e-3), "dt"),
        (dict(solver="milstein"), "solver"),
        (dict(observables="some"), "observables"),
        (dict(ts=[0.1, 0.2]), "ts"),
        (dict(seed=None), "key"),
        (dict(num_paths=-2), "num_paths"),
        (dict(brownian="tree"), "brownian"),
    ],
)
def test_bad_inputs_name_the_field(kwargs, name):
    opts = dict(ts=TS, temperature=0.1, dt=DT, seed=0)
    opts.update(kwargs)
    ts, temperature = opts.pop("ts"), opts.pop("temperature")
    with pytest.raises(ValueError, match=name):
        solve_particles_sde(CFG, ts, temperature, **opts)


def test_entropy_bad_inputs():
    with pytest.raises(ValueError, match="k"):
        entropy_knn(np.zeros((10, 2)), k=0)
    with pytest.raises(ValueError, match="duplicates"):
        entropy_knn(np.zeros((10, 2)), k=2)
    with pytest.raises(ValueError, match="samples"):
        entropy_knn(np.ones((3, 2)) * jnp.arange(3.0)[:, None].__array__(), k=3)
    with pytest.raises(ValueError, match="temperature"):
        entropic_objective(CFG, mf.init_particles(CFG), -1.0)
