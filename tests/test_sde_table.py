"""The SDE solver table of flows.sde, in the default run: each name is the intended diffrax class with the Lévy
area it needs, and four steps of each solver on a nonlinear 2-D drift with additive noise are that method's
update, written out here from its published tableau and driven by the same Brownian increments W (and
space-time Lévy areas H), to 1e-12; with sigma = 0 the same program is the deterministic method of the same
name. The nearest other solver's update differs by more than 1e-3, so a name mapped to another solver fails
here (the strong-order and zero-noise checks of tests/test_sde.py that would also see it are `slow`).

The Brownian motion is `brownian="increments"` (`diffrax.UnsafeBrownianPath`, one draw per step on the
caller's key), which compiles in well under a second per solver; the update formulas do not depend on how the
increments are drawn."""

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.sde import GENERAL_NOISE_SOLVERS, SDE_SOLVERS, STRONG_ORDER, solve_sde


def test_the_table_names_the_intended_diffrax_solvers():
    assert SDE_SOLVERS == {
        "euler": (diffrax.Euler, diffrax.BrownianIncrement),
        "heun": (diffrax.Heun, diffrax.BrownianIncrement),
        "sea": (diffrax.SEA, diffrax.SpaceTimeLevyArea),
        "sra1": (diffrax.SRA1, diffrax.SpaceTimeLevyArea),
        "shark": (diffrax.ShARK, diffrax.SpaceTimeLevyArea),
    }
    assert STRONG_ORDER == {"euler": 1.0, "heun": 1.0, "sea": 1.0, "sra1": 1.5, "shark": 1.5}
    # diffrax's own claims for additive noise agree with the table (its strong_order of a MultiTerm)
    terms = diffrax.MultiTerm(
        diffrax.ODETerm(lambda t, y, a: y),
        diffrax.ControlTerm(lambda t, y, a: y, diffrax.UnsafeBrownianPath((), jax.random.key(0))),
    )
    for name, (cls, _) in SDE_SOLVERS.items():
        if name not in ("euler", "heun"):  # diffrax gives no additive-noise order for its ODE solvers
            assert cls().strong_order(terms) == STRONG_ORDER[name], name
    assert GENERAL_NOISE_SOLVERS == {"euler": 1.0}


SIGMA = np.array([0.9, 0.4])
Y0 = np.array([0.5, -0.3])
DT, T1 = 0.125, 0.5
SOLVERS = ("euler", "heun", "sea", "sra1", "shark")
KEY = jax.random.key(7)


def drift(t, y, args):
    return jnp.stack([jnp.sin(y[1]) - 0.5 * y[0] ** 3 + jnp.cos(t), y[0] * y[1] - 0.3 * y[1]])


def _f(t, y):
    return np.array([np.sin(y[1]) - 0.5 * y[0] ** 3 + np.cos(t), y[0] * y[1] - 0.3 * y[1]])


# Additive-noise stochastic Runge-Kutta methods with two stages: z1 = y + s (w1 W + h1 H),
# z2 = y + h a f1 + s (w2 W + h2 H), y' = y + h (b1 f1 + b2 f2) + s W, f_i = f(t + c_i h, z_i).
# SRA1: Rößler (2010), SRA1 tableau; ShARK: Foster, dos Reis, Strange (2023), eq. (6.1).
_SRK2 = {
    "sra1": dict(w1=0.0, h1=0.0, a=0.75, w2=0.75, h2=1.5, c2=0.75, b=(1.0 / 3.0, 2.0 / 3.0)),
    "shark": dict(w1=0.0, h1=1.0, a=5.0 / 6.0, w2=5.0 / 6.0, h2=1.0, c2=5.0 / 6.0, b=(0.4, 0.6)),
}


@functools.cache
def _increments(levy):
    """(W, H) per step of [0, T1] of the Brownian motion solve_sde draws for KEY (diffrax.UnsafeBrownianPath;
    H is None without a Lévy area)."""
    bm = diffrax.UnsafeBrownianPath(shape=jax.ShapeDtypeStruct((2,), jnp.float64), key=KEY, levy_area=levy)
    steps = range(int(round(T1 / DT)))
    # one compiled program for the steps' draws (drawn eagerly, each primitive compiles on its own)
    incs = jax.jit(lambda: [bm.evaluate(k * DT, (k + 1) * DT, use_levy=True) for k in steps])()
    return tuple((np.asarray(i.W), np.asarray(i.H) if levy is diffrax.SpaceTimeLevyArea else None) for i in incs)


def _hand_path(solver, sigma):
    """The solver's update written out, over the steps of [0, T1], on the increments of the Brownian motion
    solve_sde draws for KEY (W, and H for the Lévy-area solvers)."""
    levy = diffrax.BrownianIncrement if solver in ("euler", "heun") else diffrax.SpaceTimeLevyArea
    y, h, path = Y0.copy(), DT, []
    for k, (W, H) in enumerate(_increments(levy)):
        t0, t1 = k * DT, (k + 1) * DT
        if solver == "euler":  # Euler-Maruyama
            y = y + h * _f(t0, y) + sigma * W
        elif solver == "heun":  # Heun's method with the noise in both stages
            k1 = h * _f(t0, y) + sigma * W
            k2 = h * _f(t1, y + k1) + sigma * W
            y = y + 0.5 * (k1 + k2)
        elif solver == "sea":  # shifted Euler: the drift at y + s (W/2 + H) (Foster et al. 2023, eq. (5.8))
            y = y + h * _f(t0, y + sigma * (0.5 * W + H)) + sigma * W
        else:
            c = _SRK2[solver]
            f1 = _f(t0, y + sigma * (c["w1"] * W + c["h1"] * H))
            f2 = _f(t0 + c["c2"] * h, y + h * c["a"] * f1 + sigma * (c["w2"] * W + c["h2"] * H))
            y = y + h * (c["b"][0] * f1 + c["b"][1] * f2) + sigma * W
        path.append(y.copy())
    return np.array(path)


@pytest.mark.parametrize("solver", SOLVERS)
def test_each_solver_is_its_update_formula(solver):
    """Four steps with noise: the hand-written update of this solver to 1e-12 (measured <= 3e-16), every other
    solver's update more than 1e-3 away (measured: SRA1 and ShARK differ by 2e-3, every other pair by > 1e-2).
    sigma = 0 through the same program (sigma is an argument, not compiled in): the deterministic method, to
    1e-12 (Euler, Heun, the SEA step is Euler's, SRA1's and ShARK's drift stages are two-stage explicit RK
    methods of order 2)."""
    ts = DT * np.arange(1, 5)
    noisy = solve_sde(
        drift,
        jnp.asarray(Y0),
        sigma=jnp.asarray(SIGMA),
        t1=T1,
        dt=DT,
        ts=ts,
        key=KEY,
        solver=solver,
        brownian="increments",
    )
    got = np.asarray(noisy.ys)
    assert got.shape == (4, 2) and noisy.status == "ok" and int(noisy.num_steps) == 4
    assert np.max(np.abs(got - _hand_path(solver, SIGMA))) <= 1e-12
    for other in SOLVERS:
        if other != solver:
            assert np.max(np.abs(got - _hand_path(other, SIGMA))) > 1e-3, other
    quiet = solve_sde(
        drift, jnp.asarray(Y0), sigma=jnp.zeros(2), t1=T1, dt=DT, ts=ts, key=KEY, solver=solver, brownian="increments"
    )
    assert quiet.compile_s == 0.0  # the program of the noisy run
    assert np.max(np.abs(np.asarray(quiet.ys) - _hand_path(solver, 0.0 * SIGMA))) <= 1e-12
