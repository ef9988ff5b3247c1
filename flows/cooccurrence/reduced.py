"""Reduced systems of word co-occurrence, derived with sympy (`derivations.cooccurrence`) and generated: the
3-token mean-field system (state `(40,)`, `THREE_TOKEN_STATE`) and the 4-ODE phase-2 skeleton (state `(4,)`,
proofs of Lemma F.6 and Thm F.8 in Yang et al. 2024), the named limits `"three_token"` and `"phase2"` of the spec
(`spec.system(config).reduced`). See docs/systems/cooccurrence.md."""

from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import Array

from .._generated import cooccurrence_3token as _gen3
from .._generated import cooccurrence_phase2 as _gen2
from ..system import Reduced
from .data import Config
from .flow import host_grams

__all__ = [
    "PHASE2_STATE",
    "THREE_TOKEN_STATE",
    "idealized_three_token_state",
    "phase2_limit",
    "phase2_loss",
    "phase2_vector_field",
    "three_token_args",
    "three_token_limit",
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


def phase2_loss(t: Any, y: Array, args: Any) -> Array:
    """The population loss of the 4-ODE state `y (..., 4)` = (G1, G2, G3, S) at uniform attention:
    sum_k q_k log(1 + e^{-rho_k}), margins rho = (G1 + G2 + G3, -(G1 + G3), -(G2 + G3), -G3) of I_1..I_4."""
    G1, G2, G3 = y[..., 0], y[..., 1], y[..., 2]
    margins = jnp.stack([G1 + G2 + G3, -(G1 + G3), -(G2 + G3), -G3], axis=-1)
    weights = jnp.asarray([0.5, 1 / 6, 1 / 6, 1 / 6], y.dtype)
    return jnp.sum(weights * jnp.logaddexp(0.0, -margins), axis=-1)


def _three_token_observe(t, y, args):
    lead = y.shape[:-1]
    return {
        "G": y[..., :3],
        "S": y[..., 3],
        "A": y[..., 4:13].reshape(lead + (3, 3)),
        "M_V": y[..., 13:22].reshape(lead + (3, 3)),
    }


def _phase2_observe(t, y, args):
    return {"G": y[..., :3], "S": y[..., 3], "loss": phase2_loss(t, y, args)}


def _three_token_initial(config: Config, params: dict, data: dict) -> Array:
    return three_token_state(host_grams(config, params, data["a"]))


def _phase2_initial(config: Config, params: dict, data: dict) -> Array:
    return three_token_state(host_grams(config, params, data["a"]))[:4]


def _three_token_args(config: Config, data: dict) -> dict:
    m1 = data["m1"]
    return {"m": jnp.asarray(float(config.m), m1.dtype), "m1": m1, "L": jnp.asarray(float(config.L), m1.dtype)}


def _phase2_args(data: dict) -> dict:
    return {"m1": data["m1"]}


def three_token_limit(config: Config) -> Reduced:
    """The 3-token system of `config` as a named limit of its spec: from the 3-token coordinates of the Grams of
    the initial parameters (`three_token_state`; `idealized_three_token_state` is its m -> infinity limit),
    with m, L of `config` and m1 of the data; observables `G (3,)`, `S`, `A (3, 3)`, `M_V (3, 3)`."""
    return Reduced(
        vector_field=three_token_vector_field,
        initial=functools.partial(_three_token_initial, config),
        args=functools.partial(_three_token_args, config),
        observe=_three_token_observe,
        description="Yang et al. 2024, App. E-F: the mean-field flow of mu_1, mu_2, mu_3 (random tokens inert)",
    )


def phase2_limit(config: Config) -> Reduced:
    """The 4-ODE phase-2 skeleton as a named limit of the spec of `config`: (G1, G2, G3, S) of the Grams of the
    initial parameters, m1 of the data; observables `G (3,)`, `S` and its `loss` (`phase2_loss`)."""
    return Reduced(
        vector_field=phase2_vector_field,
        initial=functools.partial(_phase2_initial, config),
        args=_phase2_args,
        observe=_phase2_observe,
        description="Yang et al. 2024, Lemma F.6, Thm F.8: uniform attention, M_V dropped",
    )
