"""The SGD SDE of the co-occurrence network: minibatch SGD's diffusion limit on the parameters
(`flows.optim_limits.noise`; Li, Tai & E 2017), d theta = -grad L dt + sqrt(lr c / B) G(theta) dW with
c = (n - B) / (n - 1). It runs on the parameters: the noise is not a function of the Grams. See
docs/systems/cooccurrence.md."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import Array

from .._checks import check_bool, check_int, check_real
from .._solve import Trajectory
from ..optim_limits import noise as _noise
from . import observables as obs
from .data import Config
from .network import check_args, data_args, init_params, network_loss, with_seed_init

__all__ = ["per_sample_data", "per_sample_loss", "sgd_sde", "solve_sgd_sde", "train_sgd_runs"]


def per_sample_loss(params: dict[str, Array], sample: dict[str, Array]) -> Array:
    """The logistic loss of one sample {"tokens" (L,), "labels" (), "a" (m1,)} (`network.network_loss`)."""
    return network_loss(params, sample["a"], sample["tokens"][None], sample["labels"][None])


def per_sample_data(args: dict, a: Array) -> dict:
    """The training set of `args` (`network.data_args`) as per-sample data: tokens, labels and the fixed
    signs a (repeated per sample, so that the loss is one module-level function)."""
    n = args["tokens"].shape[0]
    return {"tokens": args["tokens"], "labels": args["labels"], "a": jnp.broadcast_to(a, (n,) + a.shape)}


def _observe(t, theta, args):
    return obs.observe(t, obs.gram_state(theta, args["a"]), args["obs"])


def sgd_sde(
    config: Config,
    batch_size: int,
    lr: float,
    *,
    args: dict | None = None,
    num_test: int = 600,
    noise: bool = True,
    seed: int | None = None,
    init: str | None = None,
) -> tuple[Any, dict[str, Array]]:
    """(`optim_limits.noise.SGDSDE` of the co-occurrence network, theta0): the SDE of
    `train(config, "sgd", lr, batch_size=batch_size)` (without replacement) and `init_params(config)`.
    Its `args` also hold the fixed signs `a` and the observables' data dict (`"obs"`)."""
    config = with_seed_init(config, seed, init)
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    theta0, a = init_params(config)
    sde = _noise.sgd_sde(per_sample_loss, per_sample_data(args, a), batch_size, lr, noise=noise)
    return sde._replace(args={**sde.args, "a": a, "obs": args}), theta0


def solve_sgd_sde(
    config: Config,
    ts: Any,
    batch_size: int,
    lr: float,
    num_paths: int,
    seed: int = 0,
    *,
    dt: float | None = None,
    args: dict | None = None,
    num_test: int = 600,
    noise: bool = True,
    brownian: str = "increments",
    init_seed: int | None = None,
    init: str | None = None,
    save_states: bool = False,
    max_steps: int | None = None,
) -> Trajectory:
    """`num_paths` Euler-Maruyama paths of the SGD SDE from `init_params(config)`; the observables of
    `observables.OBSERVABLES` at the times `ts` per path.

    **Arguments:**

    - `ts`: save times in [0, ts[-1]] (flow time t = lr * step); `dt`: the SDE step, default `lr / 4`.
    - `batch_size`, `lr`: the SGD settings (batches without replacement, as `network.train`); `noise=False`
      gives gradient flow.
    - `seed`: the Brownian paths; `init_seed`, `init`: override `config.seed`, `config.init` (data and
      initialisation), as `train(seed=, init=)`.
    - `brownian`: `"increments"` (default) or `"tree"`; `max_steps` (default: the steps of `dt`): as in
      `flows.solve_sde` (one `max_steps` for a sweep over lr and dt compiles one program).

    **Returns:** the batched `flows.Trajectory` (`observables[name]` of shape `(num_paths, len(ts), ...)`).
    """
    lr = check_real("lr", lr, low=0.0, strict=True)
    num_paths = check_int("num_paths", num_paths, 1)
    seed = check_int("seed", seed, 0, 2**63 - 1)
    dt = lr / 4 if dt is None else check_real("dt", dt, low=0.0, strict=True)
    save_states = check_bool("save_states", save_states)
    sde, theta0 = sgd_sde(config, batch_size, lr, args=args, num_test=num_test, noise=noise, seed=init_seed, init=init)
    return _noise.solve_sgd_sde(
        sde,
        theta0,
        ts,
        dt=dt,
        seed=seed,
        num_paths=num_paths,
        observables=_observe,
        save_states=save_states,
        brownian=brownian,
        max_steps=max_steps,
    )


def train_sgd_runs(
    config: Config,
    steps: int,
    batch_size: int,
    lr: float,
    num_runs: int | None = None,
    seed: int = 0,
    *,
    keys: Any = None,
    save_every: int | None = None,
    args: dict | None = None,
    num_test: int = 600,
    init_seed: int | None = None,
    init: str | None = None,
) -> dict:
    """`num_runs` SGD trainings of eq. (1) (`optax.sgd(lr)`, batches of `batch_size` distinct samples drawn
    as `network.train` draws them) in one vmapped program, from `init_params(config)`: `{"steps", "ts",
    name: (runs, saves, ...)}` with the observables of `observables.OBSERVABLES` at steps 0, save_every, ...
    Run r uses `split(key(seed), num_runs)[r]`, or `keys[r]` (`keys=jax.random.PRNGKey(batch_seed)[None]`
    is `train(..., batch_seed=batch_seed)`'s minibatch stream)."""
    config = with_seed_init(config, init_seed, init)
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    theta0, a = init_params(config)
    return _noise.run_sgd(
        per_sample_loss,
        theta0,
        per_sample_data(args, a),
        batch_size,
        lr,
        steps,
        num_runs=num_runs,
        seed=seed,
        keys=keys,
        save_every=save_every,
        observables=_observe,
        extra_args={"a": a, "obs": args},
    )
