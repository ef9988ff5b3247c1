"""The exact closed gradient-flow ODE of the co-occurrence transformer on its Gram state (Yang et al. 2024,
Sec. 3, App. C): the named limit `"gram"` of the spec (`spec.system(config).reduced`); the optimiser limits on
the parameters are the shared driver's. See docs/systems/cooccurrence.md.

For attention p[i, h, l] = softmax_h(A[x_h, x_l] / sqrt m), outputs F_i and c_i = y_i / (n (1 + e^{y_i F_i})):

    z = sum_i c_i sum_l X_i p_l = -dL̂/dG,    B[x_h, x_l] += c_i p[h,l] (Gx[h] - Gx^T p_l) = -sqrt(m) dL̂/dA
    dG/dt = (S I + m1 M_V) z,   dS/dt = 2 m1 G^T z,   dM_V/dt = G z^T + z G^T,
    dA/dt = (M_K B + B M_Q) / sqrt(m),   dM_K/dt = (A B^T + B A^T) / sqrt(m),   dM_Q/dt = (A^T B + B^T A) / sqrt(m)

The Gram rows (given z and B) are derived at symbolic sizes by `derivations.cooccurrence` (the push-forward of
the parameters' gradient flow) and generated into `flows/_generated/cooccurrence_gram.py`; z and B are here."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import check_dtype
from .._generated import cooccurrence_gram as _gram
from ..events import Event
from ..system import Reduced
from . import observables as obs
from .data import Config
from .network import init_params
from .observables import Args, Gram

__all__ = [
    "GRAM_STATE",
    "SOLVER",
    "T1_EVENTS",
    "flow_gradients",
    "gram_limit",
    "host_grams",
    "initial_state",
    "vector_field",
]

#: the keys of the Gram state.
GRAM_STATE = ("G", "S", "M_V", "M_K", "M_Q", "A")
#: the default options of the solves of this system (`flows.solve` keywords).
SOLVER = {"solver": "auto", "rtol": 1e-8, "atol": 1e-10, "save_states": False}


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


def vector_field(t: Any, state: Gram, args: Args) -> Gram:
    """d(Gram state)/dt of the module docstring; `state` a dict of G `(d,)`, S `()`, M_V, M_K, M_Q, A
    `(d, d)`; `args` the spec's data (`spec.data`)."""
    z, B, _ = flow_gradients(state, args)
    return _gram.vector_field(t, state, {"z": z, "B": B, "m1": args["m1"], "sqrt_m": args["sqrt_m"]})


def host_grams(config: Config, params: dict, a: Any) -> Gram:
    """The Gram state of `params` and the signs `a`, computed on the host (a few small matmuls, not worth a
    compile). **Raises:** `ValueError` when they overflow (init stds too large for the dtype)."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, by name
        host = obs.gram_state({k: np.asarray(v) for k, v in params.items()}, np.asarray(a))
    if not all(np.all(np.isfinite(v)) for v in host.values()):
        raise ValueError(
            f"the initial Grams overflow: init stds sigma0 = {config.init_stds[0]:.3g}, sigma1 = "
            f"{config.init_stds[1]:.3g} are too large for dtype {params['W'].dtype}"
        )
    return {k: jnp.asarray(v) for k, v in host.items()}


def initial_state(config: Config, dtype: Any = None) -> Gram:
    """The Grams of `network.init_params(config)`: the flow starts where `train` starts."""
    params, a = init_params(config, dtype=check_dtype("dtype", dtype))
    return host_grams(config, params, a)


def _gram_initial(config: Config, params: dict, data: Args) -> Gram:
    return host_grams(config, params, data["a"])


def _data(data: Args) -> Args:
    return data


def gram_limit(config: Config) -> Reduced:
    """The Gram flow of `config` as a named limit of its spec: `vector_field` on the Grams of the initial
    parameters, its args the spec's data, its observables `observables.observe` of the Grams."""
    return Reduced(
        vector_field=vector_field,
        initial=functools.partial(_gram_initial, config),
        args=_data,
        observe=obs.observe,
        description="Yang et al. 2024, Sec. 3, App. C: the exact gradient flow closed on the Grams",
    )


# T1 (zero training error, the end of phase 1: Thm 3.1) located without stopping: the solve continues past it
# (one compiled program, see flows.solve). The args are the driver's: the field's args of a named limit
# (`args["field"]`), the data of an optimiser limit on the parameters (`args["batch"]`).


def _gram_margin(t: Any, y: Gram, args: dict) -> Array:
    return obs.min_margin(t, y, args["field"])


def _params_margin(t: Any, y: dict, args: dict) -> Array:
    params = y["theta"] if "theta" in y else y  # the state of momentum and Adam carries the parameters
    return obs.min_margin(t, obs.gram_state(params, args["batch"]["a"]), args["batch"])


#: the T1 event of the Gram flow (`"gram"`) and of the optimiser limits on the parameters (`None`).
T1_EVENTS = {
    "gram": Event(_gram_margin, direction=True, stop=False, name="T1 (zero training error)"),
    None: Event(_params_margin, direction=True, stop=False, name="T1 (zero training error)"),
}
