"""The particle Wasserstein gradient flow of the mean-field transformer (Gao et al. 2024, eqs. 2.1-2.4), and the
limits of the optimisers it is trained with.

Every particle moves with d theta_{l,j}/d tau = -M L dQ/d theta_{l,j} (M_mlp L for MLP particles), the gradient
flow of the finite network with its time rescaled by M L: explicit Euler with step eta_tau is
`network.train_gd(config, eta_tau, ...)`. `solve_flow(optimizer=...)` integrates the limits of GD, heavy ball,
sign descent and Adam on the same particles (`flows.optim_limits`). See docs/systems/mean_field.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import diffrax
import jax
import numpy as np
from jax.sharding import Mesh

from .._checks import check_choice, check_real, real_array
from .._solve import SOLVERS, Trajectory, solve
from ..optim_limits.problem import limit_problem as optimizer_limit
from . import observables as obs
from .data import Config, Particles, Prompts
from .gradients import velocity_autodiff
from .model import objective_value
from .network import particles_and_args, with_seed_init
from .sharding import shard_particles

__all__ = [
    "field_for",
    "limit_loss",
    "limit_problem",
    "particle_problem",
    "save_times",
    "solve_flow",
    "solve_from",
    "solve_particles",
    "vector_field",
]


def vector_field(t: float, particles: Particles, args: dict) -> Particles:
    """d particles / d tau for `args = observables.make_args(config, data, test)` (a particle dict):
    `network.velocity(method="autodiff")`, i.e. -M L dQ/d theta per attention particle and -M_mlp L dQ/d w
    per MLP particle. Differentiable in forward and reverse mode (implicit solvers)."""
    return velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], rev=False)


def _vector_field_rev(t, particles, args):
    """`vector_field` through the attention with the hand-written reverse-mode rule: the same values, a
    faster gradient, no forward-mode AD (what the explicit solvers and GD use)."""
    return velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], rev=True)


def field_for(solver: str) -> Callable:
    """`vector_field` for implicit solvers (their Newton iterations differentiate it in forward mode), the
    faster reverse-mode form otherwise (explicit ODE and SDE solvers, GD)."""
    cls = SOLVERS.get(solver) if isinstance(solver, str) else None  # a bad name is reported by flows.solve
    implicit = cls is not None and issubclass(cls, diffrax.AbstractImplicitSolver)
    return vector_field if implicit else _vector_field_rev


def limit_loss(particles: Particles, batch: dict) -> jax.Array:
    """Q of the particles on the training prompts, as `loss(theta, batch)` for `flows.optim_limits` (`batch`
    from `observables.make_args`)."""
    return objective_value(particles, batch["Z0"], batch["y"], batch["lam"], batch["threshold"], batch["d"], True)


def _scales(config):
    """The groups' learning rates relative to eta_tau: M L on the attention, M_mlp L on the MLP particles."""
    att, mlp = config.M * config.L, config.M_mlp * config.L
    return {"V": float(att), "W": float(att), "W1": float(mlp), "W2": float(mlp)}


def _optimizer_limit(config, optimizer, optim_args, batch):
    scaled = optimizer in ("gd", "momentum")  # sign and Adam are invariant to the gradient's scale
    return optimizer_limit(
        limit_loss, optimizer, optim_args, batch, rates=_scales(config) if scaled else None, sign_eps=1e-6
    )


def limit_problem(
    config: Config,
    optimizer: str,
    optim_args: dict | None = None,
    *,
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
) -> tuple[Any, dict, Particles]:
    """(limit, args, particles0) of `solve_flow(optimizer=...)`: the `flows.optim_limits.Limit` on
    `limit_loss`, its args (`observables.make_args` of the data under "batch", the clocks) and the initial
    particles."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    particles, batch = particles_and_args(config, particles, data, test)
    return (*_optimizer_limit(config, optimizer, optim_args, batch), particles)


def _on_limit(observable):
    """`observable(t, particles, args)` read off the state of an optimiser limit (the particles, or a dict with
    them under "theta")."""
    return lambda t, y, args: observable(t, y["theta"] if "theta" in y else y, args["batch"])


_OBSERVABLES: dict[str, Any] = {"all": obs.summary, "basic": obs.BASIC_OBSERVABLES}
_LIMIT_OBSERVABLES: dict[str, Any] = {
    "all": _on_limit(obs.summary),
    "basic": {name: _on_limit(f) for name, f in obs.BASIC_OBSERVABLES.items()},
}


def save_times(ts: Any) -> np.ndarray:
    """`ts` as a float array, checked: finite, non-decreasing, 1-D, starting at 0, with >= 2 entries."""
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    return ts


def solve_from(field: Callable, y0: Any, ts: np.ndarray, args: Any, dt: float | None, **options: Any) -> Trajectory:
    """`flows.solve(field, y0, ...)` from tau = 0 to `ts[-1]`, saving at `ts` (from `save_times`): adaptive
    steps, or constant steps of size `dt` when it is given; `options`: the other keywords of `flows.solve`."""
    dt0 = None if dt is None else check_real("dt", dt, low=0.0, strict=True)
    return solve(field, y0, t1=float(ts[-1]), ts=ts, args=args, dt0=dt0, constant_step=dt is not None, **options)


def particle_problem(
    config: Config,
    ts: Any,
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    observables: str | dict = "all",
) -> tuple[np.ndarray, Particles, dict, Any]:
    """(ts, particles, args, observables) of a particle solve: `ts` checked (non-decreasing, starting at 0, >= 2
    entries), the initial particles (`init_particles(config)` by default), `observables.make_args` of the
    training set and the test prompts (`training_set`, `held_out_set` by default), and `observables`
    resolved: `"all"` is `observables.summary`, `"basic"` `observables.BASIC_OBSERVABLES`, a dict itself."""
    ts = save_times(ts)
    if isinstance(observables, str):
        observables = _OBSERVABLES[check_choice("observables", observables, tuple(_OBSERVABLES))]
    return (ts, *particles_and_args(config, particles, data, test), observables)


def solve_particles(
    config: Config,
    ts: Any,
    *,
    particles: Particles | None = None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    solver: str = "auto",
    rtol: float = 1e-7,
    atol: float = 1e-9,
    dt: float | None = None,
    max_steps: int | None = None,
    observables: str | dict = "all",
    save_states: bool = False,
    mesh: Mesh | None = None,
    progress: bool = False,
    throw: bool = True,
    seed: int | None = None,
    init: str | None = None,
    optimizer: str | None = None,
    optim_args: dict | None = None,
) -> Trajectory:
    """Integrate the particle flow, or an optimiser's limit, from `init_particles(config)` with `flows.solve`
    and save observables. `solve_flow` is the same function (the name every system uses).

    **Arguments:**

    - `ts`: increasing save times in flow time tau, starting at 0; the horizon is `ts[-1]`.
    - `seed`, `init`: override `config.seed` and `config.init` (`None`: the config's), as in `network.train`:
      the flow then starts where `train(config, ..., seed=seed, init=init)` starts, on the same data.
    - `particles`, `data`, `test`: override the initial particles, the training set and the test prompts
      (`init` with `particles` is a ValueError).
    - `solver`, `rtol`, `atol`: adaptive solve (default Tsit5 with a PID controller).
    - `dt`: take constant steps of this size instead (with `solver="euler"` and `dt = eta_tau` this is
      `train(config, "gd", lr=eta_tau, ...)` to rounding).
    - `observables`: `"all"` (every entry of `observables.OBSERVABLES`), `"basic"` (Q and R only, the
      cheapest), or a dict name -> f(t, particles, args) (not with an optimizer).
    - `save_states`: also keep the state at every saved time (`traj.ys`: the particles, memory L (M + M_mlp)
      per save; with an optimizer the limit's state, the particles or a dict with them under "theta" and
      the optimiser's moments).
    - `mesh`: a mesh from `sharding.particle_mesh()` to split the particle axis over devices.
    - `optimizer`, `optim_args`: `None` (default) integrates the particle flow; `"gd"`, `"momentum"`,
      `"sign"`, `"adam"` the optimiser's limit (module docstring). `optim_args` as in every system
      (`flows.optim_limits.limit_problem`): "lr" (eta_tau for momentum), "beta", "eps" (sign: default 1e-6),
      "b1", "b2" or "c1", "c2".
    - other arguments as in `flows.solve`.

    **Returns:** a `flows.Trajectory` whose `observables["Q"]`, `["R"]`, ... are given at `ts`; the final
    particles are `traj.ys` at the last save when `save_states=True`.
    """
    config = with_seed_init(config, seed, init)
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    on_limit = optimizer is not None
    if optim_args is not None and not on_limit:
        raise ValueError("optim_args needs an optimizer ('gd', 'momentum', 'sign' or 'adam')")
    if on_limit:
        observables = _LIMIT_OBSERVABLES[check_choice("observables", observables, tuple(_LIMIT_OBSERVABLES))]
    ts, particles, args, observables = particle_problem(config, ts, particles, data, test, observables)
    if mesh is not None:
        particles = shard_particles(particles, mesh)
    field, y0 = field_for(solver), particles
    if on_limit:
        limit, args = _optimizer_limit(config, optimizer, optim_args, args)
        field, y0 = limit.vector_field, limit.initial_state(particles)
    options = dict(solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, progress=progress, throw=throw)
    return solve_from(field, y0, ts, args, dt, observables=observables, save_states=save_states, **options)


#: The name of the flow solve in every system (`cooccurrence.solve_flow`, `scan_snap.solve_flow`).
solve_flow = solve_particles
