"""Which quantity `w2_per_slice(method="sinkhorn")` returns, pinned in the default run on a small case.

It is documented as sqrt(S_eps), S_eps = OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2 the debiased Sinkhorn
divergence, OT_eps = min_P <C, P> + eps KL(P | a b^T) on the squared Euclidean cost with uniform weights. The
candidates it could be confused with (S_eps itself, the entropic cost OT_eps or its root, the exact W2 or W2^2,
or S_eps at another eps) are computed independently: OT_eps by a hand-written log-domain Sinkhorn iteration
(numpy, to a marginal error of 1e-12) and W2 by POT's exact network simplex. At eps = 0.3 they all lie at least
3.6e-2 away from sqrt(S_eps) (measured), while ott-jax's value is within 1e-5 of it (measured: 4.9e-7; the
value is stationary in the potentials, so ott's stopping threshold of 1e-3 on the marginals costs far less);
at eps = 1e-2 it is within the documented bias bound of the exact W2 (measured gaps 1.0e-3 to 1.6e-3, bounds
8.1e-3 to 1.1e-2). The clouds have 5 and 6 points (attention
and MLP of equal widths: one vmapped program for both groups, which is what sorts them back per group)."""

import numpy as np
import ot
import pytest
from scipy.spatial.distance import cdist
from scipy.special import logsumexp

from flows import mean_field as mf
from flows.mean_field import observables as obs

CFG = mf.Config(d=1, D=2, N=2, L=2, M=5, M_mlp=5, init_scale=1.5, seed=4)
WIDE = CFG.replace(M=6, M_mlp=6, seed=5)
TOL = 1e-5  # |ott-jax's value - sqrt(S_eps)|, measured <= 4.9e-7


@pytest.fixture(scope="module")
def clouds():
    a = mf.init_particles(CFG)
    b = {k: np.asarray(v) + (0.3 if k in ("V", "W1") else 0.0) for k, v in mf.init_particles(WIDE).items()}
    return a, b


def _host_clouds(p):
    """{group: (L, n, dim)}: the attention (V, W flattened) and MLP (W1, W2) points of every slice."""
    p = {k: np.asarray(v) for k, v in p.items()}
    L, M = p["V"].shape[:2]
    return {
        "attention": np.concatenate([p["V"].reshape(L, M, -1), p["W"].reshape(L, M, -1)], -1),
        "mlp": np.concatenate([p["W1"], p["W2"]], -1),
    }


def _entropic_cost(x, y, eps):
    """OT_eps(x, y) = min_P <C, P> + eps KL(P | a b^T), uniform a, b, C the squared distances: the dual value
    <f, a> + <g, b> at the fixed point of the log-domain Sinkhorn updates (alternating for x != y, stopped when
    the row marginal is met to 1e-12; for x = y the averaged symmetric update f <- (f + T f) / 2, g = f, which
    converges where the alternating one oscillates, stopped when |T f - f| < 1e-12)."""
    C = cdist(x, y, "sqeuclidean")
    la, lb = np.full(len(x), -np.log(len(x))), np.full(len(y), -np.log(len(y)))
    f, g = np.zeros(len(x)), np.zeros(len(y))
    symmetric = x is y
    for _ in range(20_000):
        if symmetric:
            Tf = -eps * logsumexp((f[None, :] - C) / eps + la[None, :], axis=1)
            done = np.max(np.abs(Tf - f)) < 1e-12
            f = g = 0.5 * (f + Tf)
        else:
            f = -eps * logsumexp((g[None, :] - C) / eps + lb[None, :], axis=1)
            g = -eps * logsumexp((f[:, None] - C) / eps + la[:, None], axis=0)
            log_P = (f[:, None] + g[None, :] - C) / eps + la[:, None] + lb[None, :]
            done = np.max(np.abs(np.exp(logsumexp(log_P, axis=1)) - np.exp(la))) < 1e-12
        if done:
            return float(f @ np.exp(la) + g @ np.exp(lb))
    raise AssertionError("the reference Sinkhorn iteration did not converge")


def _exact_w2(x, y):
    C = cdist(x, y, "sqeuclidean")
    return float(np.sqrt(ot.emd2(np.full(len(x), 1 / len(x)), np.full(len(y), 1 / len(y)), C)))


def test_sinkhorn_w2_is_the_root_of_the_debiased_divergence(clouds):
    a, b = clouds
    eps = 0.3
    got = obs.w2_per_slice(a, b, method="sinkhorn", epsilon=eps)
    ha, hb = _host_clouds(a), _host_clouds(b)
    for group in ("attention", "mlp"):
        assert got[group].shape == (CFG.L,)
        for layer in range(CFG.L):
            x, y = ha[group][layer], hb[group][layer]
            ot_xy, ot_xx, ot_yy = (_entropic_cost(u, w, eps) for u, w in ((x, y), (x, x), (y, y)))
            S = ot_xy - (ot_xx + ot_yy) / 2
            other_eps = (
                _entropic_cost(x, y, 2 * eps) - (_entropic_cost(x, x, 2 * eps) + _entropic_cost(y, y, 2 * eps)) / 2
            )
            w2 = _exact_w2(x, y)
            wrong = {
                "S": S,
                "OT_eps": ot_xy,
                "sqrt(OT_eps)": np.sqrt(ot_xy),
                "W2": w2,
                "W2^2": w2 * w2,
                "sqrt(S_2eps)": np.sqrt(other_eps),
            }
            value = float(got[group][layer])
            assert abs(value - np.sqrt(S)) <= TOL, (group, layer, value, np.sqrt(S))
            for name, w in wrong.items():  # every confusable quantity is far outside the tolerance
                assert abs(w - np.sqrt(S)) >= 1000 * TOL, (group, layer, name, w, np.sqrt(S))


def test_sinkhorn_w2_at_small_eps_is_the_exact_w2_within_the_bias_bound(clouds):
    """eps = 1e-2: |W2_eps - W2| <= eps (log n + log m) / (2 W2) per slice and group (the documented bound on
    |S_eps - W2^2|, divided by W2), and that band excludes W2^2 and the other group's value."""
    a, b = clouds
    eps = 1e-2
    got = obs.w2_per_slice(a, b, method="sinkhorn", epsilon=eps)
    exact = obs.w2_per_slice(a, b, method="exact")
    ha, hb = _host_clouds(a), _host_clouds(b)
    for group, other in (("attention", "mlp"), ("mlp", "attention")):
        for layer in range(CFG.L):
            w2 = _exact_w2(ha[group][layer], hb[group][layer])
            assert exact[group][layer] == pytest.approx(w2, rel=1e-12)
            band = obs.sinkhorn_bias_bound(eps, CFG.M, WIDE.M) / w2
            assert abs(float(got[group][layer]) - w2) <= band, (group, layer)
            assert abs(w2 * w2 - w2) > 10 * band and abs(float(exact[other][layer]) - w2) > 10 * band
