"""The mean field's `train` beyond the checks shared by every system (tests/test_vocabulary.py): `train` is the
driver on the spec (`flows.train(mf.system(config), ...)`), the per-group rates eta M L and eta M_mlp L, heavy
ball first order in lr on the shared clock, the overrides of `seed` and `init` in `train` and `solve_flow` (the
Euler flow is the GD run), `event_time` on the record, and the errors naming the field.

Every run uses the shapes and saves of tests/mean_field/test_flow.py (5 saves, Q and R only): one plain GD
program, one heavy-ball program and the Euler solve program of test_flow's sharded test serve them all.
"""

import numpy as np
import pytest

import flows
from flows import mean_field as mf

CFG = mf.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)
BASIC = dict(observables="basic")


@pytest.fixture(scope="module")
def gd():
    """`train` at eta_tau = 0.1 for 20 steps, saved every 5."""
    return mf.train(CFG, "gd", 0.1, 20, save_every=5, **BASIC)


def _gap(a, b):
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in ("Q", "R"))


def _particle_gap(a, b):
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def test_train_is_the_driver_on_the_spec_and_has_the_shared_record_fields(gd):
    rec = flows.train(mf.system(CFG, "basic"), "gd", lr=0.1, steps=20, save_every=5)
    assert _gap(rec, gd) == 0.0 and _particle_gap(mf.flow.particles_of(rec.params), gd.particles) == 0.0
    assert set(gd.params) == {"attention", "mlp"} and set(gd.particles) == {"V", "W", "W1", "W2"}
    rec = mf.train(CFG, "gd", lr=0.1, steps=20, save_every=5, **BASIC)
    assert _gap(rec, gd) <= 1e-12 and _particle_gap(rec.particles, gd.particles) <= 1e-12
    np.testing.assert_array_equal(rec.ts, gd.ts)
    np.testing.assert_array_equal(rec.steps, np.arange(0, 21, 5))
    np.testing.assert_allclose(rec.ts, 0.1 * rec.steps, rtol=1e-15, atol=0)
    assert rec.tau is rec.ts
    assert rec.lr == 0.1 and rec.config == CFG and rec.optimizer == "gd" and rec.momentum == 0.0
    assert rec.compile_s == 0.0 and rec.run_s > 0  # the program of the fixture, reused
    assert set(rec.observables) == {"Q", "R"} and rec["Q"] is rec.observables["Q"] and rec.Q is rec["Q"]
    # "sgd" without momentum is the same full-batch GD; a dict of equal rates is the number
    same = mf.train(CFG, "sgd", 0.1, 20, 5, **BASIC)
    per_group = mf.train(CFG, "gd", {"attention": 0.1, "mlp": 0.1}, 20, 5, **BASIC)
    assert _gap(same, gd) <= 1e-12 and _gap(per_group, gd) <= 1e-12
    assert per_group.lr == {"attention": 0.1, "mlp": 0.1}


def test_per_group_rates(gd):
    """{"attention": a, "mlp": b}: learning rates a M L and b M_mlp L, the clock at the largest rate; a slower
    MLP moves Q along another path (same compiled program)."""
    rec = mf.train(CFG, "gd", {"attention": 0.1, "mlp": 0.02}, 20, 5, **BASIC)
    assert rec.compile_s == 0.0
    assert rec.lr_attention == pytest.approx(0.1 * CFG.M * CFG.L, rel=1e-15)
    assert rec.lr_mlp == pytest.approx(0.02 * CFG.M_mlp * CFG.L, rel=1e-15)
    assert rec.eta_tau == 0.1
    np.testing.assert_allclose(rec.ts, 0.1 * rec.steps, rtol=1e-15, atol=0)
    assert rec["Q"][0] == gd["Q"][0]
    assert abs(rec["Q"][-1] - gd["Q"][-1]) > 1e-3 * abs(gd["Q"][0] - gd["Q"][-1])


def test_heavy_ball_tracks_gd_at_the_effective_rate():
    """Heavy ball at rate lr and beta = 0.5 against GD at lr / (1 - beta), on the shared clock
    tau = lr k / (1 - beta): the gap in Q and R is first order in lr (it halves with lr; measured 5.9e-3,
    2.9e-3, 1.4e-3 for lr = 0.05, 0.025, 0.0125 against a change of Q of 0.10)."""
    beta = 0.5
    gaps, moves = [], []
    for lr, steps in ((0.05, 20), (0.025, 40), (0.0125, 80)):
        hb = mf.train(CFG, "sgd", lr, steps, steps // 4, momentum=beta, **BASIC)
        ref = mf.train(CFG, "gd", lr / (1 - beta), steps, steps // 4, **BASIC)
        np.testing.assert_allclose(hb.ts, ref.ts, rtol=1e-15, atol=0)
        np.testing.assert_allclose(hb.ts, flows.training.flow_time(lr, hb.steps, beta), rtol=0, atol=0)
        assert hb.momentum == beta and hb.optimizer == "sgd"
        gaps.append(_gap(hb, ref))
        moves.append(float(np.max(np.abs(ref["Q"] - ref["Q"][0]))))
    assert min(moves) > 0.05  # the runs move: the gap is not small because nothing happens
    for big, small in zip(gaps, gaps[1:], strict=False):
        assert 0.35 * big < small < 0.65 * big, gaps  # first order in lr
    assert gaps[-1] < 0.02 * min(moves), gaps


def test_seed_and_init_override_and_solve_flow_starts_where_train_starts(gd):
    """`seed=`, `init=` replace Config.seed / Config.init (None keeps them) in `train` and `solve_flow`; the
    Euler flow at dt = lr with the same overrides is the GD run to rounding."""
    rec = mf.train(CFG, "gd", 0.1, 20, 5, seed=2, init="tied", **BASIC)
    other = CFG.replace(seed=2, init="tied")
    ref = mf.train(other, "gd", 0.1, 20, 5, **BASIC)
    assert rec.config == other and _gap(rec, ref) <= 1e-12
    assert abs(rec["Q"][0] - gd["Q"][0]) > 1e-3 * abs(gd["Q"][0])  # another start
    assert _gap(mf.train(CFG, "gd", 0.1, 20, 5, seed=None, init=None, **BASIC), gd) <= 1e-12
    traj = mf.solve_flow(CFG, rec.ts, seed=2, init="tied", solver="euler", dt=0.1, save_states=True, **BASIC)
    for name in ("Q", "R"):
        assert np.max(np.abs(np.asarray(traj.observables[name]) - rec[name])) <= 1e-12 * np.max(np.abs(rec[name]))
    final = {k: v[-1] for k, v in traj.ys.items()}
    assert _particle_gap(final, rec.particles) <= 1e-12


def test_event_time_on_the_record(gd):
    """`flows.event_time` on a GD record: a level halfway between two saved values of Q (Q decreasing) is
    crossed halfway between their times, and the Euler flow (the same run) gives the same time."""
    Q = gd["Q"]
    assert np.all(np.diff(Q) < 0)
    level = 0.5 * (Q[1] + Q[2])
    t = flows.event_time(gd, "Q", float(level), direction=False)
    assert abs(t - 0.5 * (gd.ts[1] + gd.ts[2])) <= 1e-12
    traj = mf.solve_flow(CFG, gd.ts, solver="euler", dt=0.1, save_states=True, **BASIC)
    assert abs(flows.event_time(traj, "Q", float(level), direction=False) - t) <= 1e-9


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: mf.train(CFG, "rmsprop", 0.1, 5), "optimizer"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, momentum=0.9), "momentum"),
        (lambda: mf.train(CFG, "adam", 0.1, 5, momentum=0.9), "momentum"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, batch_size=2), "batch_size"),
        (lambda: mf.train(CFG, "sgd", 0.1, 5, batch_size=17), "batch_size"),
        (lambda: mf.train(CFG, "sgd", 0.1, 5, momentum=1.0), "momentum"),
        (lambda: mf.train(CFG, "sgd", 0.1, 5, momentum=-0.1), "momentum"),
        (lambda: mf.train(CFG, "sgd", 0.1, 5, momentum="0.5"), "momentum"),
        (lambda: mf.train(CFG, "gd", 0.0, 5), "lr"),
        (lambda: mf.train(CFG, "gd", float("nan"), 5), "lr"),
        (lambda: mf.train(CFG, "gd", {"attention": 0.1}, 5), "lr"),
        (lambda: mf.train(CFG, "gd", {"attention": 0.1, "mlp": -1.0}, 5), r"lr\['mlp'\]"),
        (lambda: mf.train(CFG, "gd", 0.1, 0), "steps"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, 0), "save_every"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, seed=-1), "seed"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, seed=1.5), "seed"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, init="gaussian"), "init"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, init="tied", particles={}), "init"),
        (lambda: mf.train("config", "gd", 0.1, 5), "config"),
        (lambda: mf.train(CFG, "gd", 0.1, 5, observables="none"), "observables"),
        (lambda: mf.solve_flow(CFG, [0.0, 1.0], seed=-1), "seed"),
        (lambda: mf.solve_flow(CFG, [0.0, 1.0], init="gaussian"), "init"),
    ],
)
def test_bad_values_raise_naming_the_field(call, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        call()
