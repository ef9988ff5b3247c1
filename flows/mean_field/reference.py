"""The continuous-depth ("tied") reference of the mean-field transformer (Gao et al., NeurIPS 2024: the
limit L, M -> infinity of eqs. 2.1-2.3).

Particles are **curves in depth**: particle j is t -> theta_j(t) = (V_j(t), W_j(t)) for attention and
t -> w_j(t) = (W1_j(t), W2_j(t)) for the MLP, stored by their values on K depth nodes

    s_k = k / (K - 1),   k = 0..K-1,   Delta = 1 / (K - 1),

and linearly interpolated in between: theta_j(t) = (1 - u) theta_j(s_k) + u theta_j(s_{k+1}) for
t = s_k + u Delta. The node values are a particle dict with a leading node axis,
`{"V": (K, M, D, D), "W": (K, M, D, D), "W1": (K, M_mlp, D), "W2": (K, M_mlp, D)}` (the network's layout
with L replaced by K).

**Forward pass**: the depth ODE, both sublayers acting at once,

    dZ/dt = F(Z, t) = (1/M) sum_j f(Z, theta_j(t)) + (1/M_mlp) sum_j h(Z, w_j(t)),   Z(0) = Z0,  t in [0, 1],

f(Z, theta) = V Z softmax(Z^T W Z), h(Z, w) = W2 sigma(W1 Z) (`model.attention_update`, `mlp_update`).
It is integrated with a high-order diffrax solver (`DEPTH_SOLVERS`, Tsit5 by default) segment by segment,
a `jax.lax.scan` over the K - 1 node intervals [s_k, s_{k+1}] with `substeps` equal steps each; inside a
segment the interpolant is smooth, so the solver keeps its order. Per segment the diffrax solver's own steps
run in a `lax.scan`: the arithmetic of `diffrax.diffeqsolve` with `StepTo` on the same grid (tests: equal to
1e-13), compiled about twice as fast inside a tau-solve. yhat = Z(1)[d, N],
R = mean over prompts of (yhat - y)^2 / 2.

**Objective** (eq. 2.3 in the mean-field form):

    Q_ref = R + (lam/2) int_0^1 [ (1/M) sum_j |theta_j(t)|^2 + (1/M_mlp) sum_j |w_j(t)|^2 ] dt,

where the integral of the squared piecewise-linear interpolant is exact per segment:
int_0^1 |a (1 - u) + b u|^2 du Delta = Delta (|a|^2 + a.b + |b|^2) / 3.

**Velocity** (the Wasserstein gradient flow acts pointwise in depth, t is a label): at every node

    v_j(s_k) = -sum_prompts grad_theta <P(s_k), f(Z(s_k), theta_j(s_k))> - lam theta_j(s_k)

(h and w_j for MLP particles), where P(t) = dR/dZ(t) is the adjoint of the depth ODE (P(1) =
(yhat - y)/n e_d e_N^T per prompt). This is the network's convention v = -M L dQ/dtheta of
`gradients.velocity` in the limit, *not* the gradient of Q_ref with respect to the node values. P(s_k) at
all nodes comes from one reverse pass through the diffrax solves: zero perturbations eps_k are added to
Z(s_k) at every node (Z(s_k) -> Z(s_k) + eps_k before the next segment, and to Z(1) at the last node),
and P(s_k) = dR/d eps_k at eps = 0 (reverse-mode through the solver steps). The per-particle
gradients are then closed-form (`gradients.particle_gradients` with Z_att = Z_mlp = Z(s_k),
P_att = P_mlp = P(s_k)), vmapped over the nodes.

**Flow in training time tau**: the node values move with v (`reference_vector_field`), integrated by
`flows.solve` in `solve_reference`; the interpolated curves then follow the interpolated velocity, a
depth discretisation of the mean-field PDE with error O(1/K^2) for smooth curves. Q_ref decreases
along it at the rate `reference_dissipation` up to that O(1/K^2) error (measured relative mismatch
1.2e-3 at K = 9, 3.0e-4 at K = 17 in the tests' setting).

The finite network of `network` is the Euler-with-splitting discretisation of the same depth ODE at
t_l = l / L: with the same curves (`Config.init = "smooth"`, nodes from `init_reference`, network
particles from `init_particles`) its output, velocity and trained Q approach the reference at rate 1/L
(tests).

All internal functions take lam, the threshold and d as arrays, so new values do not recompile; the
depth step grid (`substeps + 1` points of [0, 1]) is an array whose length fixes the number of steps.
"""

from __future__ import annotations

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_choice, check_finite_tree, check_int, check_real, real_array
from .._solve import Trajectory, solve
from .._xla import jit as xla_jit
from . import observables as obs
from .data import Config, Prompts, held_out_set, training_set
from .gradients import particle_gradients
from .initial import init_curves
from .model import GROUPS, as_array, attention_update, check_data, group_weighted, mlp_update

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
    "reference_nodes",
    "reference_objective",
    "reference_risk",
    "reference_states",
    "reference_vector_field",
    "reference_velocity",
    "solve_reference",
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


def depth_grid(substeps: int, dtype=None) -> jax.Array:
    """The step grid u_i = i / substeps (i = 0..substeps) of one node interval in its local variable u."""
    substeps = _check_substeps(substeps)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    return jnp.linspace(0.0, 1.0, substeps + 1, dtype=dtype)


def check_nodes(config: Config, nodes) -> dict:
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


def init_reference(config: Config, K: int = _DEFAULT_K, key=None, dtype=None) -> dict:
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
    """Z(s_{k+1}) from Z(s_k) by the diffrax solver's own steps u_i -> u_{i+1} in a `jax.lax.scan` (first
    same-as-last stages carried over); reverse-mode AD goes through the scan."""
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
    nodes = check_nodes(config, nodes)
    data = check_data(config, data)
    dtype = data.Z0.dtype
    consts = dict(
        grid=depth_grid(substeps, dtype),
        threshold=jnp.asarray(config.threshold, dtype),
        lam=jnp.asarray(config.lam, dtype),
        d=jnp.asarray(config.d, jnp.int32),
    )
    return nodes, data, consts, _check_scheme(depth_solver)


def reference_states(
    config: Config, nodes, Z0, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """Z(s_k) at every depth node for prompts `Z0 (n, D, N + 1)` -> `(K, n, D, N + 1)` (Z(s_0) = Z0).

    `substeps`: equal solver steps per node interval; `depth_solver`: one of `DEPTH_SOLVERS`.
    """
    Z0 = jnp.asarray(Z0)
    dummy = Prompts(Z0, jnp.zeros(Z0.shape[:1], Z0.dtype)) if Z0.ndim >= 1 else Prompts(Z0, Z0)
    nodes, data, c, scheme = _prepare(config, nodes, dummy, substeps, depth_solver)
    return _states_jit(nodes, data.Z0, c["grid"], c["threshold"], scheme=scheme)


def reference_forward(
    config: Config, nodes, Z0, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """yhat = Z(1)[d, N] of the depth ODE for prompts `Z0 (n, D, N + 1)` -> `(n,)` (options as in
    `reference_states`)."""
    return reference_states(config, nodes, Z0, substeps, depth_solver)[-1][:, config.d, -1]


def reference_risk(
    config: Config, nodes, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """R = mean over prompts of (yhat - y)^2 / 2 of the continuous-depth model (a scalar)."""
    nodes, data, c, scheme = _prepare(config, nodes, data, substeps, depth_solver)
    return _risk_jit(nodes, data.Z0, data.y, c["grid"], c["threshold"], c["d"], scheme=scheme)


def reference_objective(
    config: Config, nodes, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> jax.Array:
    """Q_ref = R + (lam/2) int_0^1 [(1/M) sum |theta_j(t)|^2 + (1/M_mlp) sum |w_j(t)|^2] dt (module docstring)."""
    nodes, data, c, scheme = _prepare(config, nodes, data, substeps, depth_solver)
    return _objective_jit(nodes, data.Z0, data.y, c["lam"], c["grid"], c["threshold"], c["d"], scheme=scheme)


def reference_adjoint(
    config: Config, nodes, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> tuple[jax.Array, jax.Array]:
    """(Z(s_k), P(s_k)), each `(K, n, D, N + 1)`: the states and the adjoint P = dR/dZ at every node, from
    one reverse pass through the depth solves (zero perturbations eps_k added at the nodes)."""
    nodes, data, c, scheme = _prepare(config, nodes, data, substeps, depth_solver)
    return _adjoint_jit(nodes, data.Z0, data.y, c["grid"], c["threshold"], c["d"], scheme=scheme)


def reference_velocity(
    config: Config, nodes, data: Prompts, substeps: int = _DEFAULT_SUBSTEPS, depth_solver: str = "tsit5"
) -> dict:
    """The Wasserstein-gradient-flow velocity at every node (a dict shaped like `nodes`):

    v_j(s_k) = -sum_prompts grad_theta <P(s_k), f(Z(s_k), theta_j(s_k))> - lam theta_j(s_k)

    (h and w_j for MLP particles). Pointwise in depth, not the gradient w.r.t. node values.
    """
    nodes, data, c, scheme = _prepare(config, nodes, data, substeps, depth_solver)
    return _velocity_jit(nodes, data.Z0, data.y, c["lam"], c["grid"], c["threshold"], c["d"], scheme=scheme)


def reference_dissipation(nodes, velocity) -> jax.Array:
    """int_0^1 [(1/M) sum_j |v_j(t)|^2 + (1/M_mlp) sum_j |v_j(t)|^2] dt of the interpolated node velocities
    (the exact per-segment rule of the decay term): -dQ_ref/dtau along the flow up to the O(1/K^2)
    interpolation error of the velocity (the energy identity)."""
    return _weighted_integral(nodes, velocity)


# --------------------------------------------------------------------------- flow in tau


def make_reference_args(
    config: Config, data: Prompts, test: Prompts | None = None, substeps: int = _DEFAULT_SUBSTEPS, dtype=None
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


def reference_vector_field(t, nodes, args):
    """d nodes / d tau = `reference_velocity` (Tsit5 steps in depth) for `args = make_reference_args(...)`."""
    return _vf(t, nodes, args, "tsit5")


def _obs_Q(t, nodes, args, scheme):
    return _objective_jit(
        nodes, args["Z0"], args["y"], args["lam"], args["depth_grid"], args["threshold"], args["d"], scheme=scheme
    )


def _obs_R(t, nodes, args, scheme):
    return _risk_jit(nodes, args["Z0"], args["y"], args["depth_grid"], args["threshold"], args["d"], scheme=scheme)


def _obs_dissipation(t, nodes, args, scheme):
    return reference_dissipation(nodes, _vf(t, nodes, args, scheme))


def _obs_max_speed(t, nodes, args, scheme):
    v = _vf(t, nodes, args, scheme)
    att = jnp.sqrt(jnp.sum(v["V"] ** 2, axis=(2, 3)) + jnp.sum(v["W"] ** 2, axis=(2, 3)))
    mlp = jnp.sqrt(jnp.sum(v["W1"] ** 2, axis=2) + jnp.sum(v["W2"] ** 2, axis=2))
    return jnp.maximum(jnp.max(att), jnp.max(mlp))


def _rmse(nodes, Z0, y, args, scheme):
    err = _forward_jit(nodes, Z0, args["depth_grid"], args["threshold"], args["d"], scheme=scheme) - y
    return jnp.sqrt(jnp.mean(err * err))


def _obs_train_rmse(t, nodes, args, scheme):
    return _rmse(nodes, args["Z0"], args["y"], args, scheme)


def _obs_test_rmse(t, nodes, args, scheme):
    return _rmse(nodes, args["Z0_test"], args["y_test"], args, scheme)


_OBS_FNS = {
    "Q": _obs_Q,
    "R": _obs_R,
    "dissipation": _obs_dissipation,
    "max_speed": _obs_max_speed,
    "train_rmse": _obs_train_rmse,
    "test_rmse": _obs_test_rmse,
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


def solve_reference(
    config: Config,
    ts,
    *,
    K: int | None = None,
    nodes=None,
    data: Prompts | None = None,
    test: Prompts | None = None,
    substeps: int = _DEFAULT_SUBSTEPS,
    depth_solver: str = "tsit5",
    solver: str = "tsit5",
    rtol: float = 1e-7,
    atol: float = 1e-9,
    dt: float | None = None,
    max_steps: int = 100_000,
    observables: str | dict = "all",
    save_states: bool = False,
    progress: bool = False,
    throw: bool = True,
) -> Trajectory:
    """Integrate the reference particle flow d nodes/d tau = `reference_velocity` with `flows.solve`.

    **Arguments:**

    - `ts`: increasing save times in flow time tau, starting at 0; the horizon is `ts[-1]`.
    - `K`: depth nodes (default 9) of `init_reference(config, K)`; `nodes`: start from these node values
      instead (K is then read from them; a given `K` must match).
    - `data`, `test`: training prompts and fresh test prompts (defaults from `config`).
    - `substeps`, `depth_solver`: the depth integration (as in `reference_states`).
    - `solver`, `rtol`, `atol`, `dt`, `max_steps`, `progress`, `throw`: the tau-integration, as in
      `flow.solve_particles` (`dt`: constant steps instead of adaptive).
    - `observables`: `"all"` (`REFERENCE_OBSERVABLES`), `"basic"` (Q and R only, the cheapest to compile)
      or a dict name -> f(t, nodes, args) with `args = make_reference_args(...)`.
    - `save_states`: also keep the node values at every saved time (`traj.ys`).

    **Returns:** a `flows.Trajectory` with `observables["Q"]`, `["R"]`, ... at `ts`.

    **Raises:** `ValueError` for bad arguments, naming the field (`init` for `config.init == "iid"`, `K`,
    `substeps`, `nodes[...]`); `flows.FlowError` for a failed solve (unless `throw=False`).
    """
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    substeps = _check_substeps(substeps)
    scheme = _check_scheme(depth_solver)
    if nodes is None:
        nodes = init_reference(config, _DEFAULT_K if K is None else K)
    nodes = check_nodes(config, nodes)
    if K is not None and _check_K(K) != _num_nodes(nodes):
        raise ValueError(f"K = {K} does not match the {_num_nodes(nodes)} nodes given")
    vf, every, basic = _bundle(scheme)
    if isinstance(observables, str):
        if observables not in ("all", "basic"):
            raise ValueError(f"observables must be 'all', 'basic' or a dict, got {observables!r}")
        observables = every if observables == "all" else basic
    data = check_data(config, training_set(config) if data is None else data)
    test = check_data(config, held_out_set(config) if test is None else test, "test")
    args = make_reference_args(config, data, test, substeps)
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
    return solve(vf, nodes, **options)
