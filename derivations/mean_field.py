"""First variation and particle velocity of the mean-field transformer (Gao et al., NeurIPS 2024, eqs. 2.1-2.3
and its Wasserstein gradient flow) on small symbolic matrices: sympy differentiates g(theta) = <P, f(Z, theta)>_F
+ lam/2 |theta|^2 entry by entry, and the result equals the closed forms of
`flows.mean_field.gradients.particle_gradients` (attention f = V Z S, with E_ki = exp(z_k^T W z_i) made a symbol;
MLP h = W2 sigma(W1 Z) on every HuberizedReLU piece). Printed by `python -m flows derive mean_field-attention` (or
`mean_field-mlp`); no generated module. See docs/systems/mean_field.md.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import sympy as sp

from ._printing import readable
from .base import Derivation
from .gradient_flow import ParameterGroup, gradient_flow

__all__ = [
    "HUBER_PIECES",
    "MeanFieldAttentionDerivation",
    "MeanFieldMLPDerivation",
    "frobenius",
    "huberized_relu",
    "huberized_relu_grad",
]


def _matrix(prefix: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{prefix}{i + 1}{j + 1}", real=True))


def _vector(prefix: str, n: int) -> list:
    return [sp.Symbol(f"{prefix}{i + 1}", real=True) for i in range(n)]


def frobenius(A: sp.Matrix, B: sp.Matrix) -> sp.Expr:
    """<A, B>_F = sum_ij A_ij B_ij."""
    if A.shape != B.shape:
        raise ValueError(f"frobenius needs equal shapes, got {A.shape} and {B.shape}")
    return sp.Add(*[a * b for a, b in zip(A, B, strict=True)])


def _hadamard(A: sp.Matrix, B: sp.Matrix) -> sp.Matrix:
    return A.multiply_elementwise(B)


def _zero_form(expr) -> sp.Expr:
    """sp.simplify of a rational expression, after `sp.cancel` (which already brings an identity to 0)."""
    return sp.simplify(sp.cancel(sp.together(expr)))


def _check_sizes(D, K):
    for label, value in (("D", D), ("K", K)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an integer >= 1, got {value!r}")


# --------------------------------------------------------------------------- HuberizedReLU

#: the three pieces of the HuberizedReLU: (name, sigma(x, h0), sigma'(x, h0)).
HUBER_PIECES = (
    ("z <= 0", lambda x, h0: sp.Integer(0), lambda x, h0: sp.Integer(0)),
    ("0 < z <= h0", lambda x, h0: x**2 / (2 * h0), lambda x, h0: x / h0),
    ("z > h0", lambda x, h0: x - h0 / 2, lambda x, h0: sp.Integer(1)),
)


def _huber(x, h0, fns) -> sp.Piecewise:
    return sp.Piecewise(*((f(x, h0), c) for f, c in zip(fns, (x <= 0, x <= h0, True), strict=True)))


def huberized_relu(x: Any, h0: Any) -> sp.Piecewise:
    """sigma(x) = 0 (x <= 0), x^2/(2 h0) (0 < x <= h0), x - h0/2 (x > h0), as a sympy Piecewise."""
    return _huber(x, h0, [s for _, s, _ in HUBER_PIECES])


def huberized_relu_grad(x: Any, h0: Any) -> sp.Piecewise:
    """sigma'(x) = 0, x/h0, 1 on the three pieces (same conditions as `huberized_relu`)."""
    return _huber(x, h0, [d for _, _, d in HUBER_PIECES])


# --------------------------------------------------------------------------- printing


class _Raw(NamedTuple):
    """A formula given as text and LaTeX (matrix identities sympy prints poorly)."""

    text: str
    latex: str


def _text_line(lhs, expr) -> str:
    return f"{lhs} = " + (expr.text if isinstance(expr, _Raw) else sp.sstr(readable(expr)))


def _latex_line(lhs, expr, names) -> str:
    return f"{lhs} = " + (expr.latex if isinstance(expr, _Raw) else sp.latex(readable(expr), symbol_names=names))


def _dtau(s):
    return f"d{s}/dtau", rf"\frac{{d {sp.latex(s)}}}{{d\tau}}"


def _entries(name: str, M: sp.Matrix) -> list:
    """(text, LaTeX, value) of every entry of `M`, named name_ki."""
    return [
        (f"{name}{k + 1}{i + 1}", f"{name}_{{{k + 1}{i + 1}}}", M[k, i]) for k in range(M.rows) for i in range(M.cols)
    ]


class _MeanFieldDerivation(Derivation):
    """Shared printing. `_steps()` and `_velocity()` return `(title, [(text_lhs, latex_lhs, expr)])` and
    `[(text_lhs, latex_lhs, expr)]`. No generated module (`module = None`)."""

    module = None

    _velocity: Callable[[], list]  # the velocity lines, [(text_lhs, latex_lhs, expr)]

    def __init__(self, D: int, K: int):
        """The symbolic instance both particles share: sizes D, K (checked), tokens Z and adjoints P (D x K),
        the weight decay lam."""
        _check_sizes(D, K)
        self.D, self.K = D, K
        self.Z, self.P = _matrix("z", D, K), _matrix("p", D, K)
        self.lam = sp.Symbol("lam", nonnegative=True)

    def _latex_names(self) -> dict:
        return {self.lam: r"\lambda"}

    def _particle_flow(self, output: sp.Matrix, groups: dict, particle: str, law: str) -> tuple:
        """Set `pairing` = <P, output>_F, the first variation g = pairing + lam/2 sum_groups |group|^2 and
        `system` (the velocity -grad g, `gradient_flow` at learning rate 1, described by the `particle` and its
        `law`) of a particle whose parameters are `groups` (name -> symbol matrix); return the derived gradients
        of the pairing per group (sympy diff, entry by entry)."""
        description = (
            f"Mean-field transformer (Gao et al. 2024, eqs. 2.1-2.3 and its particle flow), {particle} on a D = "
            f"{self.D}, K = N + 1 = {self.K} symbolic instance: first variation\n{law}"
        )
        self.pairing = frobenius(self.P, output)
        decay = self.lam / 2 * sp.Add(*(frobenius(m, m) for m in groups.values()))
        self.first_variation = self.pairing + decay
        self.system = gradient_flow(
            self.first_variation,
            [ParameterGroup(name, tuple(m), 1) for name, m in groups.items()],
            name=self.name,
            simplify=False,
            description=description,
        )
        return tuple(m.applyfunc(lambda s: sp.diff(self.pairing, s)) for m in groups.values())

    def _closed_velocity(self, closed: list) -> tuple:
        """-closed gradient - lam theta, per state entry."""
        return tuple(-c - self.lam * s for c, s in zip(closed, self.system.state, strict=True))

    def to_text(self) -> str:
        out = [f"# {self.name}", self.system.description]
        for title, lines in self._steps():
            out.append(f"\n## {title}")
            out.extend(_text_line(lhs, e) for lhs, _, e in lines)
        out.append("\n## velocity (training time tau): d theta/d tau = -grad_theta g")
        out.extend(_text_line(lhs, e) for lhs, _, e in self._velocity())
        return "\n".join(out)

    def to_latex(self) -> str:
        names = self._latex_names()
        out = [f"% {self.name}"]
        for title, lines in self._steps():
            out.append(f"% {title}")
            out.extend(_latex_line(lhs, e, names) for _, lhs, e in lines)
        out.append(r"% velocity (training time \tau)")
        rows = [_latex_line(lhs, e, names) for _, lhs, e in self._velocity()]
        out.append("\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}")
        return "\n".join(out)


# --------------------------------------------------------------------------- attention

_G_TEXT = "S o (B - 1 1^T (S o B))"
_G_LATEX = r"S \circ \left(B - \mathbf{1}\mathbf{1}^{T} (S \circ B)\right)"
_W1_TEXT, _W1_LATEX = "((W2^T P) o sigma'(W1 Z)) Z^T", r"\left((W_2^{T} P) \circ \sigma'(W_1 Z)\right) Z^{T}"
_W2_TEXT, _W2_LATEX = "P sigma(W1 Z)^T", r"P\,\sigma(W_1 Z)^{T}"


class MeanFieldAttentionDerivation(_MeanFieldDerivation):
    """Attention particle theta = (V, W): first variation, derived velocity, closed matrix form.

    `python -m flows derive mean_field-attention`. Sizes: D (embedding) and K = N + 1 (columns).
    Attributes: `grad_V`, `grad_W` (derived, with exp), `closed_V`, `closed_W` (with E_ki = exp(a_ki)),
    `residual_V`, `residual_W`, `residual_velocity`, `residual_softmax_form`, `homogeneity`, `euler` (all
    zero), `system` (the derived velocity, `gradient_flow` with learning rate 1).
    """

    name = "mean_field-attention"

    def __init__(self, D: int = 2, K: int = 2):
        super().__init__(D, K)
        self.V, self.W = _matrix("V", D, D), _matrix("W", D, D)
        self.E = _matrix("E", K, K).applyfunc(lambda s: sp.Symbol(s.name, positive=True))
        # logits a[k, i] = z_k^T W z_i and the key-axis softmax
        self.logits = (self.Z.T * self.W * self.Z).applyfunc(sp.expand)
        pairs = zip(self.logits, self.E, strict=True)  # both row-major K x K: exp(c a_ki) -> E_ki**c
        self._exp_table = {sp.expand(c * a): e**c for a, e in pairs for c in (1, -1, 2, -2, 3, -3)}
        expa = self.logits.applyfunc(sp.exp)
        self.S = sp.Matrix(K, K, lambda k, i: expa[k, i] / sum(expa[:, i]))
        self.f = self.V * self.Z * self.S
        law = (
            "g = <P, V Z S>_F + lam/2 (|V|^2 + |W|^2), S = softmax over keys of Z^T W Z; velocity\n"
            "d theta/d tau = -grad_theta g derived by sympy and shown equal to the closed matrix form."
        )
        particle = "attention particle\ntheta = (V, W)"
        self.grad_V, self.grad_W = self._particle_flow(self.f, {"V": self.V, "W": self.W}, particle, law)
        # closed matrix forms, with S written through E[k, i] = exp(a_ki)
        self.S_E = sp.Matrix(K, K, lambda k, i: self.E[k, i] / sum(self.E[:, i]))
        self.closed_V, self.closed_W = self._closed(self.S_E)
        derived_V, derived_W = self.algebraic(self.grad_V), self.algebraic(self.grad_W)
        self.residual_V = (derived_V - self.closed_V).applyfunc(_zero_form)
        self.residual_W = (derived_W - self.closed_W).applyfunc(_zero_form)
        self.closed_velocity = self._closed_velocity([*self.closed_V, *self.closed_W])
        self.residual_velocity = tuple(
            _zero_form(self.algebraic(r) - c) for r, c in zip(self.system.rhs, self.closed_velocity, strict=True)
        )
        # the printed forms: derived gradients in the softmax entries S_ki (sum_k S_ki = 1), closed form with
        # symbols S, B, G; their difference is zero as well
        self.S_sym = _matrix("S", K, K)
        self.B_sym, self.G_sym = _matrix("B", K, K), _matrix("G", K, K)
        self._S_last = {self.S_sym[K - 1, i]: 1 - sum(self.S_sym[: K - 1, i]) for i in range(K)}  # sum_k S_ki = 1
        self.derived_softmax_poly = [self.softmax_form(e) for e in (*derived_V, *derived_W)]
        closed_SV, closed_SW = self._closed(self.S_sym)
        closed = [sp.expand(e.subs(self._S_last)) for e in (*closed_SV, *closed_SW)]
        self.residual_softmax_form = [sp.expand(d - c) for d, c in zip(self.derived_softmax_poly, closed, strict=True)]
        c = sp.Symbol("c", positive=True)
        scaled = self.f.subs({v: c * v for v in self.V}, simultaneous=True)
        self.homogeneity = (scaled - c * self.f).applyfunc(sp.expand)
        self.euler = sp.expand(frobenius(self.V, self.grad_V) - self.pairing)

    def _closed(self, S):
        """(P (Z S)^T, Z G Z^T) with G = S o (B - 1 1^T (S o B)), B = Z^T V^T P, for a K x K matrix S."""
        B = self.Z.T * self.V.T * self.P
        G = _hadamard(S, B - sp.ones(self.K, self.K) * _hadamard(S, B))
        return self.P * (self.Z * S).T, self.Z * G * self.Z.T

    def algebraic(self, expr: Any) -> Any:
        """`expr` with every exp(c * a_ki) replaced by E_ki**c (a_ki = z_k^T W z_i)."""
        if isinstance(expr, sp.MatrixBase):
            return expr.applyfunc(self.algebraic)
        return sp.sympify(expr).replace(sp.exp, self._exp_to_symbol)

    def _exp_to_symbol(self, arg):
        arg = sp.expand(arg)
        if arg in self._exp_table:
            return self._exp_table[arg]
        for a, e in zip(self.logits, self.E, strict=True):
            ratio = sp.cancel(arg / a)
            if ratio.is_number:
                return e**ratio
        raise ValueError(f"exp({arg}) is not a multiple of a logit z_k^T W z_i")

    def softmax_form(self, expr: Any) -> sp.Expr:
        """An expression in E_ki written as a polynomial in the softmax entries: E_ki = C_i S_ki, the column
        scales C_i must cancel (softmax invariance), then S_Ki = 1 - sum_{k<K} S_ki."""
        K = self.K
        C = [sp.Symbol(f"C{i + 1}", positive=True) for i in range(K)]
        to_S = {self.E[k, i]: C[i] * self.S_sym[k, i] for k in range(K) for i in range(K)}
        scaled = sp.cancel(sp.sympify(expr).subs(to_S, simultaneous=True))
        if scaled.free_symbols & set(C):
            raise ValueError("expression is not invariant under column scaling of E (not a softmax function)")
        return sp.expand(sp.cancel(scaled.subs(self._S_last)))

    @functools.cached_property
    def derived_softmax_form(self) -> list:
        """The derived gradients (V then W, row-major) in the softmax entries, coefficients factored."""
        gens = list(self.S_sym[: self.K - 1, :])

        def factored(e):
            terms = sp.Poly(e, *gens).terms()
            return sp.Add(*[sp.factor(c) * sp.Mul(*[g**m for g, m in zip(gens, mon, strict=True)]) for mon, c in terms])

        return [factored(e) for e in self.derived_softmax_poly]

    @property
    def identities_hold(self) -> bool:
        """derived == closed (gradients, velocity, printed softmax form), f(Z, (cV, W)) = c f, Euler."""
        residuals = (*self.residual_V, *self.residual_W, *self.residual_velocity, *self.residual_softmax_form)
        return all(e == 0 for e in (*residuals, *self.homogeneity, self.euler))

    def result_rhs(self) -> tuple:
        return self.closed_velocity

    def _steps(self):
        D, K = self.D, self.K
        Zm, Pm, Sm = sp.MatrixSymbol("Z", D, K), sp.MatrixSymbol("P", D, K), sp.MatrixSymbol("S", K, K)
        Vm, Wm = sp.MatrixSymbol("V", D, D), sp.MatrixSymbol("W", D, D)
        g_matrix = sp.Trace(Pm.T * Vm * Zm * Sm) + self.lam / 2 * (sp.Trace(Vm.T * Vm) + sp.Trace(Wm.T * Wm))
        logits, softmax = _entries("a", self.logits), _entries("S", self.S_E)
        derived = [
            (f"d<P, f>/d{s}", rf"\frac{{\partial \langle P, f\rangle}}{{\partial {sp.latex(s)}}}", e)
            for s, e in zip((*self.V, *self.W), self.derived_softmax_form, strict=True)
        ]
        S, Bs = self.S_sym, self.B_sym
        G = _hadamard(S, Bs - sp.ones(K, K) * _hadamard(S, Bs))
        pieces = _entries("B", self.Z.T * self.V.T * self.P) + _entries("G", G)
        closed = [
            ("grad_V <P, V Z S>", r"\nabla_V \langle P, V Z S\rangle", _Raw("P (Z S)^T", "P (Z S)^{T}")),
            ("grad_W <P, V Z S>", r"\nabla_W \langle P, V Z S\rangle", _Raw("Z G Z^T", "Z G Z^{T}")),
            ("G", "G", _Raw(_G_TEXT + "  (o entrywise)", _G_LATEX)),
            ("B", "B", _Raw("Z^T V^T P", "Z^{T} V^{T} P")),
        ]
        residuals = [
            ("grad_V", r"\nabla_V", self.residual_V),
            ("grad_W", r"\nabla_W", self.residual_W),
            ("velocity", r"\dot\theta", sp.Matrix(self.residual_velocity).T),
            ("softmax form", r"\text{softmax form}", sp.Matrix(self.residual_softmax_form).T),
        ]
        return [
            (
                "first variation (matrix form), f(Z, theta) = V Z S, S = softmax over keys of Z^T W Z",
                [("g", "g", g_matrix)],
            ),
            (f"symbolic instance D = {D}, K = N + 1 = {K}", [(n, n, getattr(self, n)) for n in "ZPVW"]),
            ("logits a = Z^T W Z; E_ki := exp(a_ki), S_ki = E_ki / sum_k' E_k'i", logits + softmax),
            ("first variation on the instance", [("g", "g", self.first_variation)]),
            ("derived gradients (sympy diff of <P, f>; exp(a_ki) = C_i S_ki, the C_i cancel; sum_k S_ki = 1)", derived),
            ("closed matrix form", closed + pieces),
            ("derived - closed, entrywise after simplify (zero: the closed form is exact)", residuals),
            (
                "partial 1-homogeneity f(Z, (c V, W)) - c f(Z, (V, W)) and Euler <V, grad_V g> - <P, f> (zero)",
                [("f(cV) - c f", r"f(cV) - c f", self.homogeneity), ("Euler", r"\text{Euler}", self.euler)],
            ),
        ]

    def _velocity(self):
        lines = [
            ("dV/dtau", r"\frac{dV}{d\tau}", _Raw("-P (Z S)^T - lam V", r"-P (Z S)^{T} - \lambda V")),
            ("dW/dtau", r"\frac{dW}{d\tau}", _Raw("-Z G Z^T - lam W", r"-Z G Z^{T} - \lambda W")),
            ("G", "G", _Raw(_G_TEXT + ",  B = Z^T V^T P", _G_LATEX + r",\quad B = Z^{T} V^{T} P")),
        ]
        vel_V = -self.P * (self.Z * self.S_sym).T - self.lam * self.V
        vel_W = -self.Z * self.G_sym * self.Z.T - self.lam * self.W
        return lines + [(*_dtau(s), e) for s, e in zip((*self.V, *self.W), (*vel_V, *vel_W), strict=True)]


# --------------------------------------------------------------------------- MLP


class MeanFieldMLPDerivation(_MeanFieldDerivation):
    """MLP particle w = (W1 row a, W2 column b): first variation, derived velocity, closed form per piece.

    `python -m flows derive mean_field-mlp`. Sizes: D (embedding) and K = N + 1 (columns).
    Attributes: `grad_W1`, `grad_W2` (derived, Piecewise), `closed_W1`, `closed_W2`, `piece_residuals`
    ({piece combination: residuals}), `sigma_derivative_residual`, `junctions`, `homogeneity`, `euler` (all
    zero), `system` (the derived velocity).
    """

    name = "mean_field-mlp"

    def __init__(self, D: int = 2, K: int = 2):
        super().__init__(D, K)
        self.W1 = sp.Matrix([_vector("a", D)])  # 1 x D row
        self.W2 = sp.Matrix(_vector("b", D))  # D x 1 column
        self.h0 = sp.Symbol("h0", positive=True)
        self.pre = (self.W1 * self.Z).applyfunc(sp.expand)  # 1 x K preactivations u_i = W1 z_i
        self.sigma = self.pre.applyfunc(lambda u: huberized_relu(u, self.h0))
        self.sigma_grad = self.pre.applyfunc(lambda u: huberized_relu_grad(u, self.h0))
        self.h = self.W2 * self.sigma
        law = (
            "g = <P, W2 sigma(W1 Z)>_F + lam/2 (|W1|^2 + |W2|^2), sigma = HuberizedReLU(h0); velocity\n"
            "d w/d tau = -grad_w g derived by sympy and shown equal to the closed form on every piece."
        )
        particle = "MLP particle\nw = (W1 row a, W2 column b)"
        self.grad_W1, self.grad_W2 = self._particle_flow(self.h, {"W1": self.W1, "W2": self.W2}, particle, law)
        self.closed_W2 = self.P * self.sigma.T
        self.closed_W1 = _hadamard(self.W2.T * self.P, self.sigma_grad) * self.Z.T
        self.closed_velocity = self._closed_velocity([*self.closed_W1, *self.closed_W2])
        # sigma' is the derivative of sigma (per piece), and sigma is C^1 at 0 and h0
        x, h0 = sp.Symbol("x", real=True), self.h0
        pieces = zip(sp.diff(huberized_relu(x, h0), x).args, huberized_relu_grad(x, h0).args, strict=True)
        self.sigma_derivative_residual = [sp.simplify(d.expr - e.expr) for d, e in pieces]
        (_, s0, d0), (_, s1, d1), (_, s2, d2) = HUBER_PIECES
        jumps = (s0(0, h0) - s1(0, h0), s1(h0, h0) - s2(h0, h0), d0(0, h0) - d1(0, h0), d1(h0, h0) - d2(h0, h0))
        self.junctions = [sp.simplify(e) for e in jumps]
        # derived == closed on each of the 3^K piece combinations (gradients and velocity), and the derived
        # Piecewise gradient on a piece == the gradient of g with sigma replaced by that piece's polynomial
        grads = (*self.grad_W1, *self.grad_W2)
        self.piece_residuals = {}
        for combo in itertools.product(range(len(HUBER_PIECES)), repeat=K):
            derived = [self.select(e, combo) for e in (*grads, *self.system.rhs)]
            closed = [self.select(e, combo) for e in (*self.closed_W1, *self.closed_W2, *self.closed_velocity)]
            sig = sp.Matrix([[HUBER_PIECES[j][1](u, h0) for j, u in zip(combo, self.pre, strict=True)]])
            g_piece = frobenius(self.P, self.W2 * sig)
            redo = [sp.diff(g_piece, s) for s in (*self.W1, *self.W2)]
            res = [_zero_form(d - c) for d, c in zip(derived, closed, strict=True)]
            res += [_zero_form(r - d) for r, d in zip(redo, derived[: len(redo)], strict=True)]
            self.piece_residuals[combo] = res
        c = sp.Symbol("c", positive=True)
        scaled = self.h.subs({b: c * b for b in self.W2}, simultaneous=True)
        self.homogeneity = (scaled - c * self.h).applyfunc(sp.expand)
        self.euler = sp.expand(frobenius(self.W2, self.grad_W2) - self.pairing)

    def _column(self, pw: sp.Piecewise) -> int:
        cond_syms = set().union(*(arg.cond.free_symbols for arg in pw.args))
        cols = [i for i in range(self.K) if set(self.Z[:, i]) & cond_syms]
        if len(cols) != 1:
            raise ValueError(f"cannot tell which column the Piecewise {pw} belongs to")
        return cols[0]

    def select(self, expr: Any, combo: tuple[int, ...]) -> sp.Expr:
        """`expr` with the HuberizedReLU Piecewise of column i replaced by its piece `combo[i]`
        (0: z <= 0, 1: 0 < z <= h0, 2: z > h0)."""

        def pick(*args):
            pw = sp.Piecewise(*args, evaluate=False)
            if len(pw.args) != len(HUBER_PIECES):
                raise ValueError(f"expected a {len(HUBER_PIECES)}-piece Piecewise, got {pw}")
            return pw.args[combo[self._column(pw)]].expr

        return sp.sympify(expr).replace(sp.Piecewise, pick)

    @property
    def identities_hold(self) -> bool:
        """derived == closed on every piece, sigma' = d sigma, C^1 junctions, homogeneity in W2, Euler."""
        pieces = itertools.chain.from_iterable(self.piece_residuals.values())
        zero = [*pieces, *self.sigma_derivative_residual, *self.junctions, *self.homogeneity, self.euler]
        return all(e == 0 for e in zero)

    def result_rhs(self) -> tuple:
        return self.closed_velocity

    def _steps(self):
        D, K = self.D, self.K
        x = sp.Symbol("x", real=True)
        Pm, sigZ = sp.MatrixSymbol("P", D, K), sp.MatrixSymbol("sigma(W1*Z)", 1, K)
        W1m, W2m = sp.MatrixSymbol("W1", 1, D), sp.MatrixSymbol("W2", D, 1)
        g_matrix = sp.Trace(Pm.T * W2m * sigZ) + self.lam / 2 * (sp.Trace(W1m * W1m.T) + sp.Trace(W2m.T * W2m))
        tags = {combo: "".join(str(p) for p in combo) for combo in self.piece_residuals}
        pieces = [
            (f"piece {tags[c]}", rf"\text{{piece {tags[c]}}}", sp.Matrix(r).T) for c, r in self.piece_residuals.items()
        ]
        derived = [
            (f"d<P, h>/d{s}", rf"\frac{{\partial \langle P, h\rangle}}{{\partial {sp.latex(s)}}}", e)
            for s, e in zip((*self.W1, *self.W2), (*self.grad_W1, *self.grad_W2), strict=True)
        ]
        residuals = sp.Matrix([*self.sigma_derivative_residual, *self.junctions]).T
        huber = [
            ("sigma(x)", r"\sigma(x)", huberized_relu(x, self.h0)),
            ("d sigma/dx", r"\frac{d\sigma}{dx}", sp.diff(huberized_relu(x, self.h0), x)),
            ("d sigma/dx - sigma' per piece; C^1 junctions at 0, h0 (zero)", r"\text{residuals}", residuals),
        ]
        instance = [("Z", "Z", self.Z), ("P", "P", self.P), ("W1", "W_1", self.W1), ("W2", "W_2", self.W2)]
        pairing = r"\langle P, W_2 \sigma(W_1 Z)\rangle"
        closed = [
            ("grad_W2 <P, W2 sigma(W1 Z)>", r"\nabla_{W_2} " + pairing, _Raw(_W2_TEXT, _W2_LATEX)),
            ("grad_W1 <P, W2 sigma(W1 Z)>", r"\nabla_{W_1} " + pairing, _Raw(_W1_TEXT + "  (o entrywise)", _W1_LATEX)),
            ("sigma'(x)", r"\sigma'(x)", huberized_relu_grad(x, self.h0)),
        ]
        return [
            (
                "first variation (matrix form), h(Z, w) = W2 sigma(W1 Z), W1 = a (row), W2 = b (column)",
                [("g", "g", g_matrix)],
            ),
            ("HuberizedReLU and its derivative (sympy diff of the Piecewise)", huber),
            (f"symbolic instance D = {D}, K = N + 1 = {K}", [*instance, ("u = W1 Z", "u = W_1 Z", self.pre)]),
            ("first variation on the instance", [("g", "g", self.first_variation)]),
            ("derived gradients (sympy diff of <P, h>)", derived),
            ("closed matrix form", closed),
            (
                "derived - closed per HuberizedReLU piece of each column (0: z <= 0, 1: 0 < z <= h0, 2: z > h0): "
                "gradients, velocity, re-derived from the piece polynomial; entrywise after simplify (zero)",
                pieces,
            ),
            (
                "partial 1-homogeneity h(Z, (W1, c W2)) - c h(Z, (W1, W2)) and Euler <W2, grad_W2 g> - <P, h> (zero)",
                [("h(cW2) - c h", r"h(cW_2) - c h", self.homogeneity), ("Euler", r"\text{Euler}", self.euler)],
            ),
        ]

    def _latex_names(self) -> dict:
        return {**super()._latex_names(), **{sp.Symbol(f"ds{i + 1}"): f"s'_{{{i + 1}}}" for i in range(self.K)}}

    def _velocity(self):
        K = self.K
        s = sp.Matrix(1, K, lambda _, i: sp.Symbol(f"s{i + 1}"))  # sigma(u_i)
        ds = sp.Matrix(1, K, lambda _, i: sp.Symbol(f"ds{i + 1}"))  # sigma'(u_i)
        vel_W1 = -_hadamard(self.W2.T * self.P, ds) * self.Z.T - self.lam * self.W1
        vel_W2 = -self.P * s.T - self.lam * self.W2
        sig = _Raw("sigma(u_i), sigma'(u_i)  (u = W1 Z)", r"\sigma(u_i), \sigma'(u_i)\quad (u = W_1 Z)")
        lines = [
            ("dW2/dtau", r"\frac{dW_2}{d\tau}", _Raw(f"-{_W2_TEXT} - lam W2", f"-{_W2_LATEX} - \\lambda W_2")),
            ("dW1/dtau", r"\frac{dW_1}{d\tau}", _Raw(f"-{_W1_TEXT} - lam W1", f"-{_W1_LATEX} - \\lambda W_1")),
            ("s_i, ds_i", r"s_i, s'_i", sig),
        ]
        return lines + [(*_dtau(w), e) for w, e in zip((*self.W1, *self.W2), (*vel_W1, *vel_W2), strict=True)]
