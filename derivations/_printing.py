"""Readable forms of derived expressions, for printing only (`to_text`, `to_latex`, generated headers):
`readable(expr)` is the shortest printed of `expr`, `factor_terms(expr)`, `factor(expr)` (a fraction with a
sum in its denominator) and `factor_terms` after e^a/(1 + e^a) -> 1/(1 + e^-a). Expressions above `MAX_NODES`
nodes are printed as they are."""

from __future__ import annotations

import sympy as sp

__all__ = ["FACTOR_NODES", "MAX_NODES", "readable"]

#: expressions with more nodes (sympy preorder traversal) than this are printed unchanged
MAX_NODES = 600
#: `factor` is tried only up to this many nodes (it is the slow form)
FACTOR_NODES = 200


def _small(expr, limit: int) -> bool:
    for i, _ in enumerate(sp.preorder_traversal(expr)):
        if i >= limit:
            return False
    return True


def _one_plus_exp(base):
    """`a` when `base` is 1 + e^a, else None."""
    if isinstance(base, sp.Add) and len(base.args) == 2 and sp.S.One in base.args:
        other = base.args[0] if base.args[1] == sp.S.One else base.args[1]
        if isinstance(other, sp.exp):
            return other.args[0]
    return None


def _logistic(expr):
    """e^a / (1 + e^a) -> 1 / (1 + e^-a) in every product, bottom-up (an equal value with one exponential
    fewer)."""
    if not isinstance(expr, sp.Basic) or expr.is_Atom:
        return expr
    args = [_logistic(a) for a in expr.args]
    if not isinstance(expr, sp.Mul):
        return expr.func(*args) if args != list(expr.args) else expr
    factors = list(args)
    for i, f in enumerate(factors):
        if not (isinstance(f, sp.Pow) and f.exp == -1):
            continue
        a = _one_plus_exp(f.base)
        if a is None:
            continue
        numerator = sp.exp(a)
        if numerator in factors:
            j = factors.index(numerator)
            factors[i] = 1 / (1 + sp.exp(-a))
            factors[j] = sp.S.One
    return sp.Mul(*factors)


def _factor(expr):
    """`factor(expr)` for a single fraction with a sum in its denominator (where sympy leaves an expanded
    polynomial that factoring splits into a product), else `expr`: on sums of fractions, factoring puts
    everything over one expanded common denominator and turns e^(a + b) into e^a e^b, which reads worse
    and is slow."""
    _, den = sp.fraction(expr)
    return sp.factor(expr) if den.has(sp.Add) and _small(expr, FACTOR_NODES) else expr


_FORMS = (sp.factor_terms, _factor, lambda e: sp.factor_terms(_logistic(e)))


def readable(expr):
    """`expr` in its most readable equal form (see the module docstring); `Eq` sides and matrix entries are
    treated one by one, anything that is not a sympy expression is returned as it is."""
    if isinstance(expr, sp.Equality):
        return sp.Eq(readable(expr.lhs), readable(expr.rhs), evaluate=False)
    if isinstance(expr, sp.MatrixBase):
        return expr.applyfunc(readable)
    if (
        not isinstance(expr, sp.Expr)
        or isinstance(expr, sp.MatrixExpr)
        or expr.is_Atom
        or not _small(expr, MAX_NODES)
        or expr.has(sp.Piecewise, sp.MatrixExpr)
    ):
        return expr
    best, best_len = expr, len(sp.sstr(expr))
    for form in _FORMS:
        try:
            cand = form(expr)
        except (sp.PolynomialError, NotImplementedError, TypeError, ValueError):
            continue  # a form sympy cannot build for this expression: the others remain
        n = len(sp.sstr(cand))
        if n < best_len:
            best, best_len = cand, n
    return best
