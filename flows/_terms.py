"""What a solve integrates, as diffrax composes it: `dy = f(t, y, args) dt` (an `ODETerm`), or an SDE
`dy = f dt + g dW` as `MultiTerm(ODETerm(f), ControlTerm(g, W))` with its Brownian motion W, and the SDE
solvers (`flows.sde` validates an SDE call; `flows._program` builds either into the one compiled solve).

- Additive noise: g = `lineax.DiagonalLinearOperator(sigma)` on the (flat) state; the solvers of
  `SDE_SOLVERS`, strong orders in `STRONG_ORDER`.
- General Itô noise: g(t, y, args) one (possibly low-rank) `lineax.MatrixLinearOperator` on the flattened
  state; only Euler-Maruyama (`GENERAL_NOISE_SOLVERS`) converges to the Itô solution for non-commutative noise.
- W: `diffrax.VirtualBrownianTree` (`"tree"`: one path per key whatever dt) or `diffrax.UnsafeBrownianPath`
  (`"increments"`: the same law, cheaper, solved with `diffrax.ForwardMode`), drawn on `flows._prng.fused(key)`
  (the same draws as the caller's key).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx

from ._prng import fused

__all__ = ["BROWNIAN", "GENERAL_NOISE_SOLVERS", "SDE_SOLVERS", "STRONG_ORDER", "Noise"]

#: name -> (diffrax solver class, Brownian-tree Lévy area it needs)
SDE_SOLVERS: dict[str, tuple[type[diffrax.AbstractSolver], type]] = {
    "euler": (diffrax.Euler, diffrax.BrownianIncrement),
    "heun": (diffrax.Heun, diffrax.BrownianIncrement),
    "sea": (diffrax.SEA, diffrax.SpaceTimeLevyArea),
    "sra1": (diffrax.SRA1, diffrax.SpaceTimeLevyArea),
    "shark": (diffrax.ShARK, diffrax.SpaceTimeLevyArea),
}
#: Strong order of each solver for additive noise (pathwise error ~ dt**order).
STRONG_ORDER = {"euler": 1.0, "heun": 1.0, "sea": 1.0, "sra1": 1.5, "shark": 1.5}

#: The solvers that converge to the Itô solution for general (non-commutative) noise (`diffusion=`), with
#: their weak order: Euler-Maruyama only (module docstring).
GENERAL_NOISE_SOLVERS = {"euler": 1.0}

#: Brownian motions: "tree" (`diffrax.VirtualBrownianTree`, the default: one path per key whatever dt) or
#: "increments" (`diffrax.UnsafeBrownianPath`: one independent Gaussian increment per constant step, solved
#: with `diffrax.ForwardMode`; much cheaper, the same law, but the path depends on dt).
BROWNIAN = ("tree", "increments")


@dataclasses.dataclass(frozen=True)
class Noise:
    """The compiled-in part of an SDE solve (part of its program's key); the traced part, `(sigma, key, dt)`,
    is the program's last argument. `diffusion` and `noise_shape` for general noise, `None` for additive;
    `tol` is the Brownian tree's (`None` for increments)."""

    solver: str
    brownian: str
    tol: float | None
    diffusion: Callable | None = None
    noise_shape: tuple[int, ...] | None = None

    def solver_object(self) -> diffrax.AbstractSolver:
        return SDE_SOLVERS[self.solver][0]()

    def adjoint(self) -> diffrax.AbstractAdjoint:
        return diffrax.RecursiveCheckpointAdjoint() if self.brownian == "tree" else diffrax.ForwardMode()

    def terms(self, drift: Callable, y0, ravel: Callable, unravel: Callable, inputs, t0, t1) -> diffrax.MultiTerm:
        """`MultiTerm(ODETerm(drift), ControlTerm(g, W))` on the state `y0` as the solver sees it (`ravel` and
        `unravel` map a pytree like the caller's state to it and back); `inputs = (sigma, key, dt)`."""
        sigma, key, _ = inputs
        key = fused(key)  # the same Brownian draws, the threefry hash unrolled (flows._prng)
        levy = SDE_SOLVERS[self.solver][1]
        if self.diffusion is not None:
            # general noise: one flat state (D,), a flat Brownian motion (m,), the factor as a D x m matrix
            m = math.prod(self.noise_shape or ())
            diffusion = self.diffusion

            def factor(t, z, a):
                g = diffusion(t, unravel(z), a)
                cols = [jnp.reshape(x, (-1, m)).astype(z.dtype) for x in jax.tree_util.tree_leaves(g)]
                return lx.MatrixLinearOperator(jnp.concatenate(cols, axis=0) if len(cols) > 1 else cols[0])

            noise_struct = jax.ShapeDtypeStruct((m,), y0.dtype)
        else:
            sigma = ravel(sigma)
            noise_struct = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), y0)
            factor = lambda t, y, a: lx.DiagonalLinearOperator(sigma)  # noqa: E731
        if self.brownian == "tree":
            bm = diffrax.VirtualBrownianTree(t0, t1, tol=self.tol, shape=noise_struct, key=key, levy_area=levy)
        else:
            bm = diffrax.UnsafeBrownianPath(shape=noise_struct, key=key, levy_area=levy)
        return diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(factor, bm))
