"""One driver for every spec (`flows.System`): `train` the finite network, `solve_flow` its optimiser's limit
(an ODE, or with `noise=True` the SGD or Adam SDE), and `limit_problem`, the limit and its args.

Clocks (`flows.training.flow_time`): t = lr * step for gradient descent, SGD and Adam, t = lr * step / (1 - beta)
for heavy-ball momentum; a group g with `rate_scale[g] = s` trains at lr * s and its limit runs at s on the
same clock. `solve_flow`'s trajectories carry the observables of `System.observe` under the names the
network records use.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from . import training
from ._checks import INT_MAX, check_bool, check_choice, check_int, check_options, check_real, real_array
from ._solve import OPTIONS as _SOLVE_OPTIONS
from ._solve import solve
from .optim_limits.ode import Limit
from .optim_limits.problem import OPTIMIZERS as LIMITS
from .optim_limits.problem import limit_problem as optimizer_limit
from .spec_noise import solve_noise
from .system import System, num_rows, params_like
from .trajectory import Trajectory

logger = logging.getLogger(__name__)

#: the `flows.solve` keywords the ODE limits take as options (the observables and the horizon are the driver's)
SOLVE_KEYWORDS = tuple(k for k in _SOLVE_OPTIONS if k != "observables") + ("throw",)

__all__ = [
    "LIMITS",
    "OPTIMIZERS",
    "TRAIN_ARGS",
    "check_optim_args",
    "limit_problem",
    "solve_flow",
    "train",
    "train_relabelled",
]

#: the optimisers `train` runs.
OPTIMIZERS = ("gd", "sgd", "momentum", "adam")
#: the `optim_args` of each optimiser of `train` (the names of `solve_flow`'s).
TRAIN_ARGS = {"gd": (), "sgd": (), "momentum": ("beta",), "adam": ("b1", "b2", "eps")}


def _check_system(system: Any) -> System:
    if not isinstance(system, System):
        raise ValueError(f"system must be a flows.System, got {type(system).__name__}")
    return system


# -- training ----------------------------------------------------------------------------------------------------


def _program(system, batch_size, template, history=False):
    """The training loop of `system` on `flows.training.training_program` (`history`: keep the parameters at
    the saved steps)."""

    def loss(params, data, batch):
        return system.loss(params, data if batch is None else batch)

    def chain(data, key, step):
        key, sub = jax.random.split(key)
        return key, system.batch(sub, data, batch_size)

    def split(data, keys, step):
        return keys, system.batch(keys[step], data, batch_size)

    sample = None if batch_size is None else chain if system.key_schedule == "chain" else split
    checks = {} if system.finite is None else {"finite": system.finite}
    snapshot = (lambda params: params) if history else None
    return training.training_program(loss, system.observables, template, sample=sample, snapshot=snapshot, **checks)


def _batch_key(system, key, steps):
    """The carried key of the loop: `key` itself ("chain"), or its `steps` per-step keys ("split")."""
    if system.key_schedule == "chain":
        return key
    return jax.random.key_data(jax.random.split(key, steps))


def train(
    system: System,
    optimizer: str = "gd",
    lr: float | dict = 0.01,
    steps: int = 1000,
    *,
    save_every: int = 10,
    save_steps: Sequence[int] | np.ndarray | None = None,
    seed: int | None = None,
    batch_size: int | None = None,
    optim_args: dict | None = None,
    history: bool = False,
    batch_loss: bool = False,
) -> training.NetworkRecord:
    """Train the network of `system` with optax and record its observables at the saved steps.

    **Arguments:**

    - `system`: the `flows.System`.
    - `optimizer`: `"gd"` (`optax.sgd` on the full batch, `loss(params, data)`), `"sgd"` (`optax.sgd` on
      minibatches of `batch_size` from `System.sample`; full batch without one), `"momentum"` (heavy ball,
      `optax.sgd(lr, momentum=beta)`, full batch or minibatches) or `"adam"` (`optax.adam`, full batch or
      minibatches).
    - `lr` (> 0): one rate, or a dict of one per parameter group (the clock runs at the largest).
    - `steps` (>= 1); `save_every` (record every k steps and the last) or `save_steps` (explicit step numbers;
      step 0 is always recorded).
    - `seed`: the seed of `System.keys` (`None`: the system's own).
    - `batch_size`: `None` (full batch) or B >= 1 (at most the number of rows where the default sampler draws
      them); not with `"gd"`.
    - `optim_args`: `"momentum"`: `{"beta"}` (required, in [0, 1)); `"adam"`: `{"b1", "b2", "eps"}` (optax's
      defaults 0.9, 0.999, 1e-8); none for `"gd"` and `"sgd"`.
    - `history`: keep the parameters at every saved step (`record.params` then holds them with a leading axis
      of the saved steps; default: the final parameters only).
    - `batch_loss`: record the loss of every step on its batch, before the step (`extras["batch_loss"]`, one
      entry per step).

    **Returns:** a `flows.training.NetworkRecord`: `ts` = `flow_time(lr, steps, beta)`, the observables of
    `System.observe`, the final `params`, `config` the system's, `extras`: `batch_size`, `system` (the name).

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` at the first non-finite step (or the
    first that fails `System.finite`), with `.record` the saved steps before it.
    """
    system = _check_system(system)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    history, batch_loss = check_bool("history", history), check_bool("batch_loss", batch_loss)
    options = check_options("optim_args", optim_args, TRAIN_ARGS[optimizer], f"optimizer {optimizer!r}")
    beta = 0.0
    if optimizer == "momentum":
        if "beta" not in options:
            raise ValueError("optim_args must give beta (in [0, 1)) for optimizer='momentum'")
        beta = check_real("optim_args['beta']", options["beta"], low=0.0, high=1.0, high_strict=True)
    adam_options = {  # b1, b2 in [0, 1), eps >= 0
        k: check_real(f"optim_args[{k!r}]", v, low=0.0, high=None if k == "eps" else 1.0, high_strict=True)
        for k, v in options.items()
        if optimizer == "adam"
    }
    steps = check_int("steps", steps, 1)
    save = training.save_steps(steps, save_every, save_steps)
    keys = system.keys(seed)
    params = system.initial_params(keys["init"])
    groups = tuple(params)
    lr = training.check_lr(lr, groups)
    data = system.dataset(keys["data"])
    if batch_size is not None:
        if optimizer == "gd":
            raise ValueError("batch_size must be None for optimizer='gd' (full batch); use 'sgd' for minibatches")
        high = num_rows(data, system.rows) if system.sample is None else INT_MAX
        batch_size = check_int("batch_size", batch_size, 1, high)
    scale = dict(system.rate_scale or {})
    labels = {g: g for g in groups} if isinstance(lr, dict) or scale else None
    heavy = beta if optimizer == "momentum" else None
    kind = "adam" if optimizer == "adam" else "sgd"
    opt_state = training.make_optimizer(kind, lr, heavy, labels=labels, scale=scale, options=adam_options).init(params)
    ones = dict.fromkeys(groups, 1.0) if labels else 1.0
    template = training.make_optimizer(kind, ones, None if heavy is None else 0.5, labels=labels, scale=scale)
    key = _batch_key(system, keys["batch"], steps) if batch_size is not None else keys["batch"]
    structure = (
        kind,
        heavy is not None,
        batch_size,
        labels is not None,
        tuple(sorted(scale.items())),
        system.loss,
        system.observe,
        system.sample,
        system.rows,
        system.key_schedule,
        system.finite,
        history,
    )
    final, series, snaps, losses, bad, compile_s, run_s = training.run_training(
        f"{system.name}.train",
        structure,
        lambda: _program(system, batch_size, template, history),
        params,
        opt_state,
        key,
        save,
        data,
        batch_loss=batch_loss,
    )
    logger.info(
        "train %s %s lr=%s steps=%d: compile %.2f s, run %.2f s", system.name, optimizer, lr, steps, compile_s, run_s
    )
    return training.finish(
        save,
        series,
        bad,
        params=final,
        clock=training.clock_rate(lr),
        momentum=beta,
        snapshots=snaps if history else None,
        batch_loss=losses if batch_loss else None,
        hint="lower lr" if system.finite is None else "or they fail System.finite; lower lr",
        optimizer=optimizer,
        lr=dict(lr) if isinstance(lr, dict) else float(lr),
        config=system.config,
        compile_s=compile_s,
        run_s=run_s,
        extras={"batch_size": batch_size, "system": system.name},
    )


def train_relabelled(
    relabel: Callable[[training.NetworkRecord], training.NetworkRecord],
    system: System,
    optimizer: str,
    lr: float | dict,
    steps: int,
    **options: Any,
) -> training.NetworkRecord:
    """`train(system, optimizer, lr, steps, **options)` with its record passed through `relabel` (a system's own
    names: its optimiser, config, rates and extras), and so the record of a failed run (`TrainingError.record`,
    also its `trajectory`) before the error goes on."""
    try:
        record = train(system, optimizer, lr, steps, **options)
    except training.TrainingError as err:
        if err.record is not None:
            err.record = err.trajectory = relabel(err.record)
        raise
    return relabel(record)


# -- the limits --------------------------------------------------------------------------------------------------


def _rates(system: System, params: dict) -> dict | None:
    """The clock of every parameter leaf from `rate_scale` (a pytree like `params`), or `None`."""
    scale = system.rate_scale
    if not scale:
        return None
    return {g: jax.tree_util.tree_map(lambda _, g=g: scale.get(g, 1.0), params[g]) for g in params}


def limit_problem(
    system: System,
    optimizer: str = "gd",
    optim_args: dict | None = None,
    *,
    seed: int | None = None,
    y0: dict | None = None,
) -> tuple[Limit, dict, dict]:
    """(limit, args, params0) of `solve_flow(system, optimizer=...)`: the `flows.optim_limits.Limit` of
    `optimizer` on `System.loss` over the full data, its args (the data as `args["batch"]`, the rates, the
    groups' clocks from `rate_scale`) and the initial parameters (`System.init`, or `y0`).

    **Arguments:** `optimizer` and `optim_args` as in `flows.optim_limits.limit_problem` (`"gd"`, `"momentum"`
    `{"lr", "beta"}`, `"sign"` `{"eps"}` (default `System.sign_eps`), `"adam"` `{"lr", "b1", "b2", "eps"}` or
    `{"c1", "c2", "eps"}`); `seed` as in `train`; `y0` a parameter dict to start from.

    **Raises:** `ValueError` naming a bad argument.
    """
    system = _check_system(system)
    keys = system.keys(seed)
    params = system.initial_params(keys["init"])
    if y0 is not None:
        params = params_like(y0, params)
    data = system.dataset(keys["data"])
    limit, args = optimizer_limit(
        system.loss, optimizer, optim_args, data, rates=_rates(system, params), sign_eps=system.sign_eps
    )
    return limit, args, params


@functools.lru_cache(maxsize=64)
def _observer(observe, loss):
    """`System.observables` as a function of the spec's `observe` and `loss` (one object for every system with
    the same functions, so that `flows.solve` compiles once for them: a system per learning rate, say)."""

    def observables(params, data):
        return {"loss": loss(params, data)} if observe is None else dict(observe(params, data))

    return observables


@functools.lru_cache(maxsize=64)
def _limit_observe(observe, params_of):
    """The observables of a state of an optimiser limit: `observe(params_of(y), args["batch"])` (one function
    per pair, so that `flows.solve` compiles once)."""

    def observables(t, y, args):
        return observe(params_of(y), args["batch"])

    return observables


@functools.lru_cache(maxsize=64)
def _reduced_field(vector_field):
    def field(t, y, args):
        return vector_field(t, y, args["field"])

    return field


@functools.lru_cache(maxsize=64)
def _reduced_observe(own, to_params, observe):
    def observables(t, y, args):
        if own is not None:
            return own(t, y, args["field"])
        return observe(to_params(y), args["data"])

    return observables


def _check_ts(ts: Any) -> np.ndarray:
    ts = real_array("ts", ts)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    return ts


def check_optim_args(optimizer: str | None, optim_args: dict | None) -> None:
    """`solve_flow` without an `optimizer` (a system's own flow) takes no `optim_args` (a `ValueError`)."""
    if optimizer is None and optim_args is not None:
        raise ValueError("optim_args needs an optimizer ('gd', 'momentum', 'sign' or 'adam')")


def solve_flow(
    system: System,
    ts: Any,
    optimizer: str | None = None,
    optim_args: dict | None = None,
    *,
    reduced: str | None = None,
    seed: int | None = None,
    noise: bool = False,
    batch_size: int | None = None,
    y0: Any = None,
    **options: Any,
) -> Trajectory:
    """Integrate the limit of `system` trained by `optimizer`, from `System.init`, saving at `ts`.

    **Arguments:**

    - `system`: the `flows.System`; `ts`: non-decreasing save times from 0 (the horizon is `ts[-1]`), on the
      clock of `train` (module docstring).
    - `optimizer`, `optim_args`: the optimiser whose limit is solved, `flows.optim_limits.limit_problem`'s
      names: `"gd"` (gradient flow), `"momentum"` (`{"lr", "beta"}`: the heavy-ball ODE), `"sign"` (`{"eps"}`,
      default `System.sign_eps`), `"adam"` (`{"lr", "b1", "b2", "eps"}` or `{"c1", "c2", "eps"}`). `None`
      (the default) is the system's own flow, `"gd"`, and takes no `optim_args` (a `ValueError` naming them)
      except with `noise=True` (the SGD SDE). The systems' `solve_flow` forward these two keywords here,
      where they are defined and checked.
    - `reduced`: the name of one of `System.reduced` (then `optimizer` is `"gd"` and `noise` False): that
      limit, from `Reduced.initial` of the initial parameters (or from the state `y0`).
    - `noise`: `True` solves the SDE of minibatch training (`flows.optim_limits.noise`) with
      `flows.solve_sde` (Euler-Maruyama): for `optimizer="gd"` (or `"sgd"`) the SGD SDE
      d theta = -grad L dt + sqrt(lr c / B) G dW (`optim_args` `{"lr"}` required, `{"replacement"}`
      optional; `batch_size` required) on the clock t = lr * step; for `"adam"` the Adam SDE of Malladi et
      al. 2022 (`optim_args` `{"c1", "c2", "sigma0", "eps0"}`, those of `flows.optim_limits.adam_sde`) on
      its clock t = lr^2 * step. The noise is computed over the rows of the data (`System.rows`); its
      Brownian motion is the `"noise"` stream of `seed`.
    - `seed`: as in `train` (`None`: the system's own); `y0`: a parameter dict to start from (a reduced state
      with `reduced`).
    - `options`: `flows.solve` keywords (`solver`, `rtol`, `atol`, `max_steps`, `save_states`, `throw`, ...)
      over `System.solver` and `Reduced.solver`; with `noise=True` those of `flows.solve_sde` (`dt`, default
      lr / 10 for SGD and required for Adam; `num_paths`, `solver`, `brownian`, `save_states`, `throw`).

    **Returns:** a `flows.Trajectory` whose `observables` are `System.observe`'s at the parameters of each
    saved state (a reduced limit's: its own `observe`, or the system's at `to_params`).

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed solve.
    """
    system = _check_system(system)
    ts = _check_ts(ts)
    noise = check_bool("noise", noise)
    if not noise:  # the SGD SDE of "gd" (optimizer None) takes optim_args {"lr"}
        check_optim_args(optimizer, optim_args)
        # the options reach flows.solve through every system's solve_flow: a typo is named here, with what
        # solve_flow takes, not as an unexpected keyword of a function the user did not call
        check_options("options", options, SOLVE_KEYWORDS, "solve_flow (the flows.solve keywords)")
    optimizer = "gd" if optimizer is None else optimizer
    if reduced is not None:
        return _solve_reduced(system, ts, optimizer, optim_args, reduced, seed, noise, batch_size, y0, options)
    if noise:
        return solve_noise(system, ts, optimizer, optim_args, seed=seed, batch_size=batch_size, y0=y0, **options)
    if batch_size is not None:
        raise ValueError("batch_size is for noise=True (the SGD SDE); the ODE limits are full batch")
    optimizer = check_choice("optimizer", optimizer, LIMITS)
    limit, args, params = limit_problem(system, optimizer, optim_args, seed=seed, y0=y0)
    return solve(
        limit.vector_field,
        limit.initial_state(params),
        t1=float(ts[-1]),
        ts=ts,
        args=args,
        observables=_limit_observe(_observer(system.observe, system.loss), limit.params),
        **{**system.solver, **options},
    )


def _solve_reduced(system, ts, optimizer, optim_args, name, seed, noise, batch_size, y0, options):
    if not system.reduced:
        raise ValueError(f"reduced: system {system.name!r} has no reduced limits")
    check_choice("reduced", name, tuple(system.reduced))
    if optimizer != "gd" or optim_args or noise or batch_size is not None:
        raise ValueError(
            f"reduced={name!r} is the gradient flow of its own state: optimizer must be 'gd', with no "
            "optim_args, noise or batch_size (the other limits run on the full parameters: reduced=None)"
        )
    red = system.reduced[name]
    keys = system.keys(seed)
    data = system.dataset(keys["data"])
    state = red.initial(system.initial_params(keys["init"]), data) if y0 is None else y0
    return solve(
        _reduced_field(red.vector_field),
        state,
        t1=float(ts[-1]),
        ts=ts,
        args={"field": red.field_args(data), "data": data},
        observables=_reduced_observe(red.observe, red.to_params, _observer(system.observe, system.loss))
        if red.observe is not None or red.to_params is not None
        else None,
        **{**system.solver, **red.solver, **options},
    )
