"""One contract for `solve_flow(optimizer=..., optim_args=...)` in every system
(`flows.optim_limits.limit_problem`): the same optimiser names, the same `optim_args` names and defaults (the
sign smoothing a documented per-system default), the same clocks per parameter group, and a ValueError that
names a bad or unknown key. Each solve is short (the limits' accuracy is in each system's test_optim.py).

Every system is checked through its spec (`flows.solve_flow(system, ...)`, `flows.driver.limit_problem`), one
entry per demo registered in `flows.registry`."""

import functools
from typing import NamedTuple

import jax
import numpy as np
import pytest

import flows
from flows import driver, registry
from flows import optim_limits as ol

LR, BETA = 0.1, 0.5


class System(NamedTuple):
    solve: callable  # (ts, **solve_flow keywords) -> Trajectory
    problem: callable  # (optimizer, optim_args) -> (limit, args)
    takes_lr: bool  # optim_args gives "lr" (Scan and Snap: solve_flow's own rates)
    group_lr: callable  # (optimizer, lr) -> {leaf: that leaf's learning rate} (None: every leaf at lr)
    sign_eps: float  # the system's documented default smoothing
    loss: str  # the observable that falls along every limit


def _spec(name):
    """The entry of a system on the shared driver: its demo spec through `flows.solve_flow`."""
    system = registry.demo(name)
    params = system.initial_params(system.keys()["init"])

    def group_lr(optimizer, lr):  # each leaf at lr times its group's rate scale (None: every leaf at lr)
        if not system.rate_scale or optimizer not in ("momentum", "adam"):
            return None
        leaves = {g: params[g] if isinstance(params[g], dict) else {g: None} for g in params}
        return {k: lr * system.rate_scale.get(g, 1.0) for g in params for k in leaves[g]}

    return System(
        lambda ts, **kw: flows.solve_flow(system, ts, **kw),
        lambda o, a: driver.limit_problem(system, o, a)[:2],
        True,
        group_lr,
        system.sign_eps,
        registry.entry(name).demo.scalar,
    )


SYSTEMS = {**{e.name: (lambda name=e.name: _spec(name)) for e in registry.SYSTEMS if e.demo is not None}}


@functools.cache
def _system(name):
    return SYSTEMS[name]()


@pytest.fixture(scope="module", params=list(SYSTEMS))
def system(request):
    return _system(request.param)


def _lr(system):
    return {"lr": LR} if system.takes_lr else {}


def _per_leaf(value, like):
    """`value` (one number, or a pytree of one per parameter leaf) by leaf name, the names of `like`."""
    if not isinstance(value, dict):
        return float(value)
    flat = {path[-1].key: float(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(value)}
    return {k: flat[k] for k in like}


def test_optim_args_names_defaults_and_clocks(system):
    """The same names and defaults in every system: momentum's friction (1 - beta)^2 / lr_g and Adam's
    c = (1 - b) / lr_g (b1 = 0.9, b2 = 0.999, eps = 1e-8 by default) per group at that group's learning rate,
    sign descent's eps the system's default, and gd's args the data and the clocks alone."""
    lrs = system.group_lr("momentum", LR)
    _, args = system.problem("momentum", {"beta": BETA, **_lr(system)})
    expected = (1 - BETA) ** 2 / LR if lrs is None else {k: (1 - BETA) ** 2 / v for k, v in lrs.items()}
    assert _per_leaf(args["friction"], expected) == pytest.approx(expected, rel=1e-12)
    lrs = system.group_lr("adam", LR)
    _, args = system.problem("adam", _lr(system))
    for key, b in (("c1", 0.9), ("c2", 0.999)):
        expected = (1 - b) / LR if lrs is None else {k: (1 - b) / v for k, v in lrs.items()}
        assert _per_leaf(args[key], expected) == pytest.approx(expected, rel=1e-12)
    assert args["eps"] == 1e-8
    _, args = system.problem("adam", {"c1": 2.0, "c2": 5.0})
    assert (float(args["c1"]), float(args["c2"])) == (2.0, 5.0)
    _, args = system.problem("sign", None)
    assert args["eps"] == system.sign_eps
    _, args = system.problem("gd", {})
    assert set(args) <= {"batch", "rates"}


@pytest.mark.parametrize(
    "optimizer, optim_args, field",
    [
        ("rmsprop", None, "optimizer"),
        ("gd", {"beta": 0.5}, "unknown keys \\['beta'\\]"),
        ("sign", {"epsilon": 1e-3}, "unknown keys \\['epsilon'\\]"),
        ("momentum", {"lr": LR}, "beta"),
        ("momentum", {"lr": LR, "beta": 1.0}, "beta"),
        ("momentum", {"lr": -1.0, "beta": BETA}, "lr"),
        ("sign", {"eps": 0.0}, "eps"),
        ("adam", {"c1": 1.0}, "c2"),
        ("adam", {"c1": 1.0, "c2": 1.0, "b1": 0.9}, "c1"),
        ("adam", {"lr": LR, "b2": 1.0}, "b2"),
        ("adam", {"lr": LR, "eps": float("nan")}, "eps"),
        (None, {"eps": 1e-3}, "optimizer"),
    ],
)
def test_bad_optim_args_name_the_key(system, optimizer, optim_args, field):
    if not system.takes_lr and optim_args and "lr" in optim_args:
        optim_args = {k: v for k, v in optim_args.items() if k != "lr"}
        if not optim_args or field == "lr":
            return
    with pytest.raises(ValueError, match=field):
        system.solve([0.0, 1.0], optimizer=optimizer, optim_args=optim_args)


def test_lr_is_an_optim_arg_exactly_where_solve_flow_has_no_rates(system):
    """Momentum needs lr where the system's solve_flow has no learning rate (co-occurrence, mean field); Scan
    and Snap's solve_flow has its rates (eta_Y, eta_Z), and an "lr" there is an unknown key."""
    match = "\\['lr'\\]" if system.takes_lr else "unknown keys \\['lr'\\]"
    with pytest.raises(ValueError, match=match):
        system.solve(
            [0.0, 1.0], optimizer="momentum", optim_args={"beta": BETA} if system.takes_lr else {"beta": BETA, "lr": LR}
        )


# Every (system, optimizer) pair; the default run solves each optimiser once, in one system (a solve compiles
# for seconds; the per-group clocks and defaults of every pair are checked above without a solve).
_DEFAULT_SOLVES = {
    ("scan_snap", "adam"),
    ("cooccurrence", "gd"),
    ("mean_field", "momentum"),
    ("joma", "sign"),
    ("linear_attention", "momentum"),
}


@pytest.mark.parametrize(
    "name, optimizer",
    [
        pytest.param(name, optimizer, marks=() if (name, optimizer) in _DEFAULT_SOLVES else pytest.mark.slow)
        for name in SYSTEMS
        for optimizer in ol.OPTIMIZERS
    ],
)
def test_every_limit_solves_and_descends(name, optimizer):
    """Every optimiser's limit in every system: a finite solve along which the loss falls."""
    system = _system(name)
    optim_args = {
        "gd": None,
        "momentum": {"beta": BETA, **_lr(system)},
        "sign": {"eps": 10 * system.sign_eps},
        "adam": _lr(system),
    }[optimizer]
    traj = system.solve(np.linspace(0.0, 0.05, 3), optimizer=optimizer, optim_args=optim_args)
    loss = np.asarray(traj.observables[system.loss])
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0], loss
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(traj.observables))
