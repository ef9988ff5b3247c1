"""Reductions computed from symmetries instead of guessed: the subspace fixed by a group of linear symmetries of
the loss and the flow is invariant under the gradient flow (symmetric criticality), so the reduced flow is the
projection onto it.

`reduce_by_symmetry(system, generators)` checks each generator (a `sympy.combinatorics.Permutation` of the state
order, or an exact n x n matrix: a sign flip, a rotation), computes the fixed subspace (the common eigenvalue-1
space of the generators), chooses coordinates on it and projects the flow with the metric of the state
(`project`: h_dot = (B^T G B)^{-1} B^T G x_dot(B h)); the reduced metric B^T G B holds the orbit sizes.
`find_symmetries` (in `derivations.symmetry_search`) proposes the generators."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy as sp
from sympy.combinatorics import Permutation

from .gradient_flow import Projection, project
from .system import FlowSystem, check_symbols

__all__ = [
    "SymmetryReduction",
    "as_matrix",
    "describe",
    "is_zero",
    "NumericCheck",
    "reduce_by_symmetry",
    "symmetry_defect",
]

logger = logging.getLogger(__name__)


def describe(generator: Any) -> str:
    """A short name of a generator for messages: the cycles of a permutation, the diagonal of a sign flip."""
    if isinstance(generator, Permutation):
        return f"Permutation{generator.cyclic_form}" if generator.cyclic_form else "the identity permutation"
    M = sp.Matrix(generator)
    if M.is_diagonal():
        return f"diag{list(M.diagonal())}"
    return f"the matrix {M.tolist()}"


def as_matrix(generator: Any, n: int, field: str) -> sp.Matrix:
    """The n x n matrix g of a generator, acting on the state x by x -> g x: a `Permutation` p moves the
    entry at i to p(i) (g[p(i), i] = 1); a matrix must be exact (integers, rationals, sympy numbers such as
    sqrt(3)/2) and invertible."""
    if isinstance(generator, Permutation):
        if generator.size > n:
            raise ValueError(f"{field} ({describe(generator)}) acts on {generator.size} entries; the state has {n}")
        g = sp.zeros(n, n)
        for i in range(n):
            g[generator(i) if i < generator.size else i, i] = 1
        return g
    try:
        g = sp.Matrix(generator)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field} must be a sympy Permutation or an n x n matrix, got {generator!r}") from err
    if g.shape != (n, n):
        raise ValueError(f"{field} must be {n} x {n} (one row and column per state entry), got shape {g.shape}")
    if g.has(sp.Float):
        floats = [x for x in g if x.has(sp.Float)]
        if all(x == round(float(x)) for x in floats):
            g = g.applyfunc(lambda x: sp.Integer(round(float(x))) if x.has(sp.Float) else x)
        else:
            raise ValueError(
                f"{field} must have exact entries (integers, rationals, sympy numbers such as sp.sqrt(3)/2), "
                f"got floats such as {floats[0]}"
            )
    if g.det() == 0:
        raise ValueError(f"{field} ({describe(generator)}) is singular: it is no symmetry")
    return g


#: expressions up to this many operations are compared by `sympy.simplify` when nothing cheaper decides
SIMPLIFY_OPS = 400


def is_zero(expr: Any, state: Sequence = ()) -> bool:
    """`expr == 0` proved symbolically: structurally (what permutations of a flow built symmetrically give),
    after expansion for an expression polynomial in `state`, or by `sympy.simplify` for a small one; False
    when none of these proves it (the caller decides: numerically, it was already found zero)."""
    expr = sp.sympify(expr)
    if expr == 0:
        return True
    if state and expr.is_polynomial(*state):
        return sp.expand(expr) == 0
    return sp.count_ops(expr) <= SIMPLIFY_OPS and sp.simplify(expr) == 0


class NumericCheck:
    """The loss and the right-hand sides of `system` at a few random states and parameters (parameters in
    [0.5, 1.5]: positive, as sizes and rates are), lambdified once, to screen candidate symmetries."""

    def __init__(self, system: FlowSystem, *, points: int = 3, seed: int = 0) -> None:
        args = [list(system.state), list(system.params)]
        self.rhs = sp.lambdify(args, list(system.rhs), "numpy", cse=True)
        self.loss = None if system.loss is None else sp.lambdify(args, system.loss, "numpy", cse=True)
        rng = np.random.default_rng(seed)
        self.points = []
        for _ in range(50 * points):
            x = rng.normal(scale=0.5, size=len(system.state))
            p = rng.uniform(0.5, 1.5, size=len(system.params))
            if np.all(np.isfinite(self.rates(x, p))):
                self.points.append((x, p))
            if len(self.points) == points:
                break

    def rates(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.broadcast_to(np.asarray(self.rhs(x, p), dtype=float), (len(x),))

    def defect(self, g: np.ndarray, rtol: float = 1e-9) -> str | None:
        """What fails numerically for x -> g x (module docstring of `symmetry_defect`), or None."""
        for x, p in self.points:
            if self.loss is not None:
                a, b = float(self.loss(g @ x, p)), float(self.loss(x, p))
                if not abs(a - b) <= rtol * max(abs(a), abs(b), 1.0):
                    return f"the loss is not invariant: L(g x) = {a:.6g} but L(x) = {b:.6g} at a random x"
            moved, want = self.rates(g @ x, p), g @ self.rates(x, p)
            err = np.abs(moved - want)
            if not np.all(err <= rtol * max(float(np.abs(want).max()), 1.0)):
                i = int(np.argmax(err))
                return f"the flow is not equivariant: rhs(g x) != g rhs(x) in entry {i} at a random x"
        return None


def symmetry_defect(system: FlowSystem, g: sp.Matrix, numeric: NumericCheck) -> str | None:
    """None when x -> g x is a symmetry of `system`: its metric preserved (g^T G g = G), its loss invariant
    (L(g x) = L(x)) and its flow equivariant (rhs(g x) = g rhs(x)), screened at random points by `numeric`
    and then proved symbolically; else what fails, in words."""
    G = sp.diag(*system.metric)
    if not all(is_zero(e) for e in g.T * G * g - G):
        return "it does not preserve the metric (the multiplicities) of the state"
    found = numeric.defect(np.asarray(g.evalf(17).tolist(), dtype=float))
    if found is not None:
        return found
    moved = dict(zip(system.state, g * sp.Matrix(system.state), strict=True))
    if system.loss is not None and not is_zero(system.loss.xreplace(moved) - system.loss, system.state):
        return "sympy could not confirm the invariance of the loss (it holds numerically at random points)"
    target = g * sp.Matrix(system.rhs)
    for i, e in enumerate(system.rhs):
        if not is_zero(sp.sympify(e).xreplace(moved) - target[i], system.state):
            return (
                f"sympy could not confirm the equivariance of the rate of {system.state[i]} (it holds "
                "numerically at random points)"
            )
    return None


def _fixed_basis(gens: Sequence[sp.Matrix], n: int) -> sp.Matrix:
    """A basis (columns) of the common eigenvalue-1 space of `gens`, each column 1 at one entry (its
    coordinate: the first entry of an orbit of a permutation group) and 0 at the other columns' entries."""
    A = sp.Matrix.vstack(*(g - sp.eye(n) for g in gens)) if gens else sp.zeros(1, n)
    reversed_cols = A[:, ::-1]  # sympy frees the last columns; reversed, an orbit is named by its first entry
    basis = [v[::-1, :] for v in reversed_cols.nullspace()]
    basis.sort(key=lambda v: min(i for i in range(n) if v[i] != 0))
    if not basis:
        raise ValueError("generators: the fixed subspace of the group is {0}; nothing is left to reduce to")
    return sp.Matrix.hstack(*basis)


def _orthogonal(B: sp.Matrix, G: sp.Matrix) -> sp.Matrix:
    """The columns of `B` made G-orthogonal (Gram-Schmidt in exact arithmetic), so that the reduced metric
    is diagonal; a basis already orthogonal is returned as it is."""
    if (B.T * G * B).is_diagonal():
        return B
    cols: list = []
    for j in range(B.cols):
        v = B[:, j]
        for u in cols:
            v = v - (u.T * G * v)[0, 0] / (u.T * G * u)[0, 0] * u
        cols.append(v.applyfunc(sp.nsimplify))
    return sp.Matrix.hstack(*cols)


@dataclasses.dataclass(frozen=True)
class SymmetryReduction:
    """The result of `reduce_by_symmetry`.

    - `system`: the reduced `FlowSystem` (state `coords`, metric the diagonal of B^T G B: orbit sizes times
      multiplicities).
    - `full`: the system reduced; `generators`: the generators as n x n matrices.
    - `basis`: B (n x k), x = B h on the fixed subspace; `projection`: the `Projection` (its `ansatz` is
      x = B h, its `residual` x_dot(B h) - B h_dot, zero).
    """

    system: FlowSystem
    full: FlowSystem
    generators: tuple
    basis: sp.Matrix
    projection: Projection

    @property
    def residual(self) -> tuple:
        return self.projection.residual

    @property
    def invariant(self) -> bool:
        return all(is_zero(r, self.full.state) for r in self.residual)

    def _lift_matrix(self) -> np.ndarray:
        return np.asarray(self.basis.evalf(17).tolist(), dtype=float)

    def to_full(self, h: Any) -> Any:
        """The full state x = B h of reduced states `h` (last axis: the reduced coordinates)."""
        return h @ self._lift_matrix().T

    def from_full(self, x: Any) -> Any:
        """h = (B^T G B)^{-1} B^T G x: the reduced coordinates of full states `x` (last axis: the state), the
        metric projection (exact on the fixed subspace)."""
        G = sp.diag(*self.full.metric)
        P = (self.basis.T * G * self.basis).inv() * self.basis.T * G
        return x @ np.asarray(P.evalf(17).tolist(), dtype=float).T


def reduce_by_symmetry(
    system: FlowSystem,
    generators: Sequence,
    *,
    name: str | None = None,
    coords: Sequence[sp.Symbol] | None = None,
    description: str = "",
    simplify: bool = True,
) -> SymmetryReduction:
    """The flow of `system` restricted to the subspace fixed by the group that `generators` generate.

    **Arguments:**

    - `system`: a `FlowSystem` (e.g. from `gradient_flow`: its `loss` is checked too).
    - `generators`: linear actions on the state: `sympy.combinatorics.Permutation`s of the state order (the
      entry at i moves to p(i)) or exact n x n matrices (sign flips, rotations); e.g. `find_symmetries(system)`.
    - `name`, `description`: of the reduced system (default name: `"<system> reduced"`).
    - `coords`: the reduced coordinates (one per dimension of the fixed subspace, in the order of their first
      entries); default: the state symbol of each coordinate's first entry (an orbit is named after its
      first member).
    - `simplify`: simplify the reduced right-hand sides (`False` for large ones; see `project`).

    **Returns:** a `SymmetryReduction` (reduced system, basis, maps `to_full` / `from_full`, residual zero).

    **Raises:** `ValueError` naming the generator (by index and form) that is not a symmetry (the loss not
    invariant, the flow not equivariant or the metric not preserved), or a malformed argument.
    """
    if not isinstance(system, FlowSystem):
        raise ValueError(f"system must be a derivations.FlowSystem, got {type(system).__name__}")
    if isinstance(generators, Permutation | sp.MatrixBase) or not isinstance(generators, Sequence):
        raise ValueError("generators must be a sequence of Permutations or matrices; wrap a single one in a list")
    n = len(system.state)
    numeric = NumericCheck(system)
    gens = []
    for i, gen in enumerate(generators):
        g = as_matrix(gen, n, f"generators[{i}]")
        defect = symmetry_defect(system, g, numeric=numeric)
        if defect is not None:
            raise ValueError(
                f"generators[{i}] ({describe(gen)}) is not a symmetry of {system.name!r}: {defect}; "
                "pass only symmetries of the loss and the flow (find_symmetries proposes them)"
            )
        gens.append(g)
    G = sp.diag(*system.metric)
    B = _orthogonal(_fixed_basis(gens, n), G)
    firsts = [min(i for i in range(n) if B[i, j] != 0) for j in range(B.cols)]
    if coords is None:
        coords = tuple(system.state[i] for i in firsts)
    else:
        coords = check_symbols("coords", coords)
        if len(coords) != B.cols:
            raise ValueError(f"coords must name the {B.cols} dimensions of the fixed subspace, got {len(coords)}")
    h = sp.Matrix(coords)
    ansatz = dict(zip(system.state, B * h, strict=True))
    projection = project(
        system,
        ansatz,
        coords,
        name=name or f"{system.name} reduced",
        description=description or system.description,
        params=None,
        simplify=simplify,
    )
    bad = [r for r in projection.residual if not is_zero(r, system.state)]
    if bad:  # a symmetry group's fixed subspace is invariant: a residual left is a bug, never the user's
        raise RuntimeError(f"reduce_by_symmetry: the invariance residual of {system.name!r} is not zero: {bad[0]}")
    metric = tuple((B.T * G * B)[j, j] for j in range(B.cols))
    loss = None if system.loss is None else system.loss.xreplace(ansatz)
    reduced = dataclasses.replace(projection.system, metric=metric, loss=loss)
    logger.debug("reduced %s from %d to %d coordinates", system.name, n, B.cols)
    return SymmetryReduction(system=reduced, full=system, generators=tuple(gens), basis=B, projection=projection)
