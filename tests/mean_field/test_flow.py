"""The particle flow against GD on the finite network: explicit Euler is GD, the adaptive solve is its
eta_tau -> 0 limit (first order), the energy identity, sharding over two devices, divergence reported."""

import dataclasses

import jax
import numpy as np
import pytest

import flows
from flows import mean_field as mf
from flows.mean_field import observables as obs

CFG = mf.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)
TAU = 2.0
# Every GD run here (and in test_sweep.py, test_observables.py) records 5 saves (4 segments) of CFG's shapes, and
# every Euler solve uses dt = 0.1 with 5 save times: one compiled GD program and one solve program serve them all.
SAVES = 4


@pytest.fixture(scope="module")
def adaptive():
    """The adaptive solve with Q and R saved (a third smaller program than with every observable), and every
    observable of `summary` evaluated afterwards on the saved particles (the program of
    test_observables.py::test_summary_observables_equal_literal_computations). Tsit5 at rtol 1e-9: its Q
    differs from Dopri8's at rtol 1e-11 by 7e-10 (measured; the smallest gap below is 7.7e-5, the energy
    mismatch 3.0e-6 against 1e-3), in 55 steps of 6 stages (Dopri8 at 1e-11: 222 steps of 13; at XLA level 0
    that solve ran 9.5 s, this one about 1 s)."""
    ts = flows.linear_grid(0.0, TAU, 201)
    traj = mf.solve_flow(CFG, ts, rtol=1e-9, atol=1e-11, solver="tsit5", save_states=True, observables="basic")
    args = obs.make_args(CFG, mf.training_set(CFG), mf.held_out_set(CFG))
    summary = jax.jit(obs.summary)
    saved = [summary(0.0, {k: v[i] for k, v in traj.ys.items()}, args) for i in range(ts.size)]
    series = {name: np.array([float(s[name]) for s in saved]) for name in obs.OBSERVABLES}
    np.testing.assert_allclose(series["Q"], np.asarray(traj.observables["Q"]), rtol=1e-13)  # same Q, two ways
    return dataclasses.replace(traj, observables=series)


def test_euler_particle_flow_equals_gd():
    eta = 0.1
    rec = mf.train(CFG, "gd", eta, 20, save_every=5)
    traj = mf.solve_flow(CFG, rec.tau, solver="euler", dt=eta, save_states=True, observables="basic")
    for name in ("Q", "R"):
        ref = rec[name]
        assert np.max(np.abs(np.asarray(traj.observables[name]) - ref)) <= 1e-12 * np.max(np.abs(ref)), name
    final = {k: v[-1] for k, v in traj.ys.items()}
    for k in final:
        assert np.max(np.abs(np.asarray(final[k]) - np.asarray(rec.particles[k]))) < 1e-12
    assert traj.num_steps == 20
    np.testing.assert_allclose(rec.tau, eta * rec.steps, rtol=0, atol=0)
    # the training set given: the spec replaced with the same functions shares the compiled program
    again = mf.solve_flow(
        CFG, rec.tau, solver="euler", dt=eta, save_states=True, observables="basic", data=mf.training_set(CFG)
    )
    assert again.compile_s == 0.0
    np.testing.assert_array_equal(np.asarray(again.observables["Q"]), np.asarray(traj.observables["Q"]))
    assert rec.lr_attention == pytest.approx(eta * CFG.M * CFG.L) and rec.lr_mlp == pytest.approx(eta * 6 * 2)


def test_gd_tracks_the_adaptive_flow_at_first_order(adaptive):
    """gap(eta) = max_tau |Q_GD(tau) - Q_flow(tau)| over the 5 saves: a 10x smaller eta_tau gives a 5-20x
    smaller gap."""
    gaps = {}
    for eta in (0.2, 0.02):
        steps = round(TAU / eta)
        rec = mf.train(CFG, "gd", eta, steps, save_every=-(-steps // SAVES))
        assert rec.steps.size == SAVES + 1
        idx = np.rint(rec.tau / (TAU / 200)).astype(int)
        flow_Q = np.asarray(adaptive.observables["Q"])[idx]
        gaps[eta] = np.max(np.abs(rec["Q"] - flow_Q))
    ratio = gaps[0.2] / gaps[0.02]
    assert 5.0 <= ratio <= 20.0, (gaps, ratio)  # measured 10.2 (gaps 7.9e-4, 7.7e-5)
    assert gaps[0.02] < 1e-2 * (adaptive.observables["Q"][0] - adaptive.observables["Q"][-1])


def test_energy_identity_and_monotone_Q(adaptive):
    """dQ/dtau (central differences of the saved Q) = -dissipation to <= 1e-3 relative (P4)."""
    ts = np.asarray(adaptive.ts)
    Q = np.asarray(adaptive.observables["Q"])
    diss = np.asarray(adaptive.observables["dissipation"])
    dQ = (Q[2:] - Q[:-2]) / (ts[2:] - ts[:-2])
    rel = np.max(np.abs(dQ + diss[1:-1]) / diss[1:-1])
    assert rel <= 1e-3, rel
    assert np.all(np.diff(Q) <= 1e-10 * abs(Q[0]))  # never rises beyond the solver tolerance
    assert Q[-1] < 0.9 * Q[0]  # and it does train
    # speeds: mean <= max, both positive
    assert np.all(adaptive.observables["mean_speed"] <= adaptive.observables["max_speed"])


@pytest.mark.slow  # the summary observables are pinned in test_observables.py
def test_observables_all_and_basic_are_summary_and_basic():
    """What `solve_flow` hands to `flows.solve` (the fixture above saves "basic" and evaluates `summary` on the
    states; the two solves differ only in this argument): the spec's observables of the particles, bit for bit
    `observables.summary` and Q, R of `observables.BASIC_OBSERVABLES`."""
    from tests.fuzzing import Reached, stop_at_solvers

    for name, want in (("all", obs.summary), ("basic", obs.BASIC_OBSERVABLES)):
        with stop_at_solvers(), pytest.raises(Reached) as info:
            mf.solve_flow(CFG, [0.0, 1.0], observables=name)
        inputs = info.value.inputs
        y0, args = inputs["y0"], inputs["args"]
        assert sorted(y0) == ["V", "W", "W1", "W2"]
        got = inputs["options"]["observables"](0.0, y0, args)
        expected = (
            want(0.0, y0, args["field"]) if callable(want) else {k: f(0.0, y0, args["field"]) for k, f in want.items()}
        )
        assert sorted(got) == sorted(expected)
        for key in expected:
            np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(expected[key]), err_msg=key)


def test_train_basic_observables():
    """`observables="basic"` records the Q and R of every observable, and the same particles (bitwise), on
    the shapes and saves of the GD program of the tests above (here, where that program is compiled anyway:
    moved from test_network.py, which compiled it a second time)."""
    rec = mf.train(CFG, "gd", 0.1, 20, save_every=5, observables="basic")
    full = mf.train(CFG, "gd", 0.1, 20, save_every=5)
    assert set(rec.observables) == {"Q", "R"}
    for name in ("Q", "R"):
        np.testing.assert_allclose(rec.observables[name], full.observables[name], rtol=1e-13)
    assert all(np.array_equal(np.asarray(rec.particles[k]), np.asarray(full.particles[k])) for k in rec.particles)
    with pytest.raises(ValueError, match="observables"):
        mf.train(CFG, "gd", 0.1, 3, observables="none")


def test_sharded_equals_unsharded():
    assert jax.device_count() >= 2, "the conftest provides two CPU devices"
    mesh = mf.particle_mesh(2)
    rec = mf.train(CFG, "gd", 0.1, 20, save_every=5)
    # the sharded run records Q and R only (half the compile of every observable; the same steps and Q)
    rec_s = mf.train(CFG, "gd", 0.1, 20, save_every=5, mesh=mesh, observables="basic")
    assert np.max(np.abs(rec_s["Q"] - rec["Q"])) < 1e-12
    assert all(
        np.max(np.abs(np.asarray(rec_s.particles[k]) - np.asarray(rec.particles[k]))) < 1e-12 for k in rec.particles
    )
    assert len(rec_s.particles["V"].sharding.device_set) == 2  # really split over both devices
    with pytest.raises(ValueError, match="divisible"):
        mf.train(CFG.replace(M=3), "gd", 0.1, 2, mesh=mesh)
    with pytest.raises(ValueError, match="num_devices"):
        mf.particle_mesh(jax.device_count() + 1)


@pytest.mark.slow
def test_sharded_particle_solve_equals_unsharded():
    """The particle solve on the mesh (the sharding step is the one of the GD run above, checked in the default
    run; a sharded solve is one more program of about 10 s)."""
    mesh = mf.particle_mesh(2)
    ts = np.linspace(0.0, 2.0, 5)  # the Euler program of test_euler_particle_flow_equals_gd, reused unsharded
    tr = mf.solve_flow(CFG, ts, solver="euler", dt=0.1, save_states=True, observables="basic")
    tr_s = mf.solve_flow(CFG, ts, solver="euler", dt=0.1, save_states=True, observables="basic", mesh=mesh)
    assert np.max(np.abs(np.asarray(tr_s.observables["Q"]) - np.asarray(tr.observables["Q"]))) < 1e-12
    assert all(np.max(np.abs(np.asarray(tr_s.ys[k]) - np.asarray(tr.ys[k]))) < 1e-12 for k in tr.ys)
    assert int(tr_s.num_steps) == int(tr.num_steps)


def test_divergence_is_reported_never_silent():
    """From init_scale = 40, GD at eta_tau = 0.1 and the Euler flow at dt = 0.1 blow up within 20 steps (the
    programs of test_euler_particle_flow_equals_gd: the same shapes, saves, step and solver options)."""
    big = CFG.replace(init_scale=40.0)
    with pytest.raises(flows.FlowError, match="training went non-finite at step") as err:
        mf.train(big, "gd", 0.1, 20, save_every=5)
    record = err.value.trajectory  # the record, truncated before the first non-finite step, comes with the error
    assert record is err.value.record and np.all(record.steps < err.value.step)
    assert np.all(np.isfinite(record["Q"]))
    with pytest.raises(flows.FlowError) as err:
        mf.solve_flow(big, np.linspace(0.0, 2.0, 5), solver="euler", dt=0.1, save_states=True, observables="basic")
    assert err.value.trajectory.status in ("nonfinite", "diverged")


def test_solve_keywords_reach_the_driver_and_unknown_ones_are_named(monkeypatch):
    """`solve_flow` and `solve_reference` pass every `flows.solve` keyword of `spec.SOLVE_OPTIONS` on (a
    dropped one would fall back to `spec.SOLVER`'s default), `dt` as constant steps, and name any other."""
    from flows.mean_field import spec

    seen = {}
    monkeypatch.setattr(spec.driver, "solve_flow", lambda *a, **kwargs: seen.update(kwargs) or "solved")
    passed = dict(solver="tsit5", rtol=1e-5, atol=1e-6, max_steps=99, progress=True, throw=False, save_states=True)
    assert set(passed) == set(spec.SOLVE_OPTIONS)
    ts = flows.linear_grid(0.0, 0.4, 5)
    for solve in (mf.solve_flow, mf.solve_reference):
        seen.clear()
        config = CFG if solve is mf.solve_flow else CFG.replace(init="tied")
        assert solve(config, ts, dt=0.1, **passed) == "solved"
        assert {k: seen[k] for k in passed} == passed and (seen["dt0"], seen["constant_step"]) == (0.1, True)
        with pytest.raises(ValueError, match="rtoll"):
            solve(config, ts, rtoll=1e-3)
        with pytest.raises(ValueError, match="dt"):
            solve(config, ts, dt=-0.1)


class _Stop(Exception):
    pass


def test_start_keywords_are_forwarded_to_spec_start_and_unknown_ones_are_named(monkeypatch):
    """`train`, `solve_flow` (every keyword of `spec.START_OPTIONS`) and `solve_reference` (`data`, `test`) pass
    their start overrides to `spec.start`, which defines them, unchanged and complete (a dropped one would
    silently start from the config's own particles or prompts), and name a keyword nobody defines."""
    from flows.mean_field import network, spec

    seen = {}

    def start(config, **overrides):
        seen.update(overrides)
        raise _Stop

    monkeypatch.setattr(spec, "start", start)
    monkeypatch.setattr(network, "start", start)
    passed = {name: object() for name in spec.START_OPTIONS}
    ts = flows.linear_grid(0.0, 0.4, 5)
    calls = {
        "train": (lambda **kw: mf.train(CFG, "gd", 0.1, 5, **kw), passed),
        "solve_flow": (lambda **kw: mf.solve_flow(CFG, ts, **kw), passed),
        "solve_reference": (
            lambda **kw: mf.solve_reference(CFG.replace(init="tied"), ts, **kw),
            {k: passed[k] for k in ("data", "test")},
        ),  # the reference's spec observes Q and R (it has its own observables)
    }
    for name, (call, given) in calls.items():
        seen.clear()
        with pytest.raises(_Stop):
            call(**given)
        assert seen == (given if name != "solve_reference" else {**given, "observables": "basic"}), name
        with pytest.raises(ValueError, match=rf"^{name} got unknown keyword\(s\) \['bogus'\]"):
            call(bogus=1)
    with pytest.raises(ValueError, match=r"\['seed'\]"):  # not a keyword of the reference
        mf.solve_reference(CFG.replace(init="tied"), ts, seed=1)
    with pytest.raises(ValueError, match="mesh is for the particle flow"):
        mf.solve_flow(CFG, ts, optimizer="gd", mesh=object())


def test_start_applies_every_override():
    """`spec.start`: seed and init replace the config's, the prompts replace the spec's data, the particles are
    checked and returned (the spec's own without them), init with particles is named."""
    from flows.mean_field import spec

    config, system, particles = spec.start(CFG, seed=7, init="tied", observables="basic")
    assert (config.seed, config.init, particles) == (7, "tied", None)
    assert system is spec.system(config, "basic")
    data, test = mf.training_set(CFG.replace(seed=5)), mf.held_out_set(CFG.replace(seed=6))
    p0 = mf.init_particles(CFG.replace(seed=8))
    config, system, particles = spec.start(CFG, particles=p0, data=data, test=test)
    assert config is CFG and all(np.array_equal(particles[k], p0[k]) for k in p0)
    want = obs.make_args(CFG, data, test)
    assert all(np.array_equal(system.data[k], want[k]) for k in ("Z0", "y", "Z0_test", "y_test"))
    with pytest.raises(ValueError, match="^init must be None when particles are given"):
        spec.start(CFG, init="tied", particles=p0)
