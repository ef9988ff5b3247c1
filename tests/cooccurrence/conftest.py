"""The co-occurrence flow against full-batch GD at two learning rates: one session fixture for
test_flow.py and test_pins.py (under pytest-xdist it is built once per worker that runs one of them; the flow
solve's compile, ~15 s on two busy cores, is most of its time)."""

import pytest

from flows import cooccurrence as co

SMALL = dict(n=12, L=4, d=3 + co.num_random_slots(12, 4), m=16, m1=8)
SEED = 1
HORIZON = 20.0  # the loss falls from 0.89 to 0.004; zero training error from t ~ 0.6
SAVES = 20  # save points after t = 0
LRS = (1e-2, 5e-3)
NUM_TEST = 24


@pytest.fixture(scope="session")
def gd_and_flow():
    """(cfg, data, {lr: GD record}, flow trajectory): GD saved at t = 0, 1, ..., 20; the flow (rtol 1e-10) at
    the same times, with the T1 event (first time with zero training error)."""
    cfg = co.Config(**SMALL, seed=SEED)
    data = co.spec.data(cfg, num_test=NUM_TEST)
    records = {}
    for lr in LRS:
        steps = int(round(HORIZON / lr))
        records[lr] = co.train(cfg, "gd", lr, steps, save_every=steps // SAVES, num_test=NUM_TEST)
    traj = co.solve_flow(cfg, records[LRS[0]].ts, num_test=NUM_TEST, locate_T1=True, rtol=1e-10, atol=1e-12)
    return cfg, data, records, traj
