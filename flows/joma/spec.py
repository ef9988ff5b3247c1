"""JoMA as a `flows.System`: the spec that `train` and `solve_flow` (below) run on the shared driver
(`flows.train`, `flows.solve_flow`, `flows.compare`). Conventions: docs/systems/joma.md.

- `init`: `model.init_params` of the config re-seeded by the driver's seed (its `"init"` stream), or a given
  start `params0`.
- `loss(params, batch)`: `model.make_loss(attention, mlp)`, the mean cross-entropy over the batch's classes.
- `data`: `model.observe_data(config, params0)`: the full batch (one row per class, `data.ROWS` = ("x", "y")),
  the embedding, the temperature, and the invariant's constant at the start, which `z_estimate_corr` and
  `invariant_gap` read (so the data is built from the start: a new start is a new system, `system(config,
  params0)`).
- `sample`: the default, classes drawn without replacement (minibatch SGD over the classes; the full batch is
  the population).
- `observe`: `model.make_observe(attention, mlp)` (`loss`, `entropy`, `z_estimate_corr`, `z_estimate_slope`, and
  `invariant_gap` for exp and linear attention).
- `reduced`: `"w_flow"`, the flow of W alone with the invariant substituted (`flow.reduced_field`): exact for
  exp attention and for linear attention from a start with c > 0, approximate for softmax.
- `predictions(trajectory)`: for exp and linear attention, the invariant exact along the flow.

Seeds: the config's streams (`Config.key`): the data and the start from the config re-seeded by the driver's
seed, the minibatches from its `"batch"` key, an SDE's Brownian motion from its `"noise"` key.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from .. import driver
from ..system import Params, Reduced, System, params_like
from ..training import NetworkRecord
from ..trajectory import Trajectory
from . import flow, model
from .data import ROWS, Config

__all__ = ["INVARIANT_TOL", "REDUCED", "SOLVER", "demo", "solve_flow", "system", "train"]


#: the named limits of the spec
REDUCED = ("w_flow",)
#: the default options of the solves of this system (tight: the invariant is held to `INVARIANT_TOL`)
SOLVER = {"solver": "auto", "rtol": 1e-10, "atol": 1e-12}
#: the largest invariant gap along a flow for which the exact invariants count as held
INVARIANT_TOL = 1e-8


def _check_config(config: Any) -> Config:
    if not isinstance(config, Config):
        raise ValueError(f"config must be a joma.Config, got {type(config).__name__}")
    return config


def _streams(config: Config, seed: int) -> dict[str, Any]:
    config = config.replace(seed=seed)
    return {"init": config, "data": config, "batch": config.key("batch"), "noise": config.key("noise")}


def _start(params0: Params, config: Config) -> Params:
    return params0


def _data(params0: Params | None, config: Config) -> dict[str, jax.Array]:
    return model.observe_data(config, params0)


def _field_args(data: dict) -> dict:
    return data


@functools.cache
def _initial(attention: str):
    def initial(params: Params, data: dict) -> jax.Array:
        flow.check_branch(data, attention)
        return params["W"]

    return initial


def _predictions(trajectory: Trajectory) -> dict:
    """The exact invariant along a flow (exp and linear attention): max_t `invariant_gap` < `INVARIANT_TOL`."""
    gap = trajectory.observables.get("invariant_gap")
    if gap is None:
        return {}
    measured = float(np.max(np.asarray(gap)))
    return {
        "invariant_exact_along_flow": {
            "measured": measured,
            "expected": f"max_t invariant_gap < {INVARIANT_TOL:g} (Theorem 1: exact along the gradient flow)",
            "holds": bool(measured < INVARIANT_TOL),
        }
    }


def _build(config: Config, params0: Params | None) -> System:
    attention, mlp = config.attention, config.mlp
    w_flow = Reduced(
        vector_field=flow.reduced_field(attention, mlp),
        initial=_initial(attention),
        args=_field_args,
        observe=flow.reduced_observables(attention, mlp),
        description="JoMA's flow of W alone, z = z(W) from the invariant (Tian et al. 2024, Theorem 1)",
    )
    return System(
        name="joma",
        init=model.init_params if params0 is None else functools.partial(_start, params0),
        loss=model.make_loss(attention, mlp),
        data=functools.partial(_data, params0),
        observe=model.make_observe(attention, mlp),
        rows=ROWS,
        reduced={"w_flow": w_flow},
        predictions=_predictions,
        seed=config.seed,
        streams=functools.partial(_streams, config),
        solver=SOLVER,
        config=config,
    )


@functools.lru_cache(maxsize=32)
def _cached(config: Config) -> System:
    return _build(config, None)


def system(config: Config, params0: Params | None = None) -> System:
    """The `flows.System` of `config` (module docstring).

    **Arguments:**

    - `config`: the `Config` (data, attention variant, MLP, initialisation, seed).
    - `params0`: the start `{"W": (d, K), "z": (M_C,)}` (default `model.init_params` of the config re-seeded by
      the driver's seed); the invariant's constant of the observables is taken there.

    **Returns:** the `flows.System` (the same object for the same config without `params0`).

    **Raises:** `ValueError` naming a bad argument.
    """
    config = _check_config(config)
    if params0 is None:
        return _cached(config)
    try:
        params0 = params_like(params0, model.init_params(config))
    except ValueError as err:
        raise ValueError(f"params0: {err}") from None
    return _build(config, params0)


def train(
    config: Config,
    optimizer: str = "gd",
    lr: float | dict = 0.1,
    steps: int = 2000,
    *,
    params0: Params | None = None,
    **options: Any,
) -> NetworkRecord:
    """Train the JoMA network of `config` on the shared driver: `flows.train(system(config, params0), ...)`
    (defaults: the official Fig. 2/3 run, full-batch GD at lr 0.1 for 2000 steps).

    **Arguments:** `optimizer` (`"gd"`, `"sgd"` with `batch_size` classes per step, `"momentum"`, `"adam"`),
    `lr`, `steps`; `params0` the start; `options`: keywords of the shared driver `flows.train`, which defines
    and checks them (`save_every`, default 10, `save_steps`, `seed`, `batch_size`, `optim_args`, ...).

    **Returns:** a `flows.training.NetworkRecord` with the observables of `model.OBSERVABLES` on the clock
    t = lr * step.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` at the first non-finite step.
    """
    return driver.train(system(config, params0), optimizer, lr, steps, **options)


def solve_flow(
    config: Config, ts: Any, *, reduced: str | None = None, params0: Params | None = None, **options: Any
) -> Trajectory:
    """Integrate a limit of the JoMA network of `config` on the shared driver:
    `flows.solve_flow(system(config, params0), ts, ...)`.

    - The joint flow (`reduced=None`): (W, z) under -grad of the loss by autodiff, or the limit of `optimizer`
      (`"momentum"`, `"sign"`, `"adam"` with `optim_args`; `noise=True` the SGD SDE over the classes, with
      `optim_args={"lr": ...}` and `batch_size`).
    - `reduced="w_flow"`: the flow of W alone from W0, z = z(W) from the invariant with the constant of the start
      (exact for exp, and for linear attention when c > 0; approximate for softmax).
    - `ts`: non-decreasing save times from 0 on the clock t = lr * step of `train`; `params0`: the start
      (default the config's); `options`: keywords of the shared driver `flows.solve_flow`, which defines and
      checks them (`optimizer`, `optim_args`, `seed`, `noise`, `batch_size`), and of `flows.solve` over
      `SOLVER` (auto, rtol 1e-10, atol 1e-12).

    **Returns:** a `Trajectory` with the observables of `train`'s record (states: the parameters, or W).

    **Raises:** `ValueError` naming a bad argument (a linear-attention start with c <= 0 for `"w_flow"`);
    `flows.FlowError` for a failed solve.
    """
    if "y0" in options:
        raise ValueError("y0: give the start as params0 (the invariant's constant is taken there)")
    return driver.solve_flow(system(config, params0), ts, reduced=reduced, **options)


def demo() -> System:
    """A small instance for the tests that run over every spec (`flows.registry`): linear attention (whose
    bilinear z V blows up under a large step, as the tests need), 2 + 2 tokens, 4 classes."""
    return system(Config(attention="linear", n_distinct=2, n_common=2, n_classes=4, d=6, init_scale=0.3))
