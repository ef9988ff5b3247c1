"""Word co-occurrence as a `flows.System`: the spec that `train` and `solve_flow` (below) run on the shared driver
(`flows.train`, `flows.solve_flow`, `flows.compare`).

- `init`: the parameters `{W, W_V, W_K, W_Q}` of `network.init_params` of the config re-seeded by the driver's
  seed (the `"init"` stream is the config; its numpy generator `rng("init")` draws them).
- `loss(params, batch)`: the logistic loss (1/n) sum_i log(1 + exp(-y_i F_i)) of eq. (1) over the batch's rows.
- `data`: `data(config)`, the training set, fresh test draws, sqrt(m), m1 and the fixed output signs `a` (drawn
  with the initialisation); `rows = ("tokens", "labels")`: SGD draws training samples, the rest is held whole.
- `observe`: `observables.observe` of the Grams of the parameters (`observables.OBSERVABLES`).
- `reduced`: `"gram"` (the exact Gram flow, `flow.gram_limit`), `"three_token"` and `"phase2"` (the generated
  reduced systems, `reduced.three_token_limit`, `reduced.phase2_limit`).

Seeds: the config's streams, as before the driver: data and initialisation from `config.rng("data")`,
`rng("init")`, test draws from `rng("test")`; the minibatches from the init key of `config.keys()` folded with
1 (or `PRNGKey(batch_seed)`), the SDE's Brownian motion from `jax.random.key(seed)`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import driver, training
from .._checks import check_bool, check_choice, check_int, real_array
from ..system import System
from ..trajectory import Trajectory
from . import observables as obs
from .data import Config, num_random_slots, sample_test, training_set
from .flow import GRAM_STATE, SOLVER, T1_EVENTS, gram_limit
from .network import init_params, network_loss
from .reduced import phase2_limit, three_token_limit

__all__ = ["REDUCED", "data", "demo", "loss", "observe", "solve_flow", "system", "train", "with_seed_init"]

#: the named limits of the spec (`solve_flow(reduced=...)`): their state shapes, `None` for the Gram dict.
REDUCED = {"gram": None, "three_token": (40,), "phase2": (4,)}


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords of
    `train` and `solve_flow` (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


def data(config: Config, num_test: int = 600) -> dict[str, Any]:
    """The spec's data: what the loss, the observables and the Gram flow read.

    **Returns:** `tokens (n, L)` int, `labels (n,)`, `group_onehot (n, 4)` of `training_set(config)`;
    `test_tokens (num_test, L)`, `test_labels` of `sample_test(config, num_test)`; `sqrt_m`, `m1` as arrays
    (traced: new values do not recompile); `a (m1,)` the fixed output signs of `network.init_params(config)`.

    **Raises:** `ValueError` naming `num_test` (>= 1).
    """
    check_int("num_test", num_test, 1)
    dtype = jnp.result_type(float)
    train, test = training_set(config), sample_test(config, num_test)
    return {
        "tokens": train.tokens,
        "labels": jnp.asarray(train.labels, dtype),
        "group_onehot": train.group_onehot(dtype),
        "test_tokens": test.tokens,
        "test_labels": jnp.asarray(test.labels, dtype),
        "sqrt_m": jnp.asarray(math.sqrt(config.m), dtype),
        "m1": jnp.asarray(float(config.m1), dtype),
        "a": init_params(config)[1],
    }


def loss(params: dict[str, jax.Array], batch: dict[str, Any]) -> jax.Array:
    """The logistic loss of eq. (1) on the batch's `tokens`, `labels` with the signs `batch["a"]`."""
    return network_loss(params, batch["a"], batch["tokens"], batch["labels"])


def observe(params: dict[str, jax.Array], data: dict[str, Any]) -> dict[str, jax.Array]:
    """`observables.observe` of the Grams of the parameters on the data."""
    return obs.observe(0.0, obs.gram_state(params, data["a"]), data)


def _init(config: Config) -> dict[str, jax.Array]:
    return init_params(config)[0]


def _streams(config: Config, batch_seed: int | None, seed: int) -> dict[str, Any]:
    config = config.replace(seed=seed)
    init_key = config.keys()[1]
    batch = jax.random.fold_in(init_key, 1) if batch_seed is None else jax.random.PRNGKey(batch_seed)
    return {"init": config, "data": config, "batch": batch, "noise": jax.random.key(seed)}


@functools.lru_cache(maxsize=32)
def _system(config: Config, num_test: int, batch_seed: int | None) -> System:
    return System(
        name="cooccurrence",
        init=_init,
        loss=loss,
        data=functools.partial(data, num_test=num_test),
        observe=observe,
        rows=("tokens", "labels"),
        reduced={"gram": gram_limit(config), "three_token": three_token_limit(config), "phase2": phase2_limit(config)},
        seed=config.seed,
        streams=functools.partial(_streams, config, batch_seed),
        solver=SOLVER,
        config=config,
    )


def system(config: Config, num_test: int = 600, batch_seed: int | None = None) -> System:
    """The `flows.System` of `config` (module docstring).

    **Arguments:**

    - `config`: the `Config` (data, sizes, initialisation, seed).
    - `num_test` (>= 1): the fresh test draws of the `test_loss` observable.
    - `batch_seed`: seeds the minibatch order, separately from the data and initialisation (`None`: a
      stream derived from the seed).

    **Returns:** the `flows.System` (the same object for the same arguments).

    **Raises:** `ValueError` naming a bad argument.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a cooccurrence.Config, got {type(config).__name__}")
    num_test = check_int("num_test", num_test, 1)
    if batch_seed is not None:
        batch_seed = check_int("batch_seed", batch_seed, 0, 2**32 - 1)
    return _system(config, num_test, batch_seed)


def train(
    config: Config,
    optimizer: str = "gd",
    lr: float | dict = 0.01,
    steps: int = 1000,
    batch_size: int | None = None,
    save_every: int = 10,
    *,
    save_steps: Any = None,
    momentum: float | None = None,
    num_test: int = 600,
    batch_seed: int | None = None,
    seed: int | None = None,
    init: str | None = None,
) -> training.NetworkRecord:
    """Train eq. (1) from `network.init_params(config)` on `training_set(config)` and record the observables:
    the shared driver `flows.train` on `system(config, num_test, batch_seed)`.

    **Arguments:**

    - `optimizer`: `"gd"` (full-batch `optax.sgd`, the Euler discretisation of the gradient flow with time
      t = lr * step), `"sgd"` (minibatches of `batch_size` drawn without replacement each step, optional
      heavy-ball `momentum` beta in [0, 1): time t = lr * step / (1 - beta)) or `"adam"` (`optax.adam`, full
      batch unless `batch_size`; time t = lr * step). `momentum` is for `"sgd"` only (ValueError otherwise).
    - `lr` (> 0): one rate, or a dict of one per parameter group `{"W", "W_V", "W_K", "W_Q"}` (the clock
      `ts` then uses the largest of them; `solve_flow` is the flow of one common rate).
    - `steps` (>= 1), `save_every` (record every k steps) or `save_steps` (explicit step numbers, e.g.
      log-spaced; step 0 is always recorded).
    - `num_test`, `batch_seed`: as in `system`; `seed`, `init`: override `config.seed` (data, initialisation,
      test draws) and `config.init` (`None`: the config's), as the same keywords of `solve_flow`.

    **Returns:** a `flows.training.NetworkRecord` (`extras`: `batch_size`, `a` the fixed signs), observables
    on the full training set at every saved step.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` at the first non-finite step, with
    `.record` the saved steps before it.
    """
    config = with_seed_init(config, seed, init)
    check_choice("optimizer", optimizer, training.OPTIMIZERS)
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("batch_size must be given for optimizer='sgd' (use 'gd' for full batch)")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("batch_size must be None for optimizer='gd' (full batch)")
    name, optim_args = training.heavy_ball_args(optimizer, momentum)
    spec = system(config, num_test, batch_seed)

    def as_here(record):  # the optimiser by this function's names, the extras of this system
        extras = {"batch_size": batch_size, "a": init_params(config)[1]}
        return dataclasses.replace(record, optimizer=optimizer, extras=extras)

    options = dict(save_every=save_every, save_steps=save_steps, batch_size=batch_size, optim_args=optim_args)
    return driver.train_relabelled(as_here, spec, name, lr, steps, **options)


def _check_y0(reduced: str | None, y0: Any) -> Any:
    if y0 is None or reduced is None:  # the parameters: checked by the driver
        return y0
    if reduced == "gram":
        if not isinstance(y0, dict) or set(y0) != set(GRAM_STATE):
            got = sorted(y0) if isinstance(y0, dict) else type(y0).__name__
            raise ValueError(
                f"y0 must be a Gram state, a dict with the keys {GRAM_STATE} (see initial_state), got {got}"
            )
        return {k: jnp.asarray(real_array(f"y0[{k!r}]", y0[k])) for k in GRAM_STATE}
    y0 = real_array("y0", y0)
    if y0.shape != REDUCED[reduced]:
        raise ValueError(f"y0 must have the shape {REDUCED[reduced]} of the {reduced!r} state, got {y0.shape}")
    return jnp.asarray(y0)


def solve_flow(
    config: Config,
    ts: Any,
    *,
    reduced: str | None = None,
    y0: Any = None,
    seed: int | None = None,
    init: str | None = None,
    num_test: int = 600,
    locate_T1: bool = True,
    **options: Any,
) -> Trajectory:
    """Integrate a limit of `config` from the initialisation of `train(config, ...)` (same seed) on the shared
    driver (`flows.solve_flow(system(config, num_test), ...)`).

    **Arguments:**

    - `ts`: non-decreasing save times from 0 (e.g. `flows.log_grid`); the horizon is `ts[-1]`.
    - `reduced`: `"gram"` (the default when neither `reduced` nor `optimizer` is given) integrates the exact
      Gram ODE (`flow.vector_field`); `"three_token"`, `"phase2"` the generated reduced systems (`reduced`).
      `optimizer="gd"`, `"momentum"`, `"sign"`, `"adam"` (with `optim_args`) integrates that optimiser's
      limit on the parameters (W, W_V, W_K, W_Q) instead (only gradient flow closes on the Grams; `"gd"` is
      the same flow as `"gram"`, in the parameters).
    - `y0`: the start: a Gram state (dict of `flow.GRAM_STATE`), a `(40,)` or `(4,)` reduced state, or a
      parameter dict with an optimizer (default: the initialisation's).
    - `locate_T1`: for the Gram flow and the optimiser limits, also find T1 = the first time with zero training
      error (min_i y_i F_i crossing 0 upwards) by a root-finding `flows.Event(stop=False)` in the same solve;
      it is returned as `traj.t_event` (`nan` if there is none before `ts[-1]`, `0.0` if the error is already
      zero at t=0).
    - `seed`, `init`: override `config.seed`, `config.init` (`None`: the config's), as in `train`;
      `num_test`: as in `system`.
    - `options`: keywords of the shared driver `flows.solve_flow`, which defines and checks them (`optimizer`,
      `optim_args`: `flows.optim_limits.limit_problem`'s names; `noise`, `batch_size`), and of `flows.solve`
      (default `flow.SOLVER`: auto, rtol 1e-8, atol 1e-10, max_steps from the horizon, observables only).

    **Returns:** a `Trajectory` with `observables` named as in `observables.OBSERVABLES` (`loss`,
    `group_loss (k, 4)`, `train_error`, `test_loss`, `G (k, 3)`, `S`, `A (k, 3, 3)`, `M_V (k, 3, 3)`, `p12`,
    `group_g (k, 4)`, `balance_ratio`, `R`, `min_margin`); the reduced systems' own (`reduced`).

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed solve.
    """
    config = with_seed_init(config, seed, init)
    spec = system(config, num_test)
    if reduced is None and options.get("optimizer") is None:
        reduced = "gram"
    if reduced is not None:
        reduced = check_choice("reduced", reduced, tuple(REDUCED))
    y0 = _check_y0(reduced, y0)
    locate_T1 = check_bool("locate_T1", locate_T1) and reduced in T1_EVENTS
    if locate_T1:
        options["event"] = T1_EVENTS[reduced]
    traj = driver.solve_flow(spec, ts, reduced=reduced, y0=y0, **options)
    if locate_T1 and float(np.asarray(traj.observables["min_margin"])[0]) > 0:
        # zero training error already at t = 0 (ts[0] = 0): T1 = 0, whatever the margin does later
        traj = dataclasses.replace(traj, t_event=0.0)
    return traj


def demo() -> System:
    """A small instance for the tests that run over every spec (`flows.registry`): n = 6, L = 3, m = 4, m1 = 2."""
    return system(Config(n=6, L=3, d=3 + num_random_slots(6, 3), m=4, m1=2, seed=3), num_test=4)
