"""flows.cooccurrence.noise: the SGD SDE of the co-occurrence network against minibatch SGD.

A small network (n = 12, L = 3, d = 4, m = m1 = 4, P = 64 parameters), batches of B = 3 distinct samples
(c = (n - B)/(n - 1) = 9/11), horizon t = 0.5 (the GD loss falls from 1.18 to 0.20). One compiled SDE
program (dt = lr / 4 traced; one max_steps) and one vmapped SGD program serve both learning rates and the
zero-noise check; the default run checks lr = 0.0125 to t = 0.25, `-m slow` adds lr = 0.003125 and a ladder of three
rates (0.05, 0.0125, 0.003125, up to 2048 paths) on which the mismatch is resolved and falls first-order in
lr (weak order 1)."""

import jax
import numpy as np
import pytest

from flows import cooccurrence as co
from flows.cooccurrence import noise as con
from tests.optim_limits._moments import check_weak_order, mismatch, se_var, summary, z_mean, z_var

CFG = co.Config(n=12, L=3, d=4, m=4, m1=4, variant="paper", init="theory", seed=0)
B, T, PATHS = 3, 0.5, 256
LRS = (0.0125, 0.003125)
TS = (0.0, 0.25, T)
LOGIT = (0, 2)  # A[key mu_1, query mu_3]: the attention score followed (A (3, 3) is A[key, query])
MAX_STEPS = int(round(T / (LRS[-1] / 4))) + 1
BATCH_SEED = 5  # run 0 of the SGD programs uses train(batch_seed=5)'s minibatch stream
NUM_TEST = 12  # test draws of the test_loss observable


def _keys():
    raw = jax.random.key_data(jax.random.split(jax.random.key(2), PATHS))
    return raw.at[0].set(jax.random.PRNGKey(BATCH_SEED))


T_DEFAULT = T / 2  # the default run's horizon (the SGD runs' mean loss: 1.18 -> 0.31); the slow tests run to T
_RUNS = {}


def _run(lr, horizon=T):
    """(SDE observables at t = horizon, SGD observables at t = horizon, the SGD record of every saved time
    (0, horizon / 2, horizon), the SDE compile time) at one lr; cached for the module. One SDE program and
    one SGD program for every lr and horizon (both traced)."""
    if (lr, horizon) not in _RUNS:
        ts = (0.0, horizon / 2, horizon)
        tr = con.solve_sgd_sde(CFG, ts, B, lr, PATHS, seed=1, num_test=NUM_TEST, max_steps=MAX_STEPS)
        steps = int(round(horizon / lr))
        sgd = con.train_sgd_runs(CFG, steps, B, lr, keys=_keys(), save_every=steps // 2, num_test=NUM_TEST)
        assert np.allclose(sgd["ts"], ts) and all(s == "ok" for s in tr.status)
        _RUNS[lr, horizon] = (
            {k: np.asarray(v)[:, -1] for k, v in tr.observables.items()},
            {k: v[:, -1] for k, v in sgd.items() if k not in ("steps", "ts")},
            sgd,
            tr.compile_s,
        )
    return _RUNS[lr, horizon]


@pytest.mark.slow  # the runs' law is pinned by test_sde_paths_and_sgd_runs_agree_within_standard_errors
def test_sgd_runs_are_the_trainer():
    """Run 0 of the vmapped SGD program (keys[0] = PRNGKey(5)) is `train(CFG, "sgd", lr, batch_size=3,
    batch_seed=5)`: the loss, G and A at the saved steps to 1e-12 (the same batches, the same optax step)."""
    lr = LRS[0]
    steps = int(round(T_DEFAULT / lr))
    record = co.train(
        CFG, "sgd", lr, steps, batch_size=B, save_every=steps // 2, batch_seed=BATCH_SEED, num_test=NUM_TEST
    )
    sgd = _run(lr, T_DEFAULT)[2]
    for name in ("loss", "G", "A"):
        assert np.max(np.abs(sgd[name][0] - record[name])) <= 1e-12, name


def _check_agreement(lrs, horizon=T):
    zs = {}
    for lr in lrs:
        sde, sgd = _run(lr, horizon)[:2]
        for name, pick in (("loss", lambda x: x), ("A", lambda x: x[:, LOGIT[0], LOGIT[1]])):
            a, b = pick(sde[name]), pick(sgd[name])
            zs[lr, name] = (
                round(z_mean(a, b), 2),
                round(z_var(a, b), 2),
                a.mean() - b.mean(),
                a.var(ddof=1) / b.var(ddof=1) - 1,
            )
        # the spread is resolved: each variance is > 5 of its standard errors (so the variance z-scores test it)
        assert sde["loss"].var() > 5 * se_var(sde["loss"]) and sgd["loss"].var() > 5 * se_var(sgd["loss"])
    assert all(abs(z) < 3 for pair in zs.values() for z in pair[:2]), zs


def test_sde_paths_and_sgd_runs_agree_within_standard_errors():
    """At lr = 0.0125 (256 SDE paths, 256 SGD runs): mean and variance of the loss and of the attention
    logit A[mu_1, mu_3] at t = 0.25 (20 steps) within 3 standard errors of the difference. Measured z (mean
    / variance): loss 0.92 / -1.24, logit 0.53 / -1.24. The variances resolve the noise scale: a third of
    it (SDE with B = 6 against SGD with B = 3) measures variance z -6.14 (loss), -6.93 (logit) here, -5.63,
    -7.59 at t = 0.5 (twice the running). The slow test below runs to t = 0.5 at two rates."""
    _check_agreement(LRS[:1], T_DEFAULT)


@pytest.mark.slow
@pytest.mark.xla_default  # Monte Carlo: its cost is running (tests/conftest.py)
def test_sde_paths_and_sgd_runs_agree_at_two_rates():
    """As above at lr = 0.0125 and 0.003125, one SDE program and one SGD program for both rates. Measured z
    (mean / variance): lr = 0.0125 loss -0.14 / -1.56, logit 0.88 / -1.52; lr = 0.003125 loss 0.58 / -0.85,
    logit -1.15 / -0.85 (SDE variances 26%, 18% and 11%, 10% below SGD's, within the ~12% standard error
    of a variance ratio at 256 paths; an independent check with 1600 paths at lr = 0.003125: loss +10 +- 6%,
    logit -4.5 +- 4.7%)."""
    _check_agreement(LRS)
    assert _run(LRS[1])[3] == 0.0


# -- weak order 1, resolved: a ladder of three rates a factor 4 apart, the same horizon t = lr * steps = 0.5 ----
LADDER = (0.05, 0.0125, 0.003125)
LADDER_CALLS = (8, 4, 2)  # calls of PATHS SDE paths and PATHS SGD runs per rung: 2048, 1024, 512 each
# (the programs of the agreement tests: PATHS per call, MAX_STEPS; the SDE run time is ~ calls / lr, the
# same at the three rungs; more paths at the large rates, where the mismatch is resolved)


def _pooled(lr, calls):
    """(SDE, SGD) observables {"loss", "logit"} at t = T over `calls` independent calls of PATHS each (new
    Brownian and batch seeds per rung and call: the rungs are independent)."""
    steps = int(round(T / lr))
    sde, sgd = {"loss": [], "logit": []}, {"loss": [], "logit": []}
    for c in range(calls):
        seed = 1000 + 100 * LADDER.index(lr) + c
        tr = con.solve_sgd_sde(CFG, TS, B, lr, PATHS, seed=seed, num_test=NUM_TEST, max_steps=MAX_STEPS)
        keys = jax.random.key_data(jax.random.split(jax.random.key(seed), PATHS))
        run = con.train_sgd_runs(CFG, steps, B, lr, keys=keys, save_every=steps // 2, num_test=NUM_TEST)
        assert np.allclose(run["ts"], TS) and all(s == "ok" for s in tr.status)
        for out, loss, A in ((sde, tr.observables["loss"], tr.observables["A"]), (sgd, run["loss"], run["A"])):
            out["loss"].append(np.asarray(loss)[:, -1])
            out["logit"].append(np.asarray(A)[:, -1, LOGIT[0], LOGIT[1]])
    return ({k: np.concatenate(v) for k, v in sde.items()}, {k: np.concatenate(v) for k, v in sgd.items()})


@pytest.mark.slow
@pytest.mark.xla_default  # Monte Carlo: its cost is running (tests/conftest.py)
def test_sde_mismatch_is_first_order_in_lr():
    """The SGD SDE's weak error, resolved above the Monte Carlo noise: lr = 0.05, 0.0125, 0.003125 with
    2048, 1024, 512 SDE paths (dt = lr / 4) and as many SGD runs, at the same t = 0.5 (10, 40, 160 steps).
    The mean training-loss mismatch d (SDE - SGD) is resolved at lr = 0.05, d / lr is the same at the three
    rungs within 3 SE (weak order 1) and a constant d is rejected (`check_weak_order`); the logit
    A[mu_1, mu_3]: resolved at lr = 0.05 and d / lr constant; at the two smaller rates the means and
    variances of both match within 3 SE (1024 and 512 paths). At every rung d of both observables equals,
    within 3 SE, the noise-free bias (`train(CFG, "gd")` at lr / 4 minus at lr: d / lr = 0.099, 0.102, 0.103
    for the loss, -1.34e-3, -1.24e-3, -1.22e-3 for the logit): the resolved O(lr) mismatch of the means is
    GD's discretisation bias, which the first-order SDE does not model; the noise's own share of the means
    is not resolved (that of the logit's variance is, below).
    Measured (z of d; d / lr +- SE; z of the variance difference):
    loss  lr 0.05: 6.75, 0.105 +- 0.016, 0.59;  0.0125: 2.31, 0.085 +- 0.037, 0.04;  0.003125: 1.32,
    0.129 +- 0.098, -1.50 (fall per 4x lr r = 4.9 +- 2.3);  logit  0.05: -4.31, -1.45e-3 +- 3.4e-4, -3.55
    (the variance, 10% below SGD's, resolved too);  0.0125: -0.44, -4.0e-4 +- 9.1e-4, 0.52;  0.003125:
    1.18, 3.1e-3 +- 2.6e-3, 0.45. The logit's variance difference / lr^2 (a noise-only quantity: O(lr)
    variance, O(lr) relative error): -1.8e-5 +- 5.1e-6, 1.4e-5 +- 2.7e-5, 6.6e-5 +- 1.5e-4, resolved at
    lr = 0.05 and the same at the three rungs within 3 SE (`check_weak_order(moment="var")`)."""
    table = {}
    for lr, calls in zip(LADDER, LADDER_CALLS, strict=True):
        sde, sgd = _pooled(lr, calls)
        steps = int(round(T / lr))
        fine, gd = (
            co.train(CFG, "gd", h, k, save_every=k, num_test=NUM_TEST) for h, k in ((lr / 4, 4 * steps), (lr, steps))
        )
        bias = {"loss": fine["loss"][-1] - gd["loss"][-1], "logit": (fine["A"][-1] - gd["A"][-1])[LOGIT]}
        table[lr] = {k: mismatch(sde[k], sgd[k]) + (float(bias[k]),) for k in sde}
    measured = summary(table)
    print(
        measured,
        "fall per 4x lr of the loss mismatch:",
        check_weak_order(LADDER, table, "loss"),
        "noise-free bias / lr:",
        {(lr, k): f"{v[4] / lr:.3g}" for lr, row in table.items() for k, v in row.items()},
        "variance difference / lr^2:",
        {(lr, k): f"{v[2] / lr**2:.3g}+-{v[3] / lr**2:.2g}" for lr, row in table.items() for k, v in row.items()},
    )
    # the O(lr) mean mismatch is the deterministic bias of GD against the flow: the noise's share is unresolved
    assert all(abs(v[0] - v[4]) <= 3 * v[1] for row in table.values() for v in row.values()), measured
    check_weak_order(LADDER, table, "logit", strict=False)
    # a noise-only quantity: the logit's variance, 10% below SGD's at lr = 0.05 (resolved), its difference
    # / lr^2 the same at the three rungs within 3 SE (an O(lr) relative error of the O(lr) variance)
    check_weak_order(LADDER, table, "logit", strict=False, moment="var")
    # at the two smaller rates SDE and SGD match: means and variances of both observables within 3 SE
    assert all(abs(v[0]) < 3 * v[1] and abs(v[2]) < 3 * v[3] for lr in LADDER[1:] for v in table[lr].values()), measured


def test_zero_noise_is_gradient_descent_at_the_sde_step():
    """Batches of all n = 12 samples (c = (n - B) / (n - 1) = 0: no noise): every SDE path is Euler on gradient
    flow, i.e. full-batch GD with lr = dt (`train(CFG, "gd", dt)`) at the saved times, to 1e-10 (the SDE
    program of the agreement tests, run to t = 0.05: 16 of its 160 steps; the horizon is an argument of that
    program and every path is the same, so the check does not need the full horizon, whose run costs 3 s)."""
    dt, horizon = LRS[0] / 4, T / 10
    tr = con.solve_sgd_sde(
        CFG, tuple(t / 10 for t in TS), CFG.n, LRS[0], PATHS, seed=1, num_test=NUM_TEST, max_steps=MAX_STEPS
    )
    steps = int(round(horizon / dt))
    assert steps == 16 and int(tr.num_steps[0]) == steps
    gd = co.train(CFG, "gd", dt, steps, save_every=steps // 2, num_test=NUM_TEST)
    assert gd["loss"][0] - gd["loss"][-1] > 0.05, gd["loss"]  # GD moved (1.18 -> 0.83; with noise on: 0.24 off)
    for name in ("loss", "A", "G"):
        assert np.max(np.abs(np.asarray(tr.observables[name]) - gd[name][None])) <= 1e-10, name


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="batch_size"):
        con.solve_sgd_sde(CFG, TS, 13, 0.1, 4, num_test=NUM_TEST)
    with pytest.raises(ValueError, match="lr"):
        con.solve_sgd_sde(CFG, TS, 3, -0.1, 4, num_test=NUM_TEST)
    with pytest.raises(ValueError, match="num_paths"):
        con.solve_sgd_sde(CFG, TS, 3, 0.1, 0, num_test=NUM_TEST)
    with pytest.raises(ValueError, match="num_runs"):
        con.train_sgd_runs(CFG, 10, 3, 0.1, num_test=NUM_TEST)
    # the forwarded keywords are checked by the functions that define them (flows.solve_sde, run_sgd)
    with pytest.raises(ValueError, match="dt"):
        con.solve_sgd_sde(CFG, TS, 3, 0.1, 4, num_test=NUM_TEST, dt=-0.1)
    with pytest.raises(TypeError, match="paths_per_lr"):
        con.solve_sgd_sde(CFG, TS, 3, 0.1, 4, num_test=NUM_TEST, paths_per_lr=2)
    with pytest.raises(TypeError, match="save_evry"):
        con.train_sgd_runs(CFG, 10, 3, 0.1, num_runs=2, num_test=NUM_TEST, save_evry=5)
