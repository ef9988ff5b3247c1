"""Every system speaks one vocabulary, checked by one test per keyword: `seed`, `lr` as a number and as one
rate per parameter group, `save_every`, heavy-ball momentum on the shared clock t = lr * step / (1 - beta), and
a failed run's record.

The tests run the shared driver `flows.train` over the demo spec of every system registered with one
(`flows.registry`): every built-in system is a spec, and its own `train` is a thin call of the driver. Each
system runs at one small size; its runs share a few compiled programs (the rates, seeds and momentum live in the
optimiser state)."""

from __future__ import annotations

import numpy as np
import pytest

import flows
from flows import FlowError, registry
from flows.training import NetworkRecord, TrainingError, flow_time


def _observables_close(a, b, rtol=1e-12):
    for k in a.observables:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=1e-14, err_msg=k)


SPECS = [e.name for e in registry.SYSTEMS if e.demo is not None]


@pytest.fixture(params=SPECS)
def spec(request):
    entry = registry.entry(request.param)
    return registry.demo(request.param), entry.demo


def _groups(system):
    return tuple(system.initial_params(system.keys()["init"]))


def test_spec_record_fields_and_seed(spec):
    system, demo = spec
    run = lambda seed: flows.train(  # noqa: E731
        system, "sgd", demo.lr, 4, save_every=1, seed=seed, batch_size=demo.batch_size
    )
    rec = run(2)
    assert isinstance(rec, NetworkRecord) and rec.optimizer == "sgd" and rec.momentum == 0.0
    assert rec.config is system.config and rec.extras == {"batch_size": demo.batch_size, "system": system.name}
    assert rec.run_s > 0 and rec.compile_s >= 0
    assert rec[demo.scalar] is rec.observables[demo.scalar] is getattr(rec, demo.scalar)
    np.testing.assert_array_equal(rec.steps, np.arange(5))
    np.testing.assert_allclose(rec.ts, flow_time(demo.lr, rec.steps), rtol=1e-15, atol=0)
    again, other = run(2), run(3)
    for k in rec.observables:
        np.testing.assert_array_equal(again[k], rec[k], err_msg=k)  # the same seed, the same record
    assert np.max(np.abs(other[demo.scalar] - rec[demo.scalar])) > 1e-8
    default = flows.train(system, "sgd", demo.lr, 4, save_every=1, batch_size=demo.batch_size)
    own = flows.train(system, "sgd", demo.lr, 4, save_every=1, batch_size=demo.batch_size, seed=system.seed)
    np.testing.assert_array_equal(default[demo.scalar], own[demo.scalar])  # seed=None: the system's own
    for kw, field in ((dict(seed=-1), "seed"), (dict(batch_size=0), "batch_size"), (dict(steps=0), "steps")):
        with pytest.raises(ValueError, match=field):
            flows.train(system, "sgd", demo.lr, **{"steps": 4, **kw})
    with pytest.raises(ValueError, match="batch_size"):
        flows.train(system, "gd", demo.lr, 4, batch_size=demo.batch_size)
    with pytest.raises(ValueError, match="optimizer"):
        flows.train(system, "rmsprop", demo.lr, 4)


def test_spec_lr_a_number_or_one_per_group(spec):
    system, demo = spec
    groups = _groups(system)
    one = flows.train(system, "gd", demo.lr, 5, save_every=1)
    each = flows.train(system, "gd", dict.fromkeys(groups, demo.lr), 5, save_every=1)
    _observables_close(each, one)
    np.testing.assert_array_equal(each.ts, one.ts)
    assert each.lr == dict.fromkeys(groups, demo.lr)
    slow = {**dict.fromkeys(groups, demo.lr), groups[-1]: demo.lr / 10}
    moved = flows.train(system, "gd", slow, 5, save_every=1)  # another path, the clock at the largest rate
    np.testing.assert_array_equal(moved.ts, one.ts)
    assert np.max(np.abs(moved[demo.scalar][1:] - one[demo.scalar][1:])) > 1e-10
    bad_group = {**dict.fromkeys(groups, demo.lr), groups[-1]: -1.0}
    for lr, field in (({groups[0]: demo.lr}, "lr"), (bad_group, groups[-1]), (0.0, "lr")):
        with pytest.raises(ValueError, match=field):
            flows.train(system, "gd", lr, 5)


def test_spec_save_every_keeps_the_same_training_at_fewer_steps(spec):
    system, demo = spec
    beta = {"beta": 0.5}
    full = flows.train(system, "momentum", demo.lr, 10, save_every=1, optim_args=beta)
    sparse = flows.train(system, "momentum", demo.lr, 10, save_every=4, optim_args=beta)
    explicit = flows.train(system, "momentum", demo.lr, 10, save_steps=[3, 7], optim_args=beta)
    assert sparse.steps.tolist() == [0, 4, 8, 10] and explicit.steps.tolist() == [0, 3, 7]
    for k in full.observables:
        np.testing.assert_allclose(sparse[k], full[k][sparse.steps], rtol=1e-12, atol=1e-14, err_msg=k)
        np.testing.assert_allclose(explicit[k], full[k][explicit.steps], rtol=1e-12, atol=1e-14, err_msg=k)
    with pytest.raises(ValueError, match="save_every"):
        flows.train(system, "gd", demo.lr, 10, save_every=0)


def test_spec_momentum_on_the_shared_clock(spec):
    system, demo = spec
    beta = 0.5
    rec = flows.train(system, "momentum", demo.lr, 10, save_every=1, optim_args={"beta": beta})
    assert rec.momentum == beta and rec.optimizer == "momentum"
    np.testing.assert_allclose(rec.ts, flow_time(demo.lr, np.arange(11), beta), rtol=1e-15, atol=0)
    plain = flows.train(system, "momentum", demo.lr, 10, save_every=1, optim_args={"beta": 0.0})
    gd = flows.train(system, "gd", demo.lr, 10, save_every=1)
    _observables_close(plain, gd)  # beta = 0 is gradient descent
    assert np.max(np.abs(plain[demo.scalar][2:] - rec[demo.scalar][2:])) > 1e-10  # the momentum acts
    for optimizer, optim_args, field in (
        ("momentum", None, "beta"),
        ("momentum", {"beta": 1.0}, "beta"),
        ("adam", {"beta": beta}, "beta"),
        ("gd", {"beta": beta}, "beta"),
        ("adam", {"b1": 1.5}, "b1"),
    ):
        with pytest.raises(ValueError, match=field):
            flows.train(system, optimizer, demo.lr, 10, optim_args=optim_args)


def test_spec_a_failed_run_is_truncated_and_carries_its_record(spec):
    system, demo = spec
    with pytest.raises(TrainingError, match="non-finite at step") as info:
        flows.train(system, "gd", demo.blowup, 40, save_every=3)
    err = info.value
    assert isinstance(err, FlowError) and 1 <= err.step <= 40
    rec = err.record
    assert rec is err.trajectory and isinstance(rec, NetworkRecord)
    assert rec.steps.tolist() == [s for s in range(0, 40, 3) if s < err.step]
    for k, v in rec.observables.items():
        assert len(v) == len(rec.steps) and np.all(np.isfinite(v)), k
