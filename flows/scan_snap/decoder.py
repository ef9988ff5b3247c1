"""The decoder scalar flow with attention frozen (Tian et al. 2023, Sec. 4, Lemma 6).

dh/dt = eta_Y / ((M - 1) + e^{M h}), h(0) = 0, whose right-hand side is *derived* by
`derivations.scan_snap` (projection of the logit gradient flow onto w_n = (M-1) h zeta_n) and emitted to
`flows/_generated/scan_snap_decoder.py`. The logits are w_n = (M-1) h zeta_n and the probability of the
target token is alpha_nn = e^{M h} / ((M-1) + e^{M h}).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_dtype, real_array
from .._generated import scan_snap_decoder as _gen
from .._solve import Trajectory, solve, solve_batch
from .flow import check_ts

__all__ = ["decoder_vector_field", "solve_decoder", "target_probability"]


def decoder_vector_field(t: Any, h: jax.Array, args: dict[str, Any]) -> jax.Array:
    """dh/dt for scalar (or batched) `h`; `args` with exactly the keys `"eta_Y"`, `"M"` (the generated RHS)."""
    return _gen.vector_field(t, h[..., None], args)[..., 0]


def target_probability(h: Any, M: Any) -> jax.Array:
    """alpha_nn = e^{M h} / ((M-1) + e^{M h}) = 1 / (1 + (M-1) e^{-M h}) (Lemma 5)."""
    return 1.0 / (1.0 + (M - 1) * jnp.exp(-M * h))


def _alpha_observable(t, h, args):
    return target_probability(h, args["M"])


def _as_param(name, value, *, lower):
    arr = real_array(name, value, finite=False)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array of values to sweep, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if np.any(arr <= lower):
        raise ValueError(f"{name} must be > {lower}, got {value!r}")
    return arr


def solve_decoder(
    M: Any,
    eta_Y: Any,
    ts: Any,
    *,
    solver: str = "dopri8",
    rtol: float = 1e-12,
    atol: float = 1e-30,
    max_steps: int = 100_000,
    dtype: Any = None,
    throw: bool = True,
) -> Trajectory:
    """Integrate the derived h-flow from h(0) = 0 and save h at `ts` (so `traj.ys[i] = h(ts[i])`).

    **Arguments:**

    - `M`: vocabulary size (> 1). `eta_Y`: decoder learning rate (> 0). Either may be a 1-D array: the
      flow is then solved for every value in one vmapped, once-compiled sweep (both arrays broadcast), and
      every field of the `Trajectory` gains a leading axis.
    - `ts`: increasing save times >= 0; the horizon is `ts[-1]`.
    - `solver`, `rtol`, `atol`, `max_steps`: as in `flows.solve` (defaults: Dopri8 at rtol 1e-12, which
      matches the closed form `theory.h` to ~1e-11 relative).
    - `dtype`: state dtype (default: JAX's default float, float64 when x64 is enabled).

    Observables saved alongside: `alpha` (target-token probability).
    """
    M_arr = _as_param("M", M, lower=1.0)
    eta_arr = _as_param("eta_Y", eta_Y, lower=0.0)
    ts = check_ts(ts, positive_end=False)
    t1 = float(ts[-1]) if ts[-1] > 0 else 1.0
    dtype = check_dtype("dtype", dtype) or jnp.result_type(float)
    observables = {"alpha": _alpha_observable}
    common = dict(t1=t1, ts=ts, solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, observables=observables)
    if M_arr.ndim == 0 and eta_arr.ndim == 0:
        args = {"M": jnp.asarray(M_arr, dtype), "eta_Y": jnp.asarray(eta_arr, dtype)}
        return solve(decoder_vector_field, jnp.zeros((), dtype), args=args, throw=throw, **common)
    M_b, eta_b = np.broadcast_arrays(np.atleast_1d(M_arr), np.atleast_1d(eta_arr))
    args = {"M": jnp.asarray(M_b, dtype), "eta_Y": jnp.asarray(eta_b, dtype)}
    return solve_batch(decoder_vector_field, jnp.zeros((), dtype), args=args, throw=throw, **common)
