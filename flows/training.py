"""The training layer every system's finite network runs on: one record, one loop, one optimiser factory, one
rule for a failed run, one clock.

A system supplies a small spec (initial parameters, `loss(params, data, batch)`, `observe(params, data)`, its
parameter groups and their rate scale, a batch sampler); its `train` is validation plus `run_training` and
`finish`:

- `NetworkRecord`: what every system's `train` returns.
- `training_program`, `run_training`: the compiled loop (segments of steps between saved steps, the
  observables at each saved step, the first step whose parameters are not finite), compiled once per shape.
- `make_optimizer`: optax's SGD (heavy ball with `momentum`) or Adam, rates injected as hyperparameters, one
  per parameter group through `optax.multi_transform`, each times a scale (the mean field's M L).
- `finish`: a failed run is truncated at its first non-finite step and raises `TrainingError` with `.record`
  and `.trajectory` both the truncated record.
- `flow_time(lr, steps, momentum)`: t = lr * step / (1 - momentum), the one momentum clock (heavy-ball SGD
  moves at the effective rate lr / (1 - beta); plain GD/SGD and Adam use t = lr * step).
- `event_time(record, name, level, direction)`: the first time an observable crosses `level`, on a network
  record and on a `flows.Trajectory` alike.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._checks import check_choice, check_int, check_real, real_array
from ._inputs import widest_dtype
from ._prng import fused
from ._program import all_finite, compiled, signature
from .trajectory import FlowError

PyTree = Any  # a pytree of arrays
ArrayLike = Any  # an array or a (nested) sequence of numbers
Rate = float | dict  # one learning rate, or one per parameter group

__all__ = [
    "NetworkRecord",
    "TrainingError",
    "check_lr",
    "check_momentum",
    "clock_rate",
    "event_time",
    "finish",
    "first_nonfinite_step",
    "flow_time",
    "heavy_ball_args",
    "make_optimizer",
    "run_training",
    "save_steps",
    "training_program",
    "with_seed_init",
]


class TrainingError(FlowError):
    """A training run went non-finite (NaN or inf in the parameters or the saved observables, or past a
    system's own bound, e.g. Scan and Snap's `blowup_bound`).

    - `step`: the first non-finite step.
    - `record`, `trajectory` (the same object, as on every `flows.FlowError`): the record of the saved steps
      before it (`None` if not even step 0 was finite).
    """

    def __init__(self, message: str, step: int, record: Any = None):  # a NetworkRecord (or a system's batch record)
        super().__init__(message, record)
        self.step = int(step)
        self.record = record


@dataclasses.dataclass(frozen=True)
class NetworkRecord:
    """A trained network at its saved steps, the same for every system.

    - `ts`: (k,) flow time of each saved step (`flow_time`); `steps`: (k,) the saved step numbers.
    - `observables`: name -> array with leading axis k, the names of the system's flow `Trajectory`; also
      `record["loss"]` and `record.loss`.
    - `params`: the final parameters (or their values at the saved steps, where a system keeps a history).
    - `optimizer`, `lr` (a number or one per parameter group), `momentum`, `config`: what was trained.
    - `compile_s`, `run_s`: compile and training wall time.
    - `extras`: what a system records beside these; both these and the parameters are reachable as
      attributes too (`record.batch_loss`, `record.Y`).
    """

    ts: np.ndarray
    steps: np.ndarray
    observables: dict
    params: dict
    optimizer: str
    lr: float | dict
    momentum: float = 0.0
    config: object = None
    compile_s: float = math.nan
    run_s: float = math.nan
    extras: dict = dataclasses.field(default_factory=dict)

    def __getitem__(self, name):
        return self.observables[name]

    def __getattr__(self, name):
        for field in ("observables", "extras", "params"):
            found = self.__dict__.get(field)
            if name != field and isinstance(found, dict) and name in found:
                return found[name]
        raise AttributeError(name)


def flow_time(lr: float, steps: ArrayLike, momentum: float | None = None) -> np.ndarray:
    """t = lr * steps / (1 - momentum): the one momentum clock of every system (`momentum=None` or 0: lr * step)."""
    beta = 0.0 if momentum is None else float(momentum)
    return float(lr) * np.asarray(steps, dtype=float) / (1.0 - beta)


def clock_rate(lr: Rate) -> float:
    """The rate of the clock: `lr`, or the largest rate of a dict of one per group."""
    return max(lr.values()) if isinstance(lr, dict) else lr


def check_lr(lr: Rate, groups: Sequence[str], name: str = "lr") -> Rate:
    """A positive rate, or a dict with one per parameter group in `groups` (ValueError naming `name`)."""
    if isinstance(lr, dict):
        if set(lr) != set(groups):
            raise ValueError(
                f"{name} must be a number or a dict with the keys {tuple(groups)} (one rate per "
                f"parameter group), got keys {sorted(map(str, lr))}"
            )
        return {k: check_real(f"{name}[{k!r}]", lr[k], low=0.0, strict=True) for k in groups}
    return check_real(name, lr, low=0.0, strict=True)


def check_momentum(optimizer: str, momentum: float | None, allowed: Sequence[str] = ("sgd",)) -> float:
    """`momentum` beta in [0, 1) (`None`: 0), nonzero only with an optimiser in `allowed`."""
    beta = 0.0 if momentum is None else check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if beta and optimizer not in allowed:
        raise ValueError(
            f"momentum is for optimizer={allowed[0]!r} only, got momentum={momentum!r} with optimizer={optimizer!r}"
        )
    return beta


def heavy_ball_args(optimizer: str, momentum: float | None) -> tuple[str, dict | None]:
    """The shared driver's (optimizer, optim_args) of a system's `optimizer` ("gd", "sgd", "adam") with an
    optional heavy-ball `momentum` (`check_momentum`): a given beta (0 included) runs "momentum" with it,
    except under Adam."""
    beta = check_momentum(optimizer, momentum)
    heavy = momentum is not None and optimizer != "adam"  # optax.sgd(lr, momentum=beta), beta = 0 included
    return ("momentum", {"beta": beta}) if heavy else (optimizer, None)


#: the most saved steps a training run records (each holds every observable)
MAX_SAVES = 10_000_000


def save_steps(steps: int, save_every: int = 1, explicit: ArrayLike | None = None) -> np.ndarray:
    """The saved step numbers: every `save_every`-th step and the last, or the `explicit` ones (step 0 is
    always saved)."""
    if explicit is not None:
        raw = real_array("save_steps", explicit)
        if raw.ndim > 1 or raw.size == 0 or np.any(raw != np.round(raw)) or raw.min() < 0 or raw.max() > steps:
            raise ValueError(f"save_steps must be integers in [0, steps={steps}], got {explicit!r}")
        arr = np.unique(raw.astype(np.int64).ravel())
        return arr if arr[0] == 0 else np.concatenate([[0], arr])
    save_every = check_int("save_every", save_every, 1)
    if steps // save_every + 2 > MAX_SAVES:  # before allocating the grid (steps up to INT_MAX are valid)
        raise ValueError(
            f"save_every = {save_every} saves {steps // save_every + 1} of steps = {steps}: more than {MAX_SAVES} "
            "saved steps; raise save_every"
        )
    arr = np.arange(0, steps + 1, save_every, dtype=np.int64)
    return arr if arr[-1] == steps else np.concatenate([arr, [steps]])


def with_seed_init(config: Any, config_type: type, seed: int | None = None, init: str | None = None) -> Any:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow` (ValueError naming a bad value)."""
    if not isinstance(config, config_type):
        raise ValueError(
            f"config must be a {config_type.__module__.split('.')[-2]}.Config, got {type(config).__name__}"
        )
    new = {k: v for k, v in (("seed", seed), ("init", init)) if v is not None}
    if not new:
        return config
    if hasattr(config, "replace"):
        return config.replace(**new)
    return dataclasses.replace(config, **new)  # type: ignore[type-var]  # config_type is a dataclass


OPTIMIZERS = ("gd", "sgd", "adam")


def make_optimizer(
    optimizer: str,
    lr: Rate,
    momentum: float | None = None,
    *,
    labels: dict | None = None,
    scale: dict | None = None,
    options: dict | None = None,
) -> optax.GradientTransformation:
    """The optax transformation of `optimizer` ("gd" and "sgd": `optax.sgd`, heavy ball when `momentum` is
    not `None`; "adam": `optax.adam`) with its rates injected as hyperparameters: they live in the optimiser
    state, so one compiled program serves every rate of one structure.

    **Arguments:**

    - `lr`: one rate, or a dict of one per group.
    - `labels`: parameter name -> group (a dict rate or a `scale` needs it; `None`: one transformation for
      every parameter).
    - `scale`: group -> factor multiplying its rate (the mean field's M L), default 1.
    - `options`: Adam's other hyperparameters (`b1`, `b2`, `eps`; default optax's), injected as the rates are.
    """
    check_choice("optimizer", optimizer, OPTIMIZERS)
    options = dict(options or {})

    def make(rate):
        if optimizer == "adam":
            return optax.inject_hyperparams(optax.adam)(learning_rate=rate, **options)
        extra = {} if momentum is None else {"momentum": momentum}
        return optax.inject_hyperparams(optax.sgd)(learning_rate=rate, **extra)

    if labels is None:
        return make(lr)
    scale = scale or {}
    rates = lr if isinstance(lr, dict) else dict.fromkeys(labels.values(), lr)
    return optax.multi_transform(
        {g: make(rates[g] * scale.get(g, 1.0)) for g in dict.fromkeys(labels.values())}, dict(labels)
    )


def training_program(
    loss: Callable,
    observe: Callable,
    optimizer: optax.GradientTransformation,
    *,
    sample: Callable | None = None,
    finite: Callable = all_finite,
    snapshot: Callable | None = None,
    timed: bool = False,
) -> Callable:
    """The training loop: `run(params, opt_state, key, increments, data, losses)`.

    **Arguments:**

    - `loss(params, data, batch)`: the training loss of one step (`batch` is `None` without a sampler).
    - `observe(params, data)`: a dict of the observables at a saved step.
    - `optimizer`: the optax transformation (its rates are read from `opt_state`).
    - `sample(data, key, step)`: -> `(key, batch)` for step `step` (`key` is carried from step to step,
      rewrapped by `flows._prng.fused`); `None`: full batch.
    - `finite(params)`: whether a step's parameters are acceptable (default: all entries finite).
    - `snapshot(params)`: what to keep of the parameters at each saved step (`None`: nothing).
    - `timed`: `observe(params, data, step)` is also given the step number (an int32 array).

    `increments` are the steps between consecutive saved steps; `losses` a zeros array of one entry per step
    to record the batch loss of each step in (or of length 0 not to). The first saved step is a segment of 0
    steps, so the observables appear once in the program.

    **Returns:** `(final params, observables at the saved steps, params snapshots or None, batch losses, first
    step whose parameters are not acceptable or -1)`.
    """
    value_and_grad = jax.value_and_grad(loss)

    def run(params, opt_state, key, increments, data, losses):
        def one_step(_, carry):
            params, opt_state, key, step, bad, losses = carry
            batch = None
            if sample is not None:
                key, batch = sample(data, key, step)
            value, grads = value_and_grad(params, data, batch)
            # optax's Adam mixes its int32 step count with floats, and the updates of parameters of mixed
            # precisions come in the rates' dtype (apply_updates casts them back); allow that under strict promotion
            with jax.numpy_dtype_promotion("standard"):
                updates, opt_state = optimizer.update(grads, opt_state, params)
                params = optax.apply_updates(params, updates)
            if losses.shape[0]:
                losses = losses.at[step].set(value)
            bad = jnp.where((bad < 0) & ~finite(params), step + 1, bad)
            return params, opt_state, key, step + 1, bad, losses

        def segment(carry, num):
            carry = jax.lax.fori_loop(0, num, one_step, carry)
            seen = observe(carry[0], data, carry[3]) if timed else observe(carry[0], data)
            return carry, (seen, None if snapshot is None else snapshot(carry[0]))

        key = fused(key) if sample is not None else key
        start = (params, opt_state, key, jnp.asarray(0, jnp.int32), jnp.asarray(-1, jnp.int32), losses)
        zero = jnp.zeros((1,), increments.dtype)
        carry, (series, snaps) = jax.lax.scan(segment, start, jnp.concatenate([zero, increments]))
        return carry[0], series, snaps, carry[5], carry[4]

    return run


def run_training(
    name: str,
    structure: Hashable,
    build: Callable,
    params: PyTree,
    opt_state: PyTree,
    key: PyTree,
    save: np.ndarray,
    data: PyTree,
    *,
    batch_loss: bool = False,
    batched: bool = False,
) -> tuple:
    """Compile (once per `name`, `structure` and argument shapes) and run `build()`, a `training_program`, for
    the saved steps `save`. Returns `(final params, series, snapshots, losses, bad, compile_s, run_s)` as
    numpy (the parameters stay arrays; `bad` is an array of one entry per run when `build()` is vmapped).
    `batched`: `build()` is a sweep's program (vmapped over its runs), compiled with the options of one
    (`flows._xla`)."""
    dtype = widest_dtype(*jax.tree_util.tree_leaves(params))
    losses = jnp.zeros((int(save[-1]) if batch_loss else 0,), dtype)
    increments = jnp.asarray(np.diff(save), jnp.int32)
    call = (params, opt_state, key, increments, data, losses)
    program, compile_s = compiled((name, structure, signature(call)), build, call, batched=batched)
    start = time.perf_counter()
    final, series, snaps, losses, bad = jax.block_until_ready(program(*call))
    run_s = time.perf_counter() - start
    series = {k: np.asarray(v) for k, v in series.items()}
    snaps = None if snaps is None else jax.tree_util.tree_map(np.asarray, snaps)
    return final, series, snaps, np.asarray(losses), np.asarray(bad), compile_s, run_s


def first_nonfinite_step(saved_steps: ArrayLike, observables: dict, param_step: int = -1) -> int:
    """The first step at which a run is non-finite: `param_step` (the first step with non-finite parameters,
    -1 if none) or the first saved step at which an observable is NaN or inf, whichever comes first; -1 if
    neither."""
    saved_steps = np.asarray(saved_steps)
    ok = np.ones(saved_steps.shape, bool)
    for v in observables.values():
        v = np.asarray(v)
        ok &= np.all(np.isfinite(v.reshape(v.shape[0], -1)), axis=1) if v.ndim > 1 else np.isfinite(v)
    steps = [int(saved_steps[np.argmin(ok)])] if not ok.all() else []
    steps += [int(param_step)] if param_step >= 0 else []
    return min(steps) if steps else -1


def finish(
    save: np.ndarray,
    series: dict,
    bad: int = -1,
    *,
    params: PyTree,
    clock: float,
    momentum: float = 0.0,
    snapshots: dict | None = None,
    batch_loss: np.ndarray | None = None,
    hint: str = "lower the learning rate",
    **fields: Any,
) -> NetworkRecord:
    """The `NetworkRecord` of a run, or `TrainingError` carrying it truncated at the first non-finite step.

    **Arguments:** `save` the saved steps; `series` the observables at them; `bad` the first step whose
    parameters were not acceptable (-1: none); `params` the final parameters, replaced by `snapshots` (their
    values at the saved steps) when given; `clock` the rate of `flow_time`; `batch_loss` per step (kept in
    `extras`); `hint` what the error message advises; `fields` the other fields of the record (`optimizer`,
    `lr`, `config`, `compile_s`, `run_s`, `extras`).
    """
    series = {k: np.asarray(v) for k, v in series.items()}
    bad = first_nonfinite_step(save, series, int(bad))
    keep = np.ones(np.shape(save), bool) if bad < 0 else np.asarray(save) < bad
    if snapshots is not None:
        params = {k: np.asarray(v)[keep] for k, v in snapshots.items()}
    extras = dict(fields.pop("extras", {}))
    if batch_loss is not None:
        extras["batch_loss"] = batch_loss if bad < 0 else batch_loss[:bad]
    record = NetworkRecord(
        ts=flow_time(clock, save[keep], momentum),
        steps=save[keep],
        observables={k: v[keep] for k, v in series.items()},
        params=params,
        momentum=float(momentum),
        extras=extras,
        **fields,
    )
    if bad >= 0:
        raise TrainingError(
            f"training went non-finite at step {bad} (optimizer={record.optimizer!r}, "
            f"lr={record.lr}): the parameters or the observables hold NaN or inf; {hint}. "
            f"error.record holds the {int(keep.sum())} saved steps before it",
            step=bad,
            record=record,
        )
    return record


def _series(record, name):
    observables = getattr(record, "observables", None)
    if not isinstance(observables, dict):
        raise ValueError(
            f"record must have an observables dict (a network record or a flows.Trajectory), got "
            f"{type(record).__name__}"
        )
    if name not in observables:
        raise ValueError(f"name must be one of the record's observables {sorted(observables)}, got {name!r}")
    ts = np.asarray(record.ts, dtype=float)
    ys = np.asarray(observables[name], dtype=float)
    if ts.ndim != 1 or ys.shape != ts.shape:
        raise ValueError(
            f"name: observable {name!r} must be a scalar series of shape {ts.shape} (one value per "
            f"saved time), got shape {ys.shape}; pass a scalar observable"
        )
    keep = np.isfinite(ts)  # a Trajectory stopped by an event pads ts with inf
    return ts[keep], ys[keep]


def event_time(record: Any, name: str, level: float = 0.0, direction: bool | None = True) -> float:
    """The first time the observable `name` of `record` crosses `level`, as `flows.Event` defines a crossing.

    - `direction`: `True` an upcrossing (from below `level` to at or above it), `False` a downcrossing (from
      above to at or below), `None` either.
    - A crossing happens between two consecutive finite saved values, the first on the near side of `level`:
      a series that starts past `level` (above it for an upcrossing, below for a downcrossing) has crossed
      nothing there, and its first crossing is the first one after it comes back to the near side.
    - Linear interpolation between the two saved points that bracket the crossing; its error is of the order
      of the save spacing times the curvature, so save densely around the event for a sharp time. Across
      non-finite saved values there is no interpolation: the time is that of the finite point past `level`.

    **Returns:** the time (float); `ts[0]` if the first finite value equals `level` exactly; `nan` if the
    series never crosses `level` in `direction` (also when it lies past `level` from its first saved point on,
    or has no finite value).

    **Example** (T1 of a co-occurrence record, the first time with zero training error):
    `event_time(record, "min_margin", 0.0, direction=True)`.
    """
    if not any(direction is v for v in (None, True, False)):
        raise ValueError(f"direction must be None, True or False, got {direction!r}")
    if (
        isinstance(level, bool)
        or not isinstance(level, (int, float, np.integer, np.floating))
        or not math.isfinite(level)
    ):
        raise ValueError(f"level must be a finite real number, got {level!r}")
    ts, ys = _series(record, name)
    g = ys - float(level)
    finite = np.flatnonzero(np.isfinite(g))
    if finite.size == 0:
        return math.nan
    gf = g[finite]
    if gf[0] == 0:
        return float(ts[finite[0]])
    below, above = gf[:-1] < 0, gf[:-1] > 0
    up = below & (gf[1:] >= 0)
    down = above & (gf[1:] <= 0)
    hits = np.flatnonzero(up if direction is True else down if direction is False else up | down)
    if hits.size == 0:
        return math.nan
    i0, i1 = int(finite[hits[0]]), int(finite[hits[0] + 1])
    g0, g1 = g[i0], g[i1]
    if i1 != i0 + 1:
        return float(ts[i1])
    return float(ts[i0] + (ts[i1] - ts[i0]) * (0.0 - g0) / (g1 - g0))
