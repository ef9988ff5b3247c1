"""The finite network of Yang et al. 2024, eq. (1), and its training with optax.

    F(X) = sum_{l=1}^{L} sum_{j=1}^{m1} a_j w_j^T W_V X softmax(X^T W_K^T W_Q x_l / sqrt(m))        (1)

Every position l is a query and the L outputs are summed; the MLP is linear; a_j = +-1 is fixed; W (m1, m),
W_V, W_K, W_Q (m, d) are trained on the logistic loss L̂ = (1/n) sum_i log(1 + exp(-y_i F(X_i))).
Tokens are one-hot, so W_V X is the gather `W_V[:, tokens]`.

`train` runs full-batch GD (`optax.sgd`, continuous time t = lr * step, the discretisation of the gradient
flow of Sec. 2.2), minibatch SGD (optionally with momentum beta: t = lr * step / (1 - beta), the clock of
every system, see `flows.network_records.flow_time`) or Adam (t = lr * step), all inside one compiled loop,
and records the observables of `observables.OBSERVABLES` on the Grams of the parameters.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .. import _program
from .._checks import check_choice, check_dtype, check_int, check_real, real_array
from .._prng import fused
from .._xla import device_array
from ..network_records import TrainingError, first_nonfinite_step, flow_time
from . import observables as obs
from .data import Config, Dataset, generator, sample_test, training_set

logger = logging.getLogger(__name__)

__all__ = ["TrainRecord", "data_args", "forward", "init_params", "network_loss", "train"]

_OPTIMIZERS = ("gd", "sgd", "adam")


def init_params(config: Config, key=None, dtype=None):
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
    return {k: device_array(v, dtype) for k, v in params.items()}, device_array(a, dtype)


def forward(params, a, tokens):
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


def network_loss(params, a, tokens, labels):
    """Logistic loss (1/n) sum_i log(1 + exp(-y_i F_i))."""
    return jnp.mean(jax.nn.softplus(-labels * forward(params, a, tokens)))


def data_args(config: Config, train: Dataset | None = None, test: Dataset | None = None,
              num_test: int = 600, dtype=None) -> dict:
    """The data dict the observables (and the flow) read: tokens, labels, group indicator, test draws,
    sqrt(m) and m1 as arrays (traced, so new values do not recompile)."""
    dtype = jnp.dtype(check_dtype("dtype", dtype) or jnp.result_type(float))
    check_int("num_test", num_test, 1)
    for name, value in (("train", train), ("test", test)):
        if value is not None and not isinstance(value, Dataset):
            raise ValueError(f"{name} must be a Dataset (see training_set, sample_test) or None, got "
                             f"{type(value).__name__}")
    train = training_set(config) if train is None else train
    test = sample_test(config, num_test) if test is None else test
    host = lambda x: device_array(x, dtype)  # noqa: E731 - host casts compile nothing
    return {
        "tokens": train.tokens,
        "labels": host(train.labels),
        "group_onehot": train.group_onehot(dtype),
        "test_tokens": test.tokens,
        "test_labels": host(test.labels),
        "sqrt_m": device_array(math.sqrt(config.m), dtype),
        "m1": device_array(float(config.m1), dtype),
    }


@dataclasses.dataclass(frozen=True)
class TrainRecord:
    """Observables of a trained network at its saved steps.

    - `ts`: continuous time t = lr * step / (1 - momentum) (t = lr * step for GD, Adam and SGD without
      momentum), shape `(k,)`; `steps`: the step numbers.
    - `observables`: name -> array with leading axis k (same names and shapes as the flow trajectory;
      `group_loss (k, 4)`, `G (k, 3)`, `A (k, 3, 3)` with A[key, query], ...). Also reachable as
      `record["loss"]` or `record.loss`.
    - `params`, `a`: the final parameters; `compile_s`, `run_s`: compile and training wall time.
    """

    ts: np.ndarray
    steps: np.ndarray
    observables: dict
    optimizer: str
    lr: float | dict
    batch_size: int | None
    params: dict
    a: jax.Array
    compile_s: float
    run_s: float

    def __getitem__(self, name):
        return self.observables[name]

    def __getattr__(self, name):
        if name != "observables" and name in self.__dict__.get("observables", {}):
            return self.__dict__["observables"][name]
        raise AttributeError(name)


#: the keys `data_args` returns and the flow and the observables read
ARGS_KEYS = ("tokens", "labels", "group_onehot", "test_tokens", "test_labels", "sqrt_m", "m1")


def check_args(args) -> dict:
    """`args` if it is a dict with the keys of `data_args` (ValueError naming `args` otherwise)."""
    if not isinstance(args, dict) or not set(ARGS_KEYS) <= set(args):
        got = sorted(args) if isinstance(args, dict) else type(args).__name__
        raise ValueError(f"args must be a dict with the keys {ARGS_KEYS} of data_args, got {got}")
    return args


def with_seed_init(config: Config, seed=None, init=None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow`, the same place as in every system (ValueError naming a bad value)."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a cooccurrence.Config, got {type(config).__name__}")
    new = {k: v for k, v in (("seed", seed), ("init", init)) if v is not None}
    return dataclasses.replace(config, **new) if new else config


def _observe(params, a, args):
    return obs.observe(0.0, obs.gram_state(params, a), args)


def _save_steps(steps, save_every, save_steps):
    if save_steps is not None:
        raw = real_array("save_steps", save_steps)
        if raw.ndim > 1 or raw.size == 0 or np.any(raw != np.round(raw)) or raw.min() < 0 or raw.max() > steps:
            raise ValueError(f"save_steps must be integers in [0, steps={steps}], got {save_steps!r}")
        arr = np.unique(raw.astype(np.int64).ravel())
        return arr if arr[0] == 0 else np.concatenate([[0], arr])
    if isinstance(save_every, bool) or not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be an integer >= 1, got {save_every!r}")
    arr = np.arange(0, steps + 1, save_every, dtype=np.int64)
    return arr if arr[-1] == steps else np.concatenate([arr, [steps]])


_GROUPS = ("W", "W_V", "W_K", "W_Q")


def _check_lr(lr):
    """A positive number, or a dict of one per parameter group {W, W_V, W_K, W_Q}."""
    if isinstance(lr, dict):
        if set(lr) != set(_GROUPS):
            raise ValueError(f"lr must be a number or a dict with the keys {_GROUPS} (one rate per parameter "
                             f"group), got keys {sorted(map(str, lr))}")
        return {k: check_real(f"lr[{k!r}]", lr[k], low=0.0, strict=True) for k in _GROUPS}
    return check_real("lr", lr, low=0.0, strict=True)


def _optimizer(optimizer: str, lr, momentum):
    """The optax optimiser with its rates (and momentum) injected as hyperparameters: they live in the
    optimiser state, so one compiled training program serves every lr and momentum of one structure."""
    def make(rate):
        if optimizer == "adam":
            return optax.inject_hyperparams(optax.adam)(learning_rate=rate)
        if momentum is None:
            return optax.inject_hyperparams(optax.sgd)(learning_rate=rate)
        return optax.inject_hyperparams(optax.sgd)(learning_rate=rate, momentum=momentum)

    if isinstance(lr, dict):
        return optax.multi_transform({k: make(v) for k, v in lr.items()}, {k: k for k in _GROUPS})
    return make(lr)


def _train_program(optimizer: str, batch_size, has_momentum: bool, per_group: bool):
    """The training loop of `train` for one optimiser structure; everything else (parameters, rates in the
    optimiser state, data, saved-step increments) is an argument, so the compiled program is cached on
    shapes (`flows._program.compiled`) and a second call with other rates, seeds or data compiles nothing."""
    lr = dict.fromkeys(_GROUPS, 1.0) if per_group else 1.0
    template = _optimizer(optimizer, lr, 0.5 if has_momentum else None)  # values are read from the state
    grad_fn = jax.grad(network_loss)

    def run(params, opt_state, key, increments, a, args):
        tokens, labels = args["tokens"], args["labels"]
        n = tokens.shape[0]

        def one_step(carry):
            params, opt_state, key, step, bad = carry
            if batch_size is None:
                grads = grad_fn(params, a, tokens, labels)
            else:
                key, sub = jax.random.split(key)
                idx = jax.random.permutation(sub, n)[:batch_size]
                grads = grad_fn(params, a, tokens[idx], labels[idx])
            # optax's Adam mixes its int32 step count with floats; allow that under strict promotion
            with jax.numpy_dtype_promotion("standard"):
                updates, opt_state = template.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree_util.tree_leaves(params)]))
            bad = jnp.where((bad < 0) & ~finite, step + 1, bad)  # the first step whose parameters are not finite
            return params, opt_state, key, step + 1, bad

        def segment(carry, num):
            carry = jax.lax.fori_loop(0, num, lambda _, c: one_step(c), carry)
            return carry, _observe(carry[0], a, args)

        first = _observe(params, a, args)
        # the same minibatches, drawn with the threefry hash unrolled (flows._prng; issue 9)
        start = (params, opt_state, fused(key), jnp.asarray(0, jnp.int32), jnp.asarray(-1, jnp.int32))
        carry, rest = jax.lax.scan(segment, start, increments)
        series = jax.tree_util.tree_map(lambda x, y: jnp.concatenate([x[None], y]), first, rest)
        return carry[0], series, carry[4]

    return run


def train(config: Config, optimizer: str = "gd", lr: float | dict = 0.01, steps: int = 1000,
          batch_size: int | None = None, save_every: int = 10, *, save_steps=None,
          momentum: float | None = None, num_test: int = 600, args: dict | None = None,
          batch_seed: int | None = None, seed: int | None = None, init: str | None = None) -> TrainRecord:
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

    **Returns:** a `TrainRecord`. Observables are evaluated on the full training set at every saved step.

    **Raises:** `ValueError` naming a bad argument; `flows.network_records.TrainingError` (a
    `flows.FlowError`) if the parameters go non-finite (e.g. too large an `lr`): it names the first
    non-finite step (the parameters are checked at every step, the observables at the saved steps) and
    carries the record of the saved steps before it as `error.record`.
    """
    config = with_seed_init(config, seed, init)
    check_choice("optimizer", optimizer, _OPTIMIZERS)
    lr = _check_lr(lr)
    clock = max(lr.values()) if isinstance(lr, dict) else lr
    steps = check_int("steps", steps, 1)
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or not 1 <= batch_size <= config.n):
        raise ValueError(f"batch_size must be None or an integer in [1, n={config.n}], got {batch_size!r}")
    if optimizer == "sgd" and batch_size is None:
        raise ValueError("batch_size must be given for optimizer='sgd' (use 'gd' for full batch)")
    if optimizer == "gd" and batch_size is not None:
        raise ValueError("batch_size must be None for optimizer='gd' (full batch)")
    if momentum is not None:
        momentum = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
        if optimizer != "sgd":
            raise ValueError(f"momentum is for optimizer='sgd' only, got momentum={momentum!r} with "
                             f"optimizer={optimizer!r}")
    if batch_seed is not None and (isinstance(batch_seed, bool) or not isinstance(batch_seed, (int, np.integer))
                                   or not 0 <= batch_seed < 2**32):
        raise ValueError(f"batch_seed must be None or an integer in [0, 2**32), got {batch_seed!r}")
    save = _save_steps(int(steps), save_every, save_steps)
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    params, a = init_params(config)
    opt_state = _optimizer(optimizer, lr, momentum).init(params)
    key = (jax.random.fold_in(config.keys()[1], 1) if batch_seed is None
           else jax.random.PRNGKey(int(batch_seed)))
    increments = device_array(np.diff(save), jnp.int32)
    call = (params, opt_state, key, increments, a, {k: args[k] for k in ARGS_KEYS})
    structure = (optimizer, batch_size, momentum is not None, isinstance(lr, dict))
    compiled, compile_s = _program.compiled(("cooccurrence.train", structure, _program.signature(call)),
                                            lambda: _train_program(*structure), call)
    start = time.perf_counter()
    final, series, bad = jax.block_until_ready(compiled(*call))
    run_s = time.perf_counter() - start
    logger.info("train %s lr=%s steps=%d: compile %.2f s, run %.2f s", optimizer, lr, steps, compile_s, run_s)
    series = {k: np.asarray(v) for k, v in series.items()}
    bad = first_nonfinite_step(save, series, int(bad))
    keep = slice(None) if bad < 0 else save < bad
    record = TrainRecord(ts=flow_time(clock, save[keep], momentum), steps=save[keep],
                         observables={k: v[keep] for k, v in series.items()},
                         optimizer=optimizer, lr=dict(lr) if isinstance(lr, dict) else float(lr),
                         batch_size=batch_size, params=final, a=a,
                         compile_s=compile_s, run_s=run_s)
    if bad >= 0:
        raise TrainingError(f"training went non-finite at step {bad} (optimizer={optimizer!r}, lr={lr}): "
                            f"the parameters or the observables hold NaN or inf; lower lr. error.record holds "
                            f"the {int(np.sum(keep))} saved steps before it", step=bad, record=record)
    return record
