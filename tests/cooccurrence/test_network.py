"""The co-occurrence network's own part of the shared vocabulary (the rest is tests/test_vocabulary.py): a
minibatch seed separate from the data seed, `seed`/`init` as overrides of the Config, a frozen parameter group,
and `solve_flow` starting where `train` starts."""

import numpy as np
import pytest

from flows import cooccurrence as co
from flows.cooccurrence.observables import gram_state
from tests.fuzzing import Reached, stop_at_solvers

TINY = dict(n=6, L=3, d=3 + co.num_random_slots(6, 3), m=4, m1=2)


def test_sgd_momentum_clock_and_batch_seed():
    cfg = co.Config(**TINY, seed=3)
    lr, beta = 1e-2, 0.5
    runs = {
        s: co.train(cfg, "sgd", lr, 40, batch_size=2, save_every=10, momentum=beta, batch_seed=s, num_test=4)
        for s in (0, 1)
    }
    for rec in runs.values():
        np.testing.assert_allclose(rec.ts, lr * np.arange(0, 41, 10) / (1 - beta), rtol=1e-14)
    # the same data and initialisation (config.seed) ...
    np.testing.assert_array_equal(runs[0]["loss"][0], runs[1]["loss"][0])
    # ... but another minibatch order: the trajectories part (a tolerance far above round-off)
    assert np.max(np.abs(runs[0]["loss"][1:] - runs[1]["loss"][1:])) > 1e-6


def test_seed_and_init_are_keywords_of_train_and_solve_flow():
    cfg = co.Config(**TINY, seed=3)
    other = co.Config(**TINY, seed=5, init="kaiming")
    a = co.train(cfg, "gd", 1e-2, 2, seed=5, init="kaiming", num_test=4)
    b = co.train(other, "gd", 1e-2, 2, num_test=4)
    for name in ("loss", "G", "A"):
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert a["loss"][0] != co.train(cfg, "gd", 1e-2, 1, num_test=4)["loss"][0]  # the override changed the draw
    for kw, field in ((dict(seed=-1), "seed"), (dict(init="nope"), "init")):
        with pytest.raises(ValueError, match=field):
            co.train(cfg, "gd", 1e-2, 2, **kw)
        with pytest.raises(ValueError, match=field):
            co.solve_flow(cfg, [0.0, 1.0], **kw)
    # solve_flow starts from the same state as the overridden config's
    y_kw = co.initial_state(co.with_seed_init(cfg, seed=5, init="kaiming"))
    for k, v in co.initial_state(other).items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(y_kw[k]))


def test_lr_per_parameter_group():
    cfg = co.Config(**TINY, seed=2)
    one = co.train(cfg, "gd", 1e-2, 5, num_test=4)
    groups = co.train(cfg, "gd", {"W": 1e-2, "W_V": 1e-2, "W_K": 1e-2, "W_Q": 1e-2}, 5, num_test=4)
    np.testing.assert_allclose(groups["loss"], one["loss"], rtol=1e-14)
    np.testing.assert_array_equal(groups.ts, one.ts)
    frozen = co.train(cfg, "gd", {"W": 1e-2, "W_V": 1e-2, "W_K": 1e-30, "W_Q": 1e-30}, 5, num_test=4)
    np.testing.assert_allclose(frozen.params["W_K"], co.init_params(cfg)[0]["W_K"], rtol=1e-12)
    assert np.max(np.abs(frozen.params["W"] - co.init_params(cfg)[0]["W"])) > 1e-6
    for bad, field in (({"W": 1e-2}, "lr"), ({"W": 1e-2, "W_V": 1e-2, "W_K": 1e-2, "W_Q": -1.0}, "W_Q")):
        with pytest.raises(ValueError, match=field):
            co.train(cfg, "gd", bad, 5)


def test_solve_flow_starts_where_train_starts():
    """`solve_flow(config, ts, seed=, init=)` hands the solver the Gram state of the parameters that
    `train(config, ..., seed=, init=)` starts from, and the same data: two steps at lr = 1e-30 leave train's
    parameters at their initial values (the update is far below their rounding), and the record's step-0
    loss is the flow's loss at t = 0. Another seed gives another start. (The solve stops at the solver stub:
    nothing is compiled but the training program of the tests above.)"""
    cfg = co.Config(**TINY, seed=3)
    rec = co.train(cfg, "gd", 1e-30, 2, seed=5, init="kaiming", num_test=4)
    start = gram_state({k: np.asarray(v) for k, v in rec.params.items()}, np.asarray(rec.a))

    def flow_start(seed):
        with stop_at_solvers(), pytest.raises(Reached) as info:
            co.solve_flow(cfg, [0.0, 1.0], seed=seed, init="kaiming", num_test=4)
        return info.value.inputs["y0"], info.value.inputs["args"]["field"]  # the Gram flow's args: the data

    y0, args = flow_start(5)
    assert set(y0) == set(start)
    for k, v in start.items():
        scale = max(float(np.max(np.abs(v))), 1e-300)
        assert float(np.max(np.abs(np.asarray(y0[k]) - v))) <= 1e-12 * scale, k
    loss0 = float(co.observables.loss(0.0, y0, args))
    assert abs(loss0 - float(rec["loss"][0])) <= 1e-12 * abs(loss0)
    other, _ = flow_start(6)
    gap = max(float(np.max(np.abs(np.asarray(other[k]) - start[k]))) / float(np.max(np.abs(start[k]))) for k in start)
    assert gap > 1e-3
