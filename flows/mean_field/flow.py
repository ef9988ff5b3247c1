"""The particle Wasserstein gradient flow of the mean-field transformer (Gao et al. 2024, eqs. 2.1-2.4), and
the limits of the optimisers it is trained with.

The empirical law rho^{L,M}_tau(., t) = (1/M) sum_j delta_{theta_{l,j}(tau)} for t in [l/L, (l+1)/L) follows
the Wasserstein gradient flow of Q when every particle moves with the velocity of `network.velocity`,

    d theta_{l,j} / d tau = -grad_theta delta Q/delta rho (theta_{l,j}, t_l) = -M L dQ/d theta_{l,j},

(M_mlp L for MLP particles) in training time tau. This is the gradient flow of the finite network with its
time rescaled by M L, so explicit Euler with step eta_tau is `network.train_gd(config, eta_tau, ...)` and an
adaptive solve is its eta_tau -> 0 limit. Along the flow Q decreases with dQ/dtau = -dissipation
(`observables.dissipation`), the energy identity checked by the tests.

`solve_flow(optimizer=...)` integrates the optimisers' limits on the particles {V, W, W1, W2} with the
objective Q of the training set (`limit_loss`), from the same initial particles:

- `"gd"`: the particle flow itself, gradient flow of Q with the per-group clocks M L and M_mlp L; tau =
  eta_tau * step for GD at learning rates eta_tau M L and eta_tau M_mlp L (`network.train`). Equal to the
  hand-written flow (tested).
- `"momentum"`: the heavy-ball ODE of `train(optimizer="sgd", lr=eta_tau, momentum=beta)`, same clocks,
  tau = eta_tau * step / (1 - beta), friction (1 - beta)^2 / (eta_tau * scale) per group.
- `"sign"`, `"adam"`: sign descent and the Adam ODE of `optax.sign_sgd(lr)` / `optax.adam(lr, ...)` with one
  learning rate lr, clock tau = lr * step: these updates are invariant to the gradient's scale, so every
  particle moves at speed O(1) whatever M and L (no M L clocks; eps is compared with the raw gradients
  dQ/d theta, which are O(1 / (M L)): hence the sign smoothing's default 1e-6).

Adam and sign descent act coordinatewise: their limits are particle ODEs, not Wasserstein gradient flows of Q.
"""

from __future__ import annotations

import diffrax
import numpy as np

from .._checks import check_choice, check_real, real_array
from .._solve import SOLVERS, Trajectory, solve
from ..optim_limits.problem import limit_problem as optimizer_limit
from . import observables as obs
from .data import Config, Prompts, held_out_set, training_set
from .gradients import velocity_autodiff
from .initial import init_particles
from .model import check_data, check_particles, objective_value
from .network import with_seed_init

__all__ = [
    "field_for",
    "limit_loss",
    "limit_problem",
    "particle_problem",
    "solve_flow",
    "solve_particles",
    "vector_field",
]


def vector_field(t, particles, args):
    """d particles / d tau for `args = observables.make_args(config, data, test)` (a particle dict):
    `network.velocity(method="autodiff")`, i.e. -M L dQ/d theta per attention particle and -M_mlp L dQ/d w
    per MLP particle. Differentiable in forward and reverse mode (implicit solvers)."""
    return velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], rev=False)


def _vector_field_rev(t, particles, args):
    """`vector_field` through the attention with the hand-written reverse-mode rule: the same values, a
    faster gradient, no forward-mode AD (what the explicit solvers and GD use)."""
    return velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], rev=True)


def field_for(solver: str):
    """`vector_field` for implicit solvers (their Newton iterations differentiate it in forward mode), the
    faster reverse-mode form otherwise (explicit ODE and SDE solvers, GD)."""
    cls = SOLVERS.get(solver) if isinstance(solver, str) else None  # a bad name is reported by flows.solve
    implicit = cls is not None and issubclass(cls, diffrax.AbstractImplicitSolver)
    return vector_field if implicit else _vector_field_rev


def limit_loss(particles, batch):
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


def _particles_and_args(config, particles, data, test):
    particles = check_particles(config, init_particles(config) if particles is None else particles)
    data = check_data(config, training_set(config) if data is None else data)
    test = check_data(config, held_out_set(config) if test is None else test, "test")
    return particles, obs.make_args(config, data, test)


def limit_problem(
    config: Config,
    optimizer: str,
    optim_args: dict | None = None,
    *,
    particles=None,
    data: Prompts | None = None,
    test: Prompts | None = None,
):
    """(limit, args, particles0) of `solve_flow(optimizer=...)`: the `flows.optim_limits.Limit` on
    `limit_loss`, its args (`observables.make_args` of the data under "batch", the clocks) and the initial
    particles."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a mean_field.Config, got {type(config).__name__}")
    particles, batch = _particles_and_args(config, particles, data, test)
    return (*_optimizer_limit(config, optimizer, optim_args, batch), particles)


def _particles_of(y):
    return y["theta"] if "theta" in y else y


def _limit_summary(t, y, args):
    return obs.summary(t, _particles_of(y), args["batch"])


def _limit_Q(t, y, args):
    return obs.objective_Q(t, _particles_of(y), args["batch"])


def _limit_R(t, y, args):
    return obs.risk_R(t, _particles_of(y), args["batch"])


_LIMIT_OBSERVABLES = {"all": _limit_summary, "basic": {"Q": _limit_Q, "R": _limit_R}}


def particle_problem(
    config: Config,
    ts,
    particles=None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    observables: str | dict = "all",
):
    """(ts, particles, args, observables) of a particle solve: `ts` checked (non-decreasing, starting at 0, >= 2
    entries), the initial particles (`init_particles(config)` by default), `observables.make_args` of the
    training set and the test prompts (`training_set`, `held_out_set` by default), and `observables`
    resolved: `"all"` is `observables.summary`, `"basic"` `observables.BASIC_OBSERVABLES`, a dict itself."""
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    if isinstance(observables, str):
        observables = {"all": obs.summary, "basic": obs.BASIC_OBSERVABLES}[
            check_choice("observables", observables, ("all", "basic"))
        ]
    return (ts, *_particles_and_args(config, particles, data, test), observables)


def solve_particles(
    config: Config,
    ts,
    *,
    particles=None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    solver: str = "tsit5",
    rtol: float = 1e-7,
    atol: float = 1e-9,
    dt: float | None = None,
    max_steps: int = 100_000,
    observables: str | dict = "all",
    save_states: bool = False,
    mesh=None,
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
    from .sharding import shard_particles

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
    options = dict(
        t1=float(ts[-1]),
        ts=ts,
        args=args,
        solver=solver,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        observables=observables,
        save_states=save_states,
        progress=progress,
        throw=throw,
    )
    if dt is not None:
        options.update(dt0=check_real("dt", dt, low=0.0, strict=True), constant_step=True)
    return solve(field, y0, **options)


#: The name of the flow solve in every system (`cooccurrence.solve_flow`, `scan_snap.solve_flow`).
solve_flow = solve_particles
