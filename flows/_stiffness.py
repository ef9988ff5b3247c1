"""Stiffness detection for `solver="auto"`: the two diffrax solvers it switches between, each watching its own
accepted steps and ending the solve (with `SWITCH_RESULT`) when the other one would do better.

A gradient flow turns stiff as it converges: near a minimum the fast directions of the Hessian have relaxed,
yet they bound an explicit solver's step at its stability limit, h |lambda_max| <= `BOUND` (3.51 for Tsit5
on the negative real axis), long after the accuracy would allow much longer steps.

Explicit (`StiffnessWatch`, Tsit5): an estimate of h rho along the error comes free from the step's stage
increments k_j = h f(Y_j). The error estimate is e.k = sum_j e_j k_j (e = b - b_hat, sum_j e_j = 0), and with
f linear near the step, e.k = h J sum_j e_j Y_j = h J w with w = sum_i (A^T e)_i k_i (the stage values are
Y_j = y0 + sum_i a_ji k_i); so

    h rho = ||e.k|| / ||w||,   <e.k, w> < 0 for a decaying direction,

is h |lambda| of the direction that dominates the error (in the spirit of Hairer and Wanner, *Solving ODEs
II*, IV.2, whose DOPRI5 estimate uses the two stages at the end of the step; those of Tsit5 differ at low
order, so that quotient sees the smooth part). When a stiff direction pins the step at the stability bound
it dominates the error and the estimate is h |lambda_max|, near `BOUND`. `PATIENCE` accepted steps above
`STIFF_FRACTION * BOUND` along decaying directions, not interrupted by `CALM` accepted steps below it, while
the rest of the horizon would still take more than `MIN_REMAINING` such steps: switch to Kvaerno5.

Implicit (`CalmWatch`, Kvaerno5): h times a power-iteration estimate of the Jacobian's spectral radius (one
Jacobian-vector product per step; the stage quotient of a long implicit step is at the rounding level once the
flow has converged). `PATIENCE` accepted steps in a row below `RELAX_FRACTION * BOUND`: an explicit step as
long would be stable, and is several times cheaper: switch back.
"""

from __future__ import annotations

from typing import Any, ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "BOUND",
    "EXPLICIT",
    "IMPLICIT",
    "PATIENCE",
    "SWITCH_RESULT",
    "CalmWatch",
    "StiffnessWatch",
    "stability_bound",
]

#: The solvers of `solver="auto"`: it starts with the explicit one.
EXPLICIT, IMPLICIT = "tsit5", "kvaerno5"
#: Accepted steps of evidence before a switch; `CALM` non-stiff steps in a row reset the explicit count.
PATIENCE, CALM = 15, 6
#: h rho above this fraction of the stability bound counts as a stiff step: a step pinned at the bound is
#: accepted at 0.85-1.15 of it, its rejected tries above (the step-size controller probes the bound).
STIFF_FRACTION = 0.8
#: h rho below this fraction of the bound, in the implicit solver, counts as a step the explicit one could take.
RELAX_FRACTION = 0.5
#: The explicit solver switches only while the rest of the horizon would take it more steps than this at the
#: pinned step: fewer explicit steps cost less than compiling and running the implicit solver (a Kvaerno5
#: step costs tens of Tsit5 steps, its first compile seconds), so a solve that ends soon stays explicit.
MIN_REMAINING = 20_000
#: The result a watching solver ends its solve with. It belongs to `diffrax.ClipStepSizeController`, which no
#: solve here uses, so it cannot mean anything else.
SWITCH_RESULT = diffrax.RESULTS.max_steps_rejected


def _matrix(tableau) -> tuple[np.ndarray, np.ndarray]:
    """(A, b) of a diffrax Butcher tableau, A square with its diagonal (zero for an explicit method)."""
    s = len(tableau.b_sol)
    A = np.zeros((s, s))
    for i, row in enumerate(tableau.a_lower):
        A[i + 1, : len(row)] = row
    if tableau.a_diagonal is not None:
        A[np.diag_indices(s)] = tableau.a_diagonal
    return A, np.asarray(tableau.b_sol, dtype=float)


def stability_bound(tableau) -> float:
    """The largest x with |R(-z)| <= 1 on all of [0, x], R the stability function of the explicit Runge-Kutta
    `tableau`, R(z) = 1 + z b^T (I - z A)^{-1} 1 (Hairer and Wanner II, IV.2): where the negative real axis
    leaves the stability region (2.0 for Euler, 3.31 for Dormand-Prince 5, 3.51 for Tsit5)."""
    A, b = _matrix(tableau)
    ones = np.ones(len(b))
    xs = np.linspace(1e-3, 10.0, 20_001)
    gain = np.array([abs(1.0 - x * b @ np.linalg.solve(np.eye(len(b)) + x * A, ones)) for x in xs])
    unstable = np.nonzero(gain > 1.0 + 1e-12)[0]
    return float(xs[unstable[0] - 1]) if unstable.size else float(xs[-1])


#: Tsit5's stability bound on the negative real axis.
BOUND = stability_bound(diffrax.Tsit5.tableau)


def _error_direction(tableau) -> np.ndarray:
    """Coefficients of w = sum_i (A^T e)_i k_i, the stage combination whose image under h J is the error
    estimate e.k (module docstring)."""
    A, _ = _matrix(tableau)
    return A.T @ np.asarray(tableau.b_error, dtype=float)


def _h_rho(y_error, k, coeffs: np.ndarray):
    """(h rho, <e.k, w>) of one step from its error estimate e.k and its stage increments `k` (pytrees of
    arrays, `k`'s leaves with a leading stage axis)."""
    pairs = [
        (err, jnp.tensordot(jnp.asarray(coeffs, leaf.dtype), leaf, axes=1))
        for err, leaf in zip(jax.tree_util.tree_leaves(y_error), jax.tree_util.tree_leaves(k), strict=True)
    ]
    top = sum(jnp.sum(err * err) for err, _ in pairs)
    bottom = sum(jnp.sum(w * w) for _, w in pairs)
    dot = sum(jnp.sum(err * w) for err, w in pairs)
    ratio = jnp.sqrt(top / jnp.where(bottom > 0, bottom, 1.0))
    return jnp.where((bottom > 0) & jnp.isfinite(ratio), ratio, 0.0), dot


class StiffnessWatch(diffrax.Tsit5):
    """Tsit5 that ends its solve with `SWITCH_RESULT` once its accepted steps are pinned at the stability bound
    (module docstring), `horizon` (the whole solve's t1, traced) still far. The state carries (Tsit5's state,
    the stiff-step count, the calm-step count)."""

    horizon: Any = None
    coeffs: ClassVar[np.ndarray] = _error_direction(diffrax.Tsit5.tableau)

    def init(self, terms, t0, t1, y0, args) -> Any:
        zero = jnp.zeros((), jnp.int32)
        return super().init(terms, t0, t1, y0, args), zero, zero

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner, stiff, calm = solver_state
        y1, y_error, dense_info, inner, result = super().step(terms, t0, t1, y0, args, inner, made_jump)
        h_rho, dot = _h_rho(y_error, dense_info["k"], self.coeffs)
        pinned = (h_rho > STIFF_FRACTION * BOUND) & (dot < 0)
        calm = jnp.where(pinned, 0, calm + 1)
        stiff = jnp.where(pinned, stiff + 1, jnp.where(calm >= CALM, 0, stiff))
        fire = (stiff >= PATIENCE) & (result == diffrax.RESULTS.successful)
        if self.horizon is not None:
            fire = fire & (self.horizon - t1 > MIN_REMAINING * (t1 - t0))
        return y1, y_error, dense_info, (inner, stiff, calm), diffrax.RESULTS.where(fire, SWITCH_RESULT, result)


class CalmWatch(diffrax.Kvaerno5):
    """Kvaerno5 that ends its solve with `SWITCH_RESULT` once `PATIENCE` accepted steps in a row were short
    enough for the explicit solver to be stable (module docstring). Here h rho is h times a power-iteration
    estimate of the Jacobian's spectral radius, one Jacobian-vector product per step, carried from step to step:
    the stage difference of a long implicit step is at the rounding level once the flow has converged, and its
    quotient means nothing there. `horizon` is not used (it is the explicit solver's)."""

    horizon: Any = None

    def init(self, terms, t0, t1, y0, args) -> Any:
        count = jnp.arange(sum(np.size(leaf) for leaf in jax.tree_util.tree_leaves(y0)), dtype=float)
        probe = _unit(_like(y0, jnp.cos(1.0 + 0.618 * count)))
        return super().init(terms, t0, t1, y0, args), jnp.zeros((), jnp.int32), probe

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner, calm, probe = solver_state
        y1, y_error, dense_info, inner, result = super().step(terms, t0, t1, y0, args, inner, made_jump)
        _, image = jax.jvp(lambda y: terms.vf(t1, y, args), (y1,), (probe,))
        rho = _norm(image)
        scale = jnp.where(rho > 0, rho, 1.0)
        probe = jax.tree_util.tree_map(lambda p, q: jnp.where(rho > 0, q / scale, p), probe, image)
        calm = jnp.where((t1 - t0) * rho < RELAX_FRACTION * BOUND, calm + 1, 0)
        fire = (calm >= PATIENCE) & (result == diffrax.RESULTS.successful)
        return y1, y_error, dense_info, (inner, calm, probe), diffrax.RESULTS.where(fire, SWITCH_RESULT, result)


def _norm(tree):
    return jnp.sqrt(sum(jnp.sum(leaf * leaf) for leaf in jax.tree_util.tree_leaves(tree)))


def _unit(tree):
    size = _norm(tree)
    return jax.tree_util.tree_map(lambda leaf: leaf / size, tree)


def _like(tree, flat):
    """`flat` (one entry per entry of `tree`) cut into `tree`'s leaves, in each leaf's dtype."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out, start = [], 0
    for leaf in leaves:
        size = int(np.size(leaf))
        out.append(jnp.reshape(flat[start : start + size], jnp.shape(leaf)).astype(jnp.result_type(leaf)))
        start += size
    return jax.tree_util.tree_unflatten(treedef, out)
