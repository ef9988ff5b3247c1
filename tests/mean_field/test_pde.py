"""The grid PDE of the charted mean-field flow held against closed forms and against particles: the OU
Fokker-Planck solution with the data term off, the grid's convergence order on the full flow, the energy
identity dQ/dtau = -dissipation on the grid law, and particles against the PDE as M grows (T = 0 and T > 0)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.fitting import power_law_fit
from flows.mean_field import Config, training_set
from flows.mean_field import chart as ch
from flows.mean_field import grid as gd
from flows.mean_field import grid_laws as gl
from flows.mean_field.observables import make_args

CFG = Config(d=2, D=3, N=4, L=2, M=8, n_train=16, lam=0.01, seed=0)
BOX = ((-3.0,), (5.0,))
MEAN0, STD0 = 0.5, 0.5


def _chart():
    A = np.zeros((1, 2, 3, 3))
    A[0, 0, 2, 2] = 1.0
    A[0, 1] = 0.5 * np.eye(3)
    return ch.Chart(A)


def _box(n):
    return gd.Box(*BOX, (n,))


def _ou_errors(flux, cells, lam=1.0, T=0.1, tau=1.0):
    cfg = Config(d=2, D=3, N=4, L=1, M=4, lam=lam)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1),))
    mean, var = gl.ou_moments(1.0, 0.09, lam, T, tau)
    rows = []
    for n in cells:
        box = gd.Box((-3.0,), (3.0,), (n,))
        flow = gd.GridFlow(cfg, chart, {"attention": box}, temperature=T, flux=flux)
        sol = gd.solve_grid(
            flow, [0.0, tau], {"attention": gl.gaussian_masses(box, 1.0, 0.3)}, data=gl.zero_data(cfg), save_states=True
        )
        assert sol.ok, sol.message
        exact = gl.gaussian_masses(box, mean, np.sqrt(var))
        l1 = float(np.abs(np.asarray(sol.states["attention"][-1, 0]) - exact).sum())
        rows.append((l1, sol.observables["attention_mean"][-1, 0, 0], sol.observables["attention_var"][-1, 0, 0]))
    return np.array(rows), mean, var


# upwind in -m slow; the second-order scheme is the default run's check
@pytest.mark.parametrize(
    "flux, low, high", [pytest.param("upwind", 0.75, 1.25, marks=pytest.mark.slow), ("muscl", 1.7, 2.3)]
)
def test_ou_fokker_planck_gaussian_at_the_scheme_order(flux, low, high):
    """Data term off (zero prompts): the grid law against the exact Gaussian's cell masses, L1 error at
    h, h/2, h/4: the observed order is the scheme's (1 upwind, 2 MUSCL)."""
    rows, mean, var = _ou_errors(flux, (40, 80, 160))
    orders = np.log2(rows[:-1, 0] / rows[1:, 0])
    assert np.all((orders >= low) & (orders <= high)), orders
    if flux == "muscl":  # the moments at the finest grid (var carries the cell-centre quadrature's h^2/12)
        assert abs(rows[-1, 1] - mean) <= 1e-3 * abs(mean)
        assert abs(rows[-1, 2] - var) <= 1e-2 * var


def _solve_grid(n, flux="muscl", tau=1.0, T=0.0, saves=2):
    box = _box(n)
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, temperature=T, flux=flux)
    sol = gd.solve_grid(
        flow, np.linspace(0.0, tau, saves), {"attention": gl.gaussian_masses(box, MEAN0, STD0)}, save_states=True
    )
    assert sol.ok, sol.message
    return sol


def _orders(sols):
    Q = np.array([s.observables["Q"][-1] for s in sols])
    dQ = np.abs(np.diff(Q))
    q_orders = np.log2(dQ[:-1] / dQ[1:])
    m = [np.asarray(s.states["attention"][-1]) for s in sols]
    diffs = np.array([np.abs(m[i] - m[i + 1].reshape(CFG.L, -1, 2).sum(-1)).sum() for i in range(len(m) - 1)])
    return q_orders, np.log2(diffs[:-1] / diffs[1:])


@pytest.mark.slow  # the order at three grids; the OU order and the energy identity stay in the default run
def test_full_flow_grid_convergence_order_fast():
    """MUSCL on the data-driven flow: Q(1) and the density (coarsened to the coarser grid) at n, 2n, 4n cells;
    the measured order of the successive differences is about 2."""
    q_orders, m_orders = _orders([_solve_grid(n) for n in (20, 40, 80)])
    assert 1.6 <= q_orders[0] <= 3.0, q_orders
    assert 1.6 <= m_orders[0] <= 2.6, m_orders


@pytest.mark.slow
def test_full_flow_grid_convergence_order_slow():
    q_orders, m_orders = _orders([_solve_grid(n) for n in (40, 80, 160, 320)])
    assert np.all((q_orders >= 1.6) & (q_orders <= 2.8)), q_orders
    assert np.all((m_orders >= 1.7) & (m_orders <= 2.4)), m_orders
    up_q, up_m = _orders([_solve_grid(n, "upwind") for n in (40, 80, 160, 320)])
    assert np.all((up_m >= 0.8) & (up_m <= 1.3)), up_m


def _energy_gap(n, flux, state=None):
    box = _box(n)
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, flux=flux)
    args = make_args(CFG, training_set(CFG))
    if state is None:
        state = flow.initial_state({"attention": gl.gaussian_masses(box, MEAN0, STD0)})

    @jax.jit
    def gap(s):
        _, dQ = jax.jvp(lambda x: flow.summary(0.0, x, args)["Q"], (s,), (flow.rhs(0.0, s, args),))
        return dQ, flow.summary(0.0, s, args)["dissipation"]

    dQ, diss = gap(state)
    return float(dQ), float(diss)


@pytest.mark.slow  # the OU order pins the grid's fluxes in the default run
def test_energy_identity_on_the_grid_law():
    """dQ/dtau (the chain rule through the grid's own right-hand side) = -(1/L) sum_l sum_c m_c |u(c)|^2, up to
    the scheme's error: first order for upwind (halves with h), small for MUSCL."""
    dQ, diss = _energy_gap(80, "muscl")
    assert diss > 1e-4 and abs(dQ + diss) <= 0.02 * diss
    later = _solve_grid(80, tau=1.0)
    dQ1, diss1 = _energy_gap(80, "muscl", {k: v[-1] for k, v in later.states.items()})
    assert abs(dQ1 + diss1) <= 0.02 * diss1
    assert -dQ1 > 0.0  # Q decreases
    gaps = [abs(sum(_energy_gap(n, "upwind"))) / _energy_gap(n, "upwind")[1] for n in (40, 80)]
    assert 1.7 <= gaps[0] / gaps[1] <= 2.5, gaps


def _particle_gaps(Ms, seeds, T=0.0, n=200, tau=1.0, dt=0.01):
    sol = _solve_grid(n, tau=tau, T=T)
    box = _box(n)
    data = training_set(CFG)
    rows = []
    for M in Ms:
        cfg = CFG.replace(M=M, M_mlp=1)
        for s in seeds:
            x = gl.sample_gaussian(box, MEAN0, STD0, (cfg.L, M), 1000 * M + s)
            c = {"attention": jnp.asarray(x), "mlp": jnp.zeros((cfg.L, 1, 0))}
            tr = ch.solve_charted(
                cfg, _chart(), [0.0, tau], c, data=data, save_states=True, temperature=T, dt=dt if T else None, seed=s
            )
            w2 = np.mean(
                [
                    gl.grid_w2(np.asarray(tr.ys["attention"][-1, k]), box, np.asarray(sol.states["attention"][-1, k]))
                    for k in range(cfg.L)
                ]
            )
            dQ = abs(float(tr.observables["Q"][-1] - sol.observables["Q"][-1]))
            dR = abs(float(tr.observables["R"][-1] - sol.observables["R"][-1]))
            rows.append((M, s, dQ, dR, w2))
    return np.array(rows)


def _fits(rows):
    return {
        name: power_law_fit(rows[:, 0], rows[:, col], seeds=rows[:, 1], n_boot=500)
        for name, col in (("Q", 2), ("R", 3), ("W2", 4))
    }


@pytest.mark.slow  # particle clouds at three widths and six seeds; the charted particles are pinned in test_chart.py
@pytest.mark.parametrize("T", [0.0, 0.02])
def test_particles_approach_the_pde_like_m_to_the_minus_half(T):
    """Particles (ODE at T = 0, the Langevin SDE at T > 0) from the law the grid starts from: the gaps in Q(1),
    R(1) and the W2 per depth slice fall like M^(-1/2) (fitted slope, 95% cluster-bootstrap interval)."""
    fits = _fits(_particle_gaps((16, 64, 256), range(6), T=T))
    assert fits["W2"].contains(-0.5) and fits["W2"].slope_ci[1] < -0.3, fits["W2"]
    for name in ("Q", "R"):
        assert fits[name].contains(-0.5) and fits[name].slope < -0.2, fits[name]


@pytest.mark.slow
@pytest.mark.parametrize("T", [0.0, 0.02])
def test_particles_approach_the_pde_like_m_to_the_minus_half_slow(T):
    fits = _fits(_particle_gaps((16, 64, 256, 1024, 4096), range(10), T=T, n=400, dt=0.005))
    for name in ("Q", "R"):
        assert fits[name].contains(-0.5) and fits[name].slope_ci[1] < -0.25, fits[name]
    # W2 of M samples from a law with Gaussian tails falls slower than M^(-1/2) by a log factor (in one
    # dimension E W2^2 ~ log log M / M for the normal law: Bobkov and Ledoux 2019): over M = 16 .. 4096 its
    # fitted slope is about -0.46 with an interval too narrow to hold -0.5, so the check is a band around -1/2
    # that excludes the -1/4 of a W2 that saturates on the grid and anything steeper than the log factor allows
    w2 = fits["W2"]
    assert -0.55 <= w2.slope_ci[0] and w2.slope_ci[1] <= -0.38, w2
