"""The joint flow of (W, z), its reduction to the MLP weights alone, and the V-flow of Fig. 4 (Tian et al., ICLR
2024, Sec. 3-4; the official scripts `draw_figure_2_3.py`, `draw_figure_4.py`). Conventions: docs/systems/joma.md.

- The **joint flow** (`joint_field`): dW/dt = -dL/dW, dz/dt = -dL/dz of `model.loss` (one learning rate, time
  t = lr * step), written out as JoMA writes it: with G = dL/dH (the back-propagated gradient g_{h_j} times
  phi'), dL/dW = F G and dL/db_k = V G[k]^T, so v_j' = -sum_k G[k, j] b_k and z' = -(1/tau) sum_k
  (d b_k / d a)^T V G[k]^T, (d b / d a) = diag(b) (exp), diag(x) (linear), diag(b) - b b^T (softmax).
- The **reduced flow** (`reduced_field`): dW/dt = -dL/dW at z = z(W), the logits given by the invariant
  (`theory`) and its constant at the start: exact for exp and linear attention (the joint flow started at
  (W0, z0) and the reduced flow started at W0 are one trajectory), the approximate softmax estimate otherwise;
  the named limit `"w_flow"` of the spec (`spec.system`), solved by `spec.solve_flow(..., reduced="w_flow")`.
- The **V-flow of Fig. 4** (`solve_v_flow`): v' = (mu - v) o s(v) ("nonlinear": Delta = mu - v) or
  v' = mu o s(v) ("linear": Delta = mu), with s = softmax(v^2 / T) ("softmax") or e^{v^2 / T} ("exp", which
  blows up in finite time with the linear MLP: `theory.blowup_time`, `blowup_event`); `euler_v_flow` is the
  official iteration v <- v + eta v' (eta = 0.02), the "network" beside it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._checks import check_choice, check_int, check_real, real_array
from .._solve import Event, Trajectory, solve
from ..system import Params
from . import model, theory
from .data import ATTENTIONS, MLPS

__all__ = [
    "V_ATTENTIONS",
    "V_MLPS",
    "blowup_event",
    "euler_v_flow",
    "joint_field",
    "joint_gradients",
    "lift",
    "check_branch",
    "reduced_field",
    "reduced_observables",
    "solve_v_flow",
    "v_field",
    "z_of_W",
]

#: the Delta of the V-flow: "nonlinear" mu - v, "linear" mu
V_MLPS = ("nonlinear", "linear")
#: the attention of the V-flow: "softmax" softmax(v^2 / T), "exp" e^{v^2 / T}
V_ATTENTIONS = ("softmax", "exp")


def _dphi(mlp: str, H: jax.Array) -> jax.Array:
    if mlp == "linear":
        return jnp.ones_like(H)
    if mlp == "relu":
        return (H > 0).astype(H.dtype)
    s = jax.nn.sigmoid(H)  # silu(h) = h sigmoid(h)
    return s * (1 + H * (1 - s))


def joint_gradients(params: Params, batch: dict, attention: str, mlp: str) -> Params:
    """dL/dW and dL/dz of `model.loss`, written out (module docstring).

    **Arguments:** `params` `{"W" (d, K), "z" (M_C,)}`, `batch` = `data.population(config)`, `attention`, `mlp`.

    **Returns:** `{"W": (d, K), "z": (M_C,)}`.
    """
    X, U, tau = batch["x"].T, batch["U"], batch["tau"]
    M, n = X.shape
    W, z = params["W"], params["z"]
    F, H = model.readout(params, batch, attention, mlp)
    out = model.activation(mlp)(H)
    P = jax.nn.softmax(out, axis=1)
    G = (P - batch["y"]) / n * _dphi(mlp, H)  # dL/dH, (classes, units)
    dW = F @ G
    dB = U[:, :M].T @ (W @ G.T)  # dL/db_k as columns, (M_C, classes)
    B = model.attention_weights(z, X, tau, attention)
    if attention == "exp":
        dz = jnp.sum(B * dB, axis=1) / tau
    elif attention == "linear":
        dz = jnp.sum(X * dB, axis=1) / tau
    else:
        dz = jnp.sum(B * dB - B * jnp.sum(B * dB, axis=0, keepdims=True), axis=1) / tau
    return {"W": dW, "z": dz}


def joint_field(attention: str, mlp: str) -> Callable:
    """The joint gradient flow `f(t, params, args)` = -`joint_gradients(params, args, ...)` for `flows.solve`
    (`args` = `data.population(config)`; one function object per pair, one compile)."""
    return _joint_field(check_choice("attention", attention, ATTENTIONS), check_choice("mlp", mlp, MLPS))


@functools.cache
def _joint_field(attention: str, mlp: str) -> Callable:
    def field(t, params, args):
        return jax.tree_util.tree_map(jnp.negative, joint_gradients(params, args, attention, mlp))

    return field


def z_of_W(W: jax.Array, args: dict, attention: str) -> jax.Array:
    """The logits the invariant gives for the MLP weights W, with its constant `args["z_offset"]` of
    `model.observe_data`: `model.z_estimate`, times sign(z0) `args["z_sign"]` for linear attention (the branch
    of z^2 = c + sum_k v_k^2 the start is on; exact while z stays away from 0, which c > 0 guarantees), `(M_C,)`."""
    est = model.z_estimate({"W": W}, args, attention)
    return args["z_sign"] * est if attention == "linear" else est


def lift(W: jax.Array, args: dict, attention: str) -> Params:
    """The parameters `{"W": W, "z": z_of_W(W)}` of a reduced state."""
    return {"W": W, "z": z_of_W(W, args, attention)}


def reduced_field(attention: str, mlp: str) -> Callable:
    """The reduced flow `f(t, W, args)` = -dL/dW at z = `z_of_W(W)` for `flows.solve`, with `args` =
    `model.observe_data(config, params0)`: exact for exp and linear attention, approximate for softmax."""
    return _reduced_field(check_choice("attention", attention, ATTENTIONS), check_choice("mlp", mlp, MLPS))


@functools.cache
def _reduced_field(attention: str, mlp: str) -> Callable:
    def field(t, W, args):
        return -joint_gradients(lift(W, args, attention), args, attention, mlp)["W"]

    return field


def reduced_observables(attention: str, mlp: str) -> Callable:
    """The observables `g(t, W, args)` of a reduced state: `model.observe` at `lift(W)` (one function object per
    pair, one compile)."""
    return _reduced_observables(check_choice("attention", attention, ATTENTIONS), check_choice("mlp", mlp, MLPS))


@functools.cache
def _reduced_observables(attention: str, mlp: str) -> Callable:
    observe = model.make_observe(attention, mlp)

    def observables(t, W, args):
        return observe(lift(W, args, attention), args)

    return observables


def check_branch(args: dict, attention: str) -> None:
    """Refuse a linear-attention start off the reduction's domain: c = z0^2 - sum_k v0_k^2 must be > 0 in
    every component (`args` = `model.observe_data(config, params0)`), else z can cross 0 and the branch
    sign(z0) of z = sqrt(c + sum_k v_k^2) is lost (ValueError naming `params0`)."""
    if attention == "linear" and not bool(jnp.all(args["z_offset"] > 0)):
        raise ValueError(
            "params0: the linear-attention reduction needs z0^2 > sum_k v0_k^2 in every component (c > 0): "
            "otherwise z can cross 0 and the branch sign(z0) of z = sqrt(c + sum_k v_k^2) is lost; start with "
            "larger |z0| or solve the joint flow (reduced=None)"
        )


def _check_ts(ts: ArrayLike) -> np.ndarray:
    ts = real_array("ts", ts)
    if ts.ndim != 1 or ts.size < 2 or ts[0] != 0.0 or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a finite, non-decreasing 1-D array starting at 0 with >= 2 entries")
    return ts


# -- the V-flow of Fig. 4 --------------------------------------------------------------------------------------


def v_field(mlp: str = "nonlinear", attention: str = "softmax") -> Callable:
    """The V-flow `f(t, v, args)`, `args = {"mu": (n,), "temperature": T}`: v' = Delta o s(v) with Delta =
    mu - v ("nonlinear") or mu ("linear") and s = softmax(v^2 / T) or e^{v^2 / T} (module docstring)."""
    return _v_field(check_choice("mlp", mlp, V_MLPS), check_choice("attention", attention, V_ATTENTIONS))


@functools.cache
def _v_field(mlp: str, attention: str) -> Callable:
    def field(t, v, args):
        logits = v**2 / args["temperature"]
        s = jax.nn.softmax(logits) if attention == "softmax" else jnp.exp(logits)
        delta = args["mu"] - v if mlp == "nonlinear" else args["mu"]
        return delta * s

    return field


def _v_entropy(t, v, args):
    return {"entropy": theory.entropy(jax.nn.softmax(v**2 / args["temperature"]))}


def blowup_event(level: float) -> Event:
    """The `flows.Event` that stops a V-flow when its largest component crosses `level` upwards: the blow-up of
    the linear-MLP exp flow, whose time left from v = level to infinity is `theory.blowup_time(delta, T, level)`
    (below 3e-9 of t* from level = 3 sqrt(2 T); much higher levels are not resolvable in float64 time, the
    steps near t* falling below one ulp of t)."""
    level = check_real("level", level, low=0.0, strict=True)
    return Event(lambda t, v, args: jnp.max(v) - level, direction=True, stop=True, name=f"max v = {level:g}")


def _v_args(mu, temperature, v0):
    mu = real_array("mu", mu)
    if mu.ndim != 1 or mu.size < 1:
        raise ValueError(f"mu must be a non-empty 1-D array (one target per component), got shape {mu.shape}")
    T = check_real("temperature", temperature, low=0.0, strict=True)
    v0 = real_array("v0", v0)
    if v0.shape not in ((), mu.shape):
        raise ValueError(f"v0 must be a number or an array of the shape of mu {mu.shape}, got shape {v0.shape}")
    v0 = v0 * np.ones_like(mu)
    return jnp.asarray(v0), {"mu": jnp.asarray(mu), "temperature": jnp.asarray(T)}


def _solve_v(field, y0, args, ts, **options) -> Trajectory:
    """`flows.solve` of a V-flow from `_v_args`' (y0, args), saved at `ts` (from 0) with its entropy."""
    return solve(field, y0, t1=float(ts[-1]), ts=ts, args=args, observables=_v_entropy, **options)


def solve_v_flow(
    mu: ArrayLike,
    ts: ArrayLike,
    temperature: float = 3.0,
    v0: ArrayLike = 0.05,
    mlp: str = "nonlinear",
    *,
    attention: str = "softmax",
    blowup_level: float | None = None,
    **options: Any,
) -> Trajectory:
    """Integrate the V-flow of Fig. 4 (module docstring) with `flows.solve`.

    **Arguments:**

    - `mu` `(n,)` the targets (Fig. 4: `theory.FIG4_MU`); `ts` save times from 0; `temperature` T (official 3);
      `v0` the start, a number or `(n,)` (official 0.05 in every component).
    - `mlp` in `V_MLPS`, `attention` in `V_ATTENTIONS`.
    - `blowup_level`: stop at `blowup_event(blowup_level)` (the blow-up of the linear-MLP exp flow; the event
      time is `Trajectory.t_event`).
    - `options`: keywords of `flows.solve`, which defines and checks them (`solver`, `rtol` (default here
      1e-10), `atol` (default here 1e-12), `max_steps`, `throw`, ...).

    **Returns:** a `Trajectory`: states v `(len(ts), n)`, observable `"entropy"` H(softmax(v^2 / T)).
    """
    field = v_field(mlp, attention)
    ts = _check_ts(ts)
    y0, args = _v_args(mu, temperature, v0)
    event = None if blowup_level is None else blowup_event(blowup_level)
    return _solve_v(field, y0, args, ts, event=event, **{"rtol": 1e-10, "atol": 1e-12, **options})


def euler_v_flow(
    mu: ArrayLike,
    steps: int = 5000,
    eta: float = 0.02,
    temperature: float = 3.0,
    v0: ArrayLike = 0.05,
    mlp: str = "nonlinear",
    *,
    attention: str = "softmax",
    save_every: int = 50,
    throw: bool = True,
) -> Trajectory:
    """The official iteration of Fig. 4, v <- v + eta v'(v) for `steps` steps (explicit Euler with constant step
    eta through `flows.solve`): the discrete "network" beside `solve_v_flow`.

    **Arguments:** `mu`, `temperature`, `v0`, `mlp`, `attention` as in `solve_v_flow`; `steps` (>= 1, official
    5000), `eta` (> 0, official 0.02); `save_every` (>= 1, divides `steps`): the stride of the saved iterates.

    **Returns:** a `Trajectory` at t = eta * i, i = 0, save_every, ..., steps (states and `"entropy"`).
    """
    field = v_field(mlp, attention)
    steps = check_int("steps", steps, 1, 10_000_000)
    save_every = check_int("save_every", save_every, 1, steps)
    if steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide steps = {steps}")
    eta = check_real("eta", eta, low=0.0, strict=True)
    y0, args = _v_args(mu, temperature, v0)
    ts = eta * np.arange(0, steps + 1, save_every)
    return _solve_v(field, y0, args, ts, solver="euler", constant_step=True, dt0=eta, max_steps=steps + 1, throw=throw)
