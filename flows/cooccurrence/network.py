"""The finite network of Yang et al. 2024, eq. (1), and its training with optax (`flows.training`).

`train` runs full-batch GD, minibatch SGD (optionally with momentum) or Adam in one compiled loop and records
`observables.OBSERVABLES` on the Grams of the parameters. See docs/systems/cooccurrence.md."""

from __future__ import annotations

import functools
import logging
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .. import training
from .._checks import check_choice, check_dtype, check_int
from ..training import NetworkRecord
from . import observables as obs
from .data import Config, Dataset, generator, sample_test, training_set

logger = logging.getLogger(__name__)

__all__ = ["NetworkRecord", "TrainRecord", "data_args", "forward", "init_params", "network_loss", "train"]


def init_params(config: Config, key: Any = None, dtype: Any = None) -> tuple[dict[str, Array], Array]:
    """(params, a): params = {W (m1, m), W_V, W_K, W_Q (m, d)} and the fixed signs a (m1,) in {+-1}.

    `config.init="theory"`: W ~ N(0, sigma1^2), W_V/K/Q ~ N(0, sigma0^2) (Sec. 2.2); `"kaiming"`: kaiming
    normal, std sqrt(2 / fan_in). Drawn with numpy from `config.rng("init")` (or from `key`, see
    `data.generator`): no program to compile.
    """
    rng = generator(config, "init", key)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    std0, std1 = config.init_stds
    m1, m, d = config.m1, config.m, config.d
    a = np.where(rng.random(m1) < 0.5, 1.0, -1.0)
    params = {
        "W": std1 * rng.standard_normal((m1, m)),
        "W_V": std0 * rng.standard_normal((m, d)),
        "W_K": std0 * rng.standard_normal((m, d)),
        "W_Q": std0 * rng.standard_normal((m, d)),
    }
    return {k: jnp.asarray(v, dtype) for k, v in params.items()}, jnp.asarray(a, dtype)


def forward(params: dict[str, Array], a: Array, tokens: Array) -> Array:
    """Eq. (1) for a batch of token-index sequences `tokens (n, L)` -> F `(n,)`."""
    m = params["W_V"].shape[0]
    V = params["W_V"].T[tokens]  # (n, L, m): v(x_h)
    K = params["W_K"].T[tokens]
    Q = params["W_Q"].T[tokens]
    s = jnp.einsum("nhm,nlm->nhl", K, Q) / math.sqrt(m)  # key h, query l
    p = jax.nn.softmax(s, axis=1)
    attended = jnp.einsum("nhl,nhm->nlm", p, V)  # W_V X p_l for every query l
    per_query = jnp.einsum("nlm,jm,j->nl", attended, params["W"], a)  # sum_j a_j w_j^T W_V X p_l
    return jnp.sum(per_query, axis=1)


def network_loss(params: dict[str, Array], a: Array, tokens: Array, labels: Array) -> Array:
    """Logistic loss (1/n) sum_i log(1 + exp(-y_i F_i))."""
    return jnp.mean(jax.nn.softplus(-labels * forward(params, a, tokens)))


def data_args(
    config: Config, train: Dataset | None = None, test: Dataset | None = None, num_test: int = 600, dtype: Any = None
) -> dict:
    """The data dict the observables (and the flow) read: tokens, labels, group indicator, test draws,
    sqrt(m) and m1 as arrays (traced, so new values do not recompile)."""
    dtype = jnp.dtype(check_dtype("dtype", dtype) or jnp.result_type(float))
    check_int("num_test", num_test, 1)
    for name, value in (("train", train), ("test", test)):
        if value is not None and not isinstance(value, Dataset):
            raise ValueError(
                f"{name} must be a Dataset (see training_set, sample_test) or None, got {type(value).__name__}"
            )
    train = training_set(config) if train is None else train
    test = sample_test(config, num_test) if test is None else test
    host = lambda x: jnp.asarray(x, dtype)
    return {
        "tokens": train.tokens,
        "labels": host(train.labels),
        "group_onehot": train.group_onehot(dtype),
        "test_tokens": test.tokens,
        "test_labels": host(test.labels),
        "sqrt_m": jnp.asarray(math.sqrt(config.m), dtype),
        "m1": jnp.asarray(float(config.m1), dtype),
    }


#: the record of `train` (the one record of every system)
TrainRecord = NetworkRecord

#: the keys `data_args` returns and the flow and the observables read
ARGS_KEYS = ("tokens", "labels", "group_onehot", "test_tokens", "test_labels", "sqrt_m", "m1")


def check_keys(name: str, value: Any, keys: tuple, what: str, *, exact: bool = True) -> dict:
    """`value` if it is a dict with exactly the `keys` (`exact=False`: at least them), else a ValueError naming
    `name` and saying `what` the dict is."""
    if not isinstance(value, dict) or not (set(value) == set(keys) if exact else set(keys) <= set(value)):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{name} must be a dict with the keys {keys} ({what}), got {got}")
    return value


def check_args(args: Any) -> dict:
    """`args` if it is a dict with the keys of `data_args` (ValueError naming `args` otherwise)."""
    return check_keys("args", args, ARGS_KEYS, "of data_args", exact=False)


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow`, the same place as in every system (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


_GROUPS = ("W", "W_V", "W_K", "W_Q")


def _training_program(batch_size, a_template):
    """The training loop of `train`: full batch (`batch_size=None`) or minibatches of `batch_size` drawn
    without replacement each step."""

    def loss(params, data, idx):
        tokens, labels = data["tokens"], data["labels"]
        if idx is not None:
            tokens, labels = tokens[idx], labels[idx]
        return network_loss(params, data["a"], tokens, labels)

    def sample(data, key, step):
        key, sub = jax.random.split(key)
        return key, jax.random.permutation(sub, data["tokens"].shape[0])[:batch_size]

    def observe(params, data):
        return obs.observe(0.0, obs.gram_state(params, data["a"]), data)

    return training.training_program(loss, observe, a_template, sample=None if batch_size is None else sample)


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
    args: dict | None = None,
    batch_seed: int | None = None,
    seed: int | None = None,
    init: str | None = None,
) -> NetworkRecord:
    """Train eq. (1) from `init_params(config)` on `training_set(config)` and record the observables.

    **Arguments:**

    - `optimizer`: `"gd"` (full-batch `optax.sgd`, the Euler discretisation of the gradient flow with time
      t = lr * step), `"sgd"` (minibatches of `batch_size` drawn without replacement each step, optional
      heavy-ball `momentum` beta in [0, 1): time t = lr * step / (1 - beta)) or `"adam"` (`optax.adam`, full
      batch unless `batch_size`; time t = lr * step). `momentum` is for `"sgd"` only (ValueError otherwise).
    - `seed`, `init`: override `config.seed` (data, initialisation, test draws) and `config.init`
      (`None`: the config's), as the same keywords of `solve_flow` and of `scan_snap.train`.
    - `batch_seed`: seeds the minibatch order (SGD, or Adam with `batch_size`), separately from the data
      and initialisation (`config.seed`); default `None`: a stream derived from `config.seed`.
    - `lr` (> 0): one rate, or a dict of one per parameter group `{"W", "W_V", "W_K", "W_Q"}` (the clock
      `ts` then uses the largest of them; `solve_flow` is the flow of one common rate).
    - `steps` (>= 1), `save_every` (record every k steps) or `save_steps` (explicit step numbers, e.g.
      log-spaced; step 0 is always recorded).
    - `args`: the data dict of `data_args` (default: built from `config`).

    **Returns:** a `flows.training.NetworkRecord` (`extras`: `batch_size`, `a` the fixed signs), observables
    on the full training set at every saved step.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` at the first non-finite step.
    """
    config = with_seed_init(config, seed, init)
    check_choice("optimizer", optimizer, training.OPTIMIZERS)
    lr = training.check_lr(lr, _GROUPS)
    steps = check_int("steps", steps, 1)
    batch_size = None if batch_size is None else check_int("batch_size", batch_size, 1, config.n)
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("batch_size must be given for optimizer='sgd' (use 'gd' for full batch)")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("batch_size must be None for optimizer='gd' (full batch)")
    beta = training.check_momentum(optimizer, momentum)
    if batch_seed is not None:
        check_int("batch_seed", batch_seed, 0, 2**32 - 1)
    save = training.save_steps(int(steps), save_every, save_steps)
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    params, a = init_params(config)
    labels = {k: k for k in _GROUPS} if isinstance(lr, dict) else None
    heavy = None if momentum is None else beta
    opt_state = training.make_optimizer(optimizer, lr, heavy, labels=labels).init(params)
    key = jax.random.fold_in(config.keys()[1], 1) if batch_seed is None else jax.random.PRNGKey(int(batch_seed))
    data = {**{k: args[k] for k in ARGS_KEYS}, "a": a}
    # one program per optimiser structure: the rates (and momentum) are read from the optimiser state
    template = training.make_optimizer(
        optimizer, dict.fromkeys(_GROUPS, 1.0) if labels else 1.0, None if heavy is None else 0.5, labels=labels
    )
    structure = (optimizer, batch_size, heavy is not None, labels is not None)
    build = functools.partial(_training_program, batch_size, template)
    final, series, _, _, bad, compile_s, run_s = training.run_training(
        "cooccurrence.train", structure, build, params, opt_state, key, save, data
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
        extras={"batch_size": batch_size, "a": a},
    )
