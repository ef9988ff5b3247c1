"""Check derived right-hand sides against `-eta * jax.grad` of the same loss written directly in JAX, at
points mapped to the full parameter by the test's own ansatz phi (`projected_rate` for a projected flow)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["VerifyReport", "autodiff_flow", "compare", "projected_rate"]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """Largest errors between a derived and a reference right-hand side over `num_points` samples."""

    num_points: int
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float

    @property
    def passed(self) -> bool:
        return self.max_abs_err <= self.atol or self.max_rel_err <= self.rtol

    def __str__(self):
        verdict = "ok" if self.passed else "MISMATCH"
        return (
            f"{verdict}: {self.num_points} points, max abs err {self.max_abs_err:.3e}, "
            f"max rel err {self.max_rel_err:.3e} (rtol {self.rtol:g}, atol {self.atol:g})"
        )


def autodiff_flow(loss: Callable, learning_rate: float | jax.Array) -> Callable:
    """theta -> -learning_rate * grad(loss)(theta) for a loss written in JAX (a pytree of parameters)."""
    grad = jax.grad(loss)
    return lambda theta: jax.tree_util.tree_map(lambda g: -learning_rate * g, grad(theta))


def projected_rate(theta_dot: Callable, phi: Callable, h: jax.typing.ArrayLike) -> jax.Array:
    """h_dot = argmin || J h_dot - theta_dot(phi(h)) || = (J^T J)^{-1} J^T theta_dot, J = d phi/d h.

    `phi` maps the ansatz coordinates (1-D array) to the flat full parameter vector (Euclidean metric).
    The normal equations are solved directly: J has few, well-conditioned columns here, and this is more
    accurate than an SVD-based least-squares solve.
    """
    h = jnp.asarray(h)
    J = jax.jacfwd(phi)(h)
    rate = theta_dot(phi(h))
    return jnp.linalg.solve(J.T @ J, J.T @ rate)


def compare(
    derived: Callable, reference: Callable, points: Iterable, *, rtol: float = 1e-12, atol: float = 0.0
) -> VerifyReport:
    """Evaluate `derived(p)` and `reference(p)` at each point and report the largest differences.

    Relative error is measured against max(|reference|) at each point (norm-wise), so near-zero
    components do not produce spurious relative errors.
    """
    max_abs, max_rel, n = 0.0, 0.0, 0
    for p in points:
        d = np.ravel(np.asarray(derived(p), dtype=float))
        r = np.ravel(np.asarray(reference(p), dtype=float))
        if d.shape != r.shape:
            raise ValueError(f"derived and reference shapes differ: {d.shape} vs {r.shape}")
        err = float(np.max(np.abs(d - r)))
        scale = float(np.max(np.abs(r)))
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / scale if scale > 0 else (0.0 if err == 0 else np.inf))
        n += 1
    if n == 0:
        raise ValueError("points must contain at least one sample")
    return VerifyReport(num_points=n, max_abs_err=max_abs, max_rel_err=max_rel, rtol=rtol, atol=atol)
