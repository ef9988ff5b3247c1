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

import logging
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import training
from .._checks import check_choice, check_int
from ..training import NetworkRecord
from . import model
from . import observables as obs
from .data import Config, draw, sample, sqrt_covariance

logger = logging.getLogger(__name__)

__all__ = ["NetworkRecord", "groups", "train", "with_seed_init"]


def groups(config: Config) -> tuple[str, ...]:
    """The parameter groups of `config.form` (the keys of a per-group `lr`).

    **Arguments:** `config`: the `Config`.

    **Returns:** `("W_PV", "W_KQ")` for the single and merged forms, `("W_PV", "W_K", "W_Q")` for separate heads.
    """
    return ("W_PV", "W_K", "W_Q") if config.form == "separate" else ("W_PV", "W_KQ")


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords of
    `train` and `solve_flow` (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


def _training_program(mode, batch_size, N, template):
    """The loop of `train`: `mode` is "population", "online" or "sample"."""

    def loss(params, data, batch):
        if mode == "population":
            lam = data["lam"]
            return model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), data["N"])
        prompts = batch if mode == "online" else data["prompts"]
        if mode == "sample" and batch is not None:
            prompts = jax.tree_util.tree_map(lambda a: a[batch], prompts)
        return 0.5 * jnp.mean((model.predict(params, None, prompts) - prompts.yq) ** 2)

    def fresh(data, key, step):
        key, sub = jax.random.split(key)
        return key, draw(sub, batch_size, N, data["root"])

    def minibatch(data, key, step):
        key, sub = jax.random.split(key)
        return key, jax.random.permutation(sub, data["prompts"].yq.shape[0])[:batch_size]

    def observe(params, data):
        return obs.observe(0.0, params, data)

    sampler = None if batch_size is None else fresh if mode == "online" else minibatch
    return training.training_program(loss, observe, template, sample=sampler)


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
    """Train the network of `config.form` from `model.init_params(config)` and record the observables.

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
    names = groups(config)
    lr = training.check_lr(lr, names)
    steps = check_int("steps", steps, 1)
    if sample_size is not None:
        sample_size = check_int("sample_size", sample_size, 1)
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, 1, sample_size or 2**31 - 1)
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("batch_size must be None for optimizer='gd' (full batch); use 'sgd' for minibatches")
    beta = training.check_momentum(optimizer, momentum)
    save = training.save_steps(steps, save_every, save_steps)
    mode = "population" if sample_size is None and batch_size is None else "online" if sample_size is None else "sample"

    params = model.init_params(config)
    labels = {k: k for k in names} if isinstance(lr, dict) else None
    heavy = None if momentum is None else beta
    opt_state = training.make_optimizer(optimizer, lr, heavy, labels=labels).init(params)
    template = training.make_optimizer(
        optimizer, dict.fromkeys(names, 1.0) if labels else 1.0, None if heavy is None else 0.5, labels=labels
    )
    data: dict[str, Any] = {**obs.data_args(config), "root": sqrt_covariance(config)}
    key = config.key("data")
    if sample_size is not None:
        data["prompts"] = sample(config, key, sample_size)
        key = jax.random.fold_in(key, 1)
    structure = (optimizer, mode, batch_size, config.N, heavy is not None, labels is not None)
    final, series, _, _, bad, compile_s, run_s = training.run_training(
        "linear_attention.train",
        structure,
        lambda: _training_program(mode, batch_size, config.N, template),
        params,
        opt_state,
        key,
        save,
        data,
    )
    logger.info("train %s lr=%s steps=%d: compile %.2f s, run %.2f s", optimizer, lr, steps, compile_s, run_s)
    return training.finish(
        save,
        series,
        bad,
        params=final,
        clock=training.clock_rate(lr),
        momentum=beta,
        hint="lower lr",
        optimizer=optimizer,
        lr=dict(lr) if isinstance(lr, dict) else float(lr),
        config=config,
        compile_s=compile_s,
        run_s=run_s,
        extras={"batch_size": batch_size, "sample_size": sample_size},
    )
