"""Gradient flows at symbolic sizes: the state is made of matrices and vectors (sympy `MatrixSymbol`s whose
sizes are symbols, and scalars), the loss a scalar expression of traces, and the flow is derived once for
every size.

Matrix calculus on sums of traces of products, written out here instead of sympy's `.diff` on matrix
expressions (which returns 0 for some traces with scalar factors inside): every trace is expanded into terms
c tr(F_1 ... F_k) with matrix factors F_i (symbols or their transposes), and

    d tr(F_1 ... F_k) / dX = sum_{i: F_i = X} (F_{i+1} ... F_k F_1 ... F_{i-1})^T
                           + sum_{i: F_i = X^T} F_{i+1} ... F_k F_1 ... F_{i-1},

the chain rule carrying nonlinear functions of traces (a trace inside a coefficient included). A vector is an
n x 1 `MatrixSymbol` (a 1-D array in generated code). The flows built here are `MatrixFlowSystem`s
(`derivations.matrix_system`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import sympy as sp

from .matrix_system import MatrixFlowSystem

__all__ = [
    "canonical_traces",
    "matrix_diff",
    "matrix_gradient",
    "matrix_gradient_flow",
    "matrix_push_forward",
    "matrix_terms",
    "rewrite_products",
]

Term = tuple  # (coefficient: scalar sympy expression, factors: tuple of MatrixSymbol / Transpose(MatrixSymbol))


def _is_matrix_atom(f) -> bool:
    return isinstance(f, sp.MatrixSymbol) or (isinstance(f, sp.Transpose) and isinstance(f.arg, sp.MatrixSymbol))


def _t(f):
    """The transpose of a factor (a symbol or the transpose of one)."""
    return f.arg if isinstance(f, sp.Transpose) else sp.Transpose(f)


def _transpose_factors(factors: tuple) -> tuple:
    return tuple(_t(f) for f in reversed(factors))


def matrix_terms(M: sp.MatrixExpr) -> list[Term]:
    """`M` expanded into terms `(c, (F_1, ..., F_k))` with sum_terms c F_1 ... F_k = M: the `F_i` matrix
    symbols or their transposes, `c` scalar (possibly with traces), identities dropped (an identity alone is
    `(c, ())`). Sums, products, scalar multiples, transposes and positive integer powers are expanded; any
    other matrix function is a `ValueError` naming it."""
    if _is_matrix_atom(M):
        return [(sp.Integer(1), (M,))]
    if isinstance(M, sp.Identity):
        return [(sp.Integer(1), ())]
    if isinstance(M, sp.ZeroMatrix):
        return []
    if isinstance(M, sp.Transpose):
        return [(c, _transpose_factors(fs)) for c, fs in matrix_terms(M.arg)]
    if isinstance(M, sp.MatAdd):
        return [t for arg in M.args for t in matrix_terms(arg)]
    if isinstance(M, sp.MatMul):
        coeff, mats = M.as_coeff_matrices()
        out: list = [(sp.Integer(coeff) if coeff == 1 else coeff, ())]
        for mat in mats:
            out = [(c1 * c2, f1 + f2) for (c1, f1), (c2, f2) in itertools.product(out, matrix_terms(mat))]
        return out
    if isinstance(M, sp.MatPow) and M.exp.is_Integer and M.exp > 0:
        return matrix_terms(sp.MatMul(*([M.base] * int(M.exp))))
    raise ValueError(
        f"the matrix expression {M} uses {type(M).__name__}, which the matrix calculus of derivations does not "
        "differentiate (it takes sums, products, scalar multiples, transposes and positive integer powers)"
    )


def _rotations(factors: tuple):
    for i in range(len(factors)):
        yield factors[i:] + factors[:i]


def _canonical_cycle(factors: tuple) -> tuple:
    """The representative of tr(F_1 ... F_k) among its cyclic rotations and those of its transpose."""
    candidates = list(_rotations(factors)) + list(_rotations(_transpose_factors(factors)))
    # a rotation starting with a row (1 x n) first: tr(z^T G) is a dot product, tr(G z^T) an outer product
    return min(candidates, key=lambda fs: (fs[0].shape[0] != 1, tuple(sp.sstr(f) for f in fs)))


def _product(factors: tuple, rows) -> sp.MatrixExpr:
    if not factors:
        return sp.Identity(rows)
    return factors[0] if len(factors) == 1 else sp.MatMul(*factors)


def _trace_of(factors: tuple, size) -> sp.Expr:
    """tr(F_1 ... F_k) in canonical form; a 1 x 1 product is its own trace; tr(I_n) = n."""
    if not factors:
        return size
    return sp.Trace(_product(_canonical_cycle(factors), size))


def _outer_traces(expr) -> list:
    """The traces in `expr` that are not inside another trace, in a fixed order."""
    found: list = []

    def visit(e):
        if isinstance(e, sp.Trace):
            if e not in found:
                found.append(e)
            return
        for arg in e.args:
            visit(arg)

    visit(sp.sympify(expr))
    return sorted(found, key=sp.default_sort_key)


def canonical_traces(expr: sp.Expr) -> sp.Expr:
    """`expr` with every trace expanded into sum_terms c tr(F_1 ... F_k), each trace in canonical cyclic form
    (so that tr(A B) and tr(B^T A^T) are one term)."""
    expr = sp.sympify(expr)
    traces = _outer_traces(expr)
    if not traces:
        return expr
    values = {}
    for T in traces:
        values[T] = sp.Add(
            *(canonical_traces(c) * _trace_of(fs, T.arg.rows) for c, fs in matrix_terms(T.arg)), evaluate=True
        )
    return expr.xreplace(values)


def _chain(expr, dtrace, dexplicit):
    """The chain rule through the outer traces of a scalar `expr`: dexplicit(S) + sum_T dS/dT dtrace(T), S
    `expr` with its traces replaced by symbols."""
    expr = sp.sympify(expr)
    traces = _outer_traces(expr)
    taus = [sp.Dummy(f"tau{i}") for i in range(len(traces))]
    S = expr.xreplace(dict(zip(traces, taus, strict=True)))
    back = dict(zip(taus, traces, strict=True))
    parts = [dexplicit(S).xreplace(back)] if dexplicit is not None else []
    for T, tau in zip(traces, taus, strict=True):
        outer = sp.diff(S, tau).xreplace(back)
        if outer != 0:
            parts.append((outer, dtrace(T)))
    return parts


def matrix_diff(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """d expr / dx for a scalar symbol `x` and a scalar `expr` that may hold traces of matrix expressions."""

    def dtrace(T):
        return sp.Add(*(matrix_diff(c, x) * _trace_of(fs, T.arg.rows) for c, fs in matrix_terms(T.arg)))

    total = sp.Integer(0)
    for part in _chain(expr, dtrace, lambda S: sp.diff(S, x)):
        total += part[0] * part[1] if isinstance(part, tuple) else part
    return canonical_traces(total)


def _scaled(c, M) -> sp.MatrixExpr:
    """c M as a matrix product (an expression with traces times a matrix could otherwise become a scalar Mul)."""
    if c == 1:
        return M
    return sp.MatMul(c, *(M.args if isinstance(M, sp.MatMul) else (M,)))


def _collect(terms, shape) -> sp.MatrixExpr:
    """sum_terms c F_1 ... F_k with equal products combined and their coefficients simplified."""
    acc: dict = {}
    for c, fs in terms:
        acc[fs] = acc.get(fs, sp.Integer(0)) + c
    out = [
        (sp.factor_terms(sp.cancel(canonical_traces(c))), fs)
        for fs, c in sorted(acc.items(), key=lambda kv: [sp.sstr(f) for f in kv[0]])
    ]
    mats = [_scaled(c, _product(fs, shape[0])) for c, fs in out if c != 0]
    if not mats:
        return sp.ZeroMatrix(*shape)
    return mats[0] if len(mats) == 1 else sp.MatAdd(*mats)


def _gradient_terms(expr, X) -> list:
    """d expr / dX as terms (c, factors) (module docstring)."""

    def dtrace(T):
        out = []
        for c, fs in matrix_terms(T.arg):
            out += [(c2 * _trace_of(fs, T.arg.rows), f2) for c2, f2 in _gradient_terms(c, X)]
            for i, f in enumerate(fs):
                rest = fs[i + 1 :] + fs[:i]
                if f == X:
                    out.append((c, _transpose_factors(rest)))
                elif f == _t(X):
                    out.append((c, rest))
        return out

    terms = []
    for outer, inner in _chain(expr, dtrace, None):
        terms += [(outer * c, fs) for c, fs in inner]
    return terms


def matrix_gradient(expr: sp.Expr, X: sp.MatrixSymbol, symmetric: Sequence = ()) -> sp.MatrixExpr:
    """d expr / dX (a matrix of the shape of `X`) of a scalar expression of traces; `symmetric` lists matrix
    symbols known to be symmetric (their transposes are replaced by themselves)."""
    flip = {sp.Transpose(S): S for S in symmetric}
    terms = [(c.xreplace(flip), tuple(flip.get(f, f) for f in fs)) for c, fs in _gradient_terms(expr, X)]
    return _collect(terms, X.shape)


def rewrite_products(M: sp.MatrixExpr | list, rules: Mapping) -> list[Term]:
    """The terms of `M` (or terms given) with every run of factors equal to a key of `rules` (a tuple of
    factors) replaced by its value: a matrix symbol (also matched transposed: the reversed, transposed run
    gives its transpose) or a scalar (a 1 x 1 product, e.g. a^T a = m1, a coefficient then)."""
    terms = matrix_terms(M) if isinstance(M, sp.MatrixExpr) else list(M)
    table = []
    for run, value in rules.items():
        table.append((tuple(run), value))
        if isinstance(value, sp.MatrixExpr) and _transpose_factors(tuple(run)) != tuple(run):
            table.append((_transpose_factors(tuple(run)), _t(value)))
    table.sort(key=lambda kv: -len(kv[0]))
    out = []
    for c, fs in terms:
        fs = list(fs)
        i = 0
        while i < len(fs):
            for run, value in table:
                if tuple(fs[i : i + len(run)]) == run:
                    if isinstance(value, sp.MatrixExpr):
                        fs[i : i + len(run)] = [value]
                    else:
                        c = c * value
                        del fs[i : i + len(run)]
                    i = -1
                    break
            i += 1
        out.append((c, tuple(fs)))
    return out


def _free_matrix_symbols(expr) -> set:
    return set(sp.sympify(expr).atoms(sp.MatrixSymbol))


def matrix_gradient_flow(
    loss: sp.Expr,
    groups: Sequence,
    *,
    name: str,
    description: str = "",
    params: Sequence | None = None,
    symmetric: Sequence = (),
) -> MatrixFlowSystem:
    """The gradient flow dX/dt = -eta_g dL/dX of a loss of traces over the (matrix or scalar) symbols of
    `groups` (`ParameterGroup`s; `derivations.gradient_flow` calls this when the loss holds matrices).

    **Arguments:** as `gradient_flow`; `symmetric`: matrix parameters known to be symmetric (their transposes
    in the result are replaced by themselves). Multiplicities must be 1 (a matrix stands for its entries).

    **Returns:** a `MatrixFlowSystem`; a `ValueError` names a symbol the loss does not contain.
    """
    state, rhs = [], []
    loss = sp.sympify(loss)
    for g in groups:
        if any(m != 1 for m in g.multiplicities):
            raise ValueError(f"groups: group {g.name!r} has multiplicities; a matrix state takes none")
        for sym in g.symbols:
            if isinstance(sym, sp.MatrixSymbol):
                if sym not in _free_matrix_symbols(loss):
                    raise ValueError(f"groups: {sym} of group {g.name!r} does not appear in the loss")
                rhs.append(
                    _collect(
                        [(-g.learning_rate * c, fs) for c, fs in matrix_terms(matrix_gradient(loss, sym, symmetric))],
                        sym.shape,
                    )
                )
            else:
                if sym not in loss.free_symbols:
                    raise ValueError(f"groups: {sym} of group {g.name!r} does not appear in the loss")
                rate = -g.learning_rate * matrix_diff(loss, sym)
                rhs.append(sp.factor_terms(canonical_traces(rate.xreplace({sp.Transpose(S): S for S in symmetric}))))
            state.append(sym)
    return _system(name, state, rhs, params, description, loss)


def _system(name, state, rhs, params, description, loss) -> MatrixFlowSystem:
    free: set = set()
    for e in rhs:
        e = sp.sympify(e)
        free |= _free_matrix_symbols(e) | {s for s in e.free_symbols if not isinstance(s, sp.MatrixSymbol)}
    shapes = [n for s in (*state, *free) if isinstance(s, sp.MatrixSymbol) for n in s.shape]
    sizes = sorted({n for n in shapes if isinstance(n, sp.Symbol)}, key=lambda x: x.name)
    free -= set(state) | set(sizes)
    free = {s for s in free if not (isinstance(s, sp.Symbol) and s in sizes)}
    if params is None:
        params = sorted(free, key=lambda s: (isinstance(s, sp.MatrixSymbol) is False, s.name))
    else:
        params = tuple(params)
        if set(params) != free:
            raise ValueError(
                f"params must list exactly the symbols of the right-hand sides besides the state and sizes: "
                f"{sorted(map(str, free))}, got {sorted(map(str, params))}"
            )
    return MatrixFlowSystem(
        name=name,
        state=tuple(state),
        rhs=tuple(rhs),
        params=tuple(params),
        sizes=tuple(sizes),
        description=description,
        loss=loss,
    )


def matrix_push_forward(
    flow: Mapping,
    observables: Mapping,
    rules: Mapping,
    *,
    name: str,
    description: str = "",
    params: Sequence | None = None,
) -> MatrixFlowSystem:
    """The flow of observables O(theta): dO/dt = sum_X D_X O [dX/dt], rewritten in the observables.

    **Arguments:**

    - `flow`: `{X: dX/dt}` over the parameters (matrix symbols), e.g. the right-hand sides of a gradient flow.
    - `observables`: `{O: O(theta)}`, `O` a matrix symbol (or a scalar symbol for a 1 x 1 product such as
      ||W^T a||^2), the value a product of parameters.
    - `rules`: further runs of factors with known values (`{(a.T, a): m1}`).

    **Returns:** a `MatrixFlowSystem` in the observables; a `ValueError` when the result still holds a
    parameter (the push-forward does not close on the observables).
    """
    table = dict(rules)
    for obs, value in observables.items():
        (c, fs), *more = matrix_terms(value)
        if more or c != 1:
            raise ValueError(f"observables[{obs}] must be a single product of parameters, got {value}")
        table[fs] = obs
    velocity = {X: matrix_terms(v) for X, v in flow.items()}
    state, rhs = [], []
    for obs, value in observables.items():
        terms = []
        for c, fs in matrix_terms(value):
            for i, f in enumerate(fs):
                base = f.arg if isinstance(f, sp.Transpose) else f
                for cv, fv in velocity.get(base, []):
                    fv = _transpose_factors(fv) if isinstance(f, sp.Transpose) else fv
                    terms.append((c * cv, fs[:i] + fv + fs[i + 1 :]))
        terms = rewrite_products(terms, table)
        left = {f.arg if isinstance(f, sp.Transpose) else f for _, fs in terms for f in fs} & set(flow)
        if left:
            raise ValueError(
                f"the push-forward of {obs} does not close on the observables: it still holds {sorted(map(str, left))}"
            )
        if isinstance(obs, sp.MatrixSymbol):
            rhs.append(_collect(terms, obs.shape))
        else:
            size = value.shape[0]
            rhs.append(sp.factor_terms(sp.Add(*(c * _trace_of(fs, size) for c, fs in terms))))
        state.append(obs)
    return _system(name, state, rhs, params, description, None)
