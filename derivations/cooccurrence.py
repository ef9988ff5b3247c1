"""Symbolic systems of word co-occurrence (Yang et al. 2024, Sec. 3, App. C, Lemma F.6, Thm F.8).

`cooccurrence-gram`: the Gram flow at symbolic sizes. The network's parameters W (m1 x m), W_V, W_K, W_Q
(m x d) enter the loss only through the Grams G = W_V^T W^T a and A = W_K^T W_Q, so their gradient flow is
the flow of the linearised loss -z^T G(theta) - tr(B^T A(theta)) / sqrt(m) (z = -dL/dG, B = -sqrt(m) dL/dA at
the current point); its push-forward to the Grams (G, S = ||W^T a||^2, M_V, M_K, M_Q, A), with a^T a = m1,
closes on them and is emitted once for every d (`flows.cooccurrence.flow.vector_field` calls it).

The reduced losses are stated here and sympy differentiates them (z and B derived, not typed in); the Gram
flow above, written out at d = 3, gives the right-hand sides. `cooccurrence-3token`: random tokens inert,
each group one representative sequence weighted (1/2, 1/6, 1/6, 1/6); `cooccurrence-phase2`: its restriction
to uniform attention without the m1 M_V term. See docs/systems/cooccurrence.md."""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from .base import Derivation
from .gradient_flow import ParameterGroup, gradient_flow
from .matrix import matrix_push_forward
from .matrix_system import MatrixFlowSystem, evaluate
from .system import FlowSystem

__all__ = [
    "GROUP_SPECIALS",
    "Cooccurrence3TokenDerivation",
    "CooccurrencePhase2Derivation",
    "GramDerivation",
    "gram_symbols",
    "three_token_symbols",
]

#: special tokens (1-based: mu_1, mu_2, mu_3) of I_1..I_4, their labels and weights (Def. 2.1).
GROUP_SPECIALS = ((1, 2, 3), (1, 3), (2, 3), (3,))
GROUP_LABELS = (1, -1, -1, -1)
GROUP_WEIGHTS = (sp.Rational(1, 2), sp.Rational(1, 6), sp.Rational(1, 6), sp.Rational(1, 6))


def three_token_symbols() -> tuple:
    """(G (3,), S, A, MV, MK, MQ (3x3 sympy matrices), m, m1, L); A[i, j] = score of key mu_i+1 for query
    mu_j+1. The state order is G1..G3, S, then A, M_V, M_K, M_Q row-major."""
    G = sp.Matrix(sp.symbols("G1:4", real=True))
    S = sp.Symbol("S", positive=True)
    blocks = [
        sp.Matrix(3, 3, lambda i, j, p=prefix: sp.Symbol(f"{p}{i + 1}{j + 1}", real=True))
        for prefix in ("A", "MV", "MK", "MQ")
    ]
    m, m1, L = sp.symbols("m m1 L", positive=True)
    return (G, S, *blocks, m, m1, L)


def three_token_loss(G, A, m, L):
    """(L̂, [F_1..F_4]) of the mean-field reduction (Yang et al. 2024, Sec. 3, random tokens inert)."""
    outputs = []
    for sp_tokens in GROUP_SPECIALS:
        idx = [t - 1 for t in sp_tokens]
        n_random = L - len(idx)
        F = n_random / L * sum(G[nu] for nu in idx)
        for mu in idx:  # special query
            weights = [sp.exp(A[nu, mu] / sp.sqrt(m)) for nu in idx]
            F += sum(w * G[nu] for w, nu in zip(weights, idx, strict=True)) / (sum(weights) + n_random)
        outputs.append(F)
    return group_loss(outputs), outputs


def group_loss(outputs: Sequence) -> sp.Expr:
    """sum_k q_k log(1 + e^{-y_k F_k}) of the group outputs F_k (weights q and labels y of Def. 2.1)."""
    return sum(q * sp.log(1 + sp.exp(-y * F)) for q, y, F in zip(GROUP_WEIGHTS, GROUP_LABELS, outputs, strict=True))


def gram_symbols() -> dict:
    """The symbols of the Gram flow at symbolic sizes: sizes `d`, `m`, `m1`; parameters `W`, `W_V`, `W_K`,
    `W_Q`, the fixed signs `a`; Grams `G`, `S`, `M_V`, `M_K`, `M_Q`, `A`; the gradients `z`, `B`; `sqrt_m`."""
    d, m, m1 = sp.symbols("d m m1", integer=True, positive=True)
    out: dict = {"d": d, "m": m, "m1": m1, "W": sp.MatrixSymbol("W", m1, m), "a": sp.MatrixSymbol("a", m1, 1)}
    out |= {k: sp.MatrixSymbol(k, m, d) for k in ("W_V", "W_K", "W_Q")}
    out |= {k: sp.MatrixSymbol(k, d, d) for k in ("M_V", "M_K", "M_Q", "A", "B")}
    out |= {"G": sp.MatrixSymbol("G", d, 1), "z": sp.MatrixSymbol("z", d, 1), "S": sp.Symbol("S", positive=True)}
    out["sqrt_m"] = sp.Symbol("sqrt_m", positive=True)
    return out


class GramDerivation(Derivation):
    """The Gram flow at symbolic sizes (module docstring), for `python -m flows derive cooccurrence-gram`."""

    name = "cooccurrence-gram"
    module = "cooccurrence_gram"

    def __init__(self) -> None:
        s = gram_symbols()
        W, W_V, W_K, W_Q, a = (s[k] for k in ("W", "W_V", "W_K", "W_Q", "a"))
        self.grams = {
            s["G"]: W_V.T * W.T * a,
            s["S"]: a.T * W * W.T * a,
            s["M_V"]: W_V.T * W_V,
            s["M_K"]: W_K.T * W_K,
            s["M_Q"]: W_Q.T * W_Q,
            s["A"]: W_K.T * W_Q,
        }
        self.linearised_loss = (
            -sp.Trace(s["z"].T * self.grams[s["G"]]) - sp.Trace(s["B"].T * self.grams[s["A"]]) / s["sqrt_m"]
        )
        groups = [ParameterGroup(p.name, (p,), 1) for p in (W, W_V, W_K, W_Q)]
        self.parameter_flow = gradient_flow(self.linearised_loss, groups, name="cooccurrence-parameters")
        self.system: MatrixFlowSystem = matrix_push_forward(
            dict(zip(self.parameter_flow.state, self.parameter_flow.rhs, strict=True)),
            self.grams,
            {(a.T, a): s["m1"]},
            name=self.name,
            params=(s["z"], s["B"], s["m1"], s["sqrt_m"]),
            description=(
                "Word co-occurrence (Yang et al. 2024, Sec. 3.2, App. C): the gradient flow of W, W_V, W_K, W_Q\n"
                "pushed forward to the Grams G = W_V^T W^T a, S = ||W^T a||^2, M_V, M_K, M_Q, A = W_K^T W_Q (any d),\n"
                "given z = -dL/dG and B = -sqrt(m) dL/dA; a in {+-1}^m1, so a^T a = m1."
            ),
        )

    def _steps(self) -> list:
        return [
            ("Grams as products of the parameters", [sp.Eq(k, v, evaluate=False) for k, v in self.grams.items()]),
            ("linearised loss (z = -dL/dG, B = -sqrt(m) dL/dA)", [sp.Eq(sp.Symbol("L"), self.linearised_loss)]),
            ("parameter flow", self.parameter_flow.equations()),
        ]


def _gram_flow_at_3(G, S, A, MV, MK, MQ, z, B, m, m1) -> list:
    """The right-hand sides of `cooccurrence-gram` written out at d = 3 (explicit sympy matrices, sqrt(m) for
    the scale), in the state order of `_flat`."""
    s = gram_symbols()
    values = {s["G"]: G, s["S"]: S, s["A"]: A, s["M_V"]: MV, s["M_K"]: MK, s["M_Q"]: MQ, s["z"]: z, s["B"]: B}
    values |= {s["sqrt_m"]: sp.sqrt(m), s["m1"]: m1, s["d"]: 3}
    gram = GramDerivation().system
    out = {sym.name: evaluate(e, values) for sym, e in zip(gram.state, gram.rhs, strict=True)}
    return _flat(*(out[k] for k in ("G", "S", "A", "M_V", "M_K", "M_Q")))


def _flat(G, S, A, MV, MK, MQ) -> list:
    """The state order: G1..G3, S, then A, M_V, M_K, M_Q row-major."""
    return [*G, S, *A, *MV, *MK, *MQ]


class Cooccurrence3TokenDerivation(Derivation):
    result_title = "result (z and B as derived above)"
    """The 3-token mean-field system, for `python -m flows derive cooccurrence-3token`."""

    name = "cooccurrence-3token"
    module = "cooccurrence_3token"

    def __init__(self):
        G, S, A, MV, MK, MQ, m, m1, L = three_token_symbols()
        self.loss, self.outputs = three_token_loss(G, A, m, L)
        # chain rule through the group outputs, so that CSE shares F_k and the softmax weights:
        # dL/dtheta = sum_k (dL/dF_k) dF_k/dtheta with dL/dF_k = -q_k y_k / (1 + e^{y_k F_k}).
        F = sp.symbols("F_1:5", real=True)
        loss_of_F = group_loss(F)
        dL_dF = [sp.diff(loss_of_F, f).subs(dict(zip(F, self.outputs, strict=True))) for f in F]

        def grad(theta):
            return sum(c * sp.diff(out, theta) for c, out in zip(dL_dF, self.outputs, strict=True))

        self.z = sp.Matrix([-grad(g) for g in G])
        self.B = sp.Matrix(3, 3, lambda i, j: -sp.sqrt(m) * grad(A[i, j]))
        state = _flat(G, S, A, MV, MK, MQ)
        rhs = _gram_flow_at_3(G, S, A, MV, MK, MQ, self.z, self.B, m, m1)
        # the same right-hand sides with z and B kept as symbols (for printing)
        z_sym = sp.Matrix(sp.symbols("z_1:4", real=True))
        B_sym = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"B_{i + 1}{j + 1}", real=True))
        self.compact_rhs = _gram_flow_at_3(G, S, A, MV, MK, MQ, z_sym, B_sym, m, m1)
        self.system = FlowSystem(
            name=self.name,
            state=tuple(state),
            rhs=tuple(rhs),
            params=(m, m1, L),  # as declared by three_token_symbols
            metric=tuple(sp.Integer(1) for _ in state),
            description=(
                "Word co-occurrence (Yang et al. 2024), 3-token mean-field reduction of the Gram flow:\n"
                "G1..G3, S and the 3x3 blocks of A (key row, query column), M_V, M_K, M_Q; random tokens\n"
                "inert (G = 0, zero key scores, uniform query rows); groups weighted (1/2, 1/6, 1/6, 1/6).\n"
                "z = -dL/dG and B = -sqrt(m) dL/dA by sympy; the Gram flow of cooccurrence-gram at d = 3."
            ),
        )

    def result_rhs(self) -> tuple:
        return tuple(self.compact_rhs)

    def _steps(self):
        return [
            (
                "group outputs F_k (I_1..I_4; random tokens inert)",
                [sp.Eq(sp.Symbol(f"F_{k + 1}"), F) for k, F in enumerate(self.outputs)],
            ),
            ("reduced loss", [sp.Eq(sp.Symbol("L_hat"), self.loss)]),
            ("z = -dL/dG (derived)", [sp.Eq(sp.Symbol(f"z_{i + 1}"), e) for i, e in enumerate(self.z)]),
            (
                "B = -sqrt(m) dL/dA (derived; B[i, j]: key i, query j)",
                [sp.Eq(sp.Symbol(f"B_{i + 1}{j + 1}"), self.B[i, j]) for i in range(3) for j in range(3)],
            ),
        ]


class CooccurrencePhase2Derivation(Derivation):
    """The 4-ODE phase-2 skeleton, for `python -m flows derive cooccurrence-phase2`."""

    name = "cooccurrence-phase2"
    module = "cooccurrence_phase2"

    def __init__(self):
        G, S, A, MV, MK, MQ, m, m1, L = three_token_symbols()
        self.restriction = frozen = {a: 0 for a in A}
        _, outputs = three_token_loss(G, A, m, L)
        # at A = 0 every query attends uniformly: F_k = sum of G over the special tokens of group k
        self.outputs = [sp.cancel(F.subs(frozen)) for F in outputs]
        self.loss = group_loss(self.outputs)
        z = sp.Matrix([-sp.diff(self.loss, g) for g in G])
        # the G and S rows of the Gram flow at d = 3 with the m1 M_V term dropped
        rhs = _gram_flow_at_3(G, S, A, sp.zeros(3, 3), MK, MQ, z, sp.zeros(3, 3), m, m1)[:4]
        self.system = FlowSystem(
            name=self.name,
            state=(*G, S),
            rhs=tuple(rhs),
            params=(m1,),
            metric=(sp.Integer(1),) * 4,
            description=(
                "Word co-occurrence (Yang et al. 2024), phase-2 skeleton (the Gram flow; proofs of\n"
                "Lemma F.6, Thm F.8): the 3-token system at uniform attention (A = 0) without the m1 M_V\n"
                "term; dG = S z, dS = 2 m1 G^T z, z = -dL/dG."
            ),
        )

    def _steps(self):
        return [
            (
                "restriction of cooccurrence-3token: A = 0 (uniform attention), m1 M_V term dropped",
                [sp.Eq(sp.Symbol(f"F_{k + 1}"), F) for k, F in enumerate(self.outputs)],
            ),
            ("reduced loss at uniform attention", [sp.Eq(sp.Symbol("L_hat"), self.loss)]),
        ]
