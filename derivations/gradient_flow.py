"""Symbolic gradient flows: loss + parameter groups + learning rates -> ODE right-hand sides.

Three operations every system in this library needs:

1. `gradient_flow`: d theta_i / dt = - eta_g / m_i * dL/d theta_i for each parameter symbol theta_i of group g
   with learning rate eta_g. The multiplicity m_i says how many entries of the real parameter the symbol
   stands for (a class-reduced coordinate: "the logit shared by the M - 1 other tokens" has m = M - 1). On an
   invariant symmetric subspace this is exactly the full gradient flow, because the gradient of L with
   respect to each of the m_i equal entries is (1/m_i) dL/d theta_i. The metric of the reduced coordinates is
   G = diag(m).
2. `push_forward`: d obs/dt = (d obs/d theta) . theta_dot for observables obs(theta) (attention scores,
   alignments, ...).
3. `project`: the flow restricted to an ansatz theta = phi(h): h_dot = (J^T G J)^{-1} J^T G theta_dot(phi(h)),
   J = d phi / d h, with the invariance residual theta_dot(phi(h)) - J h_dot, which is zero exactly when the
   ansatz manifold is invariant under the flow. Taking the gradient of L(phi(h)) in h instead would give
   -eta J^T G^{-1}... = the wrong time scale: it misses the metric J^T G J.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import sympy as sp

__all__ = [
    "FlowSystem",
    "ParameterGroup",
    "Projection",
    "gradient_flow",
    "naive_reduced_gradient",
    "project",
    "push_forward",
]


def _simplify(expr: sp.Expr) -> sp.Expr:
    return sp.simplify(sp.together(expr))


@dataclasses.dataclass(frozen=True)
class ParameterGroup:
    """Parameter symbols that share one learning rate.

    - `name`: e.g. `"Y"` or `"w"`.
    - `symbols`: the (reduced) coordinates of the group.
    - `learning_rate`: a sympy symbol or expression (eta_Y, eta_Z, ...).
    - `multiplicities`: how many entries of the real parameter each symbol stands for (default all 1).
    """

    name: str
    symbols: tuple
    learning_rate: sp.Expr
    multiplicities: tuple | None = None

    def __post_init__(self):
        if not self.name:
            raise ValueError("ParameterGroup.name must be non-empty")
        syms = tuple(self.symbols)
        if not syms or not all(isinstance(s, sp.Symbol) for s in syms):
            raise ValueError("ParameterGroup.symbols must be a non-empty sequence of sympy Symbols")
        object.__setattr__(self, "symbols", syms)
        mult = self.multiplicities
        mult = tuple(sp.Integer(1) for _ in syms) if mult is None else tuple(sp.sympify(m) for m in mult)
        if len(mult) != len(syms):
            raise ValueError(
                f"ParameterGroup.multiplicities must have one entry per symbol ({len(syms)}), "
                f"got {len(mult)}"
            )
        object.__setattr__(self, "multiplicities", mult)
        object.__setattr__(self, "learning_rate", sp.sympify(self.learning_rate))


@dataclasses.dataclass(frozen=True)
class FlowSystem:
    """An autonomous-in-structure ODE system d state/dt = rhs(state; params).

    - `name`: registry name, e.g. `"scan_snap-decoder"`.
    - `state`: tuple of sympy symbols (the coordinates, in order).
    - `rhs`: tuple of sympy expressions, one per state symbol.
    - `params`: the other free symbols, in a fixed order (they become `args[name]` in generated code).
    - `metric`: the diagonal of the metric of the coordinates (multiplicities), used by `project`.
    - `description`: one paragraph with the equation's source (paper, lemma, equation number).
    """

    name: str
    state: tuple
    rhs: tuple
    params: tuple
    metric: tuple
    description: str = ""

    def __post_init__(self):
        if len(self.state) != len(self.rhs):
            raise ValueError(f"FlowSystem '{self.name}': {len(self.state)} state symbols but "
                             f"{len(self.rhs)} right-hand sides")
        if len(self.metric) != len(self.state):
            raise ValueError(f"FlowSystem '{self.name}': metric needs one entry per state symbol")
        free = set().union(*(sp.sympify(e).free_symbols for e in self.rhs)) - set(self.state)
        missing = free - set(self.params)
        if missing:
            raise ValueError(f"FlowSystem '{self.name}': rhs uses symbols {sorted(map(str, missing))} "
                             "that are neither state nor params")

    def equations(self) -> list[sp.Eq]:
        t = sp.Symbol("t")
        return [sp.Eq(sp.Derivative(sp.Function(str(s))(t), t), e)
                for s, e in zip(self.state, self.rhs, strict=True)]

    def to_text(self) -> str:
        return "\n".join(f"d{s}/dt = {sp.sstr(e)}" for s, e in zip(self.state, self.rhs, strict=True))

    def to_latex(self) -> str:
        lines = [
            rf"\frac{{d {sp.latex(s)}}}{{dt}} = {sp.latex(e)}"
            for s, e in zip(self.state, self.rhs, strict=True)
        ]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def lambdify(self):
        """A plain numpy function `f(y, **params) -> list of rhs values` (for checks, not for solving)."""
        return sp.lambdify([list(self.state), *self.params], list(self.rhs), modules="numpy")


def _ordered_params(exprs, state) -> tuple:
    free = set().union(*(sp.sympify(e).free_symbols for e in exprs)) - set(state)
    return tuple(sorted(free, key=lambda s: s.name))


def gradient_flow(
    loss: sp.Expr,
    groups: Sequence[ParameterGroup],
    *,
    name: str,
    description: str = "",
    simplify: bool = True,
) -> FlowSystem:
    """The gradient flow d theta/dt = -eta_g / m_i * dL/d theta_i of `loss` over the symbols of `groups`."""
    loss = sp.sympify(loss)
    state, rhs, metric = [], [], []
    seen = set()
    for group in groups:
        for sym, mult in zip(group.symbols, group.multiplicities, strict=True):
            if sym in seen:
                raise ValueError(f"symbol {sym} appears in more than one parameter group")
            seen.add(sym)
            expr = -group.learning_rate / mult * sp.diff(loss, sym)
            state.append(sym)
            rhs.append(_simplify(expr) if simplify else expr)
            metric.append(mult)
    if not state:
        raise ValueError("groups must contain at least one parameter symbol")
    return FlowSystem(
        name=name,
        state=tuple(state),
        rhs=tuple(rhs),
        params=_ordered_params(rhs, state),
        metric=tuple(metric),
        description=description,
    )


def push_forward(system: FlowSystem, observables: Mapping[sp.Symbol, sp.Expr],
                 simplify: bool = True) -> dict:
    """d obs/dt = sum_i (d obs / d theta_i) theta_dot_i for each observable obs(theta).

    Returns a dict `{obs_symbol: expression in the state and params of system}`.
    """
    out = {}
    for sym, expr in observables.items():
        expr = sp.sympify(expr)
        rate = sum(
            (sp.diff(expr, s) * e for s, e in zip(system.state, system.rhs, strict=True)),
            sp.Integer(0),
        )
        out[sym] = _simplify(rate) if simplify else rate
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
) -> Projection:
    """Restrict `system` to the ansatz theta = phi(h): h_dot = (J^T G J)^{-1} J^T G theta_dot(phi(h)).

    `ansatz` must give every state symbol of `system` as an expression of `coords` (and params).
    """
    coords = tuple(coords)
    missing = [s for s in system.state if s not in ansatz]
    if missing:
        raise ValueError(f"ansatz must express every state symbol; missing {missing}")
    phi = sp.Matrix([sp.sympify(ansatz[s]) for s in system.state])
    J = phi.jacobian(list(coords))
    G = sp.diag(*system.metric)
    theta_dot = sp.Matrix([sp.sympify(e).subs(ansatz) for e in system.rhs])
    normal = sp.simplify(J.T * G * J)
    if normal.det() == 0:
        raise ValueError("the ansatz Jacobian has dependent columns (J^T G J is singular)")
    h_dot = normal.inv() * (J.T * G * theta_dot)
    h_dot = [_simplify(e) for e in h_dot]
    residual = tuple(sp.simplify(e) for e in (theta_dot - J * sp.Matrix(h_dot)))
    reduced = FlowSystem(
        name=name,
        state=coords,
        rhs=tuple(h_dot),
        params=_ordered_params(h_dot, coords),
        metric=tuple(sp.Integer(1) for _ in coords),
        description=description,
    )
    return Projection(system=reduced, residual=residual, ansatz=dict(ansatz), jacobian=J,
                      metric_matrix=normal)


def naive_reduced_gradient(loss: sp.Expr, ansatz: Mapping[sp.Symbol, sp.Expr],
                           coords: Sequence[sp.Symbol], learning_rate: sp.Expr) -> tuple:
    """-eta d/dh L(phi(h)): what one gets by differentiating the loss in the ansatz coordinates.

    Kept to show (and test) that it is *not* the restricted flow: it equals (J^T G J) h_dot, i.e. it misses
    the metric and runs on the wrong time scale.
    """
    reduced_loss = sp.sympify(loss).subs(ansatz)
    return tuple(_simplify(-learning_rate * sp.diff(reduced_loss, c)) for c in coords)
