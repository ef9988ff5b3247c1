"""`find_symmetries`: the linear symmetries of a flow, found without hand input, each confirmed symbolically.

- Permutations: a symmetry p fixes the constant states c 1, so the rates F(c 1) and the Jacobian J(c 1) at
  such points (several c, random parameters) are invariant under it: F_p(i) = F_i, J_p(i)p(j) = J_ij. These
  numbers colour a graph on the state entries; colour refinement with individualisation (as in graph
  automorphism programs) proposes the permutations that preserve all of them, level by level of a
  stabiliser chain, so that the ones kept generate the group. Each proposal is screened at random
  (non-constant) states and then confirmed symbolically (`symmetry.symmetry_defect`).
- Sign flips x_i -> s_i x_i of a flow polynomial in the state: s is a symmetry exactly when every monomial
  x^alpha of rhs_i has s^alpha = s_i (and every monomial of the loss s^alpha = 1), a linear system over
  GF(2) whose solutions are found exactly.
- A sequence of candidate generators: those that are symmetries."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import numpy as np
import sympy as sp
from sympy.combinatorics import Permutation

from .symmetry import NumericCheck, as_matrix, symmetry_defect
from .system import FlowSystem

__all__ = ["find_symmetries"]

logger = logging.getLogger(__name__)

_CANDIDATES = ("permutations", "sign-flips")


def find_symmetries(system: FlowSystem, candidates: str | Sequence = "permutations", *, seed: int = 0) -> list:
    """Generators of the linear symmetries of `system` (its loss invariant, its flow equivariant, its metric
    preserved), for `reduce_by_symmetry(system, find_symmetries(system))`.

    **Arguments:**

    - `system`: a `FlowSystem`.
    - `candidates`: `"permutations"` (of the state order; returns `sympy.combinatorics.Permutation`s
      generating the whole permutation symmetry group), `"sign-flips"` (diagonal +-1 matrices generating
      the group of sign symmetries; the right-hand sides must be polynomial in the state), or a sequence
      of candidate generators (permutations or exact matrices), of which the symmetries are returned.
    - `seed`: of the random parameters and states of the numerical screening.

    **Returns:** a list of generators (empty when there is no symmetry), each confirmed symbolically.
    """
    if not isinstance(system, FlowSystem):
        raise ValueError(f"system must be a derivations.FlowSystem, got {type(system).__name__}")
    numeric = NumericCheck(system, seed=seed)
    n = len(system.state)
    if isinstance(candidates, str):
        if candidates not in _CANDIDATES:
            raise ValueError(f"candidates must be one of {_CANDIDATES} or a sequence of generators, got {candidates!r}")
        if candidates == "sign-flips":
            return _sign_flips(system, numeric)
        return _PermutationSearch(system, numeric, seed).generators()
    out = []
    for i, gen in enumerate(candidates):
        if symmetry_defect(system, as_matrix(gen, n, f"candidates[{i}]"), numeric=numeric) is None:
            out.append(gen)
    return out


# --------------------------------------------------------------------------- sign flips


def _gf2_nullspace(rows: list[list[int]], n: int) -> list[list[int]]:
    """A basis of {s in GF(2)^n : r . s = 0 for every row r} (rows over GF(2), reduced row echelon)."""
    rows = [r[:] for r in rows]
    pivots: list[int] = []
    rank = 0
    for col in range(n):
        pivot = next((i for i in range(rank, len(rows)) if rows[i][col]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        for i in range(len(rows)):
            if i != rank and rows[i][col]:
                rows[i] = [a ^ b for a, b in zip(rows[i], rows[rank], strict=True)]
        pivots.append(col)
        rank += 1
    basis = []
    for free in (c for c in range(n) if c not in pivots):
        s = [0] * n
        s[free] = 1
        for i, col in enumerate(pivots):
            s[col] = rows[i][free]
        basis.append(s)
    return basis


def _monomials(expr, state) -> list:
    try:
        poly = sp.Poly(sp.expand(expr), *state)
    except sp.PolynomialError as err:
        raise ValueError(
            "candidates='sign-flips' needs a flow polynomial in the state; pass candidate generators instead"
        ) from err
    if any(s in c.free_symbols for c in poly.coeffs() for s in state):
        raise ValueError("candidates='sign-flips' needs a flow polynomial in the state; pass candidates instead")
    return [m for m, c in zip(poly.monoms(), poly.coeffs(), strict=True) if c != 0]


def _sign_flips(system: FlowSystem, numeric) -> list:
    n = len(system.state)
    rows: set = set()
    for i, e in enumerate(system.rhs):  # s . alpha + s_i = 0 over GF(2)
        for alpha in _monomials(e, system.state):
            r = [a % 2 for a in alpha]
            r[i] ^= 1
            rows.add(tuple(r))
    if system.loss is not None:
        rows |= {tuple(a % 2 for a in alpha) for alpha in _monomials(system.loss, system.state)}
    out = []
    for s in _gf2_nullspace([list(r) for r in sorted(rows)], n):
        g = sp.diag(*[(-1) ** b for b in s])
        if symmetry_defect(system, g, numeric=numeric) is None:
            out.append(g)
    return out


# --------------------------------------------------------------------------- permutations


def _clusters(values: np.ndarray, rtol: float = 1e-7) -> np.ndarray:
    """Integer labels of `values`, equal for values within `rtol` (relative to the largest) of a neighbour
    in sorted order; NaN gets its own label."""
    flat = values.ravel()
    scale = max(float(np.nanmax(np.abs(flat))) if np.isfinite(flat).any() else 1.0, 1e-300)
    order = np.argsort(flat, kind="stable")
    labels = np.empty(flat.size, dtype=np.int64)
    label, prev = 0, None
    for idx in order:
        v = flat[idx]
        if prev is not None and not (np.isfinite(v) and abs(v - prev) <= rtol * scale):
            label += 1
        labels[idx] = label if np.isfinite(v) else -1
        prev = v
    return labels.reshape(values.shape)


class _PermutationSearch:
    """Colour refinement and individualisation on the invariants at constant states (module docstring)."""

    def __init__(self, system: FlowSystem, numeric, seed: int) -> None:
        self.system, self.numeric = system, numeric
        n = self.n = len(system.state)
        rng = np.random.default_rng(seed)
        vertex, edge = [], []
        for c in (0.31, -0.47, 0.83):
            p = rng.uniform(0.5, 1.5, size=len(system.params))
            x = np.full(n, c)
            F = numeric.rates(x, p)
            # central differences: the clusters below merge values within 1e-7, far above their error
            h = 1e-5 * (1 + abs(c))
            J = np.stack([(numeric.rates(x + h * e, p) - numeric.rates(x - h * e, p)) / (2 * h) for e in np.eye(n)], 1)
            vertex += [_clusters(F), _clusters(np.diagonal(J).copy())]
            edge.append(_clusters(J))
        metric = [sp.sstr(m) for m in system.metric]
        self.vertex = [(metric[i], *(int(v[i]) for v in vertex)) for i in range(n)]
        self.edge = np.stack(edge, axis=-1)  # (n, n, samples)
        self.names: dict = {}
        self.checked: dict = {}

    def _intern(self, key) -> int:
        return self.names.setdefault(key, len(self.names))

    def refine(self, colours: tuple) -> tuple:
        n = self.n
        while True:
            sigs = []
            for i in range(n):
                around = sorted(
                    (tuple(self.edge[i, j]), tuple(self.edge[j, i]), colours[j]) for j in range(n) if j != i
                )
                sigs.append(self._intern((colours[i], tuple(around))))
            new = tuple(sigs)
            if len(set(new)) == len(set(colours)):
                return new
            colours = new

    def _individualise(self, colours: tuple, v: int, depth: int) -> tuple:
        out = list(colours)
        out[v] = self._intern(("individualised", depth, colours[v]))
        return tuple(out)

    @staticmethod
    def _cell(colours: tuple) -> list:
        """The smallest non-singleton cell (ties: the smallest colour), or [] for a discrete colouring."""
        cells: dict = {}
        for i, c in enumerate(colours):
            cells.setdefault(c, []).append(i)
        big = [cells[c] for c in sorted(cells) if len(cells[c]) > 1]
        return min(big, key=len) if big else []

    def _is_symmetry(self, perm: tuple) -> bool:
        if perm in self.checked:
            return self.checked[perm]
        p = list(perm)
        ok = all(self.vertex[i] == self.vertex[p[i]] for i in range(self.n)) and np.array_equal(
            self.edge, self.edge[np.ix_(p, p)]
        )
        if ok:
            g = as_matrix(Permutation(p), self.n, "candidate")
            ok = symmetry_defect(self.system, g, numeric=self.numeric) is None
        self.checked[perm] = ok
        return ok

    def _search(self, left: tuple, right: tuple, depth: int) -> tuple | None:
        """A symmetry mapping the individualised vertices of `left` to those of `right`, or None."""
        left, right = self.refine(left), self.refine(right)
        if sorted(left) != sorted(right):
            return None
        cell = self._cell(left)
        if not cell:
            where = {c: j for j, c in enumerate(right)}
            perm = tuple(where[c] for c in left)
            return perm if self._is_symmetry(perm) else None
        x = cell[0]
        for y in (j for j, c in enumerate(right) if c == left[x]):
            found = self._search(self._individualise(left, x, depth), self._individualise(right, y, depth), depth + 1)
            if found is not None:
                return found
        return None

    def generators(self) -> list:
        colours = self.refine(tuple(self._intern(("vertex", v)) for v in self.vertex))
        gens: list = []
        for depth in itertools.count():
            cell = self._cell(colours)
            if not cell:
                break
            b = cell[0]
            level: list = []
            orbit = {b}
            for w in cell[1:]:
                if w in orbit:
                    continue
                found = self._search(
                    self._individualise(colours, b, depth), self._individualise(colours, w, depth), depth + 1
                )
                if found is not None:
                    level.append(found)
                    orbit = _orbit(b, level)
            gens += level
            colours = self.refine(self._individualise(colours, b, depth))
        logger.debug("find_symmetries: %d generators for %s", len(gens), self.system.name)
        return [Permutation(list(p)) for p in gens]


def _orbit(point: int, perms: list) -> set:
    orbit, frontier = {point}, [point]
    while frontier:
        q = frontier.pop()
        for p in perms:
            if p[q] not in orbit:
                orbit.add(p[q])
                frontier.append(p[q])
    return orbit
