"""Symbolic JoMA (Tian, Wang, Zhang, Chen, Du, ICLR 2024, arXiv:2310.00535): the invariants of the joint flow of
the MLP weights and the attention logits, and the reduced flow of the MLP weights alone. See docs/systems/joma.md.

The model on a small instance (`TOKENS` contextual tokens, `CLASSES` classes = output units, the embedding
U = I, so V = W's token rows): class k has frequencies x_lk, attention b_lk = x_lk e^{z_l / tau} (exp) or
x_lk z_l / tau (linear), residual f_k = (b_1k, ..., b_Mk, 1), readout h_kj = phi(sum_i f_k[i] w_ij) and the
loss (1/K) sum_k (log sum_j e^{h_kj} - h_kk). `joint_flow` is its gradient flow in (W, z) at one rate;
`invariant_rates` pushes the invariants of Theorem 1 forward along it (d/dt (z_l - sum_j w_lj^2 / (2 tau)) for
exp, d/dt (z_l^2 - sum_j w_lj^2) for linear attention): both are 0 for any phi (an undefined sympy function)
and any data. `ExpReducedDerivation` substitutes z_l = c_l + sum_j w_lj^2 / (2 tau) into the W rows of the
joint flow (linear MLP): the reduced flow of the MLP weights alone, emitted to `flows/_generated/`, which holds
`flows.joma.flow.reduced_field` at this size. It is registered in `flows.registry` (`python -m flows derive
joma-exp-reduced`; `python -m derivations --write` emits it, `derivations.check_generated` compares).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy as sp

from .base import Derivation
from .gradient_flow import ParameterGroup, gradient_flow, push_forward
from .system import FlowSystem

__all__ = ["CLASSES", "TOKENS", "ExpReducedDerivation", "invariant_rates", "joint_flow", "joma_loss", "joma_symbols"]

#: the size of the symbolic instance: contextual tokens M_C and classes K
TOKENS = 2
CLASSES = 2


def joma_symbols(
    tokens: int = TOKENS, classes: int = CLASSES
) -> tuple[sp.Matrix, sp.Matrix, sp.Matrix, sp.Matrix, sp.Symbol]:
    """(X, W, z, c, tau): frequencies x_lk `(tokens, classes)` (positive), MLP weights w_ij `(tokens + 1,
    classes)` (the last row: the query's), logits z_l, the invariant's constants c_l and the temperature."""
    X = sp.Matrix(tokens, classes, lambda i, j: sp.Symbol(f"x{i + 1}{j + 1}", positive=True))
    W = sp.Matrix(tokens + 1, classes, lambda i, j: sp.Symbol(f"w{i + 1}{j + 1}", real=True))
    z = sp.Matrix([sp.Symbol(f"z{i + 1}", real=True) for i in range(tokens)])
    c = sp.Matrix([sp.Symbol(f"c{i + 1}", real=True) for i in range(tokens)])
    return X, W, z, c, sp.Symbol("tau", positive=True)


def joma_loss(attention: str, phi: Callable = lambda h: h, tokens: int = TOKENS, classes: int = CLASSES) -> sp.Expr:
    """The mean cross-entropy of the readout phi(f_k^T w_j) against label k, with exp or linear attention."""
    if attention not in ("exp", "linear", "softmax"):
        raise ValueError(f"attention must be 'exp', 'linear' or 'softmax', got {attention!r}")
    X, W, z, _, tau = joma_symbols(tokens, classes)
    loss = sp.Integer(0)
    for k in range(classes):
        if attention == "exp":
            b = [X[i, k] * sp.exp(z[i] / tau) for i in range(tokens)]
        elif attention == "linear":
            b = [X[i, k] * z[i] / tau for i in range(tokens)]
        else:
            norm = sum(X[i, k] * sp.exp(z[i] / tau) for i in range(tokens))
            b = [X[i, k] * sp.exp(z[i] / tau) / norm for i in range(tokens)]
        f = [*b, sp.Integer(1)]
        h = [phi(sum(f[i] * W[i, j] for i in range(tokens + 1))) for j in range(classes)]
        loss += sp.log(sum(sp.exp(hj) for hj in h)) - h[k]
    return loss / classes


def joint_flow(attention: str, phi: Callable = lambda h: h) -> FlowSystem:
    """The gradient flow of `joma_loss` in (W, z), one learning rate (unsimplified: it is only pushed forward
    and substituted)."""
    _, W, z, _, _ = joma_symbols()
    system = gradient_flow(
        joma_loss(attention, phi),
        [ParameterGroup("W", tuple(W), 1), ParameterGroup("z", tuple(z), 1)],
        name=f"joma-joint-{attention}",
        description=f"JoMA joint flow of (W, z), {attention} attention (Tian et al. 2024, Sec. 3).",
        simplify=False,
    )
    assert isinstance(system, FlowSystem)  # a loss of scalar symbols: never the matrix engine's system
    return system


def _invariants(attention: str) -> dict:
    _, W, z, _, tau = joma_symbols()
    sq = [sum(W[i, j] ** 2 for j in range(CLASSES)) for i in range(TOKENS)]
    if attention == "exp":
        return {sp.Symbol(f"I{i + 1}"): z[i] - sq[i] / (2 * tau) for i in range(TOKENS)}
    return {sp.Symbol(f"I{i + 1}"): z[i] ** 2 - sq[i] for i in range(TOKENS)}


def invariant_rates(attention: str, phi: Callable | None = None, *, simplify: bool = True) -> list:
    """d I_l / dt along `joint_flow(attention, phi)` for the invariants of Theorem 1 (exp: z_l - sum_j w_lj^2 /
    (2 tau); linear: z_l^2 - sum_j w_lj^2; softmax: the exp form, which is not invariant there), expanded and
    simplified (`simplify=False`: as pushed forward, e.g. to evaluate the long softmax rates numerically):
    [0, 0] for exp and linear attention, for any phi (default an undefined function phi)."""
    phi = sp.Function("phi") if phi is None else phi
    invariants = _invariants("exp" if attention == "softmax" else attention)
    rates = list(push_forward(joint_flow(attention, phi), invariants, simplify=False).values())
    return [sp.simplify(sp.expand(r)) for r in rates] if simplify else rates


class ExpReducedDerivation(Derivation):
    """The reduced flow of the MLP weights alone, exp attention, linear MLP (`TOKENS` x `CLASSES` instance), for
    `python -m flows derive joma-exp-reduced`."""

    name = "joma-exp-reduced"
    module = "joma_exp_reduced"

    def __init__(self) -> None:
        X, W, z, c, tau = joma_symbols()
        self.loss = joma_loss("exp")
        self.joint = joint_flow("exp")
        self.rates = push_forward(self.joint, _invariants("exp"), simplify=False)
        self.ansatz = {z[i]: c[i] + sum(W[i, j] ** 2 for j in range(CLASSES)) / (2 * tau) for i in range(TOKENS)}
        n = len(W)
        rhs = tuple(sp.sympify(e).subs(self.ansatz) for e in self.joint.rhs[:n])
        self.system = FlowSystem(
            name=self.name,
            state=tuple(W),
            rhs=rhs,
            params=(*X, tau, *c),
            metric=(sp.Integer(1),) * n,
            description=(
                f"JoMA reduced flow of the MLP weights (Tian et al. 2024, Theorem 1, exp attention), {TOKENS}\n"
                f"contextual tokens, {CLASSES} classes, linear MLP, U = I: the W rows of the joint gradient flow of\n"
                "the mean cross-entropy with z_l = c_l + sum_j w_lj^2 / (2 tau) substituted (row 3: the query's)."
            ),
        )

    def _steps(self) -> list:
        rates = [sp.simplify(sp.expand(r)) for r in self.rates.values()]
        return [
            ("loss (mean cross-entropy, exp attention, linear MLP)", [sp.Eq(sp.Symbol("L"), self.loss)]),
            ("invariant rates d/dt (z_l - sum_j w_lj^2 / (2 tau)) (zero)", rates),
            ("invariant substituted", [sp.Eq(k, v) for k, v in self.ansatz.items()]),
        ]
