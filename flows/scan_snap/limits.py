"""The named limits of Scan and Snap's spec (`spec.system(...).reduced`, `flows.Reduced`): the T -> infinity flows
of the Y/Z network that the generic optimiser limits do not give, each solved by `flows.solve_flow(system, ts,
reduced=NAME)` from the network's initial parameters.

- `"population"`: the population gradient flow of (Y, Z) at T -> infinity, hand-written (Lemma 1, eq. 4;
  Lemma 2, eq. 5; `flow.full_vector_field`): the generic `optimizer="gd"` limit of the same loss by autodiff,
  in closed form. State {"Y": (M, M), "Z": (L, M)} (the network's parameters).
- `"reduced"`: the quasi-static reduced Z-flow (Lemma 4, eq. 10; `flow.reduced_vector_field`) with the decoder
  scalar h = h(t/K) and B_n (Theorem 1). State {"Z": (L, M), "h": (), "B": (K,)}.
- `"decoder"`: the decoder h-flow (Sec. 4, Lemmas 5-6; the generated `decoder.decoder_vector_field`), one h_n
  per class at the rate eta_Y P(n), with Z frozen. Exact for classes with disjoint supports (no common token:
  the f_n are orthonormal and z_m does not move) from Y = 0: Y = F^T W with w_n = (M-1) h_n zeta_n. State
  {"h": (K,), "Z": (L, M)}.
- `"symmetric"`: the generated class-symmetric reduction of the reduced flow (`flow.symmetric_vector_field`),
  for class-symmetric classes (one query token per class, uniform P(n), D distinct tokens of probability p_d
  per class, C common tokens of probability p_c shared by all) from a symmetric Z. State (h, z_d, z_c).

Their conventions (`paper_time`, `exact_slaving`, `decoder_size`) are those of `spec.system`. Observables: the
network's (`model.observe`) where the state determines Y and Z; the attention observables and `gamma` for the
reduced flows (no Y); `alpha` (the target-token probability per class) beside the network's for the decoder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..system import Reduced
from . import observables as obs
from .data import SequenceClasses
from .decoder import decoder_vector_field, target_probability
from .flow import flow_args, full_vector_field, reduced_vector_field, symmetric_vector_field
from .theory import gamma_of_h

__all__ = ["LIMITS", "decoder_field", "decoder_params", "limits", "symmetric_Z", "symmetric_sizes"]

#: the named limits of a Y/Z system.
LIMITS = ("population", "reduced", "decoder", "symmetric")


def _args(classes, eta_Y, eta_Z, options, population, data):
    """`flow.flow_args` on Z's query rows with the system's conventions (`population`: the full flow, whose Z
    moves at K eta_Z on the paper's time)."""
    args = flow_args(classes, eta_Y, eta_Z, query_rows=True, **options, dtype=jnp.result_type(float))
    if population and options["paper_time"]:
        # the full field weights its Z rows P(n); the paper's w_n = K P(n) is K times that
        args["eta_Z"] = args["eta_Z"] * classes.num_classes
    return args


def _obs_full(t, y, args):
    """The network's observables (`model.observe`) from one evaluation of c_n."""
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {
        **obs.attention_observables(c, args["cond"]),
        "loss": obs.population_loss(c, y["Y"], args["next"], args["p"]),
    }


def _obs_reduced(t, y, args):
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {**obs.attention_observables(c, args["cond"]), "gamma": gamma_of_h(y["h"], args["Md"])}


def _population_state(params, data):
    return {"Y": params["Y"], "Z": params["Z"]}


def _reduced_state(params, data):
    dtype = np.asarray(params["Z"]).dtype
    K = data["arrays"].cond.shape[0]
    return {"Z": params["Z"], "h": np.zeros((), dtype), "B": np.zeros((K,), dtype)}


# -- the decoder h-flow -------------------------------------------------------------------------------------------


def decoder_field(t: Any, y: dict, args: dict) -> dict:
    """d{h, Z}/dt of the `"decoder"` limit: dh_n/dt = eta_Y P(n) / ((M-1) + e^{M h_n}), Z frozen."""
    M = jnp.asarray(args["cond"].shape[1], args["cond"].dtype)
    h_dot = decoder_vector_field(t, y["h"], {"eta_Y": args["eta_Y"] * args["p"], "M": M})
    return {"h": h_dot, "Z": jnp.zeros_like(y["Z"])}


def decoder_params(y: dict, args: dict) -> dict:
    """The network's (Y, Z) on the decoder ansatz: Y = F^T W, w_n = (M-1) h_n zeta_n = h_n (M e_n - 1)."""
    f = obs.normalized_attention(obs.attention(y["Z"], args["cond"], args["Q"]))
    M = args["cond"].shape[1]
    W = y["h"][:, None] * (M * args["E"] - 1.0)
    return {"Y": f.T @ W, "Z": y["Z"]}


def _obs_decoder(t, y, args):
    alpha = target_probability(y["h"], jnp.asarray(args["cond"].shape[1], y["h"].dtype))
    return {**_obs_full(t, decoder_params(y, args), args), "alpha": alpha}


def _decoder_state(params, data):
    cond = np.asarray(data["arrays"].cond)
    if np.any((cond > 0).sum(axis=0) > 1):
        raise ValueError(
            "reduced='decoder' is the limit of classes with disjoint supports (no common token): with a common "
            "token the f_n are not orthogonal and Z moves; use reduced='population'"
        )
    if np.any(np.asarray(params["Y"]) != 0):
        raise ValueError("reduced='decoder' starts from Y = 0 (init='zero', or a y0 with Y = 0)")
    return {"h": np.zeros(cond.shape[:1], cond.dtype), "Z": params["Z"]}


# -- the class-symmetric reduction --------------------------------------------------------------------------------


def symmetric_sizes(classes: SequenceClasses) -> dict[str, float] | None:
    """(p_d, p_c, D, C) of class-symmetric classes (one query token per class, uniform P(n), every class D
    distinct tokens of probability p_d and the C common tokens, shared by every class, of probability p_c), or
    `None` when `classes` are not class-symmetric."""
    cond, probs = np.asarray(classes.cond_probs), np.asarray(classes.class_probs)
    K = classes.num_classes
    on = cond > 0
    common, distinct = np.asarray(on.all(axis=0)), classes.distinct_mask
    D = distinct.sum(axis=1)
    if (
        len(classes.query_tokens) != K
        or not np.allclose(probs, 1.0 / K, rtol=0, atol=1e-12)
        or np.any(on != (distinct | common[None, :]))
        or np.any(D != D[0])
        or D[0] == 0
    ):
        return None
    p_d, p_c = cond[distinct], cond[:, common]
    if np.ptp(p_d) > 1e-12 or (p_c.size and np.ptp(p_c) > 1e-12):
        return None
    return {
        "p_d": float(p_d[0]),
        "p_c": float(p_c.flat[0]) if p_c.size else 0.0,
        "D": float(D[0]),
        "C": float(common.sum()),
    }


def _symmetric_args(classes, eta_Y, eta_Z, options, data):
    args = _args(classes, eta_Y, eta_Z, options, False, data)
    sizes = symmetric_sizes(classes) or {"p_d": 1.0, "p_c": 0.0, "D": 1.0, "C": 0.0}
    rows = np.asarray(args["Q"]).T @ classes.distinct_mask  # (L, M): the distinct tokens of each query row
    extra = {**sizes, "M": args["Md"], "distinct": rows, "common": classes.common_mask[None, :].astype(float)}
    return {**args, **{k: jnp.asarray(v, args["cond"].dtype) for k, v in extra.items()}}


def symmetric_Z(y: Any, args: dict) -> Any:
    """Z's query rows (L, M) of a symmetric state (h, z_d, z_c): z_d on each row's distinct tokens, z_c on
    the common tokens (and 0 elsewhere, where the attention has no support)."""
    return y[1] * args["distinct"] + y[2] * args["common"]


def _obs_symmetric(t, y, args):
    return _obs_reduced(t, {"Z": symmetric_Z(y, args), "h": y[0]}, args)


def _symmetric_state(classes, params, data):
    if symmetric_sizes(classes) is None:
        raise ValueError(
            "reduced='symmetric' needs class-symmetric classes (one query token per class, uniform P(n), D "
            "distinct tokens of one probability per class, common tokens shared by every class at one "
            "probability); use reduced='reduced'"
        )
    Z = np.asarray(params["Z"])
    rows = np.asarray(data["arrays"].query_onehot).T @ classes.distinct_mask > 0
    z_d, z_c = Z[rows], Z[:, classes.common_mask]
    if np.ptp(z_d) > 0 or (z_c.size and np.ptp(z_c) > 0):
        raise ValueError("reduced='symmetric' starts from a symmetric Z (one z_d, one z_c: init='zero')")
    return np.asarray([0.0, z_d.flat[0], z_c.flat[0] if z_c.size else 0.0], Z.dtype)


def limits(classes: SequenceClasses, eta_Y: float, eta_Z: float, options: dict) -> dict[str, Reduced]:
    """The named limits (module docstring) of the Y/Z system of `classes` at the rates eta_Y, eta_Z, with the
    conventions `options` = {"paper_time", "exact_slaving", "decoder_size"} (`paper_time` `None`: each flow's
    own, the paper's time for the reduced flows and the network's clock for the others)."""
    own = options["paper_time"]

    def conventions(paper):
        return {**options, "paper_time": paper if own is None else own}

    def field_args(builder, paper, *extra):
        return functools.partial(builder, classes, eta_Y, eta_Z, conventions(paper), *extra)

    # name: (vector field, initial state, field-args builder and its flags, observe, description)
    table: dict[str, tuple[Callable, Callable, tuple, Callable, str]] = {
        "population": (
            full_vector_field,
            _population_state,
            (_args, False, True),
            _obs_full,
            "Lemmas 1-2 (eqs. 4-5) at T -> inf: the population flow of (Y, Z), hand-written",
        ),
        "reduced": (
            reduced_vector_field,
            _reduced_state,
            (_args, True, False),
            _obs_reduced,
            "Lemma 4 (eq. 10), Theorem 1: the quasi-static reduced Z-flow with h(t/K) and B_n",
        ),
        "decoder": (
            decoder_field,
            _decoder_state,
            (_args, False, False),
            _obs_decoder,
            "Sec. 4, Lemmas 5-6: the decoder h-flow per class, attention frozen (disjoint supports)",
        ),
        "symmetric": (
            symmetric_vector_field,
            functools.partial(_symmetric_state, classes),
            (_symmetric_args, True),
            _obs_symmetric,
            "eq. 10 on class-symmetric classes (generated): state (h, z_d, z_c)",
        ),
    }
    return {
        name: Reduced(vector_field=field, initial=initial, args=field_args(*args), observe=observe, description=text)
        for name, (field, initial, args, observe, text) in table.items()
    }
