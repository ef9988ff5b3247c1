"""The sympy-derived reduced systems: against the full Gram RHS, against the digest's 4-ODE, up to date."""

import jax.numpy as jnp
import numpy as np
import pytest

from flows import cooccurrence as co
from flows.__main__ import main
from flows.cooccurrence import reduced


def _symmetric_instance(seed, cfg):
    """A full Gram state on which the 3-token reduction is exact: random tokens have G = 0, zero scores
    (as keys and as queries) and no M_V / M_K / M_Q coupling to mu_1..mu_3; the rest is random."""
    rng = np.random.default_rng(seed)
    d = cfg.d

    def sym(k):
        x = rng.normal(size=(k, k))
        return x + x.T

    G = np.zeros(d)
    G[:3] = 2 * rng.normal(size=3)
    A = np.zeros((d, d))
    A[:3, :3] = 3 * rng.normal(size=(3, 3))
    state = {"G": G, "S": np.asarray(rng.uniform(0.5, 5.0)), "A": A}
    for k in ("M_V", "M_K", "M_Q"):
        M = np.zeros((d, d))
        M[:3, :3] = sym(3)
        M[3:, 3:] = sym(d - 3)
        state[k] = M
    return {k: jnp.asarray(v) for k, v in state.items()}


@pytest.mark.parametrize("seed, L", [(0, 4), (1, 5), (2, 3)])
def test_three_token_equals_full_rhs_on_symmetric_instance(seed, L):
    # n = 6 with exact proportions: 3 I_1 samples and one each of I_2, I_3, I_4, weights (1/2, 1/6, ...)
    cfg = co.Config(n=6, L=L, d=3 + co.num_random_slots(6, L), m=9, m1=5, seed=seed)
    args = co.data_args(cfg, num_test=4)
    state = _symmetric_instance(seed, cfg)
    full = reduced.three_token_state(co.vector_field(0.0, state, args))
    red = reduced.three_token_vector_field(0.0, reduced.three_token_state(state),
                                           reduced.three_token_args(cfg))
    assert red.shape == (40,)
    np.testing.assert_allclose(np.asarray(red), np.asarray(full), rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(full))))


def test_phase2_is_the_restricted_three_token_system_and_matches_the_digest():
    rng = np.random.default_rng(5)
    m1 = 7.0
    for _ in range(5):
        G = rng.normal(size=3)
        S = rng.uniform(1, 10)
        y3 = np.concatenate([G, [S], np.zeros(9), np.zeros(9), rng.normal(size=18)])  # A = 0, M_V = 0
        args3 = {"L": jnp.asarray(5.0), "m": jnp.asarray(16.0), "m1": jnp.asarray(m1)}
        full = np.asarray(reduced.three_token_vector_field(0.0, jnp.asarray(y3), args3))[:4]
        y4 = jnp.asarray(np.concatenate([G, [S]]))
        skel = np.asarray(reduced.phase2_vector_field(0.0, y4, {"m1": jnp.asarray(m1)}))
        np.testing.assert_allclose(skel, full, rtol=1e-13, atol=1e-13)
        # theory digest §3.2: dG1 = S(q1 g1 - q2 g2), ..., dS = 2 m1 sum_k q_k g_k rho_k
        rho = np.array([G.sum(), -(G[0] + G[2]), -(G[1] + G[2]), -G[2]])
        g = 1 / (1 + np.exp(rho))
        q = np.array([1 / 2, 1 / 6, 1 / 6, 1 / 6])
        expected = [S * (q[0] * g[0] - q[1] * g[1]), S * (q[0] * g[0] - q[2] * g[2]),
                    S * (q[0] * g[0] - q[1] * g[1] - q[2] * g[2] - q[3] * g[3]), 2 * m1 * np.sum(q * g * rho)]
        np.testing.assert_allclose(skel, expected, rtol=1e-12)


def test_reduced_solves_run():
    cfg = co.Config(n=6, L=5, d=64, m=32, m1=16, variant="paper")
    ts = np.linspace(0.0, 5.0, 6)
    tr = reduced.solve_three_token(cfg, ts)
    G = np.asarray(tr.observables["G"])
    assert tr.status == "ok" and G[-1, 0] > 0 and G[-1, 1] > 0 and G[-1, 2] < 0
    y0 = reduced.idealized_three_token_state(cfg)[:4]
    tr2 = reduced.solve_phase2(y0, cfg.m1, ts)
    loss = np.asarray(tr2.observables["loss"])
    assert tr2.status == "ok" and np.all(np.diff(loss) < 0)



def test_derive_cli(capsys):
    assert main(["derive", "cooccurrence-3token", "--latex"]) == 0
    out = capsys.readouterr().out
    assert r"\frac{d G_{1}}{dt}" in out and "z_{1}" in out
    assert main(["derive", "cooccurrence-phase2"]) == 0
    assert "dS/dt = 2*m1" in capsys.readouterr().out
