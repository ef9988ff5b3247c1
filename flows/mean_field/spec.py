"""The mean-field transformer (Gao et al., NeurIPS 2024) as a `flows.System`: the spec that `network.train`,
`solve_flow` and `solve_reference` (below) run on the shared driver (`flows.train`, `flows.solve_flow`,
`flows.compare`).

- `init`: `init_particles` of the config re-seeded by the driver's seed, in the spec's parameter groups
  `{"attention": {"V", "W"}, "mlp": {"W1", "W2"}}` (`flow.nest`; the keys of a per-group learning rate).
- `loss(params, batch)`: the objective Q = R + weight decay (eq. 2.3, `model.objective_value`) on the batch's
  prompts `Z0`, `y`; a minibatch's Q is the mean of its prompts' losses plus the decay.
- `data`: `observables.make_args` of the training set and the fresh test prompts (`rows = ("Z0", "y")`: SGD
  draws training prompts; the test prompts, lam, the threshold and d are held whole).
- `observe`: `observables.summary` (`observables="all"`: Q, R, dissipation, speeds, RMSEs) or Q and R
  (`"basic"`).
- `rate_scale`: `{"attention": M L, "mlp": M_mlp L}`: every optimiser trains the attention particles at
  lr M L and the MLP particles at lr M_mlp L, and every limit runs them on the clocks M L and M_mlp L of the
  flow time tau = lr * step. The gradient flow is then the particle flow d theta/d tau = -M L dQ/d theta;
  Adam and sign descent, invariant to the gradient's scale but not to the learning rate's, move the
  particles at speed M L (resp. M_mlp L) times their unit-rate limits.
- `reduced`: `"particles"` (`flow.particle_limit`: the particle flow on the particle dict) and `"reference"`
  (`reference.reference_limit`: the continuous-depth reference, for `config.init` "tied" or "smooth");
  `grid.solve_grid` adds `"grid"` (the PDE on a grid of a charted model).
- `sign_eps` 1e-6 (the gradients are O(1 / (M L))); solves by Tsit5 at rtol 1e-7, atol 1e-9, observables only.

Seeds: the config's streams, as before the driver: the training set from the data key of `config.keys()`, the
initial particles from its init key, the test prompts from its test key; minibatches and the SDE's Brownian
motion from the data key folded with 1 and 2.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import Mesh

from .. import driver, training
from .._checks import check_choice, check_real
from ..system import System
from ..trajectory import Trajectory
from . import observables as obs
from .data import Config, Particles, Prompts, held_out_set, training_set
from .flow import field_for, nest, particle_limit, particles_of, vector_field
from .initial import init_particles
from .model import check_data, check_particles, objective_value
from .reference import check_nodes, init_reference, reference_limit
from .sharding import shard_particles

__all__ = [
    "OBSERVE",
    "SOLVER",
    "SOLVE_OPTIONS",
    "START_OPTIONS",
    "demo",
    "loss",
    "observe",
    "observe_basic",
    "overridden",
    "solve_flow",
    "solve_options",
    "solve_reference",
    "split_options",
    "start",
    "system",
    "with_seed_init",
]

#: the default solve options of the particle flow and the optimiser limits (`flows.solve` keywords).
SOLVER = {"solver": "auto", "rtol": 1e-7, "atol": 1e-9, "save_states": False}


def with_seed_init(config: Config, seed: int | None = None, init: str | None = None) -> Config:
    """`config` with `seed` and/or `init` replaced (`None` keeps the config's): the `seed=`, `init=` keywords
    of `train` and `solve_flow`, as in every system (ValueError naming a bad value)."""
    return training.with_seed_init(config, Config, seed, init)


def loss(params: dict, batch: dict) -> jax.Array:
    """Q (eq. 2.3) of the parameters on the batch's prompts (`batch["Z0"]`, `batch["y"]`, with `"lam"`,
    `"threshold"`, `"d"`), through the attention's reverse-mode rule (`model.attention_update_rev`)."""
    return objective_value(
        particles_of(params), batch["Z0"], batch["y"], batch["lam"], batch["threshold"], batch["d"], True
    )


def observe(params: dict, data: dict) -> dict:
    """`observables.summary`: Q, R, dissipation, max and mean speed, train and test RMSE."""
    return obs.summary(0.0, particles_of(params), data)


def observe_basic(params: dict, data: dict) -> dict:
    """Q and R (`observables.BASIC_OBSERVABLES`: one forward pass each)."""
    particles = particles_of(params)
    return {name: f(0.0, particles, data) for name, f in obs.BASIC_OBSERVABLES.items()}


#: the observables of `system(config, observables=...)`.
OBSERVE = {"all": observe, "basic": observe_basic}


def _init(config: Config) -> dict:
    return nest(init_particles(config))


def _data(config: Config) -> dict:
    return obs.make_args(config, training_set(config), held_out_set(config))


def _streams(config: Config, seed: int) -> dict:
    config = config.replace(seed=seed)
    key = config.keys()[0]
    return {"init": config, "data": config, "batch": jax.random.fold_in(key, 1), "noise": jax.random.fold_in(key, 2)}


@functools.lru_cache(maxsize=32)
def _system(config: Config, observables: str) -> System:
    return System(
        name="mean_field",
        init=_init,
        loss=loss,
        data=_data,
        observe=OBSERVE[observables],
        rows=("Z0", "y"),
        rate_scale={"attention": config.M * config.L, "mlp": config.M_mlp * config.L},  # type: ignore[operator]
        reduced={"particles": particle_limit(), "reference": reference_limit(config, observables=observables)},
        seed=config.seed,
        streams=functools.partial(_streams, config),
        sign_eps=1e-6,
        solver=SOLVER,
        config=config,
    )


def system(config: Config, observables: str = "all") -> System:
    """The `flows.System` of `config` (module docstring).

    **Arguments:** `config`: the `Config`; `observables`: `"all"` (`observables.summary`) or `"basic"` (Q and R).

    **Returns:** the `flows.System` (the same object for the same arguments).

    **Raises:** `ValueError` naming a bad argument.
    """
    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    return _system(config, check_choice("observables", observables, tuple(OBSERVE)))


def overridden(
    spec: System, config: Config, particles: Particles | None, data: Prompts | None, test: Prompts | None
) -> tuple[System, Particles | None]:
    """(the spec on the given training and test prompts, the given particles checked): the overrides of
    `start` (the spec itself and `None` without them)."""
    if particles is not None:
        particles = check_particles(config, particles)
    if data is None and test is None:
        return spec, particles
    data = check_data(config, training_set(config) if data is None else data)
    test = check_data(config, held_out_set(config) if test is None else test, "test")
    return spec.replace(data=obs.make_args(config, data, test)), particles


#: the keywords of `start` that `network.train` and `solve_flow` take as `**options`.
START_OPTIONS = ("seed", "init", "observables", "particles", "data", "test", "mesh")


def start(
    config: Config,
    *,
    seed: int | None = None,
    init: str | None = None,
    observables: str = "all",
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    mesh: Mesh | None = None,
) -> tuple[Config, System, Particles | None]:
    """Where `network.train` and `solve_flow` start: the config, its spec and the initial particles, with the
    overrides those functions take as `**options` (names in `START_OPTIONS`, defined and documented here).

    **Arguments:**

    - `seed`, `init` (the config): override `config.seed` (training set, initial particles, test prompts) and
      `config.init` (`None`: the config's), as the same keywords of the other systems.
    - `observables` (the spec): `"all"` (every entry of `observables.OBSERVABLES`, `observables.summary`) or
      `"basic"` (Q and R only: one forward pass each, the cheapest).
    - `particles`, `data`, `test` (the start): override the initial particles, the training set and the fresh
      test prompts (defaults from `config`); `init` with `particles` is a ValueError (the particles are the
      initialisation).
    - `mesh`: a `jax.sharding.Mesh` (e.g. `sharding.particle_mesh()`) to shard the particle axis over.

    **Returns:** (the config with `seed`, `init` applied, `system(config, observables)` on the given prompts,
    the given particles checked and sharded over `mesh`, or `None` for the spec's own).

    **Raises:** `ValueError` naming a bad argument.
    """
    config = with_seed_init(config, seed, init)
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    spec, particles = overridden(system(config, observables), config, particles, data, test)
    if mesh is not None:
        particles = shard_particles(init_particles(config) if particles is None else particles, mesh)
    return config, spec, particles


def split_options(caller: str, options: dict[str, Any], *groups: Sequence[str]) -> list[dict[str, Any]]:
    """`options` split by the keyword names of `groups`, one dict per group: how a thin wrapper passes its
    `**options` on to the functions that define them (`start`, `flows.solve`, `flows.train`).

    **Raises:** `ValueError` naming a keyword in no group, and listing those `caller` takes.
    """
    known = [name for group in groups for name in group]
    unknown = sorted(map(str, set(options) - set(known)))
    if unknown:
        raise ValueError(f"{caller} got unknown keyword(s) {unknown}: it takes {', '.join(known)}")
    return [{k: v for k, v in options.items() if k in group} for group in groups]


#: the `flows.solve` keywords that `solve_flow` and `solve_reference` take as `**options` (over `SOLVER`).
SOLVE_OPTIONS = ("solver", "rtol", "atol", "max_steps", "progress", "throw", "save_states")


def solve_options(caller: str, dt: float | None, options: dict[str, Any]) -> dict[str, Any]:
    """The `flows.solve` keywords of `caller`: `options` (names from `SOLVE_OPTIONS`), with constant steps of
    `dt` (checked, > 0) when it is given.

    **Raises:** `ValueError` naming a keyword `caller` does not take, or a bad `dt`.
    """
    unknown = sorted(set(options) - set(SOLVE_OPTIONS))
    if unknown:
        raise ValueError(
            f"{caller} got unknown keyword(s) {unknown}: it takes dt and the flows.solve options {SOLVE_OPTIONS}"
        )
    if dt is not None:
        options = {**options, "dt0": check_real("dt", dt, low=0.0, strict=True), "constant_step": True}
    return options


def solve_flow(
    config: Config, ts: Any, *, optimizer: str | None = None, optim_args: dict | None = None, **options: Any
) -> Trajectory:
    """Integrate the particle flow, or an optimiser's limit, from `init_particles(config)` on the shared driver
    (`flows.solve_flow(system(config), ...)`) and save the observables.

    **Arguments:**

    - `ts`: non-decreasing save times in flow time tau, starting at 0; the horizon is `ts[-1]`.
    - `optimizer`: `None` (default) integrates the particle flow (the spec's `reduced="particles"`);
      `"gd"`, `"momentum"`, `"sign"`, `"adam"` the optimiser's limit on the spec's parameters, each group on
      its clock M L or M_mlp L (`optim_args` as in every system, `flows.optim_limits.limit_problem`: "lr"
      (eta_tau) and "beta" for momentum, "eps" for sign (default 1e-6), "lr", "b1", "b2" or "c1", "c2" for
      Adam; the limits of optax at learning rates lr M L and lr M_mlp L).
    - `options`: the keywords of `start`, defined and documented there (`START_OPTIONS`: `observables`,
      `seed`, `init`, `particles`, `data`, `test`, and `mesh` for the particle flow only: the limits start
      unsharded), as in `network.train`; `dt`: constant steps of this size instead of adaptive ones (with
      `solver="euler"` and `dt = eta_tau` the particle flow is `train(config, "gd", lr=eta_tau, ...)` to
      rounding); and the `flows.solve` keywords (documented there) named in `SOLVE_OPTIONS`: `solver`, `rtol`,
      `atol`, `max_steps`, `progress`, `throw`, `save_states`, over the defaults `SOLVER` ("auto", rtol 1e-7,
      atol 1e-9, observables only). Another keyword is a ValueError naming it. The particle flow picks the
      forward-mode field for implicit solvers (`flow.field_for`). `save_states` also keeps the states
      (`traj.ys`: the particle dict for the particle flow; the limit's state, the spec's parameters or a dict
      with them under "theta" and the optimiser's moments, otherwise).

    **Returns:** a `flows.Trajectory` with `observables["Q"]`, `["R"]`, ... at `ts`.

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed solve (unless `throw=False`).
    """
    overrides, options = split_options("solve_flow", options, START_OPTIONS, ("dt", *SOLVE_OPTIONS))
    driver.check_optim_args(optimizer, optim_args)
    if optimizer is not None and overrides.get("mesh") is not None:
        raise ValueError("mesh is for the particle flow (optimizer=None): the limits start unsharded")
    config, spec, particles = start(config, **overrides)
    options = solve_options("solve_flow", options.pop("dt", None), options)
    if optimizer is not None:
        y0 = None if particles is None else nest(particles)
        return driver.solve_flow(spec, ts, optimizer, optim_args, y0=y0, **options)
    if field_for(options.get("solver", SOLVER["solver"])) is vector_field:  # implicit: the forward-mode field
        spec = spec.replace(reduced={**spec.reduced, "particles": particle_limit(implicit=True)})
    return driver.solve_flow(spec, ts, reduced="particles", y0=particles, **options)


def solve_reference(
    config: Config,
    ts: Any,
    *,
    K: int | None = None,
    nodes: Particles | None = None,
    substeps: int = 4,
    depth_solver: str = "tsit5",
    observables: str | dict = "all",
    **options: Any,
) -> Trajectory:
    """Integrate the continuous-depth reference d nodes/d tau = `reference.reference_velocity` on the shared
    driver (`flows.solve_flow(system(config), ts, reduced="reference")`).

    **Arguments:**

    - `ts`: increasing save times in flow time tau, starting at 0; the horizon is `ts[-1]`.
    - `K`: depth nodes (default 9) of `reference.init_reference(config, K)`; `nodes`: start from these node
      values instead (K is then read from them; a given `K` must match).
    - `substeps`, `depth_solver`: the depth integration (as in `reference.reference_states`).
    - `observables`: `"all"` (`reference.REFERENCE_OBSERVABLES`), `"basic"` (Q and R only, the cheapest to
      compile) or a dict name -> f(t, nodes, args) with `args = reference.make_reference_args(...)`.
    - `options`: as in `solve_flow`: `data`, `test` (the training prompts and fresh test prompts, defaults from
      `config`: the keywords of `start`), `dt` (constant steps instead of adaptive) and the `flows.solve`
      keywords named in `SOLVE_OPTIONS`, over `SOLVER` (`save_states` also keeps the node values at every
      saved time, `traj.ys`); another keyword is a ValueError naming it.

    **Returns:** a `flows.Trajectory` with `observables["Q"]`, `["R"]`, ... at `ts`.

    **Raises:** `ValueError` for bad arguments, naming the field (`init` for `config.init == "iid"`, `K`,
    `substeps`, `nodes[...]`); `flows.FlowError` for a failed solve (unless `throw=False`).
    """
    overrides, options = split_options("solve_reference", options, ("data", "test"), ("dt", *SOLVE_OPTIONS))
    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    limit = reference_limit(config, 9 if K is None else K, substeps, depth_solver, observables)
    nodes = check_nodes(config, init_reference(config, 9 if K is None else K) if nodes is None else nodes)
    if K is not None and K != nodes["V"].shape[0]:
        raise ValueError(f"K = {K} does not match the {nodes['V'].shape[0]} nodes given")
    _, spec, _ = start(config, observables="basic", **overrides)
    spec = spec.replace(reduced={"reference": limit})
    options = solve_options("solve_reference", options.pop("dt", None), options)
    return driver.solve_flow(spec, ts, reduced="reference", y0=nodes, **options)


def demo() -> System:
    """A small instance for the tests that run over every spec (`flows.registry`): L = 2, M = 4, M_mlp = 6,
    D = 3, 16 training prompts; Q and R observed."""
    config = Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)
    return system(config, "basic")
