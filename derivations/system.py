"""The flow system every derivation produces (`FlowSystem`: state, parameters, right-hand sides) and the checks
and orderings of sympy symbols that building one needs."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import sympy as sp
from numpy.typing import DTypeLike

from ._printing import readable

__all__ = [
    "FlowSystem",
    "check_names",
    "check_same_symbols",
    "check_symbols",
    "ordered_params",
    "simplified",
    "sympy_value",
]


def simplified(expr: sp.Expr) -> sp.Expr:
    """`expr` simplified over a common denominator."""
    return sp.simplify(sp.together(expr))


def sympy_value(field: str, value: object, *, what: str) -> sp.Expr:
    """`value` as a sympy expression; strings (which sympify would parse into fresh symbols without the
    assumptions of the user's own) and bools are refused."""
    if isinstance(value, str):
        raise ValueError(
            f"{field} must be a sympy expression or a number, not the string {value!r}: sympify "
            f"would make new symbols that differ from yours; build {what} from your sp.Symbol objects"
        )
    if isinstance(value, bool) or not isinstance(value, sp.Basic | numbers.Real):
        raise ValueError(f"{field} must be a sympy expression or a number, got {type(value).__name__}")
    expr = sp.sympify(value)
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"{field} must be a scalar sympy expression, got {type(expr).__name__}: {expr}")
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise ValueError(f"{field} must be finite, got {expr}")
    return expr


def check_symbols(field: str, value: Any, *, empty: bool = False, matrices: bool = False) -> tuple:
    """`value` as a tuple of distinct sympy Symbols (non-empty unless `empty`; `MatrixSymbol`s too where
    `matrices`), else a ValueError naming `field`."""
    if isinstance(value, sp.Basic | str):
        raise ValueError(f"{field} must be a sequence of sympy Symbols; wrap a single one as ({value},)")
    syms = tuple(value)
    kinds = (sp.Symbol, sp.MatrixSymbol) if matrices else sp.Symbol
    if (not syms and not empty) or not all(isinstance(s, kinds) for s in syms):
        raise ValueError(f"{field} must be a {'' if empty else 'non-empty '}sequence of sympy Symbols, got {syms!r}")
    if len(set(syms)) != len(syms):
        raise ValueError(f"{field} lists a symbol twice: {syms}")
    return syms


def _assumptions(s: sp.Symbol) -> str:
    """The assumptions the symbol was created with (`real=True`, ...), or "none"."""
    given = getattr(s, "_assumptions_orig", None)
    given = s.assumptions0 if given is None else given
    given = {k: v for k, v in sorted(given.items()) if not (k == "commutative" and v)}
    return ", ".join(f"{k}={v}" for k, v in given.items()) if given else "none"


def check_same_symbols(named_exprs: Iterable[tuple[str, sp.Basic]]) -> None:
    """Two different symbols with one name (e.g. `Symbol("x", real=True)` in the loss and `Symbol("x")` in a
    group) are different variables to sympy: d/dx of the loss would silently be 0. Refuse them, naming the
    arguments that hold each."""
    seen: dict = {}
    for arg, expr in named_exprs:
        symbols = {expr} if isinstance(expr, sp.Symbol) else expr.free_symbols
        for s in sorted(symbols, key=lambda x: (x.name, str(x.assumptions0))):
            first = seen.setdefault(s.name, (s, arg))
            if first[0] != s:
                raise ValueError(
                    f"{arg} uses a symbol {s.name!r} with assumptions {_assumptions(s)}, but {first[1]} uses a "
                    f"different symbol {s.name!r} with assumptions {_assumptions(first[0])}: sympy treats them "
                    "as different variables (a derivative would silently be 0); create the symbol once and "
                    "use it everywhere"
                )


@dataclasses.dataclass(frozen=True)
class DerivedFlow:
    """What every derived flow is, scalar (`FlowSystem`) or matrix (`MatrixFlowSystem`): d state/dt = rhs(state;
    params), named; one right-hand side per state entry."""

    name: str
    state: tuple
    rhs: tuple
    params: tuple

    def __post_init__(self):
        if len(self.state) != len(self.rhs):
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: {len(self.state)} state entries but {len(self.rhs)} "
                "right-hand sides"
            )

    def to_text(self) -> str:
        """One line `dX/dt = ...` per state entry, each right-hand side in its readable form
        (`derivations.readable`: an equal expression, factored or collected where that is shorter)."""
        return "\n".join(f"d{s}/dt = {sp.sstr(readable(e))}" for s, e in zip(self.state, self.rhs, strict=True))

    def state_names(self) -> tuple:
        """The names of the state entries, in order: the generated module's `STATE`."""
        return tuple(s.name for s in self.state)


@dataclasses.dataclass(frozen=True)
class FlowSystem(DerivedFlow):
    """An autonomous-in-structure ODE system d state/dt = rhs(state; params).

    - `name`: registry name, e.g. `"scan_snap-decoder"`.
    - `state`: tuple of sympy symbols (the coordinates, in order).
    - `rhs`: tuple of sympy expressions, one per state symbol.
    - `params`: the other free symbols, in a fixed order (they become `args[name]` in generated code, and
      `PARAMS` lists them in this order). `gradient_flow` and `project` order them as declared: see there.
    - `metric`: the diagonal of the metric of the coordinates (multiplicities), used by `project`.
    - `description`: one paragraph with the equation's source (paper, lemma, equation number).
    - `loss`: the loss L the flow descends (`gradient_flow` sets it; None for a flow given by its right-hand
      sides); `reduce_by_symmetry` checks its invariance.
    """

    metric: tuple
    description: str = ""
    loss: sp.Expr | None = None

    def __post_init__(self):
        super().__post_init__()
        if len(self.metric) != len(self.state):
            raise ValueError(f"FlowSystem '{self.name}': metric needs one entry per state symbol")
        free = set().union(*(sp.sympify(e).free_symbols for e in self.rhs)) - set(self.state)
        missing = free - set(self.params)
        if missing:
            raise ValueError(
                f"FlowSystem '{self.name}': rhs uses symbols {sorted(map(str, missing))} "
                "that are neither state nor params"
            )

    def equations(self) -> list[sp.Eq]:
        t = sp.Symbol("t")
        return [sp.Eq(sp.Derivative(sp.Function(str(s))(t), t), e) for s, e in zip(self.state, self.rhs, strict=True)]

    def to_latex(self) -> str:
        lines = [
            rf"\frac{{d {sp.latex(s)}}}{{dt}} = {sp.latex(readable(e))}"
            for s, e in zip(self.state, self.rhs, strict=True)
        ]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def pack_state(self, values: Mapping, dtype: DTypeLike = float) -> np.ndarray:
        """The state array whose last axis holds `values[name]` for every state symbol, in `state` order (the
        `y0` of `flows.solve`; the generated module's `pack_state` with JAX arrays).

        **Arguments:**

        - `values`: exactly one real number or array per state symbol, keyed by its name (or by the symbol);
          they broadcast against each other (shape `s` gives states of shape `s + (len(state),)`).
        - `dtype`: the array's dtype (default float64).
        """
        if not isinstance(values, Mapping):
            raise ValueError(
                f"values must be a mapping {{name: value}} with the state names "
                f"{self.state_names()}, got {type(values).__name__}"
            )
        by_name: dict = {}
        for key, value in values.items():
            name = key.name if isinstance(key, sp.Symbol) else key
            if name in by_name:
                raise ValueError(f"values gives the state {name!r} twice (as a name and as a symbol)")
            by_name[name] = value
        check_names("values", by_name, self.state_names(), f"the state of {self.name!r}")
        arrays = []
        for name in self.state_names():
            value = by_name[name]
            try:
                arr = np.asarray(value, dtype=float if isinstance(value, sp.Basic) else None)
            except (TypeError, ValueError) as err:
                raise ValueError(f"values[{name!r}] must be a real number or array, got {value!r}") from err
            if arr.dtype.kind not in "iuf":
                raise ValueError(f"values[{name!r}] must be real numbers, got {value!r} (dtype {arr.dtype})")
            arrays.append(arr)
        try:
            return np.stack(np.broadcast_arrays(*arrays), axis=-1).astype(dtype)
        except ValueError as err:
            shapes = {n: a.shape for n, a in zip(self.state_names(), arrays, strict=True)}
            raise ValueError(f"values: the shapes {shapes} do not broadcast against each other") from err

    def unpack_state(self, ys: Any) -> dict:
        """`{name: ys[..., i]}` for every state symbol (the inverse of `pack_state`).

        `ys`: one state `(n,)`, the saved states of a solve `(T, n)`, of a batch `(B, T, n)` (numpy or JAX
        arrays, returned as views of the same kind), or a `flows.Trajectory` (its `ys`). A last axis of
        another length is a `ValueError`.
        """
        if hasattr(ys, "ys") and hasattr(ys, "ts"):  # a flows.Trajectory
            if ys.ys is None:
                raise ValueError("ys: the trajectory saved no states (ys is None); solve with save_states=True")
            ys = ys.ys
        if not hasattr(ys, "shape") or not hasattr(ys, "ndim"):
            try:
                ys = np.asarray(ys, dtype=float)
            except (TypeError, ValueError) as err:
                raise ValueError(f"ys must be an array of states or a flows.Trajectory, got {ys!r}") from err
        n = len(self.state)
        if ys.ndim == 0 or ys.shape[-1] != n:
            raise ValueError(
                f"ys must hold the {n} coordinates {self.state_names()} of {self.name!r} on its "
                f"last axis, got shape {tuple(ys.shape)}"
            )
        return {name: ys[..., i] for i, name in enumerate(self.state_names())}

    def lambdify(self) -> Callable:
        """A plain numpy function `f(y, **params) -> list of rhs values` (for checks, not for solving)."""
        return sp.lambdify([list(self.state), *self.params], list(self.rhs), modules="numpy")


def check_names(field: str, given: Iterable[str], expected: Sequence[str], what: str) -> None:
    """`given` (names) must be exactly `expected`; a `ValueError` names the missing and the unknown ones."""
    missing = [n for n in expected if n not in given]
    unknown = [n for n in given if n not in expected]
    if missing or unknown:
        parts = ([f"unknown {', '.join(map(repr, unknown))}"] if unknown else []) + (
            [f"missing {', '.join(map(repr, missing))}"] if missing else []
        )
        raise ValueError(f"{field}: {'; '.join(parts)}; expected exactly the names of {what}: {tuple(expected)}")


def _free_params(exprs, state) -> set:
    return set().union(*(sp.sympify(e).free_symbols for e in exprs)) - set(state)


def ordered_params(
    exprs: Iterable,
    state: Iterable[sp.Symbol],
    declared: Iterable[sp.Symbol],
    params: Iterable[sp.Symbol] | None = None,
) -> tuple:
    """The parameters of `exprs` (their free symbols that are not `state`).

    Default order: the symbols of `declared` first, in its order (the order the user declared them in: the
    groups' learning rates and multiplicities, or the parameters of the system being projected), then any
    other symbol by name (the loss's own constants, whose order of appearance sympy does not keep). An
    explicit `params` (a sequence with exactly these symbols) sets the order instead.
    """
    free = _free_params(exprs, state)
    if params is not None:
        params = check_symbols("params", params, empty=True)
        given = {p.name: p for p in params}
        expected = {p.name: p for p in sorted(free, key=lambda x: x.name)}
        check_names("params", given, tuple(expected), "the right-hand sides' parameters")
        other = [n for n in given if given[n] != expected[n]]
        if other:
            raise ValueError(
                f"params: {other} have other assumptions than the symbols of the right-hand sides; "
                "create each symbol once and use it everywhere"
            )
        return params
    ordered: list = []
    for s in declared:
        if s in free and s not in ordered:
            ordered.append(s)
    return tuple(ordered) + tuple(sorted(free - set(ordered), key=lambda x: x.name))
