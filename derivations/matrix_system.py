"""`MatrixFlowSystem`: a flow whose state is made of matrices and vectors at symbolic sizes (what
`derivations.matrix` derives and `codegen` emits as matmul code), its entries written out at given sizes
(`instantiate`: a `FlowSystem` of scalars, for checks and for reductions of small instances), and `evaluate`
(a matrix expression computed with explicit sympy matrices)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import sympy as sp

from .system import DerivedFlow, FlowSystem

__all__ = ["MatrixFlowSystem", "evaluate"]


@dataclasses.dataclass(frozen=True)
class MatrixFlowSystem(DerivedFlow):
    """d state/dt = rhs(state; params) with matrix and vector states at symbolic sizes.

    - `name`, `description`: as in `FlowSystem`.
    - `state`: scalar `Symbol`s and `MatrixSymbol`s (sizes symbols or integers; an n x 1 symbol is a vector).
    - `rhs`: one expression per state entry, of its shape (a scalar expression of traces, or a matrix
      expression).
    - `params`: the other free symbols (scalars and matrices), in order: the generated `PARAMS`.
    - `sizes`: the size symbols of the shapes of the state and parameters (bound from the arrays' shapes in
      generated code; a size that enters the right-hand side only as a number is a parameter).
    - `loss`: the scalar loss the flow descends, when it is a gradient flow (else None).
    """

    sizes: tuple
    description: str = ""
    loss: sp.Expr | None = None

    def __post_init__(self):
        super().__post_init__()
        for s, e in zip(self.state, self.rhs, strict=True):
            shape = s.shape if isinstance(s, sp.MatrixSymbol) else None
            got = e.shape if isinstance(e, sp.MatrixExpr) else None
            if shape != got:
                raise ValueError(
                    f"MatrixFlowSystem {self.name!r}: the right-hand side of {s} has shape {got}, expected {shape}"
                )

    def shapes(self) -> dict:
        """`{name: shape}` of the state and parameters; a shape is a tuple of size names or integers (an
        n x 1 symbol is a vector of shape (n,), a scalar has shape ())."""
        return {s.name: _shape(s) for s in (*self.state, *self.params)}

    def equations(self) -> list:
        t = sp.Symbol("t")
        return [
            sp.Eq(sp.Derivative(sp.Function(str(s))(t), t), e, evaluate=False)
            for s, e in zip(self.state, self.rhs, strict=True)
        ]

    def to_latex(self) -> str:
        lines = [rf"\frac{{d {sp.latex(s)}}}{{dt}} = {sp.latex(e)}" for s, e in zip(self.state, self.rhs, strict=True)]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def size_values(self, sizes: Mapping) -> dict:
        """`{size symbol: int}` from `sizes` (keyed by the size symbols or their names)."""
        by_name = {str(k): v for k, v in sizes.items()}
        missing = [str(s) for s in self.sizes if str(s) not in by_name]
        if missing:
            raise ValueError(f"sizes: missing {missing} (the sizes of {self.name!r} are {self.sizes})")
        out = {}
        for s in self.sizes:
            v = by_name[str(s)]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"sizes[{str(s)!r}] must be an integer >= 1, got {v!r}")
            out[s] = v
        return out

    def explicit(self, sizes: Mapping) -> dict:
        """`{matrix symbol: explicit sympy Matrix of entry symbols}` for the state and parameters at `sizes`
        (`{"d": 3}`); the entries are real symbols named `X11`, `X12`, ... (`X_1_12` beyond 9; `x1`, ...
        for a vector)."""
        size_values = self.size_values(sizes)
        values = {}
        for s in (*self.state, *self.params):
            if isinstance(s, sp.MatrixSymbol):
                rows, cols = (int(sp.sympify(n).xreplace(size_values)) for n in s.shape)
                big = max(rows, cols) > 9
                values[s] = sp.Matrix(rows, cols, lambda i, j, s=s, c=cols, b=big: _entry(s.name, i, j, c, b))
        return values

    def instantiate(self, sizes: Mapping, *, name: str | None = None) -> FlowSystem:
        """The same flow written out entry by entry at `sizes` (`{"d": 3}`): a `FlowSystem` of scalar
        coordinates (row-major entries of each state matrix), with every matrix parameter a matrix of entry
        symbols; its `loss` is the instantiated loss."""
        values, size_values = self.explicit(sizes), self.size_values(sizes)
        state, rhs = [], []
        for s, e in zip(self.state, self.rhs, strict=True):
            got = _explicit(e, values, size_values)
            if isinstance(s, sp.MatrixSymbol):
                state += list(values[s])
                rhs += list(got)
            else:
                state.append(s)
                rhs.append(got)
        params = []
        for p in self.params:
            params += list(values[p]) if isinstance(p, sp.MatrixSymbol) else [p]
        free = set().union(*(sp.sympify(e).free_symbols for e in rhs)) - set(state)
        params = [p for p in params if p in free] + sorted(free - set(params), key=lambda x: x.name)
        loss = None if self.loss is None else _explicit(self.loss, values, size_values)
        return FlowSystem(
            name=name or f"{self.name} at {', '.join(f'{k} = {v}' for k, v in size_values.items())}",
            state=tuple(state),
            rhs=tuple(rhs),
            params=tuple(params),
            metric=tuple(sp.Integer(1) for _ in state),
            description=self.description,
            loss=loss,
        )


def _entry(name: str, i: int, j: int, cols: int, big: bool) -> sp.Symbol:
    if cols == 1:
        return sp.Symbol(f"{name}{'_' if big else ''}{i + 1}", real=True)
    return sp.Symbol(f"{name}_{i + 1}_{j + 1}" if big else f"{name}{i + 1}{j + 1}", real=True)


def _explicit(expr, values: Mapping, sizes: Mapping):
    """`expr` evaluated with explicit matrices (`evaluate`) and expanded."""
    out = evaluate(expr, {**values, **sizes})
    return out.applyfunc(sp.expand) if isinstance(out, sp.MatrixBase) else sp.expand(out)


def _shape(s) -> tuple:
    if not isinstance(s, sp.MatrixSymbol):
        return ()
    dims = tuple(int(n) if isinstance(n, sp.Integer | int) else str(n) for n in s.shape)
    return dims[:1] if dims[1:] == (1,) else dims


def evaluate(expr: sp.Basic, values: Mapping) -> sp.Basic:
    """`expr` (a matrix or scalar expression) computed with ordinary sympy matrix arithmetic after replacing
    the symbols of `values` (matrix symbols by explicit matrices, sizes and scalars by values): what a
    derivation at one size writes out entry by entry."""
    if isinstance(expr, sp.MatrixSymbol):
        return sp.Matrix(values[expr]) if expr in values else expr
    if isinstance(expr, sp.Identity | sp.ZeroMatrix):
        rows = int(sp.sympify(expr.rows).xreplace(dict(values)))
        return (
            sp.eye(rows)
            if isinstance(expr, sp.Identity)
            else sp.zeros(rows, int(sp.sympify(expr.cols).xreplace(dict(values))))
        )
    if isinstance(expr, sp.Transpose):
        return evaluate(expr.arg, values).T
    if isinstance(expr, sp.MatAdd):
        parts = [evaluate(a, values) for a in expr.args]
        out = parts[0]
        for part in parts[1:]:
            out = out + part
        return out
    if isinstance(expr, sp.MatMul):
        out = None
        scalar = sp.Integer(1)
        for a in expr.args:
            if isinstance(a, sp.MatrixExpr):
                m = evaluate(a, values)
                out = m if out is None else out * m
            else:
                scalar = scalar * evaluate(a, values)
        return out if scalar == 1 else scalar * out
    if isinstance(expr, sp.MatPow):
        return evaluate(expr.base, values) ** int(expr.exp)
    if isinstance(expr, sp.Trace):
        return evaluate(expr.arg, values).trace()
    if isinstance(expr, sp.MatrixExpr):
        raise ValueError(f"evaluate: {type(expr).__name__} is not supported ({expr})")
    expr = sp.sympify(expr)
    if not expr.args:
        return values.get(expr, expr)
    return expr.func(*(evaluate(a, values) for a in expr.args))
