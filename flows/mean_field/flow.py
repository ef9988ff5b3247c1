"""The particle Wasserstein gradient flow of the mean-field transformer (Gao et al. 2024, eqs. 2.1-2.4) as a named
limit of its spec (`spec.system(config).reduced["particles"]`).

Every particle moves with d theta_{l,j}/d tau = -M L dQ/d theta_{l,j} (M_mlp L for MLP particles): the gradient
flow of the finite network's objective Q with its groups' clocks M L and M_mlp L (the spec's `rate_scale`), on
the particle dict. Explicit Euler with step eta_tau is `network.train(config, "gd", lr=eta_tau, ...)`. See
docs/systems/mean_field.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import diffrax
import numpy as np

from .._checks import check_choice, real_array
from .._solve import SOLVERS
from ..system import Reduced
from . import observables as obs
from .data import Config, Particles, Prompts, held_out_set, training_set
from .gradients import velocity_autodiff
from .initial import init_particles
from .model import ATTENTION, MLP, check_data, check_particles

__all__ = [
    "OVERRIDES",
    "field_for",
    "nest",
    "particle_limit",
    "particle_problem",
    "particles_and_args",
    "particles_of",
    "save_times",
    "vector_field",
]


def vector_field(t: float, particles: Particles, args: dict) -> Particles:
    """d particles / d tau for `args = observables.make_args(config, data, test)` (a particle dict):
    `network.velocity(method="autodiff")`, i.e. -M L dQ/d theta per attention particle and -M_mlp L dQ/d w
    per MLP particle. Differentiable in forward and reverse mode (implicit solvers)."""
    return velocity_autodiff(particles, *obs.objective_inputs(args), rev=False)


def _vector_field_rev(t, particles, args):
    """`vector_field` through the attention with the hand-written reverse-mode rule: the same values, a
    faster gradient, no forward-mode AD (what the explicit solvers and GD use)."""
    return velocity_autodiff(particles, *obs.objective_inputs(args), rev=True)


def field_for(solver: str) -> Callable:
    """`vector_field` for implicit solvers (their Newton iterations differentiate it in forward mode), the
    faster reverse-mode form otherwise (explicit ODE and SDE solvers, GD)."""
    cls = SOLVERS.get(solver) if isinstance(solver, str) else None  # a bad name is reported by flows.solve
    implicit = cls is not None and issubclass(cls, diffrax.AbstractImplicitSolver)
    return vector_field if implicit else _vector_field_rev


def nest(particles: Particles) -> dict:
    """The spec's parameters of a particle dict: the groups `{"attention": {"V", "W"}, "mlp": {"W1", "W2"}}`
    (the keys of a per-group learning rate and of the clocks M L, M_mlp L)."""
    return {"attention": {k: particles[k] for k in ATTENTION}, "mlp": {k: particles[k] for k in MLP}}


def particles_of(params: dict) -> Particles:
    """The particle dict `{"V", "W", "W1", "W2"}` of the spec's parameters (`nest` undone)."""
    return {**params["attention"], **params["mlp"]}


#: the keywords of `particles_and_args`: the overrides of a particle solve's start.
OVERRIDES = ("particles", "data", "test")


def particles_and_args(
    config: Config, particles: Particles | None = None, data: Prompts | None = None, test: Prompts | None = None
) -> tuple[Particles, dict]:
    """The initial particles (`init_particles(config)` by default) and `observables.make_args` of the training
    set and the test prompts (`training_set`, `held_out_set` by default), each checked against `config`."""
    particles = check_particles(config, init_particles(config) if particles is None else particles)
    data = check_data(config, training_set(config) if data is None else data)
    test = check_data(config, held_out_set(config) if test is None else test, "test")
    return particles, obs.make_args(config, data, test)


_OBSERVABLES: dict[str, Any] = {"all": obs.summary, "basic": obs.BASIC_OBSERVABLES}


def save_times(ts: Any) -> np.ndarray:
    """`ts` as a float array, checked: finite, non-decreasing, 1-D, starting at 0, with >= 2 entries."""
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    return ts


def particle_problem(
    config: Config, ts: Any, observables: str | dict = "all", **overrides: Any
) -> tuple[np.ndarray, Particles, dict, Any]:
    """(ts, particles, args, observables) of a particle solve: `ts` checked (non-decreasing, starting at 0, >= 2
    entries), `particles_and_args(config, **overrides)` (the keywords `particles`, `data`, `test`, documented
    there; another name is a TypeError naming it), and `observables` resolved: `"all"` is
    `observables.summary`, `"basic"` `observables.BASIC_OBSERVABLES`, a dict itself."""
    ts = save_times(ts)
    if isinstance(observables, str):
        observables = _OBSERVABLES[check_choice("observables", observables, tuple(_OBSERVABLES))]
    return (ts, *particles_and_args(config, **overrides), observables)


def _same(data: dict) -> dict:
    """The field's args of the particle flow: the spec's data itself (`observables.make_args`)."""
    return data


@functools.cache
def particle_limit(implicit: bool = False) -> Reduced:
    """The particle flow as a `flows.Reduced` of the spec: state the particle dict, `vector_field` (the
    forward-mode form with `implicit=True`, for implicit solvers; else the reverse-mode one), args the spec's
    data, to and from the parameters by `nest` and `particles_of`; its observables are the spec's `observe`.

    It is the spec's generic gradient flow (`flows.solve_flow(system, ts, "gd")`) written on the particle
    dict: d theta_g/d tau = -rate_scale[g] dQ/d theta_g, the same vector field to rounding (M L dQ/d theta
    against M L times dQ/d theta), one state in another layout."""
    return Reduced(
        vector_field=vector_field if implicit else _vector_field_rev,
        initial=lambda params, data: particles_of(params),
        to_params=nest,
        args=_same,
        description="the particle flow d theta/d tau = -M L dQ/d theta (Gao et al. 2024, eq. 2.4)",
    )
