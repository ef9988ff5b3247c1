"""Training the linear-attention networks (`model`) with optax through the shared training layer.

Three kinds of data, one loop (`flows.training.training_program`):

- `batch_size=None`, `sample_size=None`: the exact population loss (`model.moment_loss`, infinitely many
  prompts): GD is then the explicit Euler discretisation of the population gradient flow d theta/dt = -grad L
  (ZFB eq. 3.9) with t = lr * step, and differs from the flow only by the step;
- `batch_size=B`, `sample_size=None`: online SGD, B fresh prompts every step;
- `sample_size=n`: a fixed training set of n prompts (ZSLS's public code trains this way), full batch or
  minibatches of `batch_size` drawn without replacement each step.

The loss is ZFB's (1/2) E[(y_hat - y_q)^2] (eq. 3.7); the clock is the shared `flows.training.flow_time`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .. import driver, training
from .._checks import INT_MAX, check_choice, check_int
from ..training import NetworkRecord
from .data import Config
from .spec import system, with_seed_init

__all__ = ["NetworkRecord", "groups", "train", "with_seed_init"]


def groups(config: Config) -> tuple[str, ...]:
    """The parameter groups of `config.form` (the keys of a per-group `lr`).

    **Arguments:** `config`: the `Config`.

    **Returns:** `("W_PV", "W_KQ")` for the single and merged forms, `("W_PV", "W_K", "W_Q")` for separate heads.
    """
    return ("W_PV", "W_K", "W_Q") if config.form == "separate" else ("W_PV", "W_KQ")


def train(
    config: Config,
    optimizer: str = "gd",
    lr: float | dict[str, float] = 0.01,
    steps: int = 1000,
    *,
    batch_size: int | None = None,
    sample_size: int | None = None,
    save_every: int = 10,
    save_steps: Sequence[int] | np.ndarray | None = None,
    momentum: float | None = None,
    seed: int | None = None,
    init: str | None = None,
) -> NetworkRecord:
    """Train the network of `config.form` from `model.init_params(config)` and record the observables: the
    shared driver `flows.train` on `spec.system(config, sample_size)`.

    **Arguments:**

    - `config`: the `Config` (data, form, initialisation).
    - `optimizer`: `"gd"` (`optax.sgd` on the full batch: the population loss, or the whole fixed sample),
      `"sgd"` (`optax.sgd` on `batch_size` prompts per step, or full batch without it; heavy-ball `momentum`
      beta in [0, 1), time t = lr * step / (1 - beta)) or `"adam"` (`optax.adam`, t = lr * step).
    - `lr` (> 0): one rate, or one per parameter group (`groups(config)`; the clock runs at the largest).
    - `steps` (>= 1); `save_every` (record every k steps) or `save_steps` (explicit step numbers).
    - `batch_size`: `None` (full batch) or B >= 1: fresh prompts every step (online), or a minibatch of the
      fixed sample when `sample_size` is given (B <= `sample_size`).
    - `sample_size`: `None` (no fixed sample: the population loss, or online prompts) or n >= 1 prompts drawn
      once from `config.key("data")`.
    - `seed`, `init`: override `config.seed` and `config.init`, as in every system.

    **Returns:** a `flows.training.NetworkRecord` with the observables of `observables.OBSERVABLES`
    (`record.loss` the population loss, `record.G`, `record.alignment`, `record.n_learned`) at the saved steps;
    `extras`: `batch_size`, `sample_size`.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` if the parameters or the observables
    go non-finite (too large an `lr`), with `.record` the saved steps before it.
    """
    config = with_seed_init(config, seed, init)
    check_choice("optimizer", optimizer, training.OPTIMIZERS)
    if sample_size is not None:
        sample_size = check_int("sample_size", sample_size, 1)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, 1, sample_size or INT_MAX)
    name, optim_args = training.heavy_ball_args(optimizer, momentum)

    def as_here(record):  # the optimiser by this function's names, the extras of this system
        extras = {"batch_size": batch_size, "sample_size": sample_size}
        return dataclasses.replace(record, optimizer=optimizer, extras=extras)

    options = dict(save_every=save_every, save_steps=save_steps, batch_size=batch_size, optim_args=optim_args)
    return driver.train_relabelled(as_here, system(config, sample_size), name, lr, steps, **options)
