"""Full-batch GD on the finite mean-field transformer (Gao et al., NeurIPS 2024, eqs. 2.1-2.3), on the shared
training layer `flows.training`: learning rate eta_tau M L on the attention particles (V, W) and eta_tau M_mlp L
on the MLP particles (W1, W2), so step k sits at flow time tau = k eta_tau (heavy ball: k eta_tau / (1 - beta)).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from .. import training
from .._checks import check_choice, check_int, check_real
from ..training import NetworkRecord
from . import observables as obs
from .data import Config, Particles, Prompts, held_out_set, training_set
from .initial import init_particles
from .model import check_data, check_particles, objective_value
from .sharding import shard_particles

logger = logging.getLogger(__name__)

__all__ = [
    "LR_GROUPS",
    "NetworkRecord",
    "gd_optimizer",
    "gd_program",
    "optimizer_state",
    "particles_and_args",
    "train",
    "train_gd",
    "with_seed_init",
]

#: The parameter groups of a per-group rate `lr={"attention": .., "mlp": ..}` and the particles in each.
LR_GROUPS = ("attention", "mlp")
_LABELS = {"V": "attention", "W": "attention", "W1": "mlp", "W2": "mlp"}
_OPTIMIZERS = ("gd", "sgd")


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow`, as in every system (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


def _rate_scale(config: Config) -> dict:
    return {"attention": config.M * config.L, "mlp": config.M_mlp * config.L}  # type: ignore[operator]  # an int


def gd_optimizer(config: Config, eta_tau: float | dict, momentum: float | None = None) -> optax.GradientTransformation:
    """`optax.sgd` with learning rate eta_tau M L on (V, W) and eta_tau M_mlp L on (W1, W2).

    **Arguments:**

    - `eta_tau`: one flow-time rate, or `{"attention": .., "mlp": ..}` (one per group).
    - `momentum`: heavy-ball momentum beta of `optax.sgd` (`None`: plain GD).

    The learning rates (and beta) are injected hyperparameters (they live in the optimiser state), so one
    compiled training program serves every rate.
    """
    eta_tau = training.check_lr(eta_tau, LR_GROUPS, "eta_tau")
    return training.make_optimizer("sgd", eta_tau, momentum, labels=_LABELS, scale=_rate_scale(config))


def optimizer_state(config: Config, particles: Particles, eta_tau: float | dict, momentum: float | None = None) -> Any:
    """The initial state of `gd_optimizer`, its floating leaves (the injected rates) in the particles' dtype."""
    dtype = particles["V"].dtype
    state = gd_optimizer(config, eta_tau, momentum).init(particles)
    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, state
    )


def particles_and_args(
    config: Config, particles: Particles | None = None, data: Prompts | None = None, test: Prompts | None = None
) -> tuple[Particles, dict]:
    """The initial particles (`init_particles(config)` by default) and `observables.make_args` of the training
    set and the test prompts (`training_set`, `held_out_set` by default), each checked against `config`."""
    particles = check_particles(config, init_particles(config) if particles is None else particles)
    data = check_data(config, training_set(config) if data is None else data)
    test = check_data(config, held_out_set(config) if test is None else test, "test")
    return particles, obs.make_args(config, data, test)


def gd_program(basic: bool, heavy: bool = False) -> Callable:
    """The GD loop of `flows.training.training_program` on Q, recording `observables.summary` (`basic=False`)
    or only Q and R (`basic=True`) at the saved steps; `heavy`: heavy ball. Its `data` are the args of
    `observables.make_args`."""

    def loss(particles, args, batch):
        return objective_value(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], True)

    def observe(particles, args):
        if basic:
            return {k: f(0.0, particles, args) for k, f in obs.BASIC_OBSERVABLES.items()}
        return obs.summary(0.0, particles, args)

    template = training.make_optimizer("sgd", 1.0, 0.5 if heavy else None, labels=_LABELS)
    return training.training_program(loss, observe, template)


def train(
    config: Config,
    optimizer: str = "gd",
    lr: float | dict = 0.1,
    steps: int = 100,
    save_every: int = 1,
    *,
    momentum: float = 0.0,
    seed: int | None = None,
    init: str | None = None,
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    mesh: Mesh | None = None,
    observables: str = "all",
) -> NetworkRecord:
    """Full-batch GD (or heavy-ball GD) with optax on the finite network from `init_particles(config)`.

    The same vocabulary as `cooccurrence.train` and `scan_snap.train` (docs/getting_started.md).

    **Arguments:**

    - `optimizer`: `"gd"` (plain full-batch GD) or `"sgd"` (full batch too, with heavy-ball `momentum`;
      `momentum=0` is `"gd"`). `momentum` beta in [0, 1) is for `"sgd"` only (ValueError with `"gd"`).
    - `lr` (> 0): the flow-time rate eta_tau, or `{"attention": .., "mlp": ..}` (one per parameter group).
      The optimiser's learning rates are eta M L (attention) and eta M_mlp L (MLP) on the raw gradients of Q.
    - `steps` (>= 1); `save_every`: record every k-th step (and the last).
    - `seed`, `init`: override `config.seed` (training set, initial particles, test prompts) and
      `config.init` (`None`: the config's), as the same keywords of `solve_flow` and of the other systems.
      `init` with `particles` is a ValueError (the particles are the initialisation).
    - `particles`, `data`, `test`: override the initial particles, the training set and the fresh test
      prompts (defaults from `config`).
    - `mesh`: a `jax.sharding.Mesh` (e.g. `sharding.particle_mesh()`) to shard the particle axis over.
    - `observables`: `"all"` (every entry of `observables.OBSERVABLES` at the saved steps, one velocity
      evaluation each) or `"basic"` (Q and R only: one forward pass each; what throughput runs use).

    **Clock:** step k sits at flow time tau = eta k / (1 - momentum) (`flows.training.flow_time`; eta the
    largest rate of a dict): explicit Euler of the particle flow with step eta is the `"gd"` run, and heavy
    ball at rate eta tracks GD at rate eta / (1 - beta). One compiled program serves every rate, momentum,
    steps, seed, lam and threshold of the same shapes and number of saved steps.

    **Returns:** a `flows.training.NetworkRecord` (`params` the final particles; `extras`: `particles` (the
    same), `tau` (= `ts`), `eta_tau` (the clock's rate), `lr_attention`, `lr_mlp` (the optimiser's learning
    rates, eta M L and eta M_mlp L)). **Raises:** `ValueError` naming a bad argument; `flows.TrainingError`
    when the run goes non-finite, carrying the record truncated before that step (`flows.training.finish`).
    """
    config = with_seed_init(config, seed, init)
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    check_choice("optimizer", optimizer, _OPTIMIZERS)
    lr = training.check_lr(lr, LR_GROUPS)
    beta = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if optimizer == "gd" and beta != 0.0:
        raise ValueError(
            f"momentum is for optimizer='sgd' only (heavy ball), got momentum={momentum!r} with optimizer='gd'"
        )
    steps = check_int("steps", steps, 1)  # int32 step counts in the compiled loop
    save = training.save_steps(steps, save_every)
    check_choice("observables", observables, ("all", "basic"))
    particles, args = particles_and_args(config, particles, data, test)
    if mesh is not None:
        particles = shard_particles(particles, mesh)
    heavy = beta != 0.0
    opt_state = optimizer_state(config, particles, lr, beta if heavy else None)
    build = functools.partial(gd_program, observables == "basic", heavy)
    final, series, _, _, bad, compile_s, run_s = training.run_training(
        "mean_field.train", (observables, heavy), build, particles, opt_state, None, save, args
    )
    logger.info(
        "train %s lr=%s momentum=%g steps=%d: compile %.2f s, run %.2f s", optimizer, lr, beta, steps, compile_s, run_s
    )
    clock = training.clock_rate(lr)
    att, mlp = (lr["attention"], lr["mlp"]) if isinstance(lr, dict) else (lr, lr)
    scale = _rate_scale(config)
    lr_att, lr_mlp = att * scale["attention"], mlp * scale["mlp"]
    extras = {"particles": final, "eta_tau": clock, "lr_attention": lr_att, "lr_mlp": lr_mlp}
    fields: dict[str, Any] = dict(optimizer=optimizer, lr=dict(lr) if isinstance(lr, dict) else lr, config=config)
    fields.update(params=final, clock=clock, momentum=beta, compile_s=compile_s, run_s=run_s, extras=extras)
    try:
        record = training.finish(
            save, series, bad, hint=f"lower lr (the learning rate is lr M L = {lr_att:.4g})", **fields
        )
    except training.TrainingError as error:
        error.record.extras["tau"] = error.record.ts
        raise
    record.extras["tau"] = record.ts
    return record


def train_gd(
    config: Config,
    eta_tau: float,
    steps: int,
    save_every: int = 1,
    *,
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    mesh: Mesh | None = None,
    observables: str = "all",
) -> NetworkRecord:
    """Full-batch GD at flow-time step `eta_tau`: `train(config, "gd", lr=eta_tau, steps=steps, ...)`.

    Learning rates eta_tau M L (attention) and eta_tau M_mlp L (MLP) on the raw gradients of Q, so step k
    sits at flow time tau = k eta_tau and explicit Euler of the particle flow with step eta_tau is this run.
    `eta_tau` (> 0) and the other arguments as in `train`. **Returns:** a `flows.training.NetworkRecord`.
    """
    eta_tau = check_real("eta_tau", eta_tau, low=0.0, strict=True)
    options: dict[str, Any] = dict(particles=particles, data=data, test=test, mesh=mesh, observables=observables)
    return train(config, "gd", eta_tau, steps, save_every, **options)
