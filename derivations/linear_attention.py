"""Symbolic reduced flows of linear attention on in-context linear regression.

Papers: (ZFB) Zhang, Frei, Bartlett, JMLR 2024, arXiv:2306.09927; (ZSLS) Zhang, Singh, Latham, Saxe, ICML 2025,
arXiv:2501.16265. Convention: ZFB's loss L = (1/2) E[(y_hat - y_q)^2] and flow d theta/dt = -grad L (eqs 3.7-3.9);
ZSLS's flow tau dW/dt = -(1/2) dL_ZSLS/dW (eq 5) with L_ZSLS = 2 L runs on the same clock t/tau.

For a model predicting y_hat = x_q^T G h, with Lambda the covariance of the inputs, the exact population loss
is (docs/systems/linear_attention.md)

    2 L = tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) + tr(Lambda),
    Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I.

1. `linear_attention-zfb` (ZFB Lemma 5.2, eq 5.4): the single head with its zero blocks kept zero, value entry
   u = w^{PV}_22 and key-query block U = W^{KQ}_11, so G = u U^T; the gradient flow in (u, U) of this loss,
   derived once at symbolic size d (U and Lambda d x d matrix symbols, Lambda symmetric): the generated module
   runs at every d, in any basis (Lambda the covariance itself, not only its eigenvalues).
2. `linear_attention-separate` (ZSLS eq 21): one rank-one head on eigen-direction i, value v, key k and query
   q along r_i, so G = v q k^T contributes g = v k q to G_ii and the loss of that direction is
   L_i = (1/2)(lambda^2 gamma g^2 - 2 lambda^2 g + lambda), gamma = (1 + 1/N) lambda + trace/N. Its gradient
   flow in (v, k, q) is reduced by its symmetries (the permutations of (v, k, q), found by `find_symmetries`)
   to their fixed subspace v = k = q = s, giving ds/dt = lambda^2 s^2 - lambda^3 (1 + (1 + trace/lambda)/N) s^5,
   which is ZSLS eq 21 with tau = 1.

`write()` emits both into `flows/_generated/` and `diff()` compares the committed modules with a fresh emission.
"""

from __future__ import annotations

import os

import sympy as sp

from . import codegen
from .base import Derivation
from .gradient_flow import ParameterGroup, gradient_flow
from .symmetry import reduce_by_symmetry
from .symmetry_search import find_symmetries
from .system import FlowSystem

__all__ = ["SeparateDerivation", "ZFBDerivation", "diff", "population_loss_of_G", "separate_direction_loss", "write"]


def population_loss_of_G(G: sp.MatrixExpr | sp.MatrixBase, Lam: sp.MatrixExpr | sp.MatrixBase, N: sp.Symbol) -> sp.Expr:
    """L(G) = (1/2)(tr(G^T Lambda G Gamma Lambda) - 2 tr(Lambda G Lambda) + tr Lambda), Gamma = (1 + 1/N) Lambda +
    tr(Lambda)/N I: `G`, `Lam` d x d matrix symbols (a loss at symbolic size) or explicit sympy matrices."""
    explicit = isinstance(Lam, sp.MatrixBase)
    eye = sp.eye(Lam.rows) if explicit else sp.Identity(Lam.rows)
    Gam = (1 + 1 / N) * Lam + (sp.Trace(Lam) / N) * eye
    return sp.Rational(1, 2) * (sp.Trace(G.T * Lam * G * Gam * Lam) - 2 * sp.Trace(Lam * G * Lam) + sp.Trace(Lam))


def zfb_symbols():
    """(u, U, Lambda, N, d): the value entry, the key-query block (d x d), the covariance (d x d), the prompt
    length and the size d (a symbol)."""
    d = sp.Symbol("d", integer=True, positive=True)
    u = sp.Symbol("u", real=True)
    U = sp.MatrixSymbol("U", d, d)
    Lam = sp.MatrixSymbol("Lambda", d, d)
    N = sp.Symbol("N", positive=True)
    return u, U, Lam, N, d


class ZFBDerivation(Derivation):
    """The reduced single-head flow in (u, U) (ZFB Lemma 5.2) at symbolic size d, for
    `python -m flows derive linear_attention-zfb`."""

    name = "linear_attention-zfb"
    module = "linear_attention_zfb"

    def __init__(self) -> None:
        u, U, Lam, N, _ = zfb_symbols()
        self.G = u * U.T
        self.loss = population_loss_of_G(self.G, Lam, N)
        groups = [ParameterGroup("value", (u,), 1), ParameterGroup("key_query", (U,), 1)]
        self.system = gradient_flow(
            self.loss,
            groups,
            name=self.name,
            params=(Lam, N),
            symmetric=(Lam,),
            description=(
                "Linear self-attention, one head (Zhang, Frei, Bartlett 2024, Lemma 5.2, eq 5.4), zero blocks\n"
                "kept zero: value entry u = w_22, key-query block U = W_11 (d x d, any d), covariance Lambda\n"
                "(d x d, symmetric), G = u U^T; gradient flow of L = (1/2)(tr(G^T Lambda G Gamma Lambda) -\n"
                "2 tr(Lambda G Lambda) + tr Lambda), Gamma = (1 + 1/N) Lambda + tr(Lambda)/N I (eqs 3.7-3.9)."
            ),
        )

    def _steps(self) -> list:
        return [
            ("effective matrix G = u U^T", [self.G]),
            ("population loss (ZFB's factor 1/2)", [sp.Eq(sp.Symbol("L"), self.loss)]),
        ]


def separate_symbols():
    """(v, k, q, s, lam, N, trace): a head's value, key and query along one eigen-direction, the balanced
    coordinate, the eigenvalue, the prompt length and tr(Lambda)."""
    v, k, q, s = sp.symbols("v k q s", real=True)
    lam, N, trace = sp.symbols("lam N trace", positive=True)
    return v, k, q, s, lam, N, trace


def separate_direction_loss(g: sp.Expr, lam: sp.Symbol, N: sp.Symbol, trace: sp.Symbol) -> sp.Expr:
    """The loss of one eigen-direction with G_ii = g: (1/2)(lambda^2 gamma g^2 - 2 lambda^2 g + lambda)."""
    gamma = (1 + 1 / N) * lam + trace / N
    return sp.Rational(1, 2) * (lam**2 * gamma * g**2 - 2 * lam**2 * g + lam)


class SeparateDerivation(Derivation):
    """The separate-heads scalar ODE of one eigen-direction (ZSLS eq 21), for
    `python -m flows derive linear_attention-separate`."""

    name = "linear_attention-separate"
    module = "linear_attention_separate"

    def __init__(self) -> None:
        v, k, q, s, lam, N, trace = separate_symbols()
        self.loss = separate_direction_loss(v * k * q, lam, N, trace)
        self.head_flow = gradient_flow(
            self.loss,
            [ParameterGroup("head", (v, k, q), 1)],
            name="linear_attention-separate-head",
            params=(lam, N, trace),
            description="One rank-one head on one eigen-direction: value v, key k, query q (ZSLS eqs 12-14).",
        )
        assert isinstance(self.head_flow, FlowSystem)  # a loss of scalars
        # no ansatz: the loss depends on v k q only, so permuting (v, k, q) is a symmetry; its fixed subspace
        # v = k = q is invariant and the flow restricted to it is the balanced one
        self.symmetries = find_symmetries(self.head_flow)
        self.reduction = reduce_by_symmetry(
            self.head_flow,
            self.symmetries,
            coords=(s,),
            name=self.name,
            description=(
                "Linear attention with separate rank-one key and query (Zhang, Singh, Latham, Saxe 2025, eq 21):\n"
                "one head on one eigen-direction of Lambda (eigenvalue lam, trace = tr Lambda), reduced by the\n"
                "permutations of (v, k, q) (found, not assumed) to v = k = q = s;\n"
                "ds/dt = lam^2 s^2 - lam^3 (1 + (1 + trace/lam)/N) s^5 (tau = 1, ZFB's clock)."
            ),
        )
        self.projection = self.reduction.projection
        self.ansatz = self.projection.ansatz
        self.system: FlowSystem = self.reduction.system

    def _steps(self) -> list:
        return [
            ("loss of one direction, G_ii = v k q", [sp.Eq(sp.Symbol("L_i"), self.loss)]),
            ("gradient flow of the head", self.head_flow.equations()),
            ("symmetries of the flow (find_symmetries: permutations of (v, k, q))", list(self.symmetries)),
            ("fixed subspace of the symmetries", [sp.Eq(key, val) for key, val in self.ansatz.items()]),
            ("invariance residual (zero: the subspace is invariant)", [sp.Matrix(self.projection.residual)]),
        ]


DERIVATIONS = (ZFBDerivation, SeparateDerivation)


def write(out_dir: str | os.PathLike | None = None) -> list:
    """Emit the generated modules of both derivations (into `flows/_generated/` by default); returns the paths."""
    paths = []
    for cls in DERIVATIONS:
        d = cls()
        paths.append(codegen.write(d.system, out_dir=out_dir, module=d.module, source=d.source))
    return paths


def diff(out_dir: str | os.PathLike | None = None) -> dict:
    """{name: unified diff} for each generated module that differs from a fresh emission (empty: current)."""
    out = {}
    for cls in DERIVATIONS:
        d = cls()
        delta = codegen.diff(d.system, module=d.module, source=d.source, out_dir=out_dir)
        if delta:
            out[d.name] = delta
    return out
