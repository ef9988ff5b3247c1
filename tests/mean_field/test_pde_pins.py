"""The mean-field grid PDE against independent references: the right-hand side on a 2-D chart against a literal
finite-volume loop over the faces (zero data: the velocity is the closed form -lam A^T A c), the grid law's
moments against literal weighted sums with part of the mass escaped, the OU closed form with pure diffusion
(lam = 0) against its lam -> 0 limit and against the grid's own solve of the heat equation, and the noise of
the charted Langevin particles against the exact moments of their Euler-Maruyama scheme (Monte Carlo, stated
standard errors)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.mean_field import Config
from flows.mean_field import chart as ch
from flows.mean_field import grid as gd
from flows.mean_field import grid_laws as gl
from flows.mean_field.observables import make_args

CFG = Config(d=2, D=3, N=4, L=2, M=8, n_train=16, lam=0.6, seed=0)
SCALES = np.array([1.0, 0.5])  # A^T A = diag(1, 1/4): a different drift rate along each axis
BOX = gd.Box((-2.0, -1.5), (2.5, 1.0), (6, 5))  # unequal cells and widths


def _chart():
    A = np.zeros((2, 2, 3, 3))
    A[0, 0, 2, 2] = SCALES[0]  # c_0 sets V[d, d]
    A[1, 1, 0, 1] = SCALES[1]  # c_1 sets W[0, 1]
    return ch.Chart(A)


def _state(seed=0, escaped=(0.1, 0.25)):
    """Random positive cell masses per slice (different slices), each slice's box mass 1 - escaped."""
    rng = np.random.default_rng(seed)
    m = rng.uniform(0.2, 1.0, size=(CFG.L, *BOX.cells))
    m = m / m.reshape(CFG.L, -1).sum(1)[:, None, None] * (1.0 - np.asarray(escaped))[:, None, None]
    return {"attention": jnp.asarray(m), "attention_escaped": jnp.asarray(escaped)}


def _van_leer(a, b):
    return 2.0 * a * b / (a + b) if a * b > 0 else 0.0


def _literal_rhs(m, T, flux, lam):
    """d m / d tau of one slice by a loop over every face: velocity -lam s_k^2 c_k (the k-th component, at the
    face centre), upwind (or van Leer MUSCL) states with zero mass outside, minus T times the mass gradient;
    each face's flux leaves the cell below it and enters the cell above it; the boundary faces' net outflow is
    the escaped rate."""
    dm = np.zeros_like(m)
    escaped = 0.0
    for k in range(2):
        n, h = BOX.cells[k], BOX.widths[k]
        edges = BOX.edges(k)
        for other in range(BOX.cells[1 - k]):

            def cell(i, k=k, n=n, other=other):  # the mass of cell i along axis k (0 outside the box)
                if i < 0 or i >= n:
                    return 0.0
                return m[i, other] if k == 0 else m[other, i]

            def slope(i):
                return _van_leer(cell(i) - cell(i - 1), cell(i + 1) - cell(i))

            for j in range(n + 1):  # face j between cells j - 1 and j
                u = -lam * SCALES[k] ** 2 * edges[j]
                lo, hi = cell(j - 1), cell(j)
                if flux == "muscl":
                    lo, hi = lo + 0.5 * slope(j - 1), hi - 0.5 * slope(j)
                G = (max(u, 0.0) * lo + min(u, 0.0) * hi) / h - T * (cell(j) - cell(j - 1)) / h**2
                for i, sign in ((j - 1, -1.0), (j, 1.0)):
                    if 0 <= i < n:
                        dm[(i, other) if k == 0 else (other, i)] += sign * G
                escaped += G if j == n else -G if j == 0 else 0.0
    return dm, escaped


@pytest.mark.parametrize("flux", ["upwind", "muscl"])
def test_two_dimensional_rhs_is_the_literal_face_loop(flux):
    """Every face of a 2-D chart reads the velocity component along its own axis (rates lam and lam / 4 here), the
    width of its own axis, the upwind side of its velocity's sign, and diffuses with T."""
    T = 0.07
    flow = gd.GridFlow(CFG, _chart(), {"attention": BOX}, temperature=T, flux=flux)
    args = make_args(CFG, gl.zero_data(CFG))
    state = _state()
    got = jax.jit(flow.rhs)(0.0, state, args)
    for slice_ in range(CFG.L):
        dm, escaped = _literal_rhs(np.asarray(state["attention"][slice_]), T, flux, CFG.lam)
        np.testing.assert_allclose(got["attention"][slice_], dm, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got["attention_escaped"][slice_], escaped, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(dm)) > 1e-2  # the field moves mass (cell masses ~ 0.03)


def test_grid_law_moments_are_the_literal_weighted_sums():
    """Mass per slice = mass in the box + escaped; mean and variance of the law in the box (normalised by the
    mass still in it, per slice), per axis."""
    flow = gd.GridFlow(CFG, _chart(), {"attention": BOX})
    state = _state()
    out = jax.jit(flow.summary)(0.0, state, make_args(CFG, gl.zero_data(CFG)))
    x, y = np.meshgrid(BOX.mids(0), BOX.mids(1), indexing="ij")
    for slice_ in range(CFG.L):
        m = np.asarray(state["attention"][slice_])
        mass = m.sum()
        mean = np.array([(m * x).sum(), (m * y).sum()]) / mass
        var = np.array([(m * x * x).sum(), (m * y * y).sum()]) / mass - mean**2
        np.testing.assert_allclose(out["attention_mean"][slice_], mean, rtol=1e-13)
        np.testing.assert_allclose(out["attention_var"][slice_], var, rtol=1e-12)
        np.testing.assert_allclose(out["attention_mass"][slice_], 1.0, rtol=1e-14)
        np.testing.assert_allclose(out["attention_escaped"][slice_], state["attention_escaped"][slice_], rtol=0)
    np.testing.assert_allclose(out["attention_min"], np.min(np.asarray(state["attention"])), rtol=0)


def test_ou_closed_form_with_pure_diffusion():
    """lam = 0: the heat kernel, mean fixed and variance var0 + 2 T tau (the OU law's lam -> 0 limit)."""
    tau = np.array([0.0, 0.3, 1.0, 4.0])
    mean, var = gl.ou_moments(0.7, 0.09, 0.0, 0.2, tau)
    np.testing.assert_allclose(mean, 0.7, rtol=0)
    np.testing.assert_allclose(var, 0.09 + 0.4 * tau, rtol=1e-14)
    near_mean, near_var = gl.ou_moments(0.7, 0.09, 1e-7, 0.2, tau)
    np.testing.assert_allclose(var, near_var, rtol=1e-6)
    np.testing.assert_allclose(mean, near_mean, rtol=1e-6)


@pytest.mark.slow
def test_grid_heat_equation_matches_the_pure_diffusion_closed_form():
    """A second scheme for lam = 0: the grid PDE (zero data, MUSCL, 100 cells of h = 0.1) from the Gaussian
    N(1, 0.3^2) to tau = 1.5 at T = 0.1; its mean and variance against `ou_moments` (the cell-centre quadrature
    adds h^2 / 12 to the variance), within 1% of the variance."""
    cfg = Config(d=2, D=3, N=4, L=1, M=4, lam=0.0)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1),))
    box = gd.Box((-4.0,), (6.0,), (100,))
    flow = gd.GridFlow(cfg, chart, {"attention": box}, temperature=0.1, flux="muscl")
    sol = gd.solve_grid(flow, [0.0, 1.5], {"attention": gl.gaussian_masses(box, 1.0, 0.3)}, data=gl.zero_data(cfg))
    assert sol.ok, sol.message
    mean, var = gl.ou_moments(1.0, 0.09, 0.0, 0.1, 1.5)
    h = box.widths[0]
    assert abs(sol.observables["attention_mean"][-1, 0, 0] - mean) < 1e-4
    assert abs(sol.observables["attention_var"][-1, 0, 0] - (var + h * h / 12)) < 1e-2 * var, var


def test_charted_langevin_noise_is_sqrt_2T():
    """The charted particles at T > 0 (zero data, orthonormal chart: drift -lam c) solved by Euler-Maruyama with
    step dt: c_K = a^K c_0 + noise of variance 2 T dt sum_j a^(2j), a = 1 - lam dt, the law of the scheme
    itself (no dt bias). The sample variance of 1000 particles at tau = 1 against it, within 4 standard
    errors (var sqrt(2 / n)); noise sqrt(T) would give half the noise variance."""
    lam, T, dt, tau = 1.0, 0.3, 0.05, 1.0
    cfg = Config(d=2, D=3, N=4, L=1, M=1000, M_mlp=1, lam=lam)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1),))
    rng = np.random.default_rng(4)
    c0 = 0.5 + 0.1 * rng.standard_normal((cfg.L, cfg.M, 1))
    c = {"attention": jnp.asarray(c0), "mlp": jnp.zeros((cfg.L, 1, 0))}
    tr = ch.solve_charted(
        cfg, chart, [0.0, tau], c, data=gl.zero_data(cfg), temperature=T, dt=dt, seed=3, save_states=True
    )
    assert tr.ok, tr.message
    end = np.asarray(tr.ys["attention"][-1]).ravel()
    K = round(tau / dt)
    a = 1.0 - lam * dt
    noise = 2.0 * T * dt * np.sum(a ** (2 * np.arange(K)))
    want_mean = a**K * c0.mean()
    want_var = a ** (2 * K) * c0.var() + noise
    n = end.size
    assert abs(end.mean() - want_mean) < 4.0 * np.sqrt(want_var / n), (end.mean(), want_mean)
    assert abs(end.var() - want_var) < 4.0 * want_var * np.sqrt(2.0 / n), (end.var(), want_var)
