"""The sympy-derived reduced systems: against the full Gram RHS, against the hand-written 4-ODE, up to date."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

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


@jax.jit  # the exact RHS read in 3-token coordinates: one program per shape (eager, ~5 s a shape)
def _full_three_token_rhs(state, args):
    return reduced.three_token_state(co.vector_field(0.0, state, args))


@pytest.mark.parametrize("seed, L", [(0, 4), (1, 5), (2, 3)])
def test_three_token_equals_full_rhs_on_symmetric_instance(seed, L):
    # n = 6 with exact proportions: 3 I_1 samples and one each of I_2, I_3, I_4, weights (1/2, 1/6, ...)
    cfg = co.Config(n=6, L=L, d=3 + co.num_random_slots(6, L), m=9, m1=5, seed=seed)
    args = co.spec.data(cfg, num_test=4)
    state = _symmetric_instance(seed, cfg)
    full = _full_three_token_rhs(state, args)
    red = reduced.three_token_vector_field(0.0, reduced.three_token_state(state), reduced.three_token_args(cfg))
    assert red.shape == (40,)
    np.testing.assert_allclose(np.asarray(red), np.asarray(full), rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(full))))


def test_phase2_is_the_restricted_three_token_system_and_matches_the_hand_written_one():
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
        # written out: dG1 = S(q1 g1 - q2 g2), ..., dS = 2 m1 sum_k q_k g_k rho_k
        rho = np.array([G.sum(), -(G[0] + G[2]), -(G[1] + G[2]), -G[2]])
        g = 1 / (1 + np.exp(rho))
        q = np.array([1 / 2, 1 / 6, 1 / 6, 1 / 6])
        expected = [
            S * (q[0] * g[0] - q[1] * g[1]),
            S * (q[0] * g[0] - q[2] * g[2]),
            S * (q[0] * g[0] - q[1] * g[1] - q[2] * g[2] - q[3] * g[3]),
            2 * m1 * np.sum(q * g * rho),
        ]
        np.testing.assert_allclose(skel, expected, rtol=1e-12)


REDUCED_CFG = dict(n=6, L=5, d=64, m=32, m1=16, variant="paper")
REDUCED_TS = np.linspace(0.0, 5.0, 6)


def _check_three_token_signs(G):
    assert G[-1, 0] > 0 and G[-1, 1] > 0 and G[-1, 2] < 0


def test_reduced_solves_run():
    """The named limit "phase2" from the idealised state, and the 3-token system from it integrated by scipy on
    the generated source evaluated with numpy (its XLA compile, ~300k characters of scalar algebra, takes ~13 s
    on two busy cores; the slow test below solves the limit "three_token" itself)."""
    cfg = co.Config(**REDUCED_CFG)
    y0 = reduced.idealized_three_token_state(cfg)[:4]
    tr2 = co.solve_flow(cfg, REDUCED_TS, reduced="phase2", y0=y0, num_test=4)
    loss = np.asarray(tr2.observables["loss"])
    assert tr2.status == "ok" and np.all(np.diff(loss) < 0)
    np.testing.assert_array_equal(np.asarray(tr2.observables["G"])[0], np.asarray(y0[:3]))
    src = inspect.getsource(reduced._gen3)
    assert src.count("import jax.numpy as jnp") == 1
    namespace = {}
    exec(
        compile(src.replace("import jax.numpy as jnp", "import numpy as jnp"), reduced._gen3.__file__, "exec"),
        namespace,
    )
    a3 = {k: float(v) for k, v in reduced.three_token_args(cfg).items()}
    sol = solve_ivp(
        lambda t, y: namespace["vector_field"](t, y, a3),
        (0.0, REDUCED_TS[-1]),
        np.asarray(reduced.idealized_three_token_state(cfg)),
        t_eval=REDUCED_TS,
        method="DOP853",
        rtol=1e-10,
        atol=1e-12,
    )
    assert sol.success
    _check_three_token_signs(sol.y.T[:, :3])  # G = y[:3] (reduced.THREE_TOKEN_STATE order)
    assert reduced.THREE_TOKEN_STATE[:3] == ("G1", "G2", "G3"), reduced.THREE_TOKEN_STATE[:4]


@pytest.mark.slow
def test_three_token_solve_runs():
    """The named limit "three_token" from the idealised state (one compile of the generated RHS)."""
    cfg = co.Config(**REDUCED_CFG)
    tr = co.solve_flow(cfg, REDUCED_TS, reduced="three_token", y0=reduced.idealized_three_token_state(cfg), num_test=4)
    assert tr.status == "ok"
    _check_three_token_signs(np.asarray(tr.observables["G"]))


def test_derive_cli(capsys):
    assert main(["derive", "cooccurrence-3token", "--latex"]) == 0
    out = capsys.readouterr().out
    assert r"\frac{d G_{1}}{dt}" in out and "z_{1}" in out
    assert main(["derive", "cooccurrence-phase2"]) == 0
    assert "dS/dt = m1*(" in capsys.readouterr().out
