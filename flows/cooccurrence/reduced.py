"""Reduced systems of word co-occurrence, derived with sympy (`derivations.cooccurrence`) and generated: the
3-token mean-field system (state `(40,)`, `THREE_TOKEN_STATE`) and the 4-ODE phase-2 skeleton (state `(4,)`,
proofs of Lemma F.6 and Thm F.8 in Yang et al. 2024). See docs/systems/cooccurrence.md."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

from .._generated import cooccurrence_3token as _gen3
from .._generated import cooccurrence_phase2 as _gen2
from .._solve import Trajectory, solve
from .data import Config

__all__ = [
    "PHASE2_STATE",
    "THREE_TOKEN_STATE",
    "idealized_three_token_state",
    "phase2_vector_field",
    "solve_phase2",
    "solve_three_token",
    "three_token_args",
    "three_token_state",
    "three_token_vector_field",
]

THREE_TOKEN_STATE = _gen3.STATE
PHASE2_STATE = _gen2.STATE


def three_token_vector_field(t: Any, y: Array, args: dict[str, Array]) -> Array:
    """The generated 3-token RHS; `y (..., 40)`, `args` with exactly the keys `{"m", "m1", "L"}`."""
    return _gen3.vector_field(t, y, args)


def phase2_vector_field(t: Any, y: Array, args: dict[str, Array]) -> Array:
    """The generated 4-ODE RHS; `y (..., 4)`, `args` with exactly the key `{"m1"}`."""
    return _gen2.vector_field(t, y, args)


def three_token_state(state: dict[str, Array]) -> Array:
    """Restrict a full Gram state (dict, see `observables`) to the 3-token coordinates `(40,)`."""
    blocks = [state[k][:3, :3].reshape(-1) for k in ("A", "M_V", "M_K", "M_Q")]
    return jnp.concatenate([state["G"][:3], state["S"][None], *blocks])


def three_token_args(config: Config, dtype: Any = None) -> dict:
    """`{"m", "m1", "L"}` of `config` as float arrays (the generated module's PARAMS)."""
    dtype = dtype or jnp.result_type(float)
    return {k: jnp.asarray(float(getattr(config, k)), dtype) for k in _gen3.PARAMS}


def idealized_three_token_state(config: Config, dtype: Any = None) -> Array:
    """The large-m initial state (the m -> infinity limit of the Grams of `network.init_params`): G = 0,
    A = 0, M_V = M_K = M_Q = sigma0^2 m I, S = sigma1^2 m m1, with the (sigma0, sigma1) of `config.init_stds`."""
    dtype = dtype or jnp.result_type(float)
    s0, s1 = config.init_stds
    eye = (s0**2 * config.m) * np.eye(3).reshape(-1)
    y = np.concatenate([np.zeros(3), [s1**2 * config.m * config.m1], np.zeros(9), eye, eye, eye])
    return jnp.asarray(y, dtype)


def _g_obs(t, y, args):
    return y[..., :3]


def _s_obs(t, y, args):
    return y[..., 3]


def _scores_obs(t, y, args):
    return y[..., 4:13].reshape(y.shape[:-1] + (3, 3))


def _phase2_loss(t, y, args):
    G1, G2, G3 = y[..., 0], y[..., 1], y[..., 2]
    margins = jnp.stack([G1 + G2 + G3, -(G1 + G3), -(G2 + G3), -G3], axis=-1)
    weights = jnp.asarray([0.5, 1 / 6, 1 / 6, 1 / 6], y.dtype)
    return jnp.sum(weights * jnp.logaddexp(0.0, -margins), axis=-1)


def solve_three_token(config: Config, ts: Any, y0: Array | None = None, **solve_kw: Any) -> Trajectory:
    """Integrate the 3-token system from `y0` (default `idealized_three_token_state(config)`) and save
    `G (k, 3)`, `S`, `A (k, 3, 3)` at `ts` (starting at 0)."""
    ts = np.asarray(ts, dtype=float)
    y0 = idealized_three_token_state(config) if y0 is None else y0
    return solve(
        three_token_vector_field,
        y0,
        t1=float(ts[-1]),
        ts=ts,
        args=three_token_args(config),
        observables={"G": _g_obs, "S": _s_obs, "A": _scores_obs},
        **solve_kw,
    )


def solve_phase2(y0: Any, m1: float, ts: Any, **solve_kw: Any) -> Trajectory:
    """Integrate the 4-ODE skeleton from `y0 = (G1, G2, G3, S)`; saves the state and its `loss`
    (sum_k q_k log(1 + e^{-rho_k}))."""
    ts = np.asarray(ts, dtype=float)
    y0 = jnp.asarray(y0)
    args = {"m1": jnp.asarray(float(m1), y0.dtype)}
    return solve(
        phase2_vector_field, y0, t1=float(ts[-1]), ts=ts, args=args, observables={"loss": _phase2_loss}, **solve_kw
    )
