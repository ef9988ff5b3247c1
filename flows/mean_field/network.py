"""Training the finite mean-field transformer (Gao et al., NeurIPS 2024, eqs. 2.1-2.3) with optax on the shared
driver (`flows.train(spec.system(config), ...)`): learning rate eta_tau M L on the attention particles (V, W) and
eta_tau M_mlp L on the MLP particles (W1, W2), so step k sits at flow time tau = k eta_tau (heavy ball:
k eta_tau / (1 - beta)).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import driver, training
from .._checks import check_choice, check_real
from ..training import NetworkRecord
from .data import Config
from .flow import nest, particles_of
from .spec import START_OPTIONS, split_options, start

__all__ = ["LR_GROUPS", "NetworkRecord", "train"]

#: The parameter groups of a per-group rate `lr={"attention": .., "mlp": ..}` (the spec's groups).
LR_GROUPS = ("attention", "mlp")


def train(
    config: Config,
    optimizer: str = "gd",
    lr: float | dict = 0.1,
    steps: int = 100,
    save_every: int = 1,
    *,
    momentum: float = 0.0,
    **options: Any,
) -> NetworkRecord:
    """Train the finite network from `init_particles(config)` with optax: the shared driver `flows.train` on
    `spec.system(config, observables)`.

    The same vocabulary as every system (docs/getting_started.md).

    **Arguments:**

    - `optimizer`: `"gd"` (full-batch GD), `"sgd"` (`optax.sgd` on minibatches of `batch_size` training
      prompts, full batch without one; heavy-ball `momentum` beta in [0, 1)) or `"adam"` (`optax.adam`, full
      batch or minibatches). `momentum` is for `"sgd"` only (ValueError otherwise).
    - `lr` (> 0): the flow-time rate eta_tau, or `{"attention": .., "mlp": ..}` (one per parameter group).
      The optimiser's learning rates are eta M L (attention) and eta M_mlp L (MLP) on the raw gradients of Q.
    - `steps` (>= 1); `save_every`: record every k-th step (and the last).
    - `options`: `batch_size` (`flows.train`'s: `None`, full batch, or B in [1, n_train] prompts per step, for
      `"sgd"` and `"adam"`), and the keywords of `spec.start`, defined and documented there
      (`spec.START_OPTIONS`), as in `solve_flow`: `seed`, `init` (override `config.seed` and `config.init`),
      `observables` (`"all"`, every entry of `observables.OBSERVABLES` at the saved steps, one velocity
      evaluation each, or `"basic"`, Q and R only: what throughput runs use), `particles`,
      `data`, `test` (the initial particles, the training set and the test prompts), `mesh` (to shard the
      particle axis over). Another keyword is a ValueError naming it.

    **Clock:** step k sits at flow time tau = eta k / (1 - momentum) (`flows.training.flow_time`; eta the
    largest rate of a dict): explicit Euler of the particle flow with step eta is the `"gd"` run, and heavy
    ball at rate eta tracks GD at rate eta / (1 - beta). One compiled program serves every rate, momentum,
    steps, seed, lam and threshold of the same shapes and number of saved steps.

    **Returns:** a `flows.training.NetworkRecord` (`params` the final parameters in the spec's groups;
    `extras`: `particles` (the final particle dict), `tau` (= `ts`), `eta_tau` (the clock's rate),
    `lr_attention`, `lr_mlp` (the optimiser's learning rates, eta M L and eta M_mlp L), `batch_size`).

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` when the run goes non-finite,
    carrying the record truncated before that step.
    """
    overrides, batching = split_options("train", options, START_OPTIONS, ("batch_size",))
    batch_size = batching.get("batch_size")
    config, spec, particles = start(config, **overrides)
    check_choice("optimizer", optimizer, training.OPTIMIZERS)
    beta = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if optimizer != "sgd" and beta != 0.0:
        raise ValueError(
            f"momentum is for optimizer='sgd' only (heavy ball), got momentum={momentum!r} with optimizer={optimizer!r}"
        )
    if particles is not None:
        start_params = nest(particles)
        spec = spec.replace(init=lambda source: start_params)
    name, optim_args = ("momentum", {"beta": beta}) if beta != 0.0 else (optimizer, None)
    if name == "gd" and batch_size is not None:
        raise ValueError("batch_size is for optimizer='sgd' or 'adam' (minibatches); 'gd' is full batch")

    def as_here(record):  # the optimiser by this function's names, the extras of this system
        lr_att, lr_mlp = (record.lr[g] if isinstance(record.lr, dict) else record.lr for g in LR_GROUPS)
        extras = {
            "particles": particles_of(record.params),
            "tau": record.ts,
            "eta_tau": training.clock_rate(record.lr),
            "lr_attention": lr_att * spec.rate_scale["attention"],
            "lr_mlp": lr_mlp * spec.rate_scale["mlp"],
            "batch_size": batch_size,
        }
        return dataclasses.replace(record, optimizer=optimizer, config=config, extras=extras)

    options = dict(save_every=save_every, batch_size=batch_size, optim_args=optim_args)
    return driver.train_relabelled(as_here, spec, name, lr, steps, **options)
