"""Every observable of the exact co-occurrence flow against the GD-trained network (issue 10, item 3).

Full-batch GD with learning rate lr is the explicit Euler discretisation, in the parameters (W, W_V, W_K, W_Q),
of the gradient flow whose pushforward to the Grams is `flow.vector_field`; the record's clock is t = lr * step.
Euler is first order: at a fixed time t the trained parameters differ from the flow by lr * E(t) + O(lr^2),
with E independent of lr, and so does every smooth observable of them. Hence the tolerance of each
observable is proportional to lr,

    max_t |x_GD(t) - x_flow(t)| <= C_TOL * lr * max_t |x_flow(t)|        (C_TOL = 0.5, measured <= 0.28),

and halving lr halves the error (ratio 1.6-2.4, measured 1.93-2.02 for every observable). The scores A, the
value Gram block M_V and p(mu_1 -> mu_2) move little from their common initial value, so for them the
change from t = 0 is compared (relative to its size). `train_error` is a step function of the margins: it is
compared exactly on the saved grid (its jump from 1/2 to 0 lies between two saved times).
"""

import numpy as np

from flows import cooccurrence as co

# the records and the flow: the session fixture gd_and_flow (conftest.py: SMALL config, seed 1, GD at lr = 1e-2
# and 5e-3 saved at t = 0, 1, ..., 20, the flow at rtol 1e-10), shared with test_flow.py
HORIZON = 20.0  # the loss falls from 0.89 to 0.004; zero training error from t ~ 1
LRS = (1e-2, 5e-3)
C_TOL = 0.5
RATIO = (1.6, 2.4)
FROM_START = ("A", "M_V", "p12")  # compared as changes from t = 0


def _error(flow, gd, name):
    flow, gd = np.asarray(flow, float), np.asarray(gd, float)
    if name in FROM_START:
        flow, gd = flow - flow[0], gd - gd[0]
    return float(np.max(np.abs(gd - flow)) / np.max(np.abs(flow)))


def test_every_observable_of_the_flow_matches_gd_to_first_order_in_lr(gd_and_flow):
    """The failures of all observables are reported together."""
    _, _, records, traj = gd_and_flow
    assert tuple(records) == LRS and traj.status == "ok"
    for lr, rec in records.items():  # the clock t = lr * step, the same save times, the same names
        np.testing.assert_allclose(rec.ts, lr * rec.steps, rtol=1e-15, atol=0)
        np.testing.assert_allclose(rec.ts, np.linspace(0.0, HORIZON, 21), rtol=1e-13, atol=1e-13)
        assert set(rec.observables) == set(co.observables.OBSERVABLES) == set(traj.observables)
    failures = []
    for name in sorted(set(co.observables.OBSERVABLES) - {"train_error"}):
        flow = np.asarray(traj.observables[name])
        errs = {lr: _error(flow, rec[name], name) for lr, rec in records.items()}
        ratio = errs[LRS[0]] / errs[LRS[1]]
        if any(err > C_TOL * lr for lr, err in errs.items()) or not RATIO[0] <= ratio <= RATIO[1]:
            failures.append((name, errs, ratio))
        if name in FROM_START:  # what is compared really moved
            assert np.max(np.abs(flow - flow[0])) > 1e-6 * max(1.0, float(np.max(np.abs(flow)))), name
    assert not failures, failures
    # train_error: equal on the saved grid; the run trains (zero training error, loss / 100)
    flow_err = np.asarray(traj.observables["train_error"])
    for rec in records.values():
        np.testing.assert_array_equal(rec["train_error"], flow_err)
    assert flow_err[0] == 0.5 and flow_err[-1] == 0.0
    loss = np.asarray(traj.observables["loss"])
    assert loss[-1] < 1e-2 * loss[0]
