"""The exact closed gradient-flow ODE of the co-occurrence transformer on its Gram state (Yang et al. 2024,
Sec. 3, App. C), and the optimiser limits on the parameters. See docs/systems/cooccurrence.md.

For attention p[i, h, l] = softmax_h(A[x_h, x_l] / sqrt m), outputs F_i and c_i = y_i / (n (1 + e^{y_i F_i})):

    z = sum_i c_i sum_l X_i p_l = -dL̂/dG,    B[x_h, x_l] += c_i p[h,l] (Gx[h] - Gx^T p_l) = -sqrt(m) dL̂/dA
    dG/dt = (S I + m1 M_V) z,   dS/dt = 2 m1 G^T z,   dM_V/dt = G z^T + z G^T,
    dA/dt = (M_K B + B M_Q) / sqrt(m),   dM_K/dt = (A B^T + B A^T) / sqrt(m),   dM_Q/dt = (A^T B + B^T A) / sqrt(m)"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import check_bool, check_dtype, real_array
from .._solve import Event, Trajectory, solve
from ..optim_limits.problem import limit_problem as optimizer_limit
from . import observables as obs
from .data import Config
from .network import check_args, check_keys, data_args, init_params, network_loss, with_seed_init
from .observables import Args, Gram

__all__ = ["flow_gradients", "initial_state", "limit_loss", "limit_problem", "solve_flow", "vector_field"]


def flow_gradients(state: Gram, args: Args) -> tuple[Array, Array, Array]:
    """(z, B, F): z `(d,)`, B `(d, d)` of the module docstring and the outputs F `(n,)`."""
    tokens, labels = args["tokens"], args["labels"]
    n = tokens.shape[0]
    d = state["G"].shape[0]
    p, Gx, F = obs.outputs(state, tokens, args["sqrt_m"])
    c = jax.nn.sigmoid(-labels * F) * labels / n  # g_i y_i / n
    z = jnp.zeros((d,), p.dtype).at[tokens].add(c[:, None] * jnp.sum(p, axis=2))
    mean_G = jnp.einsum("nh,nhl->nl", Gx, p)  # Gx^T p_l
    r = p * (Gx[:, :, None] - mean_G[:, None, :])
    B = jnp.zeros((d, d), p.dtype).at[tokens[:, :, None], tokens[:, None, :]].add(c[:, None, None] * r)
    return z, B, F


_STATE_KEYS = ("G", "S", "M_V", "M_K", "M_Q", "A")


def vector_field(t: Any, state: Gram, args: Args) -> Gram:
    """d(Gram state)/dt of the module docstring; `state` a dict of G `(d,)`, S `()`, M_V, M_K, M_Q, A
    `(d, d)`; `args` from `network.data_args`."""
    z, B, _ = flow_gradients(state, args)
    G, S, M_V, M_K, M_Q, A = (state[k] for k in ("G", "S", "M_V", "M_K", "M_Q", "A"))
    m1, sqrt_m = args["m1"], args["sqrt_m"]
    Gz = jnp.outer(G, z)
    AB = A @ B.T
    AtB = A.T @ B
    return {
        "G": S * z + m1 * (M_V @ z),
        "S": 2.0 * m1 * (G @ z),
        "M_V": Gz + Gz.T,
        "M_K": (AB + AB.T) / sqrt_m,
        "M_Q": (AtB + AtB.T) / sqrt_m,
        "A": (M_K @ B + B @ M_Q) / sqrt_m,
    }


def initial_state(config: Config, dtype: Any = None) -> Gram:
    """The Grams of `network.init_params(config)`: the flow starts where `network.train` starts."""
    params, a = init_params(config, dtype=check_dtype("dtype", dtype))
    # on the host: the Grams of the initial parameters are a few small matmuls, not worth a compile
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, by name
        host = obs.gram_state({k: np.asarray(v) for k, v in params.items()}, np.asarray(a))
    if not all(np.all(np.isfinite(v)) for v in host.values()):
        raise ValueError(
            f"the initial Grams overflow: init stds sigma0 = {config.init_stds[0]:.3g}, sigma1 = "
            f"{config.init_stds[1]:.3g} are too large for dtype {params['W'].dtype}"
        )
    return {k: jnp.asarray(v) for k, v in host.items()}


# Located without stopping: the solve continues past T1 (one compiled program, see flows.solve).
_T1_EVENT = Event(obs.min_margin, direction=True, stop=False, name="T1 (zero training error)")


def solve_flow(
    config: Config,
    ts: Any,
    *,
    args: dict | None = None,
    y0: dict | None = None,
    solver: str = "auto",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int | None = None,
    locate_T1: bool = True,
    save_states: bool = False,
    num_test: int = 600,
    throw: bool = True,
    seed: int | None = None,
    init: str | None = None,
    optimizer: str | None = None,
    optim_args: dict | None = None,
) -> Trajectory:
    """Integrate the exact Gram ODE from the initialisation of `network.train(config, ...)` (same seed).

    **Arguments:**

    - `ts`: increasing save times starting at 0 (e.g. `flows.log_grid`); the horizon is `ts[-1]`.
    - `args`: the data dict (default `network.data_args(config)`, i.e. the training set and test draws
      of `config.seed`); `y0`: override the initial Gram state.
    - `locate_T1`: also find T1 = the first time with zero training error (min_i y_i F_i crossing 0
      upwards) by a root-finding `flows.Event(stop=False)` in the same solve; it is returned as
      `traj.t_event` (`nan` if there is none before `ts[-1]`, `0.0` if the error is already zero at t=0).
    - `seed`, `init`: override `config.seed`, `config.init` (`None`: the config's), as in `network.train`.
    - other arguments as in `flows.solve`.

    - `optimizer`, `optim_args`: None (default) integrates the Gram ODE; `"gd"`, `"momentum"`, `"sign"`,
      `"adam"` integrate the optimiser's limit on the parameters (W, W_V, W_K, W_Q) with `network.network_loss`
      over the training set (`flows.optim_limits.limit_problem`; only gradient flow closes on the Grams).
      `y0` is then the parameter dict; `save_states=True` saves the limit's state (`traj.ys["theta"]`, or
      `traj.ys` itself for gd and sign).

    **Returns:** a `Trajectory` with `observables` named as in `observables.OBSERVABLES` (`loss`,
    `group_loss (k, 4)`, `train_error`, `test_loss`, `G (k, 3)`, `S`, `A (k, 3, 3)`, `M_V (k, 3, 3)`, `p12`,
    `group_g (k, 4)`, `balance_ratio`, `R`, `min_margin`).
    """
    config = with_seed_init(config, seed, init)
    ts = real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0) or not np.all(np.isfinite(ts)):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    locate_T1 = check_bool("locate_T1", locate_T1)
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    if optimizer is not None:
        limit, args, params = limit_problem(config, optimizer, optim_args, args=args, y0=y0)
        field, y0, observe, event = limit.vector_field, limit.initial_state(params), _obs_limit, _LIMIT_T1_EVENT
    else:
        if optim_args is not None:
            raise ValueError("optim_args needs an optimizer ('gd', 'momentum', 'sign' or 'adam')")
        field, observe, event = vector_field, obs.observe, _T1_EVENT
        y0 = initial_state(config) if y0 is None else check_keys("y0", y0, _STATE_KEYS, "see initial_state")
    traj = solve(
        field,
        y0,
        t1=float(ts[-1]),
        ts=ts,
        args=args,
        observables=observe,
        save_states=save_states,
        event=event if locate_T1 else None,
        solver=solver,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        throw=throw,
    )
    if locate_T1 and float(traj.observables["min_margin"][0]) > 0:
        # zero training error already at t = 0 (ts[0] = 0): T1 = 0, whatever the margin does later
        traj = dataclasses.replace(traj, t_event=0.0)
    return traj


# -- optimiser limits on the parameters -------------------------------------------------------------------------

_PARAM_KEYS = ("W", "W_V", "W_K", "W_Q")


def limit_loss(params: dict[str, Array], batch: Args) -> Array:
    """`network_loss` over the full training set, as `loss(theta, batch)` for `flows.optim_limits`; `batch`
    is `data_args(config)` plus the fixed output signs `"a"`."""
    return network_loss(params, batch["a"], batch["tokens"], batch["labels"])


def _grams_of(y, args):
    return obs.gram_state(y["theta"] if "theta" in y else y, args["batch"]["a"])


def _obs_limit(t, y, args):
    return obs.observe(t, _grams_of(y, args), args["batch"])


def _limit_margin(t, y, args):
    return obs.min_margin(t, _grams_of(y, args), args["batch"])


_LIMIT_T1_EVENT = Event(_limit_margin, direction=True, stop=False, name="T1 (zero training error)")


def limit_problem(
    config: Config,
    optimizer: str,
    optim_args: dict | None = None,
    *,
    args: dict | None = None,
    y0: dict | None = None,
    num_test: int = 600,
) -> tuple[Any, Args, dict[str, Array]]:
    """(limit, limit_args, params0) of `solve_flow(optimizer=...)`: the `flows.optim_limits.Limit` on
    `limit_loss`, its args (`args` or `data_args(config)`, plus the output signs "a") and the initial
    parameters (`init_params(config)`, or `y0`)."""
    if not isinstance(config, Config):
        raise ValueError(f"config must be a cooccurrence.Config, got {type(config).__name__}")
    args = data_args(config, num_test=num_test) if args is None else check_args(args)
    params, a = init_params(config)
    limit, limit_args = optimizer_limit(limit_loss, optimizer, optim_args, dict(args, a=a))
    if y0 is not None:
        check_keys("y0", y0, _PARAM_KEYS, "the parameters, with an optimizer")
        params = {k: jnp.asarray(real_array(f"y0[{k!r}]", y0[k]).astype(params[k].dtype)) for k in _PARAM_KEYS}
    return limit, limit_args, params
