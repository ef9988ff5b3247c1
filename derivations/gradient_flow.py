"""Symbolic gradient flows: loss + parameter groups + learning rates -> ODE right-hand sides.

`gradient_flow` (d theta_i/dt = -eta_g / m_i dL/d theta_i, m_i the multiplicity of a class-reduced
coordinate), `push_forward` (d obs/dt = (d obs/d theta) . theta_dot) and `project` (the flow restricted to an
ansatz theta = phi(h) with the metric J^T G J, and its invariance residual)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence

import sympy as sp

from .matrix import matrix_gradient_flow
from .matrix_system import MatrixFlowSystem
from .system import FlowSystem, check_same_symbols, check_symbols, ordered_params, simplified, sympy_value

__all__ = ["ParameterGroup", "Projection", "gradient_flow", "naive_reduced_gradient", "project", "push_forward"]


def _multiplicity(field: str, value) -> sp.Expr:
    """A multiplicity: a positive integer, or a symbolic count not known to be non-positive or non-integer."""
    m = sympy_value(field, value, what="the multiplicity")
    if m.is_number:
        v = complex(m)
        if not (v.imag == 0 and math.isfinite(v.real) and v.real == round(v.real) and v.real >= 1):
            raise ValueError(
                f"{field} must be a positive integer (how many entries the symbol stands for), got {value!r}"
            )
        return sp.Integer(round(v.real))
    if m.is_positive is False or m.is_integer is False:
        raise ValueError(
            f"{field} must be a positive integer count; {m} is known to be "
            f"{'non-positive' if m.is_positive is False else 'non-integer'}"
        )
    return m


@dataclasses.dataclass(frozen=True)
class ParameterGroup:
    """Parameter symbols that share one learning rate.

    - `name`: e.g. `"Y"` or `"w"`.
    - `symbols`: the (reduced) coordinates of the group (sympy Symbols, each appearing in the loss).
    - `learning_rate`: a sympy symbol or expression (eta_Y, eta_Z, ...), or a positive number.
    - `multiplicities`: how many entries of the real parameter each symbol stands for (default all 1):
      positive integers, or symbolic counts such as `M - 1`.
    """

    name: str
    symbols: tuple
    learning_rate: sp.Expr
    multiplicities: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ParameterGroup.name must be a non-empty string, got {self.name!r}")
        syms = check_symbols(f"ParameterGroup.symbols of {self.name!r}", self.symbols, matrices=True)
        object.__setattr__(self, "symbols", syms)
        mult = (1,) * len(syms) if self.multiplicities is None else self.multiplicities
        if isinstance(mult, sp.Basic | str | numbers.Number):
            raise ValueError(
                f"ParameterGroup.multiplicities of {self.name!r} must be a sequence with one entry per symbol, "
                f"got {mult!r}"
            )
        if len(mult := tuple(mult)) != len(syms):
            raise ValueError(
                f"ParameterGroup.multiplicities must have one entry per symbol ({len(syms)}), got {len(mult)}"
            )
        mult = tuple(
            _multiplicity(f"ParameterGroup.multiplicities[{i}] (of {s} in group {self.name!r})", m)
            for i, (s, m) in enumerate(zip(syms, mult, strict=True))
        )
        object.__setattr__(self, "multiplicities", mult)
        lr = sympy_value(f"ParameterGroup.learning_rate of {self.name!r}", self.learning_rate, what="the learning rate")
        if lr.is_positive is False:
            raise ValueError(f"ParameterGroup.learning_rate of {self.name!r} must be positive, got {lr}")
        object.__setattr__(self, "learning_rate", lr)


def _declared_by_groups(groups) -> list:
    """The symbols of the groups' learning rates and multiplicities, group by group (by name within one
    expression: sympy keeps no order inside it)."""
    out: list = []
    for g in groups:
        for e in (g.learning_rate, *g.multiplicities):
            out.extend(sorted(e.free_symbols, key=lambda x: x.name))
    return out


def gradient_flow(
    loss: sp.Expr,
    groups: Sequence[ParameterGroup],
    *,
    name: str,
    description: str = "",
    simplify: bool = True,
    params: Sequence[sp.Symbol] | None = None,
    symmetric: Sequence[sp.MatrixSymbol] = (),
) -> FlowSystem | MatrixFlowSystem:
    """The gradient flow d theta/dt = -eta_g / m_i * dL/d theta_i of `loss` over the symbols of `groups`.

    A loss of matrices (traces of products of `MatrixSymbol`s whose sizes are symbols) gives the flow at
    symbolic sizes, a `MatrixFlowSystem` (`derivations.matrix`): the groups may then hold matrix symbols,
    and `symmetric` lists the matrix parameters known to be symmetric.

    **Arguments:**

    - `loss`: a sympy expression (not a string) in the group symbols and any parameters.
    - `groups`: a sequence of `ParameterGroup`; every symbol appears in `loss`, in one group only.
    - `name`: the system's name; `description`: one paragraph on where it comes from.
    - `params`: the order of the parameters (`system.params`, the generated `PARAMS`); default: as declared,
      group by group (learning rate, then multiplicities), then the loss's other symbols by name.

    **Returns:** the `FlowSystem`, its state the groups' symbols in order; a `ValueError` names a bad argument.
    """
    loss = _check_loss(loss)
    groups = _check_groups(groups)
    _check_name(name)
    if loss.atoms(sp.MatrixSymbol) or any(isinstance(s, sp.MatrixSymbol) for g in groups for s in g.symbols):
        return matrix_gradient_flow(
            loss, groups, name=name, description=description, params=params, symmetric=symmetric
        )
    seen = set()
    for group in groups:
        for sym in group.symbols:
            if sym in seen:
                raise ValueError(f"symbol {sym} appears in more than one parameter group")
            seen.add(sym)
    named = [("loss", loss)]
    for g in groups:
        parts = {"": g.symbols, ", learning_rate": (g.learning_rate,), ", multiplicities": g.multiplicities}
        named += [(f"groups (group {g.name!r}{label})", e) for label, exprs in parts.items() for e in exprs]
    check_same_symbols(named)
    free = loss.free_symbols
    for group in groups:
        absent = [s for s in group.symbols if s not in free]
        if absent:
            raise ValueError(
                f"groups: symbol(s) {', '.join(map(str, absent))} of group {group.name!r} do not appear "
                f"in the loss, so their rate would be identically 0 (loss symbols: "
                f"{', '.join(sorted(map(str, free)))})"
            )
    state, rhs, metric = [], [], []
    for group in groups:
        for sym, mult in zip(group.symbols, group.multiplicities, strict=True):
            expr = -group.learning_rate / mult * sp.diff(loss, sym)
            state.append(sym)
            rhs.append(simplified(expr) if simplify else expr)
            metric.append(mult)
    return FlowSystem(
        name=name,
        state=tuple(state),
        rhs=tuple(rhs),
        params=ordered_params(rhs, state, _declared_by_groups(groups), params),
        metric=tuple(metric),
        description=description,
        loss=loss,
    )


def _check_loss(loss) -> sp.Expr:
    if isinstance(loss, str):
        raise ValueError(
            f"loss must be a sympy expression, not the string {loss!r}: build it from your "
            "sp.Symbol objects (sympify would create new symbols, and every rate would be 0)"
        )
    if not isinstance(loss, sp.Expr):
        raise ValueError(f"loss must be a scalar sympy expression, got {type(loss).__name__}")
    if loss.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise ValueError(f"loss must be finite, got {loss}")
    return loss


def _check_groups(groups) -> tuple:
    if isinstance(groups, ParameterGroup):
        raise ValueError("groups must be a sequence of ParameterGroup; wrap a single group in a list")
    try:
        groups = tuple(groups)
    except TypeError:
        raise ValueError(f"groups must be a sequence of ParameterGroup, got {type(groups).__name__}") from None
    if not groups:
        raise ValueError("groups must contain at least one parameter symbol")
    bad = [type(g).__name__ for g in groups if not isinstance(g, ParameterGroup)]
    if bad:
        raise ValueError(f"groups must hold ParameterGroup objects, got {', '.join(bad)}")
    return groups


def _check_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")


def push_forward(system: FlowSystem, observables: Mapping[sp.Symbol, sp.Expr], simplify: bool = True) -> dict:
    """d obs/dt = sum_i (d obs / d theta_i) theta_dot_i for each observable obs(theta).

    Returns a dict `{obs_symbol: expression in the state and params of system}`. Observable expressions must
    be sympy expressions (not strings) whose symbols are those of `system` (same names, same assumptions).
    """
    if not isinstance(system, FlowSystem):
        raise ValueError(f"system must be a FlowSystem, got {type(system).__name__}")
    if not isinstance(observables, Mapping):
        raise ValueError(f"observables must be a mapping {{symbol: expression}}, got {type(observables).__name__}")
    exprs = {sym: sympy_value(f"observables[{sym}]", e, what="the observable") for sym, e in observables.items()}
    check_same_symbols(
        [("system (state)", s) for s in system.state]
        + [("system (params)", s) for s in system.params]
        + [(f"observables[{k}]", v) for k, v in exprs.items()]
    )
    out = {}
    for sym, expr in exprs.items():
        rate = sum((sp.diff(expr, s) * e for s, e in zip(system.state, system.rhs, strict=True)), sp.Integer(0))
        out[sym] = simplified(rate) if simplify else rate
    return out


@dataclasses.dataclass(frozen=True)
class Projection:
    """The result of `project`: the reduced system and the invariance residual (zero iff invariant)."""

    system: FlowSystem
    residual: tuple
    ansatz: dict
    jacobian: sp.Matrix
    metric_matrix: sp.Matrix

    @property
    def invariant(self) -> bool:
        return all(sp.simplify(r) == 0 for r in self.residual)


def project(
    system: FlowSystem,
    ansatz: Mapping[sp.Symbol, sp.Expr],
    coords: Sequence[sp.Symbol],
    *,
    name: str,
    description: str = "",
    params: Sequence[sp.Symbol] | None = None,
    simplify: bool = True,
) -> Projection:
    """Restrict `system` to the ansatz theta = phi(h): h_dot = (J^T G J)^{-1} J^T G theta_dot(phi(h)).

    **Arguments:**

    - `system`: a `FlowSystem` (e.g. from `gradient_flow`).
    - `ansatz`: `{state symbol: expression of coords (and params)}` for every state symbol of `system`
      (values are sympy expressions or numbers, not strings).
    - `coords`: the new coordinates h (distinct sympy Symbols, each appearing in the ansatz).
    - `params`: the order of the reduced system's parameters, as in `gradient_flow`. Default: those of
      `system` in its order, then the ansatz's new symbols by name.
    - `simplify`: simplify the reduced right-hand sides and the residual (`False` keeps them as computed:
      for large expressions, whose equal terms sympy already combines).

    **Returns:** a `Projection` (the reduced system and the invariance residual); a `ValueError` names a bad
    argument, including a symbol with the name of one of `system`'s but other assumptions.
    """
    if not isinstance(system, FlowSystem):
        raise ValueError(f"system must be a FlowSystem, got {type(system).__name__}")
    _check_name(name)
    if not isinstance(ansatz, Mapping):
        raise ValueError(f"ansatz must be a mapping {{state symbol: expression}}, got {type(ansatz).__name__}")
    coords = check_symbols("coords", coords)
    values = {}
    for key, value in ansatz.items():
        if not isinstance(key, sp.Symbol):
            raise ValueError(f"ansatz keys must be the state symbols of the system, got {key!r}")
        values[key] = sympy_value(f"ansatz[{key}]", value, what="the ansatz")
    check_same_symbols(
        [("system (state)", s) for s in system.state]
        + [("system (params)", s) for s in system.params]
        + [(f"ansatz (key {k})", k) for k in values]
        + [(f"ansatz[{k}]", v) for k, v in values.items()]
        + [("coords", c) for c in coords]
    )
    extra = [k for k in values if k not in system.state]
    if extra:
        raise ValueError(
            f"ansatz gives {', '.join(map(str, extra))}, which are not state symbols of "
            f"{system.name!r} (state: {', '.join(map(str, system.state))})"
        )
    missing = [s for s in system.state if s not in values]
    if missing:
        raise ValueError(f"ansatz must express every state symbol; missing {missing}")
    used = set().union(*(v.free_symbols for v in values.values()))
    unused = [c for c in coords if c not in used]
    if unused:
        raise ValueError(
            f"coords {', '.join(map(str, unused))} do not appear in the ansatz (the Jacobian would have a zero column)"
        )
    ansatz = values
    phi = sp.Matrix([ansatz[s] for s in system.state])
    J = phi.jacobian(list(coords))
    G = sp.diag(*system.metric)
    theta_dot = sp.Matrix([sp.sympify(e).xreplace(ansatz) for e in system.rhs])
    normal = sp.simplify(J.T * G * J)
    if normal.det() == 0:
        raise ValueError("the ansatz Jacobian has dependent columns (J^T G J is singular)")
    h_dot = normal.inv() * (J.T * G * theta_dot)
    tidy = simplified if simplify else (lambda e: e)
    h_dot = [tidy(e) for e in h_dot]
    residual = tuple((sp.simplify if simplify else tidy)(e) for e in (theta_dot - J * sp.Matrix(h_dot)))
    reduced = FlowSystem(
        name=name,
        state=coords,
        rhs=tuple(h_dot),
        params=ordered_params(h_dot, coords, system.params, params),
        metric=tuple(sp.Integer(1) for _ in coords),
        description=description,
    )
    return Projection(system=reduced, residual=residual, ansatz=dict(ansatz), jacobian=J, metric_matrix=normal)


def naive_reduced_gradient(
    loss: sp.Expr, ansatz: Mapping[sp.Symbol, sp.Expr], coords: Sequence[sp.Symbol], learning_rate: sp.Expr
) -> tuple:
    """-eta d/dh L(phi(h)): what one gets by differentiating the loss in the ansatz coordinates.

    Kept to show (and test) that it is *not* the restricted flow: it equals (J^T G J) h_dot, i.e. it misses
    the metric and runs on the wrong time scale.
    """
    reduced_loss = sp.sympify(loss).subs(ansatz)
    return tuple(simplified(-learning_rate * sp.diff(reduced_loss, c)) for c in coords)
