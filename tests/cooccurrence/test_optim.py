"""Co-occurrence optimiser limits on the parameters (`solve_flow(optimizer=...)`, issue 12).

The parameter flows run on (W, W_V, W_K, W_Q) with `network_loss` over the full training set (Adam and sign
descent are not rotation invariant: no Gram reduction). A small instance (n = 12, L = 4, m = 16, m1 = 8).
"""

import jax
import numpy as np
import optax
import pytest

from flows import cooccurrence as co
from flows import optim_limits as ol
from flows.cooccurrence.flow import limit_loss

CFG = co.Config(n=12, L=4, d=3 + co.num_random_slots(12, 4), m=16, m1=8, seed=1)
ARGS = co.data_args(CFG, num_test=24)
TIGHT = dict(rtol=1e-12, atol=1e-14)


def test_gd_on_the_parameters_equals_the_gram_flow():
    """optimizer="gd" (gradient flow of the parameters by autodiff) gives today's Gram-ODE observables to
    1e-10 (loss, margins, Grams) and the same T1."""
    ts = np.linspace(0.0, 4.0, 9)
    gram = co.solve_flow(CFG, ts, args=ARGS, **TIGHT)
    gd = co.solve_flow(CFG, ts, args=ARGS, optimizer="gd", **TIGHT)
    for name in ("loss", "min_margin", "G", "S", "A", "M_V", "group_loss"):
        err = float(np.max(np.abs(np.asarray(gd.observables[name]) - np.asarray(gram.observables[name]))))
        assert err < 1e-10, (name, err)
    assert abs(gd.t_event - gram.t_event) < 1e-8
    assert gram.observables["loss"][-1] < 0.5 * gram.observables["loss"][0]


C1, C2, EPS = 2.0, 5.0, 1e-8
HORIZON = 1.0  # lr * steps


def _adam_gap(lr):
    steps = round(HORIZON / lr)
    ts = np.linspace(0.0, HORIZON, 11)
    flow = co.solve_flow(CFG, ts, args=ARGS, optimizer="adam", optim_args={"c1": C1, "c2": C2, "eps": EPS},
                         save_states=True, locate_T1=False, rtol=1e-10, atol=1e-12)
    params, a = co.init_params(CFG)
    disc = ol.run_optax(limit_loss, params, dict(ARGS, a=a), optax.adam(lr, b1=1 - C1 * lr, b2=1 - C2 * lr, eps=EPS),
                        steps, steps // 10)
    gaps = jax.tree_util.tree_map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))),
                                  flow.ys["theta"], disc["params"])
    moved = max(float(np.max(np.abs(np.asarray(x[-1]) - np.asarray(x[0])))) for x in
                jax.tree_util.tree_leaves(flow.ys["theta"]))
    return max(jax.tree_util.tree_leaves(gaps)), moved


def test_adam_limit_against_optax_adam_first_order():
    """sup over 11 saved steps of |params_optax - params_ODE| (Adam, b = 1 - c lr): lr 1e-2 -> 1e-3 shrinks it
    5-20x."""
    (big, moved), (small, _) = _adam_gap(1e-2), _adam_gap(1e-3)
    assert moved > 0.1
    assert 5.0 <= big / small <= 20.0, (big, small)


@pytest.mark.parametrize("kwargs, field", [
    (dict(optimizer="rmsprop"), "optimizer"),
    (dict(optimizer="momentum", optim_args={"beta": 0.9}), "lr"),
    (dict(optimizer="momentum", optim_args={"beta": 1.0, "lr": 0.1}), "beta"),
    (dict(optimizer="adam"), "lr"),
    (dict(optimizer="adam", optim_args={"c1": 1.0}), "c2"),
    (dict(optimizer="adam", optim_args={"c1": 1.0, "c2": 1.0, "lr": 0.1}), "c1"),
    (dict(optimizer="sign", optim_args={"eps": -1.0}), "eps"),
    (dict(optimizer="sign", optim_args={"beta": 0.5}), "unknown"),
    (dict(optimizer="gd", y0={"W": 1.0}), "y0"),
    (dict(optim_args={"eps": 1.0}), "optimizer"),
])
def test_bad_optimizer_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        co.solve_flow(CFG, [0.0, 1.0], args=ARGS, **kwargs)
