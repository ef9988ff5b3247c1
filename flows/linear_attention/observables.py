"""Observables of linear attention, functions of the parameters that the network record and the flow
trajectory share (Zhang, Frei, Bartlett 2024; Zhang, Singh, Latham, Saxe 2025).

Each observable is a module-level `f(t, params, args)` (the signature `flows.solve` takes, so its compilation is
cached), with `params` a parameter dict of any form (`model.init_params`) and `args = data_args(config)` the
population statistics as arrays (traced: a new Lambda or N does not recompile):

- `"loss"`: the exact population loss (1/2) E[(y_hat - y_q)^2] (`model.moment_loss`);
- `"G"`: the effective matrix, y_hat = x_q^T G h + ... (`model.effective_G`), `(d, d)`;
- `"alignment"`: gamma_i r_i^T G r_i along each eigen-direction r_i of Lambda, `(d,)`, in the order of
  `Config.eigenvalues`: 0 at G = 0, 1 at the optimum G = Gamma^{-1} (ZFB Theorem 4.1);
- `"n_learned"`: how many directions have alignment above 1/2 (the step of ZSLS's staircase, Sec. 4).

The distribution-shift losses of ZFB Sec. 4.2 (`task_shift_loss`, `query_shift_loss`, `covariate_shift_loss`)
take the `Config` and a covariance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..system import Batch, Params
from . import model
from .data import Config, covariance

__all__ = [
    "OBSERVABLES",
    "alignment",
    "covariate_shift_loss",
    "data_args",
    "effective_G",
    "loss",
    "n_learned",
    "observe",
    "query_shift_loss",
    "task_shift_loss",
]


def data_args(config: Config) -> Batch:
    """The arrays the observables read: `"lam"` Lambda `(d, d)`, `"N"` the prompt length (a float array),
    `"directions"` R `(d, d)` (the eigen-directions of Lambda as columns, in the order of `eigenvalues`) and
    `"gamma"` gamma_i = (1 + 1/N) lambda_i + tr(Lambda) / N `(d,)`, the eigenvalues of Gamma.

    **Arguments:** `config`: the `Config`.

    **Returns:** the dict of arrays.
    """
    dtype = jnp.result_type(float)
    eig = np.asarray(config.eigenvalues)
    R = np.eye(config.d) if config.rotation is None else np.asarray(config.rotation)
    gamma = (1.0 + 1.0 / config.N) * eig + eig.sum() / config.N
    return {
        "lam": covariance(config),
        "N": jnp.asarray(float(config.N), dtype),
        "directions": jnp.asarray(R, dtype),
        "gamma": jnp.asarray(gamma, dtype),
    }


def loss(t: Any, params: Params, args: Batch) -> jax.Array:
    """The exact population loss (1/2) E[(y_hat - y_q)^2] (ZFB eq. 3.8), a scalar."""
    lam = args["lam"]
    return model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), args["N"])


def effective_G(t: Any, params: Params, args: Batch) -> jax.Array:
    """G with y_hat = x_q^T G h on ZFB's reduced parameters (`model.effective_G`), `(d, d)`."""
    return model.effective_G(params, None)


def alignment(t: Any, params: Params, args: Batch) -> jax.Array:
    """a_i = gamma_i r_i^T G r_i, `(d,)`: the fraction of eigen-direction i that G has learned (1 at
    G = Gamma^{-1}, where r_i^T G r_i = 1 / gamma_i; 0 at G = 0)."""
    R = args["directions"]
    return args["gamma"] * jnp.einsum("ia,ij,ja->a", R, effective_G(t, params, args), R)


def n_learned(t: Any, params: Params, args: Batch) -> jax.Array:
    """The number of eigen-directions with `alignment` above 1/2 (a float scalar): k on the k-th plateau of
    principal-component regression (ZSLS eq. 18-19)."""
    a = alignment(t, params, args)
    return jnp.sum((a > 0.5).astype(a.dtype))


OBSERVABLES: dict[str, Callable[[Any, Params, Batch], jax.Array]] = {
    "loss": loss,
    "G": effective_G,
    "alignment": alignment,
    "n_learned": n_learned,
}


def observe(t: Any, params: Params, args: Batch) -> dict[str, jax.Array]:
    """Every observable of `OBSERVABLES` at once (G computed once).

    **Arguments:** `t` (unused), `params` of any form, `args = data_args(config)`.

    **Returns:** `{"loss", "G", "alignment", "n_learned"}`.
    """
    G = effective_G(t, params, args)
    R = args["directions"]
    a = args["gamma"] * jnp.einsum("ia,ij,ja->a", R, G, R)
    return {"loss": loss(t, params, args), "G": G, "alignment": a, "n_learned": jnp.sum((a > 0.5).astype(a.dtype))}


def task_shift_loss(params: Params, config: Config, task_cov: jax.Array | np.ndarray) -> jax.Array:
    """The loss when the task vectors follow w ~ N(0, `task_cov`) instead of N(0, I) (ZFB Sec. 4.2, task shift).

    **Arguments:** `params` of `config.form`, `config`, `task_cov` `(d, d)`.

    **Returns:** the exact loss (1/2) E[(y_hat - y_q)^2] (scalar).
    """
    return model.shifted_loss(params, config, task_cov=task_cov)


def query_shift_loss(params: Params, config: Config, query_cov: jax.Array | np.ndarray) -> jax.Array:
    """The loss when only the query follows x_q ~ N(0, `query_cov`) (ZFB Sec. 4.2, query shift).

    **Arguments:** `params` of `config.form`, `config`, `query_cov` `(d, d)`.

    **Returns:** the exact loss (scalar).
    """
    return model.shifted_loss(params, config, query_cov=query_cov)


def covariate_shift_loss(params: Params, config: Config, test_cov: jax.Array | np.ndarray) -> jax.Array:
    """The loss when every input of the prompt, context and query, follows N(0, `test_cov`) (ZFB Sec. 4.2,
    covariate shift: the trained model predicts x_q^T Gamma^{-1} Lambda' w instead of x_q^T w).

    **Arguments:** `params` of `config.form`, `config`, `test_cov` `(d, d)`.

    **Returns:** the exact loss (scalar).
    """
    return model.shifted_loss(params, config, context_cov=test_cov, query_cov=test_cov)
