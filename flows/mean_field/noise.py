"""The noisy (Fokker-Planck) mean-field transformer: particle Langevin dynamics and entropy estimates.

`solve_particles_sde` integrates d theta = v(theta) d tau + sqrt(2 T) dB (v = `flow.vector_field`, one Brownian
motion per coordinate) with `flows.solve_sde`; as M -> infinity every depth slice follows the Fokker-Planck
equation, the Wasserstein gradient flow of F = Q - T int_0^1 H(rho(., t)) dt (Mei-Montanari-Nguyen 2018, Thm 5).
`entropy_knn` is the Kozachenko-Leonenko estimator of H, `entropy_per_slice` applies it per depth slice (the law
of a slice taken as the product of its attention and MLP marginals), `entropic_objective` reports F.

**The explicit step at high temperature.** The drift grows faster than linearly in the weights (the prediction
is a polynomial in V, W1, W2), and the noise carries the particles out to where it does. An explicit step
theta + h v(theta) on a drift growing like |theta|^k overshoots and diverges once h |v(theta)| / |theta| > 2 (the
monomial case: x (1 - h c |x|^(k-1)) grows iff h c |x|^(k-1) > 2), and a finite step has a positive
probability per path of meeting such a state, larger at higher T and over longer horizons. `step_rate` is
Lambda(theta) = max_j |v_j(theta)| / max_j |theta_j| over the particles j; `solve_particles_sde_stable`
takes the largest of dt, dt/2, dt/4, ... at which every path is finite and h Lambda <= `MAX_STEP_RATIO` at
every saved state (a factor 20 below the monomial edge: many particles move at once and a path cascades from
smaller ratios), solving again on the same Brownian paths (the same keys and tree tolerance) at each halving.
See docs/systems/mean_field.md.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.spatial import cKDTree
from scipy.special import digamma, gammaln

from .._checks import check_choice, check_int, check_real
from .._solve import Trajectory
from .._xla import jit as xla_jit
from ..sde import SDE_SOLVERS, solve_sde
from ..trajectory import FlowError
from . import observables as obs
from .data import Config, Particles, Prompts, training_set
from .flow import OVERRIDES, field_for, particle_problem
from .model import ATTENTION, MLP, check_data, check_particles, objective, risk
from .spec import split_options

__all__ = [
    "MAX_STEP_RATIO",
    "SDE_OPTIONS",
    "StableSolve",
    "entropic_objective",
    "entropy_knn",
    "entropy_per_slice",
    "solve_particles_sde",
    "solve_particles_sde_stable",
    "step_rate",
]

#: The largest accepted h Lambda(theta) of `solve_particles_sde_stable` (module docstring).
MAX_STEP_RATIO = 0.1

#: The `flows.solve_sde` keywords that `solve_particles_sde` passes on.
SDE_OPTIONS = ("key", "seed", "num_paths", "tol", "max_steps", "throw")


def _check_temperature(temperature) -> float:
    return check_real("temperature", temperature, low=0.0)


def solve_particles_sde(
    config: Config,
    ts: Any,
    temperature: float,
    *,
    dt: float,
    solver: str = "euler",
    observables: str | dict = "basic",
    save_states: bool = False,
    **options: Any,
) -> Trajectory:
    """Integrate the particle SDE d theta = v(theta) d tau + sqrt(2 T) dB (module docstring) from
    `init_particles(config)` with `flows.solve_sde` and save observables.

    **Arguments:**

    - `ts`: non-decreasing save times in flow time tau, starting at 0 (>= 2 entries); the horizon is `ts[-1]`.
    - `temperature`: T >= 0 (T = 0: the particle ODE of `solve_flow` with the same constant-step solver).
    - `dt`: the constant step (Euler-Maruyama with `dt = eta_tau` is full-batch GD at learning rate eta_tau M L
      with Gaussian noise sqrt(2 T eta_tau) per coordinate).
    - `solver`: a name of `flows.sde.SDE_SOLVERS` (`"euler"`, `"heun"`, `"sea"`, `"sra1"`, `"shark"`; all of
      strong order >= 1 here, the noise being additive).
    - `observables`: `"basic"` (Q and R, default), `"all"` (`observables.summary`) or a dict
      name -> f(t, particles, args) with `args = observables.make_args(config, data, test)`.
    - `save_states`: also keep the particles at every saved time (`traj.ys`).
    - `options`: `particles`, `data`, `test` (the initial particles, the training set and the test prompts: the
      keywords `flow.OVERRIDES` of `flow.particles_and_args`, which defines and checks them), and the
      `flows.solve_sde` keywords (documented there) named in `SDE_OPTIONS`; another keyword is a ValueError
      naming it. `key` or `seed` (the Brownian motions, exactly one; the same seed gives the same
      result), `num_paths` (that many independent noise realisations from the same initial particles, one
      vmapped program; every field of the result gains a leading path axis), `tol`, `max_steps`, `throw`.

    **Returns:** a `flows.Trajectory` (observables at `ts`; `traj.ys` the particles if `save_states`).
    The temperature, the step `dt`, the horizon `ts[-1]` and the keys are traced: a new T reuses the compiled
    program. The defaults of `tol` (`dt / 8`) and `max_steps` (the number of steps + 1) depend on `dt` and are
    compiled in, so a sweep over `dt` with the defaults compiles once per `dt`: pass one `tol` (<= the
    smallest `dt`; the same key and `tol` then give the same Brownian path at every `dt`, for weak/strong
    convergence on common random numbers) and one `max_steps` (>= the most steps of any solve) to compile once.
    """
    temperature = _check_temperature(temperature)
    dt = check_real("dt", dt, low=0.0, strict=True)
    check_choice("solver", solver, sorted(SDE_SOLVERS))
    overrides, options = split_options("solve_particles_sde", options, OVERRIDES, SDE_OPTIONS)
    ts, particles, args, observables = particle_problem(config, ts, observables, **overrides)
    dtype = jnp.result_type(particles["V"])
    sigma = jnp.sqrt(jnp.asarray(2.0 * temperature, dtype))
    options.update(solver=solver, observables=observables, save_states=save_states)
    return solve_sde(field_for(solver), particles, sigma=sigma, t1=float(ts[-1]), dt=dt, ts=ts, args=args, **options)


def _particle_norms(tree: dict) -> jnp.ndarray:
    """|theta_j| of every attention particle (V, W) and every MLP particle (W1, W2), one flat vector."""
    att = jnp.sum(tree[ATTENTION[0]] ** 2 + tree[ATTENTION[1]] ** 2, axis=(-2, -1))  # (L, M)
    mlp = jnp.sum(tree[MLP[0]] ** 2 + tree[MLP[1]] ** 2, axis=-1)  # (L, M_mlp)
    return jnp.sqrt(jnp.concatenate([att.ravel(), mlp.ravel()]))


def step_rate(t: float, particles: Particles, args: dict) -> jnp.ndarray:
    """Lambda(theta) = max_j |v_j(theta)| / max_j |theta_j|: the largest particle speed over the largest particle
    norm (per particle: (V, W) of a head, (W1, W2) of a neuron; v the particle velocity, `flow.vector_field`),
    in 1/tau. An explicit step h moves the particles by at most h Lambda times the size of the largest one
    (module docstring). An observable `f(t, particles, args)` (`args` from `observables.make_args`)."""
    v = field_for("sea")(t, particles, args)
    return jnp.max(_particle_norms(v)) / jnp.max(_particle_norms(particles))


class StableSolve(NamedTuple):
    """The result of `solve_particles_sde_stable`: the accepted solve, its step h and max h Lambda over its
    saved states (<= the `max_step_ratio` asked for)."""

    trajectory: Trajectory
    dt: float
    step_ratio: float


# Lambda of a stack of particle configurations (saves, or paths x saves, flattened): one program per shape
_rates = xla_jit(jax.vmap(step_rate, in_axes=(None, 0, None)))


def _max_rate(states: Particles, args: dict) -> float:
    """max Lambda over every saved state of every path (inf where a state is not finite)."""
    lead = states["V"].ndim - 4  # (saves,) or (paths, saves) before (L, M, D, D)
    flat = {k: jnp.reshape(v, (-1, *v.shape[lead:])) for k, v in states.items()}
    rates = np.asarray(_rates(0.0, flat, args))
    return float(np.max(rates)) if np.all(np.isfinite(rates)) else float("inf")


def solve_particles_sde_stable(
    config: Config,
    ts: Any,
    temperature: float,
    *,
    dt: float,
    max_step_ratio: float = MAX_STEP_RATIO,
    halvings: int = 4,
    **options: Any,
) -> StableSolve:
    """`solve_particles_sde` at the largest step of dt, dt/2, ..., dt/2^halvings whose solve is stable: every path
    finite and h * `step_rate` <= `max_step_ratio` at every saved state of every path (module docstring). Each
    halving solves again on the same Brownian paths (same key or seed, same `tol`): a smaller step refines the
    same solution, it does not draw another.

    **Arguments:** as `solve_particles_sde` (`options`: its keywords but `throw` and `save_states`: the states
    are saved, the check reads them), and

    - `dt`: the first step tried.
    - `max_step_ratio`: the largest h Lambda accepted (default `MAX_STEP_RATIO`), in (0, 2).
    - `halvings`: how many times the step may be halved (>= 0). Save often enough (`ts`) for the check to see
      the path: it reads Lambda at the saved states only. With `tol` given, keep dt / 2^halvings >= `tol`.

    **Returns:** a `StableSolve` (trajectory, dt, step_ratio): the accepted solve, its step and max h Lambda.

    **Raises:** `flows.FlowError` (with the last trajectory) when no step down to dt / 2^halvings is stable: a
    smaller first step, a lower temperature or a shorter horizon is needed.
    """
    dt = check_real("dt", dt, low=0.0, strict=True)
    ratio = check_real("max_step_ratio", max_step_ratio, low=0.0, high=2.0, strict=True)
    halvings = check_int("halvings", halvings, 0)
    for name in ("throw", "save_states"):
        if name in options:
            raise ValueError(f"{name} is not an option of solve_particles_sde_stable (module docstring)")
    overrides = {name: options[name] for name in OVERRIDES if name in options}
    _, _, args, _ = particle_problem(config, ts, "basic", **overrides)
    h, worst = dt, float("nan")
    for _ in range(halvings + 1):
        traj = solve_particles_sde(config, ts, temperature, dt=h, save_states=True, throw=False, **options)
        worst = h * _max_rate(traj.ys, args)
        if traj.ok and worst <= ratio:
            return StableSolve(traj, h, worst)
        h /= 2
    raise FlowError(
        f"no stable step down to dt = {2 * h:g} at temperature {temperature:g}: the last solve reached "
        f"h * step_rate = {worst:.3g} (> {ratio:g}) or a non-finite state; start from a smaller dt, allow more "
        "halvings, or lower the temperature or the horizon",
        traj,
    )


def entropy_knn(points: Any, k: int = 3) -> float | np.ndarray:
    """Kozachenko-Leonenko k-nearest-neighbour estimate of the differential entropy H = -int p log p (nats).

    For n samples x_i in R^d with eps_i the Euclidean distance from x_i to its k-th nearest neighbour among
    the other samples,

        H_hat = psi(n) - psi(k) + log V_d + (d / n) sum_i log eps_i,    V_d = pi^{d/2} / Gamma(d/2 + 1)

    (psi the digamma function, V_d the volume of the unit ball; Kraskov, Stögbauer & Grassberger 2004,
    eq. 20). It is consistent for n -> infinity at fixed k, with a bias that grows with d at fixed n.

    `points`: `(n, d)`, or `(..., n, d)` for a stack of clouds (e.g. one per depth slice), which gives an
    array of shape `(...)`. Distances by `scipy.spatial.cKDTree`. Raises `ValueError` for non-finite
    points, `n <= k`, or duplicated points (a zero distance, log 0).
    """
    k = check_int("k", k, 1)
    x = np.asarray(points, dtype=float)
    if x.ndim < 2:
        raise ValueError(f"points must have shape (n, d) or (..., n, d), got {x.shape}")
    if x.ndim > 2:
        flat = x.reshape((-1,) + x.shape[-2:])
        return np.array([entropy_knn(c, k) for c in flat]).reshape(x.shape[:-2])
    n, d = x.shape
    if n <= k:
        raise ValueError(f"points: need more than k = {k} samples, got n = {n}")
    if not np.all(np.isfinite(x)):
        raise ValueError("points must be finite")
    dist, _ = cKDTree(x).query(x, k=k + 1)  # column 0 is the point itself
    eps = dist[:, k]
    if np.any(eps <= 0):
        raise ValueError(
            f"points: {int(np.sum(eps <= 0))} points have a k-th neighbour at distance 0 "
            f"(duplicates); the estimator needs distinct points"
        )
    log_vd = 0.5 * d * math.log(math.pi) - gammaln(0.5 * d + 1.0)
    return float(digamma(n) - digamma(k) + log_vd + d * np.mean(np.log(eps)))


def entropy_per_slice(particles: Particles, k: int = 3) -> dict:
    """`entropy_knn` per depth slice: `{"attention": (L,), "mlp": (L,)}` in nats, for the attention cloud
    (V, W flattened, R^{2 D^2}) and the MLP cloud (W1, W2, R^{2 D}) of every slice."""
    att, mlp = obs.clouds({key: jnp.asarray(particles[key]) for key in ("V", "W", "W1", "W2")})
    return {
        "attention": np.asarray(entropy_knn(np.asarray(att), k)),
        "mlp": np.asarray(entropy_knn(np.asarray(mlp), k)),
    }


def entropic_objective(
    config: Config, particles: Particles, temperature: float, *, data: Prompts | None = None, k: int = 3
) -> dict:
    """The entropy-regularised objective of the noisy flow at a particle configuration (module docstring):

    F = Q - T * H,   H = (1/L) sum_l (H_att,l + H_mlp,l)   (= Q + T int_0^1 int rho log rho d theta dt).

    Returns `{"Q", "R", "H", "F", "H_attention" (L,), "H_mlp" (L,)}` (floats / arrays; entropies in nats by
    `entropy_knn` with `k` neighbours; Q and R on `data`, default the training set).
    """
    temperature = _check_temperature(temperature)
    particles = check_particles(config, particles)
    data = check_data(config, training_set(config) if data is None else data)
    Q = float(objective(config, particles, data))  # jitted: one program per shape (eager would retrace each call)
    R = float(risk(config, particles, data))
    H = entropy_per_slice(particles, k)
    h = float(np.mean(H["attention"] + H["mlp"]))
    return {"Q": Q, "R": R, "H": h, "F": Q - temperature * h, "H_attention": H["attention"], "H_mlp": H["mlp"]}
