"""The particle Wasserstein gradient flow of the mean-field transformer (theory digest §2.3-2.4).

The empirical law rho^{L,M}_tau(., t) = (1/M) sum_j delta_{theta_{l,j}(tau)} for t in [l/L, (l+1)/L) follows
the Wasserstein gradient flow of Q when every particle moves with the velocity of `network.velocity`,

    d theta_{l,j} / d tau = -grad_theta delta Q/delta rho (theta_{l,j}, t_l) = -M L dQ/d theta_{l,j},

(M_mlp L for MLP particles) in training time tau. This is the gradient flow of the finite network with its
time rescaled by M L, so explicit Euler with step eta_tau is `network.train_gd(config, eta_tau, ...)` and an
adaptive solve is its eta_tau -> 0 limit. Along the flow Q decreases with dQ/dtau = -dissipation
(`observables.dissipation`), the energy identity checked by the tests.
"""

from __future__ import annotations

import diffrax
import numpy as np

from .._checks import check_real, real_array
from ..solve import SOLVERS, Trajectory, solve
from . import observables as obs
from .data import Config, Prompts, held_out_set, training_set
from .network import _check_data, _velocity_autodiff, check_particles, init_particles, with_seed_init

__all__ = ["solve_flow", "solve_particles", "vector_field"]


def vector_field(t, particles, args):
    """d particles / d tau for `args = observables.make_args(config, data, test)` (a particle dict):
    `network.velocity(method="autodiff")`, i.e. -M L dQ/d theta per attention particle and -M_mlp L dQ/d w
    per MLP particle. Differentiable in forward and reverse mode (implicit solvers)."""
    return _velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"],
                              rev=False)


def _vector_field_rev(t, particles, args):
    """`vector_field` through the attention with the hand-written reverse-mode rule: the same values, a
    faster gradient, no forward-mode AD (what the explicit solvers and GD use)."""
    return _velocity_autodiff(particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"],
                              rev=True)


def _field_for(solver: str):
    """Implicit solvers differentiate the vector field (Newton iterations) and get the forward-mode one."""
    cls = SOLVERS.get(solver) if isinstance(solver, str) else None  # a bad name is reported by flows.solve
    implicit = cls is not None and issubclass(cls, diffrax.AbstractImplicitSolver)
    return vector_field if implicit else _vector_field_rev


def solve_particles(config: Config, ts, *, particles=None, data: Prompts | None = None,
                    test: Prompts | None = None, solver: str = "tsit5", rtol: float = 1e-7,
                    atol: float = 1e-9, dt: float | None = None, max_steps: int = 100_000,
                    observables: str | dict = "all", save_states: bool = False, mesh=None,
                    progress: bool = False, throw: bool = True, seed: int | None = None,
                    init: str | None = None) -> Trajectory:
    """Integrate the particle flow from `init_particles(config)` with `flows.solve` and save observables.
    `solve_flow` is the same function (the name every system uses).

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
      cheapest), or a dict name -> f(t, particles, args).
    - `save_states`: also keep the particles at every saved time (`traj.ys`, memory L (M + M_mlp) per save).
    - `mesh`: a mesh from `sharding.particle_mesh()` to split the particle axis over devices.
    - other arguments as in `flows.solve`.

    **Returns:** a `flows.Trajectory` whose `observables["Q"]`, `["R"]`, ... are given at `ts`; the final
    particles are `traj.ys` at the last save when `save_states=True`.
    """
    from .sharding import shard_particles

    config = with_seed_init(config, seed, init)
    if init is not None and particles is not None:
        raise ValueError("init must be None when particles are given (the particles are the initialisation)")
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    if isinstance(observables, str):
        if observables not in ("all", "basic"):
            raise ValueError(f"observables must be 'all', 'basic' or a dict, got {observables!r}")
        observables = obs.summary if observables == "all" else obs.BASIC_OBSERVABLES
    particles = check_particles(config, init_particles(config) if particles is None else particles)
    data = _check_data(config, training_set(config) if data is None else data)
    test = _check_data(config, held_out_set(config) if test is None else test, "test")
    if mesh is not None:
        particles = shard_particles(particles, mesh)
    args = obs.make_args(config, data, test)
    options = dict(t1=float(ts[-1]), ts=ts, args=args, solver=solver, rtol=rtol, atol=atol,
                   max_steps=max_steps, observables=observables, save_states=save_states,
                   progress=progress, throw=throw)
    if dt is not None:
        options.update(dt0=check_real("dt", dt, low=0.0, strict=True), constant_step=True)
    return solve(_field_for(solver), particles, **options)


#: The name of the flow solve in every system (`cooccurrence.solve_flow`, `scan_snap.solve_flow`).
solve_flow = solve_particles
