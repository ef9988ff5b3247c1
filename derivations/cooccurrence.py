"""Symbolic reduced systems of word co-occurrence (Yang et al. 2024, Sec. 3, App. C, Lemma F.6, Thm F.8).

The reduced losses are stated here and sympy differentiates them (z = -dL/dG and B = -sqrt(m) dL/dA are
derived, not typed in); the Gram pushforward of `flows.cooccurrence.flow` gives the right-hand sides.
`cooccurrence-3token`: random tokens inert, each group one representative sequence weighted (1/2, 1/6, 1/6,
1/6); `cooccurrence-phase2`: its restriction to uniform attention without the m1 M_V term. See
docs/systems/cooccurrence.md."""

from __future__ import annotations

from collections.abc import Sequence

import sympy as sp

from .base import Derivation
from .system import FlowSystem

__all__ = ["GROUP_SPECIALS", "Cooccurrence3TokenDerivation", "CooccurrencePhase2Derivation", "three_token_symbols"]

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


def _gram_pushforward(G, S, A, MV, MK, MQ, z, B, m, m1):
    I3 = sp.eye(3)
    root = sp.sqrt(m)
    dG = (S * I3 + m1 * MV) * z
    dS = 2 * m1 * (G.T * z)[0, 0]
    dMV = G * z.T + z * G.T
    dA = (MK * B + B * MQ) / root
    dMK = (A * B.T + B * A.T) / root
    dMQ = (A.T * B + B.T * A) / root
    return dG, dS, dA, dMV, dMK, dMQ


def _flat(G, S, A, MV, MK, MQ) -> list:
    """The state order: G1..G3, S, then A, M_V, M_K, M_Q row-major."""
    return [*G, S, *A, *MV, *MK, *MQ]


class Cooccurrence3TokenDerivation(Derivation):
    result_title = "result (z and B as derived above)"
    """The 3-token mean-field system, for `python -m flows derive cooccurrence-3token`."""

    name = "cooccurrence-3token"
    module = "cooccurrence_3token"
    source = "derivations.cooccurrence:Cooccurrence3TokenDerivation"

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
        rhs = _flat(*_gram_pushforward(G, S, A, MV, MK, MQ, self.z, self.B, m, m1))
        # the same right-hand sides with z and B kept as symbols (for printing)
        z_sym = sp.Matrix(sp.symbols("z_1:4", real=True))
        B_sym = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"B_{i + 1}{j + 1}", real=True))
        self.compact_rhs = _flat(*_gram_pushforward(G, S, A, MV, MK, MQ, z_sym, B_sym, m, m1))
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
                "z = -dL/dG and B = -sqrt(m) dL/dA by sympy; Gram pushforward of §3.2."
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
    source = "derivations.cooccurrence:CooccurrencePhase2Derivation"

    def __init__(self):
        G, S, A, MV, MK, MQ, m, m1, L = three_token_symbols()
        self.restriction = frozen = {a: 0 for a in A}
        _, outputs = three_token_loss(G, A, m, L)
        # at A = 0 every query attends uniformly: F_k = sum of G over the special tokens of group k
        self.outputs = [sp.cancel(F.subs(frozen)) for F in outputs]
        self.loss = group_loss(self.outputs)
        z = sp.Matrix([-sp.diff(self.loss, g) for g in G])
        # the G and S rows of the 3-token pushforward with the m1 M_V term dropped
        dG, dS, *_ = _gram_pushforward(G, S, A, sp.zeros(3, 3), MK, MQ, z, sp.zeros(3, 3), m, m1)
        self.system = FlowSystem(
            name=self.name,
            state=(*G, S),
            rhs=(*dG, dS),
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
