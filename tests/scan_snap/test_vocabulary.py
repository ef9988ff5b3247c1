"""The Scan and Snap network record speaks the shared vocabulary: ts, steps, observables named as on the flow's
Trajectory (attention, loss), save_every, the deprecated .t, and a non-finite run stopped by name."""

import warnings

import numpy as np
import pytest

from flows import FlowError
from flows.network_records import TrainingError
from flows.scan_snap import observables as obs
from flows.scan_snap import syn_small, train
from flows.scan_snap.flow import flow_args, population_loss

RUN = dict(T=24, batch_size=8, steps=15, momentum=0.9, init="random", seed=2)  # test_network.py's SGD case


def test_save_every_observables_and_clock():
    c = syn_small()
    full = train(c, "sgd", 1.0, 1.0, **RUN)  # the program of test_network.py (save_every=1)
    sparse = train(c, "sgd", 1.0, 1.0, **RUN, save_every=4)
    assert sparse.steps.tolist() == [0, 4, 8, 12, 15]
    np.testing.assert_allclose(sparse.ts, sparse.steps / (1 - 0.9), rtol=1e-14)
    np.testing.assert_allclose(full.ts, np.arange(16) / (1 - 0.9), rtol=1e-14)
    # the same training, kept at fewer steps
    assert np.max(np.abs(sparse.Z - full.Z[sparse.steps])) <= 1e-12
    assert np.max(np.abs(sparse.Y - full.Y[sparse.steps])) <= 1e-12
    assert np.max(np.abs(sparse.batch_loss - full.batch_loss)) <= 1e-12
    # the flow's observables, by the flow's names, from the saved (Y, Z)
    args = flow_args(c, 1.0, 1.0)
    for i, s in enumerate(sparse.steps):
        y = {"Y": full.Y[s], "Z": full.Z[s]}
        np.testing.assert_allclose(sparse["attention"][i], obs.attention(y["Z"], args["cond"], args["Q"]),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(sparse["loss"][i], population_loss(y, args), rtol=1e-12)
    assert sparse.attention is sparse.observables["attention"]
    assert sparse["loss"][-1] < sparse["loss"][0]
    with pytest.warns(DeprecationWarning, match="ts"):
        assert np.array_equal(full.t, full.ts)
    with pytest.warns(DeprecationWarning, match="batch_loss"):
        assert np.array_equal(full.loss, full.batch_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sparse.compile_s >= 0 and sparse.run_s > 0
    with pytest.raises(ValueError, match="save_every"):
        train(c, "sgd", 1.0, 1.0, **RUN, save_every=0)


def test_non_finite_training_stops_naming_the_step():
    c = syn_small()
    with pytest.raises(TrainingError, match="non-finite at step") as info:
        train(c, "sgd", 1e308, 1e308, **{**RUN, "steps": 40}, save_every=3)  # gradients are bounded: overflow
    err = info.value
    assert isinstance(err, FlowError) and 1 <= err.step <= 40
    rec = err.record
    assert np.all(rec.steps < err.step) and rec.steps[0] == 0
    assert np.all(np.isfinite(rec["loss"])) and len(rec.batch_loss) == err.step


def test_lr_keyword_equals_eta_and_is_validated():
    c = syn_small()
    base = train(c, "sgd", 1.0, 1.0, **RUN)  # the compiled program of the first test: no new compile
    for lr in (1.0, {"Y": 1.0, "Z": 1.0}):
        rec = train(c, "sgd", lr=lr, **RUN)
        assert np.array_equal(rec.Z, base.Z) and np.array_equal(rec.Y, base.Y)
    for kw, field in ((dict(lr={"Y": 1.0}), "lr"), (dict(lr=1.0, eta_Y=1.0), "lr"), (dict(eta_Y=1.0), "lr"),
                      (dict(lr=-1.0), "lr"), (dict(lr={"Y": 1.0, "Z": 0.0}), r"lr\['Z'\]"),
                      (dict(eta_Y=-1.0, eta_Z=1.0), "eta_Y")):  # a bad rate is named as it was passed
        with pytest.raises(ValueError, match=field):
            train(c, "sgd", **kw, **RUN)


def test_solve_flow_init_random_starts_where_train_does():
    from flows.scan_snap import solve_flow

    c = syn_small()
    rec = train(c, "sgd", 1.0, 1.0, **RUN)  # init="random", seed=2
    traj = solve_flow(c, 1.0, 1.0, [0.0, 1e-9], init="random", seed=2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(traj.ys["Z"][0], rec.Z[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(traj.ys["Y"][0], rec.Y[0], rtol=0, atol=1e-15)
    for kw, field in ((dict(init="nope"), "init"), (dict(seed=-1), "seed"), (dict(init="random", Z0=rec.Z[0]), "Z0")):
        with pytest.raises(ValueError, match=field):
            solve_flow(c, 1.0, 1.0, [0.0, 1.0], **kw)


def test_lr_keyword_of_solve_flow_and_train_sweep():
    from flows.scan_snap import solve_flow, train_sweep

    c = syn_small()
    ts = [0.0, 0.5, 1.0]
    base = solve_flow(c, 2.0, 1.0, ts, rtol=1e-9, atol=1e-11)
    same = solve_flow(c, ts=ts, lr={"Y": 2.0, "Z": 1.0}, rtol=1e-9, atol=1e-11)  # the same program
    np.testing.assert_array_equal(np.asarray(same.ys["Z"]), np.asarray(base.ys["Z"]))
    for kw, field in ((dict(lr={"Y": 1.0, "Z": -1.0}), r"lr\['Z'\]"), (dict(lr=1.0, eta_Y=1.0), "lr"),
                      (dict(lr=float("nan")), "lr"), (dict(), "lr"), (dict(lr=1.0, ts=None), "ts")):
        kw = {"ts": ts, **kw}
        with pytest.raises(ValueError, match=field):
            solve_flow(c, **kw)
    sweep = dict(seeds=np.array([2, 3]), T=RUN["T"], batch_size=RUN["batch_size"], steps=RUN["steps"],
                 momentum=RUN["momentum"], init=RUN["init"])
    old = train_sweep(c, "sgd", np.array([1.0, 2.0]), np.array([1.0, 0.5]), **sweep)
    new = train_sweep(c, "sgd", lr={"Y": np.array([1.0, 2.0]), "Z": np.array([1.0, 0.5])}, **sweep)
    np.testing.assert_array_equal(new[1]["Z"], old[1]["Z"])
    with pytest.raises(ValueError, match=r"lr\['Y'\]"):
        train_sweep(c, "sgd", lr={"Y": np.array([1.0, -2.0]), "Z": np.array([1.0, 0.5])}, **sweep)
