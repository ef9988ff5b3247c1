"""Scan and Snap physics pinned against independent references.

Tian, Wang, Chen, Du 2023 (Sec. 4-5):

- the reduced flow's decoder scalar h and speed coefficient gamma (Lemma 6, eqs. 45, 85), in paper time and
  in real time, against `theory.h(t / K)`, `theory.gamma` and the implicit equation
  e^{M h} + (M-1) M h = M eta_Y t / K + 1 written out in numpy;
- dGamma/dt = eta_Z gamma (eq. 128) by `jax.grad`;
- the class-symmetric generated flow that the snap-time sweep integrates (`symmetric_vector_field`) against
  the vectorised reduced flow, right-hand side and trajectory;
- the observables against literal numpy loops written from their definitions (eq. 5, Theorem 3, eq. 11).

The reduced solves share one compiled program (every variant is a change of traced arguments).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from flows import solve
from flows.scan_snap import SequenceClasses, solve_flow, syn_small, theory
from flows.scan_snap import observables as obs
from flows.scan_snap.flow import flow_args, reduced_vector_field, symmetric_vector_field

# class-symmetric instance: K classes, each with its own query token, C common tokens (weight 1) and D
# distinct tokens (weight 1/2); tokens 0..C-1 CTs, then D DTs per class, then the queries, then the next tokens
K, C, D = 3, 2, 3
M = C + K * D + 2 * K
P_C, P_D = 1.0 / (C + 0.5 * D), 0.5 / (C + 0.5 * D)
QUERIES = tuple(C + K * D + n for n in range(K))
ETA_Y, ETA_Z = 3.0, 0.5  # distinct, and neither is 1: a swapped or dropped rate shows
DECODER = 50.0  # a decoder size other than the vocabulary size
TS = np.concatenate([[0.0], np.geomspace(1e-2, 300.0, 40)])  # 300 ~ 50 snap times 2 K ln M / eta_Y
SOLVE_TOL = dict(rtol=1e-10, atol=1e-12)
H_TOL = 1e-8  # relative, h and gamma of the solve (rtol 1e-10) against the closed forms


@jax.jit
def _closed_forms(t, M, K, eta_Y, eta_Z):
    """(h(t / K), gamma(t), dGamma/dt by jax.grad) at the times t, in one compiled program (called eagerly,
    every call of theory's Newton loop would trace and compile anew)."""
    dGamma = jax.vmap(jax.grad(theory.Gamma), in_axes=(0, None, None, None, None))(t, M, K, eta_Y, eta_Z)
    return theory.h(t / K, M, eta_Y), theory.gamma(t, M, K, eta_Y), dGamma


def closed_forms(t, M, K, eta_Y, eta_Z=1.0):
    return tuple(np.asarray(x) for x in _closed_forms(*(jnp.asarray(v, jnp.float64) for v in (t, M, K, eta_Y, eta_Z))))


def symmetric_classes():
    w = np.zeros((K, M))
    w[:, :C] = 1.0
    for n in range(K):
        w[n, C + D * n : C + D * (n + 1)] = 0.5
    return SequenceClasses.from_weights(w, QUERIES, tuple(C + K * D + K + n for n in range(K)), name="sym")


def reduced_runs():
    """Reduced solves (one compile): paper time, real time, real time at K eta_Z, another decoder size."""
    sym = symmetric_classes()
    kw = dict(reduced=True, **SOLVE_TOL)
    return {
        "paper": solve_flow(sym, ETA_Y, ETA_Z, TS, paper_time=True, **kw),
        "real": solve_flow(sym, ETA_Y, ETA_Z, TS, paper_time=False, **kw),
        "real_K": solve_flow(sym, ETA_Y, K * ETA_Z, TS, paper_time=False, **kw),
        "decoder": solve_flow(sym, ETA_Y, ETA_Z, TS, paper_time=True, decoder_size=DECODER, **kw),
    }


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _check_h_and_gamma(tr, Md):
    """h(t) = h_Lemma6(t / K) with rate eta_Y and the decoder size, in both time conventions (h does not
    depend on paper_time: only the Z weights do)."""
    assert tr.status == "ok"
    h = np.asarray(tr.ys["h"])
    gamma = np.asarray(tr.observables["gamma"])
    h_closed, gamma_closed, _ = closed_forms(TS, Md, K, ETA_Y)
    assert _rel(h, h_closed) <= H_TOL
    assert _rel(gamma, gamma_closed) <= H_TOL
    # independent of theory.py: the implicit solution of dh/dt = eta_Y / (K ((M-1) + e^{M h})), h(0) = 0
    S = Md * ETA_Y * TS / K + 1.0
    assert np.max(np.abs(np.exp(Md * h) + (Md - 1.0) * Md * h - S) / S) <= H_TOL
    assert _rel(gamma, (Md - 1.0) ** 2 * h / ((Md - 1.0) + np.exp(Md * h))) <= 1e-12
    # the run passes the scan stage (gamma rises like eta_Y t / K, then decays): not a trivial check
    assert np.argmax(gamma) not in (0, len(TS) - 1) and gamma[-1] < 0.2 * gamma.max()


def _check_paper_time(runs):
    """paper_time=True drops P(n) = 1/K from the Z weights (w_n = K P(n)) and nothing else: its Z and B at
    eta_Z are the real-time Z and B at K eta_Z, with the same h."""
    paper, real, real_K = runs["paper"], runs["real"], runs["real_K"]
    assert _rel(paper.ys["h"], real.ys["h"]) <= H_TOL  # the same h (different adaptive steps)
    for key in ("Z", "B"):
        assert _rel(paper.ys[key], real_K.ys[key]) <= 1e-7, key
        assert _rel(paper.ys[key], real.ys[key]) > 0.1, key  # and the factor K matters
    assert float(np.max(np.asarray(paper.ys["Z"])[-1])) > 0.5  # the logits moved


@pytest.mark.parametrize("M_, K_, eta_Y", [(17, 3, 3.0), (1000, 10, 0.5), (2, 1, 2.0)])
def test_grad_of_Gamma_is_eta_Z_gamma(M_, K_, eta_Y):
    """Gamma(t) = eta_Z int_0^t gamma (eq. 128): d/dt of the closed form equals eta_Z gamma(t)."""
    eta_Z = 0.7
    ts = np.geomspace(1e-3, 1e4, len(TS)) * K_ / eta_Y  # the shape of TS: the same compiled program
    _, gamma, grad = closed_forms(ts, M_, K_, eta_Y, eta_Z)
    np.testing.assert_allclose(grad, eta_Z * gamma, rtol=1e-10, atol=0)


def _symmetric_args(eta_Y=ETA_Y, eta_Z=ETA_Z):
    return {
        k: jnp.asarray(float(v), jnp.float64)
        for k, v in dict(M=M, K=K, eta_Y=eta_Y, eta_Z=eta_Z, p_d=P_D, p_c=P_C, D=D, C=C).items()
    }


def _symmetric_Z(zd, zc):
    Z = np.zeros((M, M))
    for n, q in enumerate(QUERIES):
        Z[q, :C] = zc
        Z[q, C + D * n : C + D * (n + 1)] = zd
    return Z


def test_symmetric_vector_field_equals_the_vectorised_reduced_flow():
    """The sweep's RHS (h, z_DT, z_CT) at the state of a class-symmetric Z equals the reduced flow's RHS,
    entry by entry: dZ is z_DT' on every DT of every query row, z_CT' on every CT, 0 elsewhere."""
    sym = symmetric_classes()
    fargs = flow_args(sym, ETA_Y, ETA_Z)  # paper time, decoder size M: the generated system's convention
    red = jax.jit(reduced_vector_field)
    gen = jax.jit(symmetric_vector_field)
    for h, zd, zc in ((0.0, 0.0, 0.0), (0.02, 0.3, -0.2), (0.15, 1.2, -0.9), (0.3, 2.5, -1.5)):
        Z = _symmetric_Z(zd, zc)
        r = red(0.0, {"Z": jnp.asarray(Z), "h": jnp.asarray(h), "B": jnp.zeros(K)}, fargs)
        g = np.asarray(gen(0.0, jnp.asarray([h, zd, zc]), _symmetric_args()))
        dZ = np.asarray(r["Z"])
        expected = _symmetric_Z(g[1], g[2])
        scale = max(np.max(np.abs(dZ)), 1e-300)
        assert abs(float(r["h"]) - g[0]) <= 1e-14 * abs(g[0])
        assert np.max(np.abs(dZ - expected)) <= 1e-10 * scale, (h, zd, zc)
        if h > 0:
            assert g[1] > 0 > g[2]  # DTs up, CTs down (Theorem 2)


def _integrate_symmetric(ts):
    rhs = jax.jit(lambda t, y: symmetric_vector_field(t, y, _symmetric_args()))
    # t as a Python float on every call (scipy's first call passes a float, the later ones numpy floats: two
    # jit signatures, one program compiled twice)
    sol = solve_ivp(
        lambda t, y: np.asarray(rhs(float(t), jnp.asarray(y))),
        (0.0, ts[-1]),
        np.zeros(3),
        t_eval=ts,
        method="DOP853",
        rtol=1e-11,
        atol=1e-13,
    )
    assert sol.success
    return sol.y.T


def _check_symmetric_trajectory(ys, tr):
    Z = np.asarray(tr.ys["Z"])
    assert _rel(ys[:, 0], tr.ys["h"]) <= 1e-8
    for n, q in enumerate(QUERIES):  # every DT and every CT logit of every query row
        for j in range(C + D * n, C + D * (n + 1)):
            assert _rel(Z[:, q, j], ys[:, 1]) <= 1e-7, (n, j)
        for j in range(C):
            assert _rel(Z[:, q, j], ys[:, 2]) <= 1e-7, (n, j)
    assert ys[-1, 1] > 0.5 and ys[-1, 2] < -0.5  # the logits moved


def test_reduced_flow_h_gamma_time_conventions_and_the_symmetric_sweep():
    """The reduced solves (one compile), checked in one test (under pytest-xdist a shared fixture would be
    solved on every worker):

    - h(t) = h_Lemma6(t / K) with rate eta_Y and the decoder size, gamma by eq. 85, in paper time, in real
      time and for a decoder size other than M (h does not depend on paper_time: only the Z weights do);
    - paper time = real time at K eta_Z;
    - the sweep's 3-state flow integrated (scipy DOP853 on the jitted RHS) is the reduced flow's h, DT and
      CT logits at every saved time."""
    runs = reduced_runs()
    for name, Md in (("paper", M), ("real", M), ("decoder", DECODER)):
        _check_h_and_gamma(runs[name], Md)
    _check_paper_time(runs)
    _check_symmetric_trajectory(_integrate_symmetric(TS), runs["paper"])


@pytest.mark.slow
def test_symmetric_flow_through_flows_solve_matches_the_reduced_trajectory():
    """The same, integrated by `flows.solve` as the snap-time sweep does (one more compile)."""
    sol = solve(symmetric_vector_field, jnp.zeros(3), t1=float(TS[-1]), ts=TS, args=_symmetric_args(), **SOLVE_TOL)
    paper = solve_flow(symmetric_classes(), ETA_Y, ETA_Z, TS, reduced=True, paper_time=True, **SOLVE_TOL)
    _check_symmetric_trajectory(np.asarray(sol.ys), paper)


# --- observables against literal numpy loops ------------------------------------------------------------


@jax.jit
def _observables(Z, Z0, cond, Q, distinct, common, uniform):
    att = obs.attention(Z, cond, Q)
    return {
        "att": att,
        "f": obs.normalized_attention(att),
        "entropy": obs.entropy(att),
        "entropy_dt": obs.entropy_distinct(att, distinct),
        "mass": obs.common_mass(att, common),
        "gains": jnp.stack([obs.relative_gain(att, j, jp) for j, jp in GAIN_PAIRS]),
        "chi": obs.growth_factor(Z, Z0, Q),
        "uniform_entropy": obs.entropy(uniform),
        "uniform_entropy_dt": obs.entropy_distinct(uniform, distinct),
    }


GAIN_PAIRS = ((19, 12), (21, 28), (3, 15))  # (DT, DT) of class 0, of class 1, (CT, DT)


@pytest.fixture(scope="module")
def state():
    """syn_small (CTs, DTs with unequal P(l|n)) at a random Z and a random Z0: the literal attention (eq. 5)
    and the library's observables."""
    c = syn_small()
    rng = np.random.default_rng(3)
    Z = rng.normal(scale=1.5, size=(c.vocab_size, c.vocab_size))
    Z0 = rng.normal(scale=0.5, size=(c.vocab_size, c.vocab_size))
    Q = np.zeros((c.num_classes, c.vocab_size))
    Q[np.arange(c.num_classes), c.query] = 1.0
    att = np.zeros((c.num_classes, c.vocab_size))
    for n in range(c.num_classes):  # c_{l|n} = P(l|n) e^{z_ml} / sum_l' P(l'|n) e^{z_ml'}
        m = c.query[n]
        tilde = [c.cond_probs[n, j] * math.exp(Z[m, j]) for j in range(c.vocab_size)]
        att[n] = np.array(tilde) / sum(tilde)
    uniform = np.zeros((c.num_classes, c.vocab_size))  # 1/20 on the CTs and the DTs of each class
    uniform[:, :10] = 0.05
    uniform[0, 10:20] = uniform[1, 20:30] = 0.05
    got = _observables(*(jnp.asarray(a) for a in (Z, Z0, c.cond_probs, Q, c.distinct_mask, c.common_mask, uniform)))
    return c, Z, Z0, att, {k: np.asarray(v) for k, v in got.items()}


def _entropy(p):
    return -sum(x * math.log(x) for x in p if x > 0)


def test_attention_and_entropies_are_the_literal_formulas(state):
    c, _, _, att, got = state
    np.testing.assert_allclose(got["att"], att, rtol=1e-12, atol=1e-300)
    assert np.all(got["att"][~c.support] == 0.0)
    np.testing.assert_allclose(got["f"], att / np.sqrt(np.sum(att**2, axis=1, keepdims=True)), rtol=1e-13)
    for n in range(c.num_classes):
        assert abs(got["entropy"][n] - _entropy(att[n])) <= 1e-12
        dts = [att[n, j] for j in range(c.vocab_size) if c.distinct_mask[n, j]]
        assert len(dts) == 10
        assert abs(got["entropy_dt"][n] - _entropy([x / sum(dts) for x in dts])) <= 1e-12
        assert abs(got["mass"][n] - sum(att[n, j] for j in range(10))) <= 1e-13  # tokens 0-9 are the CTs
    # uniform over 10 DTs and 10 CTs: ln 10 on the DTs, ln 20 in all (cases a formula cannot hit by luck)
    np.testing.assert_allclose(got["uniform_entropy_dt"], math.log(10), rtol=1e-13)
    np.testing.assert_allclose(got["uniform_entropy"], math.log(20), rtol=1e-13)


def test_relative_gain_and_growth_factor_are_the_literal_formulas(state):
    c, Z, Z0, _, got = state
    for i, (j, jp) in enumerate(GAIN_PAIRS):
        for n in range(c.num_classes):
            if not (c.support[n, j] and c.support[n, jp]):
                continue
            m = c.query[n]
            # Theorem 3: r_{l/l'|n} = c_l^2 / c_l'^2 - 1 = (P(l|n) e^{z_ml} / (P(l'|n) e^{z_ml'}))^2 - 1
            ratio = c.cond_probs[n, j] * math.exp(Z[m, j]) / (c.cond_probs[n, jp] * math.exp(Z[m, jp]))
            assert abs(got["gains"][i, n] - (ratio**2 - 1)) <= 1e-11 * max(1.0, ratio**2), (j, jp, n)
    chi = got["chi"]
    assert chi.shape == (c.num_classes, c.vocab_size)
    for n in range(c.num_classes):
        m = c.query[n]
        for j in range(c.vocab_size):  # eq. 11: chi_l = e^{2 (z_ml(t) - z_ml(0))} on the query row of n
            assert abs(chi[n, j] - math.exp(2 * (Z[m, j] - Z0[m, j]))) <= 1e-12 * chi[n, j]


def _vertex(x, y):
    """ln t of the vertex of the parabola through three points (Lagrange form, no polyfit)."""
    (x0, x1, x2), (y0, y1, y2) = x, y
    num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
    den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
    return x1 - 0.5 * num / den


def test_knee_time_is_the_refined_steepest_point():
    """knee_time: argmax |rate| on the grid, refined by the parabola in ln t through it and its neighbours."""
    t = np.concatenate([[0.0], np.geomspace(0.1, 100.0, 31)])  # t = 0 is dropped
    x = np.log(t[1:])
    t_star = 3.7  # between grid points
    parabola = 50.0 - (x - math.log(t_star)) ** 2  # > 0 on the grid
    # |rate| is used, and the point t = 0 (here the largest) is dropped
    assert abs(obs.knee_time(t, np.concatenate([[1e3], -parabola])) / t_star - 1) <= 1e-12
    # a bump that is not a parabola: the vertex of the top three points, computed independently
    rate = np.concatenate([[0.0], np.exp(-((x - 1.1) ** 2) / 0.8) * (1 + 0.3 * x)])
    i = int(np.argmax(rate[1:]))
    expected = math.exp(_vertex(x[i - 1 : i + 2], rate[1:][i - 1 : i + 2]))
    got = obs.knee_time(t, rate)
    assert abs(got / expected - 1) <= 1e-10 and got != t[1:][i]
    tp = t[1:]
    # the peak at the end of the grid: the top three are the last three; a concave top is clipped to its
    # end point, a convex one (no interior maximum of the parabola) gives the middle grid point
    concave = np.concatenate([[0.0], np.sqrt(x - x[0] + 1.0)])
    assert abs(obs.knee_time(t, concave) / tp[-1] - 1) <= 1e-12
    assert obs.knee_time(t, np.concatenate([[0.0], np.exp(x)])) == tp[-2]
    assert obs.knee_time(t, np.concatenate([[0.0], np.exp(-x)])) == tp[1]  # peak at the start
    with pytest.raises(ValueError, match="3 positive"):
        obs.knee_time([0.0, 1.0, 2.0], [1.0, 2.0, 1.0])
