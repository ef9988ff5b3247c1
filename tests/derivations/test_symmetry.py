"""Reductions by symmetry (`reduce_by_symmetry`, `find_symmetries`): the three reductions of the papers rederived
with no ansatz and equal to the hand-written ones (Scan and Snap's class-symmetric Z-flow, ZFB's (u, U) flow
from the full single head, the separate heads' scalar ODE), the metric and maps of the reduction, and the
refusals (a generator that is no symmetry is named)."""

import math
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp
from sympy.combinatorics import Permutation, PermutationGroup

import derivations
from derivations import ParameterGroup, find_symmetries, gradient_flow, project, reduce_by_symmetry
from derivations import linear_attention as dla
from derivations import scan_snap as dss
from flows._generated import linear_attention_zfb as gen_zfb
from flows.linear_attention import model

TOL = 1e-12
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _neurons(n=3):
    """A two-layer linear network with n exchangeable hidden neurons fitting 1, with weight decay mu:
    L = (sum_i a_i w_i - 1)^2 / 2 + mu/2 sum_i (a_i^2 + w_i^2), state (a_1..a_n, w_1..w_n), learning rates
    eta_a, eta_w (two rates: a_i <-> w_i is then no symmetry of the flow)."""
    a = sp.symbols(f"a1:{n + 1}", real=True)
    w = sp.symbols(f"w1:{n + 1}", real=True)
    mu, eta_a, eta_w = sp.symbols("mu eta_a eta_w", positive=True)
    pairs = list(zip(a, w, strict=True))
    loss = (sum(x * y for x, y in pairs) - 1) ** 2 / 2 + mu / 2 * sum(x**2 + y**2 for x, y in pairs)
    groups = [ParameterGroup("a", a, eta_a), ParameterGroup("w", w, eta_w)]
    return gradient_flow(loss, groups, name="neurons"), a, w, mu, (eta_a, eta_w)


def _values(system, rng, n=3):
    return [
        (rng.normal(scale=0.7, size=len(system.state)), rng.uniform(0.3, 2.0, size=len(system.params)))
        for _ in range(n)
    ]


# --------------------------------------------------------------------------- the engine on a small example


def test_exchangeable_neurons_reduce_to_one_neuron_with_multiplicity_n():
    system, a, w, mu, (eta_a, eta_w) = _neurons(3)
    gens = find_symmetries(system)
    group = PermutationGroup(gens)
    # every permutation of the 3 neurons (moving a_i and w_i together), and nothing else
    assert group.order() == 6
    assert all(g(i) < 3 and g(i + 3) == g(i) + 3 for g in gens for i in range(3))
    red = reduce_by_symmetry(system, gens)
    assert red.system.state == (a[0], w[0]) and red.system.metric == (3, 3)
    assert red.invariant and all(r == 0 for r in red.residual)
    # the flow of one neuron of three: da/dt = -eta_a ((3 a w - 1) w + mu a), by hand
    x, y = a[0], w[0]
    want = (-eta_a * ((3 * x * y - 1) * y + mu * x), -eta_w * ((3 * x * y - 1) * x + mu * y))
    assert all(sp.simplify(g - h) == 0 for g, h in zip(red.system.rhs, want, strict=True))
    # the reduced loss is L(B h), and the reduced flow its gradient flow with the metric of the orbit sizes
    assert sp.simplify(red.system.loss - ((3 * x * y - 1) ** 2 / 2 + 3 * mu / 2 * (x**2 + y**2))) == 0
    h = np.array([[0.3, -0.7], [1.1, 0.2]])
    full = red.to_full(h)
    np.testing.assert_allclose(full, np.repeat(h, 3, axis=-1), rtol=0, atol=0)
    np.testing.assert_allclose(red.from_full(full), h, rtol=TOL, atol=TOL)


def test_the_reduced_flow_is_the_full_flow_on_the_fixed_subspace():
    """x_dot(B h) = B h_dot at random points, numerically (the residual is zero symbolically too)."""
    system, *_ = _neurons(4)
    red = reduce_by_symmetry(system, find_symmetries(system))
    full_f = sp.lambdify([system.state, system.params], list(system.rhs))
    red_f = sp.lambdify([red.system.state, red.system.params], list(red.system.rhs))
    rng = np.random.default_rng(0)
    for h, p in _values(red.system, rng):
        got = np.asarray(full_f(red.to_full(h), p))
        np.testing.assert_allclose(got, red.to_full(np.asarray(red_f(h, p))), rtol=TOL, atol=TOL)


def test_sign_flips_are_found_exactly_and_a_rotation_is_taken():
    x, y, z = sp.symbols("x y z", real=True)
    loss = (x**2 + y**2) ** 2 + (z - 1) ** 2 + x**2 * y**2
    system = gradient_flow(loss, [ParameterGroup("p", (x, y, z), 1)], name="quartic")
    flips = find_symmetries(system, "sign-flips")
    # the group {x -> -x} x {y -> -y}: two generators, z never flips
    span = {tuple(int(bool(v < 0)) for v in sp.Matrix(g).diagonal()) for g in flips}
    assert len(flips) == 2 and all(s[2] == 0 for s in span)
    quarter = sp.Matrix([[0, -1, 0], [1, 0, 0], [0, 0, 1]])  # (x, y) -> (-y, x)
    red = reduce_by_symmetry(system, [quarter])
    assert red.system.state == (z,) and red.system.rhs == (-2 * (z - 1),)


# --------------------------------------------------------------------------- refusals


def test_a_generator_that_is_no_symmetry_is_named():
    system, *_ = _neurons(2)
    good = Permutation([1, 0, 3, 2])  # neuron 1 <-> neuron 2
    with pytest.raises(ValueError, match=r"generators\[1\] \(Permutation\[\[0, 1\]\]\) is not a symmetry of 'neurons'"):
        reduce_by_symmetry(system, [good, Permutation([1, 0, 2, 3])])  # a_1 <-> a_2 alone breaks a_i w_i
    with pytest.raises(ValueError, match=r"generators\[0\] \(diag\[-1, 1, 1, 1\]\).*loss is not invariant"):
        reduce_by_symmetry(system, [sp.diag(-1, 1, 1, 1)])


def test_a_flow_that_is_not_equivariant_is_refused_even_with_an_invariant_loss():
    """Two learning rates: swapping u and v keeps the loss but not the flow (the metric differs)."""
    u, v = sp.symbols("u v", real=True)
    eta_u, eta_v = sp.symbols("eta_u eta_v", positive=True)
    system = gradient_flow(
        (u * v - 1) ** 2, [ParameterGroup("u", (u,), eta_u), ParameterGroup("v", (v,), eta_v)], name="rates"
    )
    with pytest.raises(ValueError, match=r"generators\[0\].*not equivariant"):
        reduce_by_symmetry(system, [Permutation([1, 0])])
    assert find_symmetries(system) == []


@pytest.mark.parametrize(
    ("generators", "match"),
    [
        (Permutation([1, 0]), "sequence of Permutations or matrices"),
        ([Permutation([0, 1, 2, 3, 5, 4])], r"generators\[0\].*acts on 6 entries; the state has 4"),
        ([np.eye(3)], r"generators\[0\] must be 4 x 4"),
        ([np.diag([1.0, 0.5, 1.0, 1.0])], r"generators\[0\] must have exact entries"),
        ([sp.diag(1, 0, 1, 1)], r"generators\[0\].*is singular"),
        ([sp.diag(-1, -1, -1, -1)], r"fixed subspace of the group is \{0\}"),
    ],
)
def test_malformed_generators_are_refused(generators, match):
    system, *_ = _neurons(2)
    with pytest.raises(ValueError, match=match):
        reduce_by_symmetry(system, generators)


def test_bad_coords_candidates_and_systems_are_refused():
    system, *_ = _neurons(2)
    with pytest.raises(ValueError, match="coords must name the 2 dimensions"):
        reduce_by_symmetry(system, find_symmetries(system), coords=sp.symbols("h1:4"))
    with pytest.raises(ValueError, match="candidates must be one of"):
        find_symmetries(system, "rotations")
    with pytest.raises(ValueError, match="system must be a derivations.FlowSystem"):
        find_symmetries("neurons")
    x = sp.Symbol("x", real=True)
    soft = gradient_flow(sp.log(1 + sp.exp(x)), [ParameterGroup("x", (x,), 1)], name="soft")
    with pytest.raises(ValueError, match="sign-flips.*polynomial in the state"):
        find_symmetries(soft, "sign-flips")
    # a sequence of candidates: the symmetries among them are returned
    assert find_symmetries(system, [Permutation([1, 0, 3, 2]), Permutation([1, 0, 2, 3])]) == [
        Permutation([1, 0, 3, 2])
    ]


# --------------------------------------------------------------------------- the papers' reductions


def test_separate_heads_scalar_ode_is_the_fixed_subspace_of_the_permutations_of_v_k_q():
    """find_symmetries finds S_3 on (v, k, q) (not assumed), and the reduction equals the hand-written
    projection onto the balanced ansatz v = k = q = s, symbolically, and ZSLS eq 21."""
    d = dla.SeparateDerivation()
    assert PermutationGroup(d.symmetries).order() == 6
    v, k, q, s, lam, N, trace = dla.separate_symbols()
    hand = project(d.head_flow, {v: s, k: s, q: s}, (s,), name="hand", params=(lam, N, trace))
    assert sp.simplify(d.system.rhs[0] - hand.system.rhs[0]) == 0
    assert sp.simplify(d.system.rhs[0] - (lam**2 * s**2 - lam**3 * (1 + (1 + trace / lam) / N) * s**5)) == 0
    assert d.system.metric == (3,)


def _hand_symmetric(K, D, C):
    z_d, z_c, p_d, p_c, Ds, Cs, Ks, eta_Z, gamma = dss.reduced_symmetric_symbols()
    hand = dss.ReducedSymmetricDerivation().system
    return sp.lambdify([(z_d, z_c), (p_d, p_c, eta_Z, gamma)], [e.subs({Ds: D, Cs: C, Ks: K}) for e in hand.rhs])


@pytest.mark.parametrize("sizes", [(2, 2, 1), pytest.param((3, 2, 2), marks=pytest.mark.slow)])
def test_scan_snap_class_symmetric_reduction_is_found_and_equals_the_hand_written_one(sizes):
    """The quasi-static Z-flow of every logit of every query row, reduced by the permutations found by
    find_symmetries (classes, distinct tokens within a class, common tokens), is the hand-assembled (z_d, z_c)
    flow of ReducedSymmetricDerivation at these counts, to 1e-12 at random states and parameters."""
    K, D, C = sizes
    full = dss.quasi_static_z_flow(K, D, C)
    gens = find_symmetries(full)
    # classes (K!), distinct tokens within each class (D!^K), common tokens (C!)
    order = math.factorial(K) * math.factorial(D) ** K * math.factorial(C)
    assert PermutationGroup(gens).order() == order
    red = reduce_by_symmetry(full, gens, simplify=False)
    assert [s.name for s in red.system.state] == ["z1_d1", "z1_c1"] and red.system.metric == (K * D, K * C)
    hand = _hand_symmetric(K, D, C)
    mine = sp.lambdify([red.system.state, red.system.params], list(red.system.rhs))
    assert [p.name for p in red.system.params] == ["p_d", "p_c", "eta_Z", "gamma"]
    rng = np.random.default_rng(K)
    for _ in range(4):
        z = rng.normal(size=2)
        p = (*rng.uniform(0.05, 0.5, size=2), *rng.uniform(0.5, 2.0, size=2))
        want = np.asarray(hand(z, p))
        np.testing.assert_allclose(np.asarray(mine(z, p)), want, rtol=TOL, atol=TOL)


def _single_head_loss(d):
    """The exact population loss of one linear-attention head in the blocks the prediction reads (u, v, A, b:
    `flows.linear_attention.model.blocks`), Lambda = diag(lambda), w ~ N(0, I): the steps of
    `model.moment_loss` in sympy (its cubature is exact for the degree-4 polynomial in w)."""
    lam = sp.symbols(f"lambda1:{d + 1}", positive=True)
    N = sp.Symbol("N", positive=True)
    u = sp.Matrix(sp.symbols(f"u1:{d + 1}", real=True))
    v = sp.Symbol("v", real=True)
    A = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"A{i + 1}{j + 1}", real=True))
    b = sp.Matrix(sp.symbols(f"b1:{d + 1}", real=True))
    L = sp.diag(*lam)
    e = sp.eye(d)
    r, s = sp.sqrt(d + 2), sp.sqrt(sp.Rational(d + 2, 2))
    points = [(sp.zeros(d, 1), sp.Rational(2, d + 2))]
    points += [(sg * r * e[:, i], sp.Rational(4 - d, 2 * (d + 2) ** 2)) for i in range(d) for sg in (1, -1)]
    points += [
        (s * (si * e[:, i] + sj * e[:, j]), sp.Rational(1, (d + 2) ** 2))
        for i in range(d)
        for j in range(i + 1, d)
        for si in (1, -1)
        for sj in (1, -1)
    ]
    S = (A + A.T) / 2
    c = u * (S * L).trace() + 2 * S * L * u
    total = sp.Integer(0)
    for w, weight in points:
        C, beta = A + w * b.T, u + v * w
        Bl = [C[:, i] * beta.T for i in range(d)]
        LB = [L * B for B in Bl]
        rho = sp.Matrix([LB[i].trace() for i in range(d)]) - w + c / N
        wishart = sum(
            L[i, j] * ((LB[i] * LB[j]).trace() + (Bl[i].T * LB[j] * L).trace()) for i in range(d) for j in range(d)
        )
        total += weight * ((rho.T * L * rho)[0, 0] + wishart / N)
    SL, Lu = S * L, L * u
    rest = 2 * (u.T * Lu)[0, 0] * (SL * SL).trace() + 4 * (Lu.T * SL * SL * u)[0, 0]
    return sp.expand((total + rest / N**2) / 2), (u, v, A, b, lam, N)


@pytest.mark.parametrize("d", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_zfb_reduction_is_the_fixed_subspace_of_the_label_flip(d):
    """The full single head (its exact loss equal to model.moment_loss), reduced by the action of the data
    symmetry y -> -y (w -> -w) on the parameters, W -> D W D with D = diag(1, .., 1, -1), is ZFB's (u, U) flow
    (the generated module) to 1e-12; find_symmetries("sign-flips") finds that flip among the sign
    symmetries."""
    loss, (u, v, A, b, lam, N) = _single_head_loss(d)
    rng = np.random.default_rng(0)
    f = sp.lambdify([list(u), v, list(A), list(b), list(lam), N], loss)
    exact, zfb_field = jax.jit(model.moment_loss), jax.jit(gen_zfb.vector_field)  # one compile each
    for _ in range(3):  # the sympy loss is the library's exact loss
        uu, vv, AA, bb = rng.normal(size=d), rng.normal(), rng.normal(size=(d, d)), rng.normal(size=d)
        ll = rng.uniform(0.2, 2.0, size=d)
        W_PV = np.zeros((d + 1, d + 1))
        W_PV[d] = [*uu, vv]
        W_KQ = np.zeros((d + 1, d + 1))
        W_KQ[:d, :d], W_KQ[d, :d] = AA, bb
        params = {"W_PV": jnp.asarray(W_PV), "W_KQ": jnp.asarray(W_KQ)}
        want = float(exact(params, jnp.diag(ll), jnp.diag(ll), jnp.eye(d), 7.0))
        assert f(uu, vv, AA.ravel(), bb, ll, 7.0) == pytest.approx(want, rel=TOL)
    state = (*u, v, *A, *b)
    groups = [ParameterGroup("value", (*u, v), 1), ParameterGroup("key_query", (*A, *b), 1)]
    system = gradient_flow(loss, groups, name="single-head", simplify=False)  # polynomials, already expanded
    # the generator: y -> -y acts on the embedding by D, so W_PV -> D W_PV D and W_KQ -> D W_KQ D; read off its
    # action on (u, v, A, b), the blocks of the last row of W_PV and the first d columns of W_KQ
    D = sp.diag(*([1] * d), -1)
    W_PV = sp.zeros(d + 1, d + 1)
    W_PV[d, :] = sp.Matrix([[*u, v]])
    W_KQ = sp.zeros(d + 1, d + 1)
    W_KQ[:d, :d], W_KQ[d, :d] = A, b.T
    P, K = D * W_PV * D, D * W_KQ * D
    moved = sp.Matrix([*P[d, :d], P[d, d], *K[:d, :d], *K[d, :d]])
    flip = moved.jacobian(state)
    assert flip.is_diagonal() and list(flip.diagonal()) == [-1] * d + [1] * (1 + d * d) + [-1] * d
    # found by the engine among the sign symmetries (the GF(2) span of the generators holds it)
    found = [tuple(int(bool(x < 0)) for x in sp.Matrix(g).diagonal()) for g in find_symmetries(system, "sign-flips")]
    target = tuple(int(bool(x < 0)) for x in flip.diagonal())
    span = {tuple([0] * len(state))}
    for g in found:
        span |= {tuple(a ^ b for a, b in zip(s, g, strict=True)) for s in span}
    assert target in span
    red = reduce_by_symmetry(system, [flip], simplify=False)
    assert red.system.state == (v, *A)
    rates = sp.lambdify([red.system.state, red.system.params], list(red.system.rhs))
    for _ in range(4):
        vv, AA = rng.normal(), rng.normal(size=(d, d))
        ll, NN = rng.uniform(0.2, 2.0, size=d), float(rng.integers(2, 30))
        values = {f"lambda{i + 1}": ll[i] for i in range(d)} | {"N": NN}
        params = [values[p.name] for p in red.system.params]
        got = np.asarray(rates([vv, *AA.ravel()], params))
        zfb = zfb_field(
            0.0, {"u": jnp.asarray(vv), "U": jnp.asarray(AA)}, {"Lambda": jnp.diag(ll), "N": jnp.asarray(NN)}
        )
        want = np.concatenate([[float(zfb["u"])], np.asarray(zfb["U"]).ravel()])
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * np.abs(want).max())


def test_the_package_exports_the_reduction_api():
    assert derivations.reduce_by_symmetry is reduce_by_symmetry and derivations.find_symmetries is find_symmetries


def _blocks(path, heading):
    text = (ROOT / path).read_text(encoding="utf-8")
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_docs_worked_example_and_the_tutorial_one_liner_run_as_printed():
    """The worked example of docs/derivations.md and the tutorial's one-line reduction run, and give what
    their comments print."""
    (example,) = _blocks("docs/derivations.md", "Reductions by symmetry")
    ns: dict = {}
    exec(example, ns)  # noqa: S102 - the documentation's own example
    assert ns["reduced"].system.metric == (3, 3) and len(ns["symmetries"]) == 3
    assert sp.sstr(ns["reduced"].system.rhs[0]) == "eta_a*(-a1*mu - 3*a1*w1**2 + w1)"
    (one_liner,) = _blocks("docs/tutorials/bring_your_own_theory.md", "Reduce by symmetry in one line")
    ns = {}
    exec(one_liner, ns)  # noqa: S102
    assert ns["reduced"].system.to_text() == "da/dt = a*eta*(-a**2 - lambda + 1)"
    y = ns["gen"].vector_field(0.0, jnp.asarray([0.5]), {"eta": 1.0, "lambda": 0.1})
    np.testing.assert_allclose(np.asarray(y), [0.5 * (1 - 0.25 - 0.1)], rtol=TOL)
    (matrix_example,) = _blocks("docs/derivations.md", "Derivations at symbolic sizes")
    ns = {}
    exec(matrix_example, ns)  # noqa: S102
    assert ns["system"].rhs == derivations.derive("linear_attention-zfb").system.rhs
