"""Linear attention as a `flows.System`: the spec that `network.train` and `solve_flow` (below) run on the shared
driver (`flows.train`, `flows.solve_flow`, `flows.compare`).

- `init`: `model.init_params` of the config re-seeded by the driver's seed (the `"init"` stream is the config;
  its numpy generator `rng("init")` draws the parameters).
- `loss(params, batch)`: ZFB's (1/2) E[(y_hat - y_q)^2] (eq. 3.7): the exact population loss
  (`model.moment_loss`) on the population statistics, or the empirical loss of the batch's `"prompts"`.
- `data`: the population statistics (`observables.data_args` and Lambda^{1/2}), with `sample_size=n` also a
  fixed set of n prompts drawn from the `"data"` key of the config (`rows = ("prompts",)`).
- `sample`: online, `batch_size` fresh prompts per step (`data.draw`); with a fixed sample, rows of it drawn
  without replacement (the default sampler).
- `observe`: `observables.observe` (loss, G, alignment, n_learned).
- `reduced`: `"zfb"` and `"separate"` (`flow.reduced_limit`).

Seeds: the config's streams, as before the driver: prompts of a fixed sample from `config.key("data")`, the
online or minibatch key `config.key("data")` (folded with 1 after a fixed sample was drawn from it), the SDE's
Brownian motion from `config.key("test")`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from .. import driver, training
from .._checks import check_choice, check_int
from ..system import System
from ..trajectory import Trajectory
from . import model
from . import observables as obs
from .data import Config, draw, sample, sqrt_covariance
from .flow import REDUCED, SOLVER, initial_reduced_state, reduced_limit

__all__ = ["demo", "limit_problem", "loss", "observe", "solve_flow", "system", "with_seed_init"]


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords of
    `train` and `solve_flow` (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


def loss(params: dict[str, jax.Array], batch: dict[str, Any]) -> jax.Array:
    """(1/2) E[(y_hat - y_q)^2] (ZFB eq. 3.7): over the batch's `"prompts"` when it has them, else the exact
    population loss (eq. 3.8) of the statistics `"lam"`, `"N"` (`model.moment_loss`)."""
    if "prompts" in batch:
        prompts = batch["prompts"]
        return 0.5 * jnp.mean((model.predict(params, None, prompts) - prompts.yq) ** 2)
    lam = batch["lam"]
    return model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), batch["N"])


def observe(params: dict[str, jax.Array], data: dict[str, Any]) -> dict[str, jax.Array]:
    """`observables.observe` of the parameters on the population statistics in `data`."""
    return obs.observe(0.0, params, data)


@functools.cache
def _fresh(N: int):
    """The online sampler of prompts of length N (one function per N: one compiled loop per shape)."""

    def fresh(key, data, batch_size):
        return {**data, "prompts": draw(key, batch_size, N, data["root"])}

    return fresh


def _statistics(config: Config) -> dict[str, Any]:
    return {**obs.data_args(config), "root": sqrt_covariance(config)}


def _with_sample(sample_size: int, config: Config) -> dict[str, Any]:
    return {**_statistics(config), "prompts": sample(config, config.key("data"), sample_size)}


def _streams(config: Config, sample_size: int | None, seed: int) -> dict[str, Any]:
    config = config.replace(seed=seed)
    key = config.key("data")
    return {
        "init": config,
        "data": config,
        "batch": key if sample_size is None else jax.random.fold_in(key, 1),
        "noise": config.key("test"),
    }


@functools.lru_cache(maxsize=32)
def _system(config: Config, sample_size: int | None) -> System:
    return System(
        name="linear_attention",
        init=model.init_params,
        loss=loss,
        data=_statistics(config) if sample_size is None else functools.partial(_with_sample, sample_size),
        observe=observe,
        sample=_fresh(config.N) if sample_size is None else None,
        rows=None if sample_size is None else ("prompts",),
        reduced={name: reduced_limit(config, name) for name in REDUCED},
        seed=config.seed,
        streams=functools.partial(_streams, config, sample_size),
        solver=SOLVER,
        config=config,
    )


def system(config: Config, sample_size: int | None = None) -> System:
    """The `flows.System` of `config` (module docstring).

    **Arguments:**

    - `config`: the `Config` (data, form, initialisation, seed).
    - `sample_size`: `None` (the population loss; `batch_size` trains on fresh prompts every step) or n >= 1
      (a fixed training set of n prompts; `batch_size` draws minibatches of it without replacement).

    **Returns:** the `flows.System` (the same object for the same arguments).

    **Raises:** `ValueError` naming a bad argument.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a linear_attention.Config, got {type(config).__name__}")
    if sample_size is not None:
        sample_size = check_int("sample_size", sample_size, 1)
    return _system(config, sample_size)


def limit_problem(
    config: Config, optimizer: str, optim_args: dict | None = None, *, y0: dict | None = None
) -> tuple[Any, dict, dict[str, jax.Array]]:
    """(limit, limit_args, params0) of `solve_flow(optimizer=...)`: `flows.driver.limit_problem` of
    `system(config)` (the limit of `optimizer` on the exact population loss, its args with the statistics as
    `args["batch"]`, and `model.init_params(config)` or `y0`)."""
    return driver.limit_problem(system(config), optimizer, optim_args, y0=y0)


def solve_flow(
    config: Config,
    ts: Any,
    *,
    reduced: str | None = None,
    y0: dict | float | Any | None = None,
    seed: int | None = None,
    init: str | None = None,
    **options: Any,
) -> Trajectory:
    """Integrate the population-loss flow of `config` on the shared driver (`flows.solve_flow(system(config),
    ...)`).

    - The full flow (`reduced=None`): every parameter of `config.form` under -grad of the exact
      `model.population_loss` by autodiff, from `model.init_params(config)` (or the parameter dict `y0`);
      `optimizer="momentum"`, `"sign"`, `"adam"` (with `optim_args`) integrates that optimiser's limit instead
      of gradient flow (`None` or `"gd"`).
    - `reduced="zfb"` (ZFB Lemma 5.2): the generated (u, U) flow from the initial parameters (`form="single"`,
      `init="paper"`, any d); `reduced="separate"` (ZSLS eq 21): one balanced head per
      eigen-direction from s_i = `init_scale` or the scales `y0` (`flow.initial_reduced_state`).
    - `ts`: non-decreasing save times from 0 on the clock t = lr * step of `network.train`.
    - `seed`, `init`: override `config.seed`, `config.init`.
    - `options`: keywords of the shared driver `flows.solve_flow`, which defines and checks them (`optimizer`,
      `optim_args`, `noise`, `batch_size`), and of `flows.solve` (default `flow.SOLVER`: auto, rtol 1e-10,
      atol 1e-12, max_steps from the horizon, observables only).

    **Returns:** a `Trajectory` with the observables of `observables.OBSERVABLES` ("loss", "G" `(k, d, d)`,
    "alignment" `(k, d)`, "n_learned"), as `network.train`'s record.

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed solve.
    """
    config = with_seed_init(config, seed, init)
    if reduced is not None:
        if isinstance(y0, dict):
            raise ValueError(
                "y0 must be the initial scales (a number or (d,) array) with reduced='separate', not a dict"
            )
        reduced = check_choice("reduced", reduced, REDUCED)
        if y0 is not None:
            y0 = initial_reduced_state(config, reduced, y0)
    elif y0 is not None and not isinstance(y0, dict):
        raise ValueError(f"y0 must be a parameter dict of form {config.form!r} for the full flow")
    return driver.solve_flow(system(config), ts, reduced=reduced, y0=y0, **options)


def demo() -> System:
    """A small instance for the tests that run over every spec (`flows.registry`): d = 2, N = 4, one head."""
    return system(Config(d=2, N=4, eigenvalues=(1.0, 0.4)))
