"""The continuous-depth ("tied") reference of the mean-field transformer (Gao et al., NeurIPS 2024: the limit
L, M -> infinity of eqs. 2.1-2.3).

Particles are curves in depth, stored by their values on K nodes s_k = k / (K - 1) (a particle dict with a
leading node axis) and linearly interpolated in between. The depth ODE dZ/dt = F(Z, t) is integrated by a
diffrax solver node interval by node interval; the velocity at every node comes from one reverse pass (the
adjoint P = dR/dZ); the nodes move in training time tau with `flows.solve`. Every internal function takes lam,
the threshold and d as arrays, so new values do not recompile. See docs/systems/mean_field.md.
"""

from __future__ import annotations

import functools
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_choice, check_finite_tree, check_int
from .._xla import jit as xla_jit
from ..system import Reduced
from . import observables as obs
from .data import Config, Particles, Prompts
from .flow import particles_of
from .gradients import particle_gradients
from .initial import init_curves
from .model import GROUPS, as_array, attention_update, group_weighted, mlp_update

__all__ = [
    "DEPTH_SOLVERS",
    "REFERENCE_OBSERVABLES",
    "check_nodes",
    "depth_grid",
    "init_reference",
    "make_reference_args",
    "reference_adjoint",
    "reference_dissipation",
    "reference_forward",
    "reference_limit",
    "reference_nodes",
    "reference_objective",
    "reference_risk",
    "reference_states",
    "reference_vector_field",
    "reference_velocity",
]

#: diffrax solvers for the depth ODE (explicit, high order; the interpolant is smooth within a segment).
DEPTH_SOLVERS = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}

_DEFAULT_K = 9
_DEFAULT_SUBSTEPS = 4


# --------------------------------------------------------------------------- validation


def _check_K(K):
    return check_int("K (the number of depth nodes)", K, 2)


def _check_substeps(substeps):
    return check_int("substeps", substeps, 1)


def reference_nodes(config: Config, K: int) -> np.ndarray:
    """The depth nodes s_k = k / (K - 1), k = 0..K-1 (K >= 2; s_0 = 0 and s_{K-1} = 1)."""
    K = _check_K(K)
    return np.linspace(0.0, 1.0, K)


def depth_grid(substeps: int, dtype: Any = None) -> jax.Array:
    """The step grid u_i = i / substeps (i = 0..substeps) of one node interval in its local variable u."""
    substeps = _check_substeps(substeps)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    return jnp.linspace(0.0, 1.0, substeps + 1, dtype=dtype)


def check_nodes(config: Config, nodes: Any) -> Particles:
    """Validate node values against `config`: keys V, W, W1, W2; shapes (K, M, D, D), (K, M, D, D),
    (K, M_mlp, D), (K, M_mlp, D) with one K >= 2; floating point. Returns them as arrays.

    **Raises:** `ValueError` naming the offending field.
    """
    if not isinstance(nodes, dict) or set(nodes) != set(GROUPS):
        raise ValueError(
            f"nodes must be a dict with keys {GROUPS}, got "
            f"{sorted(nodes) if isinstance(nodes, dict) else type(nodes).__name__}"
        )
    arrays = {name: as_array(f"nodes[{name!r}]", nodes[name]) for name in GROUPS}
    V = arrays["V"]
    if V.ndim < 1 or V.shape[0] < 2:
        raise ValueError(f"nodes['V'] must have a leading node axis of length K >= 2, got shape {V.shape}")
    K, D, M, Mm = V.shape[0], config.D, config.M, config.M_mlp
    want = {"V": (K, M, D, D), "W": (K, M, D, D), "W1": (K, Mm, D), "W2": (K, Mm, D)}
    for name in GROUPS:
        arr = arrays[name]
        if arr.shape != want[name]:
            raise ValueError(
                f"nodes[{name!r}] must have shape {want[name]} (K={K} nodes, config M={M}, "
                f"M_mlp={Mm}, D={D}), got {arr.shape}"
            )
        if not jnp.issubdtype(arr.dtype, jnp.floating):
            raise ValueError(f"nodes[{name!r}] must be floating point, got {arr.dtype}")
        check_finite_tree(f"nodes[{name!r}]", arr)
    return arrays


def init_reference(config: Config, K: int = _DEFAULT_K, key: Any = None, dtype: Any = None) -> Particles:
    """Initial node values: `initial.init_curves(config, s_k)` at the K nodes (the same base draws as the
    network with `config.init`, whose layer l samples the curves at l / L: the two are coupled).

    **Raises:** `ValueError` if `config.init == "iid"` (the reference needs a depth-smooth law: an i.i.d.
    draw per layer has no continuous-depth limit as curves) or K is not an integer >= 2.
    """
    K = _check_K(K)
    if config.init == "iid":
        raise ValueError(
            "config.init must be 'tied' or 'smooth' for the continuous-depth reference (its "
            "particles are curves in depth), got 'iid'"
        )
    return init_curves(config, reference_nodes(config, K), key=key, dtype=dtype)


# --------------------------------------------------------------------------- depth ODE (traced)


def _num_nodes(nodes):
    return nodes["V"].shape[0]


def _drift(Z, p, threshold):
    """F(Z, t) = (1/M) sum_j f(Z, theta_j) + (1/M_mlp) sum_j h(Z, w_j) at one depth (p: one node's particles)."""
    M, Mm = p["V"].shape[0], p["W1"].shape[0]
    return attention_update(Z, p["V"], p["W"]) / M + mlp_update(Z, p["W1"], p["W2"], threshold) / Mm


def _segment_field(u, Z, args):
    """dZ/du = Delta F(Z, s_k + u Delta) on one node interval, theta(u) = (1 - u) a + u b."""
    a, b, delta, threshold = args
    p = {k: (1.0 - u) * a[k] + u * b[k] for k in GROUPS}
    return delta * _drift(Z, p, threshold)


def _segment_scan(Z, args, grid, depth_solver):
    """Z(s_{k+1}) from Z(s_k) by the diffrax solver's own steps u_i -> u_{i+1} in a `jax.lax.scan`: the arithmetic
    of `diffrax.diffeqsolve` with `StepTo` on the same grid (tests), which compiles faster inside a tau-solve."""
    term, solver = diffrax.ODETerm(_segment_field), DEPTH_SOLVERS[depth_solver]()
    state = solver.init(term, grid[0], grid[1], Z, args)

    def step(carry, interval):
        Z, state = carry
        Z, _, _, state, _ = solver.step(term, interval[0], interval[1], Z, args, state, False)
        return (Z, state), None

    (Z, _), _ = jax.lax.scan(step, (Z, state), (grid[:-1], grid[1:]))
    return Z


def _integrate(nodes, Z0, eps, grid, threshold, scheme, delta=None):
    """States Z(s_k) + eps_k at every node, (K, n, D, N + 1), with the perturbation eps_k (K, n, D, N + 1)
    added at node k before the next segment (eps = 0: the plain forward pass). `scheme`: the name of the
    depth solver; `delta` (default 1 / (K - 1)) is the length of a node interval: passing it lets a
    sub-curve nodes[k:] be integrated from s_k to 1 (tests)."""
    K = _num_nodes(nodes)
    delta = 1.0 / (K - 1) if delta is None else delta
    heads = {k: nodes[k][:-1] for k in GROUPS}
    tails = {k: nodes[k][1:] for k in GROUPS}

    def step(Z, xs):
        a, b, e = xs
        Z = _segment_scan(Z, (a, b, delta, threshold), grid, scheme) + e
        return Z, Z

    Z_start = Z0 + eps[0]
    _, rest = jax.lax.scan(step, Z_start, (heads, tails, eps[1:]))
    return jnp.concatenate([Z_start[None], rest])


def _states(nodes, Z0, grid, threshold, scheme):
    K = _num_nodes(nodes)
    return _integrate(nodes, Z0, jnp.zeros((K,) + Z0.shape, Z0.dtype), grid, threshold, scheme)


def _forward(nodes, Z0, grid, threshold, d, scheme):
    return _states(nodes, Z0, grid, threshold, scheme)[-1][:, d, -1]


def _risk(nodes, Z0, y, grid, threshold, d, scheme):
    err = _forward(nodes, Z0, grid, threshold, d, scheme) - y
    return 0.5 * jnp.mean(err * err)


def _interp_sq_integral(x):
    """int_0^1 |x(t)|^2 dt of the piecewise-linear interpolant of node values x (K, ...), summed over the
    remaining axes: sum_k Delta (|x_k|^2 + x_k.x_{k+1} + |x_{k+1}|^2) / 3."""
    a, b = x[:-1], x[1:]
    delta = 1.0 / (x.shape[0] - 1)
    return delta / 3.0 * (jnp.sum(a * a) + jnp.sum(a * b) + jnp.sum(b * b))


def _weighted_integral(nodes, values):
    """(1/M) int sum_j |.|^2 dt over the attention groups + (1/M_mlp) int sum_j |.|^2 dt over the MLP ones."""
    return group_weighted(values, (1.0 / nodes["V"].shape[1], 1.0 / nodes["W1"].shape[1]), _interp_sq_integral)


def _decay(nodes, lam):
    """(lam/2) int_0^1 [(1/M) sum_j |theta_j(t)|^2 + (1/M_mlp) sum_j |w_j(t)|^2] dt (exact for the interpolant)."""
    return 0.5 * lam * _weighted_integral(nodes, nodes)


def _objective(nodes, Z0, y, lam, grid, threshold, d, scheme):
    return _risk(nodes, Z0, y, grid, threshold, d, scheme) + _decay(nodes, lam)


def _adjoint(nodes, Z0, y, grid, threshold, d, scheme):
    """(Z(s_k), P(s_k)), each (K, n, D, N + 1): P(s_k) = dR/d eps_k at eps = 0 (one reverse pass)."""
    K = _num_nodes(nodes)

    def risk_of_eps(eps):
        states = _integrate(nodes, Z0, eps, grid, threshold, scheme)
        err = states[-1][:, d, -1] - y
        return 0.5 * jnp.mean(err * err), states

    P, Z = jax.grad(risk_of_eps, has_aux=True)(jnp.zeros((K,) + Z0.shape, Z0.dtype))
    return Z, P


def _velocity(nodes, Z0, y, lam, grid, threshold, d, scheme):
    """v at every node: -sum_prompts grad <P(s_k), f(Z(s_k), theta)> - lam theta (and h for the MLP)."""
    Z, P = _adjoint(nodes, Z0, y, grid, threshold, d, scheme)
    per_node = tuple(nodes[k] for k in GROUPS)
    grads = jax.vmap(particle_gradients, in_axes=(0, 0, 0, 0, 0, None))(Z, P, Z, P, per_node, threshold)
    return {k: -g - lam * nodes[k] for k, g in zip(GROUPS, grads, strict=True)}


# Jitted with the scheme static. Used by the public functions and, nested, by the tau vector field and the
# observables: one traced copy per signature, which roughly halves the compile time of a tau solve.
_states_jit = xla_jit(_states, static_argnames=("scheme",))
_risk_jit = xla_jit(_risk, static_argnames=("scheme",))
_objective_jit = xla_jit(_objective, static_argnames=("scheme",))
_adjoint_jit = xla_jit(_adjoint, static_argnames=("scheme",))
_velocity_jit = xla_jit(_velocity, static_argnames=("scheme",))
_forward_jit = xla_jit(_forward, static_argnames=("scheme",))


# --------------------------------------------------------------------------- public evaluation


def _check_scheme(depth_solver):
    return check_choice("depth_solver", depth_solver, tuple(DEPTH_SOLVERS))


def _prepare(config, nodes, data, substeps, depth_solver):
    """(nodes, args, scheme), checked: the arguments of the tau vector field and observables below."""
    nodes = check_nodes(config, nodes)
    return nodes, make_reference_args(config, data, None, substeps), _check_scheme(depth_solver)


def reference_states(
    config: Config, nodes: Particles, Z0: Any, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """Z(s_k) at every depth node for prompts `Z0 (n, D, N + 1)` -> `(K, n, D, N + 1)` (Z(s_0) = Z0).

    `substeps`: equal solver steps per node interval; `depth_solver`: one of `DEPTH_SOLVERS`.
    """
    Z0 = jnp.asarray(Z0)
    dummy = Prompts(Z0, jnp.zeros(Z0.shape[:1], Z0.dtype)) if Z0.ndim >= 1 else Prompts(Z0, Z0)
    nodes, args, scheme = _prepare(config, nodes, dummy, substeps, depth_solver)
    return _states_jit(nodes, args["Z0"], args["depth_grid"], args["threshold"], scheme=scheme)


def reference_forward(
    config: Config, nodes: Particles, Z0: Any, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """yhat = Z(1)[d, N] of the depth ODE for prompts `Z0 (n, D, N + 1)` -> `(n,)` (options as in
    `reference_states`)."""
    return reference_states(config, nodes, Z0, substeps, depth_solver)[-1][:, config.d, -1]


def reference_risk(
    config: Config, nodes: Particles, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """R = mean over prompts of (yhat - y)^2 / 2 of the continuous-depth model (a scalar)."""
    return _obs_R(0.0, *_prepare(config, nodes, data, substeps, depth_solver))


def reference_objective(
    config: Config, nodes: Particles, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """Q_ref = R + (lam/2) int_0^1 [(1/M) sum |theta_j(t)|^2 + (1/M_mlp) sum |w_j(t)|^2] dt (eq. 2.3)."""
    return _obs_Q(0.0, *_prepare(config, nodes, data, substeps, depth_solver))


def reference_adjoint(
    config: Config, nodes: Particles, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> tuple[jax.Array, jax.Array]:
    """(Z(s_k), P(s_k)), each `(K, n, D, N + 1)`: the states and the adjoint P = dR/dZ at every node, from
    one reverse pass through the depth solves (zero perturbations eps_k added at the nodes)."""
    nodes, args, scheme = _prepare(config, nodes, data, substeps, depth_solver)
    return _adjoint_jit(nodes, *(args[k] for k in ("Z0", "y", "depth_grid", "threshold", "d")), scheme=scheme)


def reference_velocity(
    config: Config, nodes: Particles, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> Particles:
    """The Wasserstein-gradient-flow velocity at every node (a dict shaped like `nodes`):

    v_j(s_k) = -sum_prompts grad_theta <P(s_k), f(Z(s_k), theta_j(s_k))> - lam theta_j(s_k)

    (h and w_j for MLP particles). Pointwise in depth, not the gradient w.r.t. node values.
    """
    return _vf(0.0, *_prepare(config, nodes, data, substeps, depth_solver))


def reference_dissipation(nodes: Particles, velocity: Particles) -> jax.Array:
    """int_0^1 [(1/M) sum_j |v_j(t)|^2 + (1/M_mlp) sum_j |v_j(t)|^2] dt of the interpolated node velocities
    (the exact per-segment rule of the decay term): -dQ_ref/dtau along the flow up to the O(1/K^2)
    interpolation error of the velocity (the energy identity)."""
    return _weighted_integral(nodes, velocity)


# --------------------------------------------------------------------------- flow in tau


def make_reference_args(
    config: Config, data: Prompts, test: Prompts | None = None, substeps: int = _DEFAULT_SUBSTEPS, dtype: Any = None
) -> dict:
    """`observables.make_args(config, data, test)` plus `"depth_grid"` = `depth_grid(substeps)`, the step
    grid of one node interval (its length fixes the number of steps). Arrays only: new values of lam, the
    threshold or the data do not recompile."""
    args = obs.make_args(config, data, test, dtype)
    args["depth_grid"] = depth_grid(substeps, args["Z0"].dtype)
    return args


def _vf(t, nodes, args, scheme):
    return _velocity_jit(
        nodes, args["Z0"], args["y"], args["lam"], args["depth_grid"], args["threshold"], args["d"], scheme=scheme
    )


def reference_vector_field(t: float, nodes: Particles, args: dict) -> Particles:
    """d nodes / d tau = `reference_velocity` (Tsit5 steps in depth) for `args = make_reference_args(...)`."""
    return _vf(t, nodes, args, "tsit5")


def _obs_Q(t, nodes, args, scheme):
    return _objective_jit(
        nodes, args["Z0"], args["y"], args["lam"], args["depth_grid"], args["threshold"], args["d"], scheme=scheme
    )


def _obs_R(t, nodes, args, scheme):
    return _risk_jit(nodes, args["Z0"], args["y"], args["depth_grid"], args["threshold"], args["d"], scheme=scheme)


def _obs_rmse(t, nodes, args, scheme, suffix=""):
    Z0, y = args["Z0" + suffix], args["y" + suffix]
    err = _forward_jit(nodes, Z0, args["depth_grid"], args["threshold"], args["d"], scheme=scheme) - y
    return jnp.sqrt(jnp.mean(err * err))


_OBS_FNS = {
    "Q": _obs_Q,
    "R": _obs_R,
    "dissipation": lambda t, nodes, args, scheme: reference_dissipation(nodes, _vf(t, nodes, args, scheme)),
    "max_speed": lambda t, nodes, args, scheme: jnp.max(obs.particle_speeds(_vf(t, nodes, args, scheme))),
    "train_rmse": _obs_rmse,
    "test_rmse": functools.partial(_obs_rmse, suffix="_test"),
}


@functools.cache
def _bundle(scheme):
    """(vector field, all observables, basic observables) for one depth scheme, built once so that
    `flows.solve` finds its compiled programs again on the next call."""
    vf = reference_vector_field if scheme == "tsit5" else functools.partial(_vf, scheme=scheme)
    every = {name: functools.partial(fn, scheme=scheme) for name, fn in _OBS_FNS.items()}
    basic = {name: every[name] for name in ("Q", "R")}
    return vf, every, basic


#: The observables saved by `solve_reference(observables="all")` with the default depth scheme, functions
#: f(t, nodes, args) of `args = make_reference_args(...)`: Q, R, dissipation (approximately -dQ/dtau),
#: max_speed (over nodes and particles), train_rmse, test_rmse.
REFERENCE_OBSERVABLES = _bundle("tsit5")[1]


@functools.cache
def _observer(items: tuple) -> Any:
    """The observables `dict(items)` (name -> f(t, nodes, args)) as one function of (t, nodes, args), the same
    object for the same items (one compiled program per content)."""
    functions = dict(items)

    def observe(t, nodes, args):
        return {name: f(t, nodes, args) for name, f in functions.items()}

    return observe


def _reference_args(substeps, data):
    """`make_reference_args` of the spec's data (`observables.make_args`): the data and the depth grid."""
    return {**data, "depth_grid": depth_grid(substeps, data["Z0"].dtype)}


def _reference_start(config, K, params, data):
    """`init_reference(config, K)`: the curves whose samples at l / L are the network's initial particles
    (`init_curves`), checked to be the curves of the initial `params` the driver drew."""
    nodes = init_reference(config, K)
    network = init_curves(config, np.arange(config.L) / config.L)
    given = particles_of(params)
    if any(not np.array_equal(np.asarray(network[k]), np.asarray(given[k])) for k in GROUPS):
        raise ValueError(
            "seed: the reference starts from init_reference(config) of the system's own config; for another "
            "seed pass y0=init_reference(config.replace(seed=...)) (or mean_field.solve_reference(..., nodes=))"
        )
    return nodes


def reference_limit(
    config: Config,
    K: int = _DEFAULT_K,
    substeps: int = _DEFAULT_SUBSTEPS,
    depth_solver: str = "tsit5",
    observables: str | dict = "all",
) -> Reduced:
    """The continuous-depth reference as a `flows.Reduced` of the spec `spec.system(config)`: state the node
    values (K curves in depth), d nodes/d tau = `reference_velocity` (`reference_vector_field` for the default
    Tsit5 depth steps), args the spec's data with the depth grid of `substeps` steps per node interval, start
    `init_reference(config, K)` (the curves the network's initial particles sample; `config.init` "tied" or
    "smooth"), observables its own (`"all"`: `REFERENCE_OBSERVABLES`, `"basic"`: Q and R, or a dict
    name -> f(t, nodes, args) of `make_reference_args`' args).

    **Raises:** `ValueError` naming `K`, `substeps`, `depth_solver` or `observables`.
    """
    K, substeps, scheme = _check_K(K), _check_substeps(substeps), _check_scheme(depth_solver)
    vf, every, basic = _bundle(scheme)
    if isinstance(observables, str):
        observables = {"all": every, "basic": basic}[check_choice("observables", observables, ("all", "basic"))]
    if not isinstance(observables, dict) or not observables or not all(callable(f) for f in observables.values()):
        raise ValueError("observables must be 'all', 'basic' or a dict name -> f(t, nodes, args)")
    return Reduced(
        vector_field=vf,
        initial=functools.partial(_reference_start, config, K),
        args=functools.partial(_reference_args, substeps),
        observe=_observer(tuple(sorted(observables.items(), key=lambda kv: kv[0]))),
        description="the continuous-depth reference: node curves in depth, d nodes/d tau = reference_velocity",
    )
