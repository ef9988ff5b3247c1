"""The SGD SDE of the co-occurrence network: minibatch SGD's diffusion limit on the parameters
(`flows.optim_limits.noise`; Li, Tai & E 2017), d theta = -grad L dt + sqrt(lr c / B) G(theta) dW with
c = (n - B) / (n - 1), solved by the shared driver (`flows.solve_flow(spec, noise=True)`), beside many SGD runs
in one vmapped program. It runs on the parameters: the noise is not a function of the Grams. See
docs/systems/cooccurrence.md."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from .. import driver
from .._checks import check_int, check_real
from ..optim_limits import noise as _noise
from ..trajectory import Trajectory
from . import observables as obs
from .data import Config
from .network import network_loss
from .spec import system, with_seed_init

__all__ = ["solve_sgd_sde", "train_sgd_runs"]


def solve_sgd_sde(
    config: Config,
    ts: Any,
    batch_size: int,
    lr: float,
    num_paths: int,
    seed: int = 0,
    *,
    num_test: int = 600,
    init_seed: int | None = None,
    init: str | None = None,
    **options: Any,
) -> Trajectory:
    """`num_paths` Euler-Maruyama paths of the SGD SDE from `network.init_params(config)`: the shared driver's
    `flows.solve_flow(spec.system(config, num_test), ts, "sgd", {"lr": lr}, noise=True, ...)`, the observables of
    `observables.OBSERVABLES` at the times `ts` per path.

    **Arguments:**

    - `ts`: non-decreasing save times from 0 (flow time t = lr * step).
    - `batch_size`, `lr`: the SGD settings (batches without replacement, as `train`); `batch_size = n` is
      full-batch GD, the SDE without noise.
    - `seed`: the Brownian paths (`jax.random.key(seed)`, split per path); `init_seed`, `init`: override
      `config.seed`, `config.init` (data and initialisation), as `train(seed=, init=)`.
    - `options`: keywords of `flows.solve_sde`, which defines and checks them: `dt` (the SDE step, default
      here `lr / 4`), `brownian` (default here `"increments"`), `save_states` (default `False`: the driver's),
      `max_steps` (default: the steps of `dt`; one `max_steps` for a sweep over lr and dt compiles one
      program), `throw`, ...

    **Returns:** the batched `flows.Trajectory` (`observables[name]` of shape `(num_paths, len(ts), ...)`).

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed path.
    """
    lr = check_real("lr", lr, low=0.0, strict=True)
    num_paths = check_int("num_paths", num_paths, 1)
    seed = check_int("seed", seed, 0, 2**63 - 1)
    spec = system(with_seed_init(config, init_seed, init), num_test)
    options = {"dt": lr / 4, "brownian": "increments", **options}
    key = jax.random.key(seed)
    return driver.solve_flow(
        spec, ts, "sgd", {"lr": lr}, noise=True, batch_size=batch_size, key=key, num_paths=num_paths, **options
    )


def _per_sample_loss(params: dict[str, Array], sample: dict[str, Array]) -> Array:
    """The logistic loss of one sample {"tokens" (L,), "labels" (), "a" (m1,)}."""
    return network_loss(params, sample["a"], sample["tokens"][None], sample["labels"][None])


def _observe(t, theta, args):
    return obs.observe(t, obs.gram_state(theta, args["a"]), args["obs"])


def train_sgd_runs(
    config: Config,
    steps: int,
    batch_size: int,
    lr: float,
    *,
    num_test: int = 600,
    init_seed: int | None = None,
    init: str | None = None,
    **options: Any,
) -> dict:
    """`num_runs` SGD trainings of eq. (1) (`optax.sgd(lr)`, batches of `batch_size` distinct samples drawn
    as `train` draws them) in one vmapped program (`flows.optim_limits.run_sgd`), from
    `network.init_params(config)`: `{"steps", "ts", name: (runs, saves, ...)}` with the observables of
    `observables.OBSERVABLES` at steps 0, save_every, ... `options`: the keywords of `run_sgd`, which defines
    and checks them (`num_runs`, `seed`, `keys`, `save_every`, `replacement`); run r uses
    `split(key(seed), num_runs)[r]`, or `keys[r]` (`keys=jax.random.PRNGKey(batch_seed)[None]` is
    `train(..., batch_seed=batch_seed)`'s minibatch stream). `init_seed`, `init`, `num_test`: as in
    `solve_sgd_sde`."""
    spec = system(with_seed_init(config, init_seed, init), num_test)
    source = spec.keys()
    data = spec.dataset(source["data"])
    n = data["tokens"].shape[0]
    # the signs repeated per sample, so that the loss of one sample is one module-level function
    rows = {
        "tokens": data["tokens"],
        "labels": data["labels"],
        "a": jnp.broadcast_to(data["a"], (n,) + data["a"].shape),
    }
    return _noise.run_sgd(
        _per_sample_loss,
        spec.initial_params(source["init"]),
        rows,
        batch_size,
        lr,
        steps,
        observables=_observe,
        extra_args={"a": data["a"], "obs": data},
        **options,
    )
