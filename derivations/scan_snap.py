"""Symbolic models of Scan and Snap (Tian, Wang, Chen, Du, NeurIPS 2023, arXiv:2305.16380 v4).

The decoder with attention frozen (Sec. 4): the class-reduced logit flow w_dot = eta_Y (e_n - alpha_n) projected
onto w_n = (M - 1) h zeta_n (Lemmas 5-6) gives dh/dt = eta_Y / ((M - 1) + exp(M h)) (eq. 45), which
`decoder_h_flow` derives; and the quasi-static reduced Z-flow (Lemma 4, eq. 10) on a class-symmetric instance.
See docs/systems/scan_snap.md."""

from __future__ import annotations

import sympy as sp

from .base import Derivation
from .gradient_flow import FlowSystem, ParameterGroup, gradient_flow, naive_reduced_gradient, project

__all__ = [
    "DecoderDerivation",
    "ReducedSymmetricDerivation",
    "decoder_h_flow",
    "decoder_logit_flow",
    "decoder_symbols",
    "explicit_decoder_h_flow",
    "quasi_static_z_flow",
    "reduced_symmetric_symbols",
]


def decoder_symbols() -> tuple[sp.Symbol, ...]:
    """(M, eta_Y, h, w_t, w_o): vocabulary size, decoder learning rate, the ansatz coordinate, and the
    target / other-token logits."""
    M, eta_Y, h = sp.symbols("M eta_Y h", positive=True)
    w_t, w_o = sp.symbols("w_t w_o", real=True)
    return M, eta_Y, h, w_t, w_o


def decoder_logit_flow() -> tuple[FlowSystem, sp.Expr]:
    """The class-reduced logit flow (w_t, w_o) and its loss, for symbolic vocabulary size M."""
    M, eta_Y, _, w_t, w_o = decoder_symbols()
    loss = -w_t + sp.log(sp.exp(w_t) + (M - 1) * sp.exp(w_o))  # -log softmax(w)_n, classes (1, M-1)
    group = ParameterGroup("w", (w_t, w_o), eta_Y, multiplicities=(1, M - 1))
    system = gradient_flow(
        loss,
        [group],
        name="scan_snap-decoder-logits",
        description="Decoder logits of one class, attention frozen: w_dot = eta_Y (e_n - alpha_n) "
        "(Tian et al. 2023, Lemma 3), in token classes (target, M-1 others).",
    )
    assert isinstance(system, FlowSystem)  # a loss of scalars
    return system, loss


class DecoderDerivation(Derivation):
    """Every step of the decoder derivation, for `python -m flows derive scan_snap-decoder`."""

    name = "scan_snap-decoder"
    module = "scan_snap_decoder"
    source = "derivations.scan_snap:decoder_h_flow"

    def __init__(self):
        M, eta_Y, h, w_t, w_o = decoder_symbols()
        self.logit_flow, self.loss = decoder_logit_flow()
        self.ansatz = {w_t: (M - 1) * h, w_o: -h}
        self.projection = project(
            self.logit_flow,
            self.ansatz,
            (h,),
            name=self.name,
            description=(
                "Scan and Snap decoder scalar flow (Tian et al. 2023, Lemma 6, eq. 45): projection of the\n"
                "class-reduced logit flow onto w_n = (M-1) h zeta_n with the metric diag(1, M-1)."
            ),
        )
        self.system = self.projection.system
        self.naive = naive_reduced_gradient(self.loss, self.ansatz, (h,), eta_Y)

    def _steps(self):
        return [
            ("loss: cross-entropy of n, logits target w_t, M-1 others w_o", [sp.Eq(sp.Symbol("L"), self.loss)]),
            ("gradient flow, metric diag(1, M-1)", self.logit_flow.equations()),
            ("ansatz w_n = (M-1) h zeta_n", [sp.Eq(k, v) for k, v in self.ansatz.items()]),
            ("projected flow h_dot = (J^T G J)^-1 J^T G w_dot", self.system.equations()),
            ("invariance residual w_dot - J h_dot (zero: invariant ansatz)", [sp.Matrix(self.projection.residual)]),
        ]


def decoder_h_flow() -> FlowSystem:
    """The derived scalar flow dh/dt = eta_Y / ((M - 1) + e^{M h}) (Lemma 6, eq. 45)."""
    system = DecoderDerivation().system
    assert isinstance(system, FlowSystem)
    return system


def explicit_decoder_h_flow(M: int) -> sp.Expr:
    """The same projection with all M logits as separate symbols (no class reduction), for a concrete M.

    Returns dh/dt; used to check the class-reduced derivation for several M.
    """
    if int(M) < 2:
        raise ValueError(f"M must be an integer >= 2, got {M}")
    M = int(M)
    eta_Y, h = sp.symbols("eta_Y h", positive=True)
    w = sp.symbols(f"w0:{M}", real=True)
    loss = -w[0] + sp.log(sum(sp.exp(wi) for wi in w))
    system = gradient_flow(loss, [ParameterGroup("w", w, eta_Y)], name=f"explicit-{M}", simplify=False)
    assert isinstance(system, FlowSystem)  # a loss of scalars
    ansatz = {w[0]: (M - 1) * h, **{wi: -h for wi in w[1:]}}
    proj = project(system, ansatz, (h,), name=f"explicit-h-{M}")
    return proj.system.rhs[0]


# --- quasi-static reduced Z-flow on a class-symmetric instance (Lemma 4, eq. 10) ------------------------------


def reduced_symmetric_symbols() -> tuple[sp.Symbol, ...]:
    """(z_d, z_c, p_d, p_c, D, C, K, eta_Z, gamma): DT / CT logit of a query row, the per-token
    probabilities, the numbers of distinct / common tokens per class, the number of classes, eta_Z, gamma(t)."""
    z_d, z_c = sp.symbols("z_d z_c", real=True)
    p_d, p_c, D, C, K, eta_Z, gamma = sp.symbols("p_d p_c D C K eta_Z gamma", positive=True)
    return z_d, z_c, p_d, p_c, D, C, K, eta_Z, gamma


class ReducedSymmetricDerivation(Derivation):
    """Class-symmetric reduction of the quasi-static Z-flow (eq. 10): K classes, each with its own query
    token, D distinct tokens of probability p_d and C common tokens (shared by all classes) of probability
    p_c; by symmetry each query row has one DT logit z_d and one CT logit z_c (one logit per token class).

    f_n has entries f_d = p_d e^{z_d} / s, f_c = p_c e^{z_c} / s, s^2 = D (p_d e^{z_d})^2 + C (p_c e^{z_c})^2;
    F^T F = (1 - rho) I + rho 1 1^T with rho = C f_c^2, whose inverse a I + b 1 1^T is solved for here;
    (F^dagger)^T e_n = (a + b) f_n + b sum_{n' != n} f_{n'}; then z_dot = eta_Z gamma diag(f_n) P^perp_{f_n}
    (F^dagger)^T e_n per token class (paper time, K P(n) = 1).
    """

    name = "scan_snap-reduced-symmetric"
    module = "scan_snap_reduced_symmetric"

    def __init__(self):
        z_d, z_c, p_d, p_c, D, C, K, eta_Z, gamma = reduced_symmetric_symbols()
        s = sp.sqrt(D * (p_d * sp.exp(z_d)) ** 2 + C * (p_c * sp.exp(z_c)) ** 2)
        f_d, f_c = p_d * sp.exp(z_d) / s, p_c * sp.exp(z_c) / s
        rho = C * f_c**2
        a, b = sp.symbols("a b")
        sol = sp.solve([sp.Eq((1 - rho) * a, 1), sp.Eq((1 - rho) * b + rho * a + K * rho * b, 0)], [a, b], dict=True)[0]
        self.inverse = sol
        a_, b_ = sol[a], sol[b]
        g_d = (a_ + b_) * f_d  # DTs of other classes vanish at a DT of n
        g_c = (a_ + b_) * f_c + b_ * (K - 1) * f_c
        fg = (a_ + b_) + b_ * (K - 1) * rho  # f_n . (F^dagger)^T e_n, with ||f_n|| = 1
        rhs_d = eta_Z * gamma * f_d * (g_d - f_d * fg)
        rhs_c = eta_Z * gamma * f_c * (g_c - f_c * fg)
        self.f = (f_d, f_c)
        self.rho = rho
        rhs = tuple(sp.simplify(sp.powsimp(sp.together(e))) for e in (rhs_d, rhs_c))
        params = (p_d, p_c, D, C, K, eta_Z, gamma)  # as declared by reduced_symmetric_symbols
        self.system = FlowSystem(
            name=self.name,
            state=(z_d, z_c),
            rhs=rhs,
            params=params,
            metric=(sp.Integer(1), sp.Integer(1)),
            description=(
                "Scan and Snap quasi-static reduced Z-flow (Tian et al. 2023, Lemma 4, eq. 10) on a\n"
                "class-symmetric instance: one DT logit z_d and one CT logit z_c per query row."
            ),
        )

    def _steps(self):
        a, b = sp.symbols("a b")
        return [
            ("normalised attention entries f_d, f_c", [sp.Matrix(self.f)]),
            ("rho = f_n . f_n' (n != n')", [self.rho]),
            ("(F^T F)^{-1} = a I + b 1 1^T", [sp.Eq(a, self.inverse[a]), sp.Eq(b, self.inverse[b])]),
            ("reduced flow", self.system.equations()),
        ]


def quasi_static_z_flow(K: int, D: int, C: int) -> FlowSystem:
    """The quasi-static reduced Z-flow (Lemma 4, eq. 10, paper time K P(n) = 1) of a class-symmetric instance
    written entry by entry, with no symmetry assumed: K classes, each with its own query token, D distinct
    tokens of probability p_d and C common tokens (shared by all classes) of probability p_c; the state is
    every logit of every query row on its class's support (`z{n}_d{j}`, `z{n}_c{j}`), the rate
    z_dot = eta_Z gamma diag(f_n) P^perp_{f_n} (F^dagger)^T e_n with F^dagger = F^T (F F^T)^{-1}.
    `reduce_by_symmetry(flow, find_symmetries(flow))` gives `ReducedSymmetricDerivation` at these counts."""
    for label, value in (("K", K), ("D", D), ("C", C)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    _, _, p_d, p_c, _, _, _, eta_Z, gamma = reduced_symmetric_symbols()
    z = [
        [sp.Symbol(f"z{n + 1}_d{j + 1}", real=True) for j in range(D)]
        + [sp.Symbol(f"z{n + 1}_c{j + 1}", real=True) for j in range(C)]
        for n in range(K)
    ]
    tokens = K * D + C  # class n's distinct tokens, then the common ones
    F = sp.zeros(K, tokens)
    for n in range(K):
        weighted = [p_d * sp.exp(x) for x in z[n][:D]] + [p_c * sp.exp(x) for x in z[n][D:]]
        norm = sp.sqrt(sum(w**2 for w in weighted))
        for j, w in enumerate(weighted):
            F[n, n * D + j if j < D else K * D + (j - D)] = w / norm
    # (F F^T)^{-1} = adj / det of a symmetric matrix of symbols, expanded (a form that relabelling the classes
    # maps onto itself term by term), then the dot products substituted
    dots = sp.Matrix(K, K, lambda i, j: sp.Symbol(f"_g{min(i, j)}{max(i, j)}"))
    det = sp.expand(dots.det(method="berkowitz"))
    inverse = (dots.adjugate().applyfunc(sp.expand) / det).xreplace(dict(zip(dots, F * F.T, strict=True)))
    gt = inverse * F  # row n: (F^dagger)^T e_n
    state, rhs = [], []
    for n in range(K):
        f, g = F[n, :], gt[n, :]
        fg = (f * g.T)[0, 0]
        support = [n * D + j for j in range(D)] + [K * D + j for j in range(C)]
        for x, col in zip(z[n], support, strict=True):
            state.append(x)
            rhs.append(eta_Z * gamma * f[col] * (g[col] - f[col] * fg))
    return FlowSystem(
        name=f"scan_snap-quasi-static-K{K}-D{D}-C{C}",
        state=tuple(state),
        rhs=tuple(rhs),
        params=(p_d, p_c, eta_Z, gamma),
        metric=tuple(sp.Integer(1) for _ in state),
        description=(
            f"Scan and Snap quasi-static Z-flow (Tian et al. 2023, Lemma 4, eq. 10), K = {K} classes, D = {D}\n"
            f"distinct and C = {C} common tokens, every logit of every query row (no symmetry assumed)."
        ),
    )
