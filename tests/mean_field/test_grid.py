"""The grid solver of the charted mean-field flow (flows.mean_field.grid): conservation, positivity, the box
status, and the grid law as weighted atoms of the particles' code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows import mean_field as mf
from flows.mean_field import Config, training_set
from flows.mean_field import chart as ch
from flows.mean_field import grid as gd
from flows.mean_field import grid_laws as gl
from flows.mean_field.observables import make_args

CFG = Config(d=2, D=3, N=4, L=2, M=8, n_train=16, lam=0.01, seed=0)


def _chart():
    A = np.zeros((1, 2, 3, 3))
    A[0, 0, 2, 2] = 1.0
    A[0, 1] = 0.5 * np.eye(3)
    return ch.Chart(A)


def test_mass_conserved_and_nonnegative_with_data_and_noise():
    box = gd.Box((-3.0,), (5.0,), (40,))
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, temperature=0.05, flux="muscl")
    sol = gd.solve_grid(flow, np.linspace(0.0, 1.0, 5), {"attention": gl.gaussian_masses(box, 0.5, 0.5)})
    assert sol.ok, sol.message
    assert np.max(np.abs(sol.observables["attention_mass"] - 1.0)) <= 1e-12
    assert np.min(sol.observables["attention_min"]) >= -1e-12
    assert np.max(sol.observables["attention_escaped"]) < 1e-6
    assert np.ptp(sol.observables["Q"]) > 1e-4  # the law moved


@pytest.mark.slow  # mass and nonnegativity with data and noise stay in the default run
def test_ssp_heun_upwind_keeps_every_mass_nonnegative():
    """Heun is strong-stability preserving: under the CFL and diffusion step bounds upwind masses stay >= 0."""
    box = gd.Box((-3.0,), (5.0,), (40,))
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, temperature=0.05, flux="upwind")
    sol = gd.solve_grid(
        flow, np.linspace(0.0, 0.5, 3), {"attention": gl.gaussian_masses(box, 0.5, 0.5)}, solver="heun", dt=0.02
    )
    assert sol.ok, sol.message
    assert np.min(sol.observables["attention_min"]) >= 0.0
    assert np.max(np.abs(sol.observables["attention_mass"] - 1.0)) <= 1e-12


def test_leaving_the_box_is_a_status_and_the_mass_is_accounted():
    cfg = CFG.replace(lam=1.0)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1),))
    box = gd.Box((-1.0,), (1.0,), (30,))
    flow = gd.GridFlow(cfg, chart, {"attention": box}, temperature=1.0)
    sol = gd.solve_grid(
        flow, np.linspace(0.0, 0.5, 3), {"attention": gl.gaussian_masses(box, 0.0, 0.3)}, data=gl.zero_data(cfg)
    )
    assert sol.status == "left_box" and not sol.ok and "left the box" in sol.message
    assert np.max(sol.observables["attention_escaped"]) > 1e-3
    assert np.max(np.abs(sol.observables["attention_mass"] - 1.0)) <= 1e-12


def test_the_grid_law_is_the_particle_model_of_its_cell_centres():
    """Equal cell masses: the grid law is n equal atoms at the centres, so Q, R and the velocity at the
    centres are those of the charted network with M = n particles there."""
    n = 12
    box = gd.Box((-1.0,), (2.0,), (n,))
    flow = gd.GridFlow(CFG, _chart(), {"attention": box})
    state = flow.initial_state({"attention": np.full(n, 1.0 / n)})
    data = training_set(CFG)
    args = make_args(CFG, data)
    summary = jax.jit(flow.summary)(0.0, state, args)
    cfg = CFG.replace(M=n, M_mlp=1)
    c = {
        "attention": jnp.broadcast_to(jnp.asarray(box.centres())[None], (CFG.L, n, 1)),
        "mlp": jnp.zeros((CFG.L, 1, 0)),
    }
    lam, thr, d = args["lam"], args["threshold"], args["d"]
    Q = ch.charted_objective(_chart(), c, data.Z0, data.y, lam, thr, d)
    R = ch.charted_risk(_chart(), c, data.Z0, data.y, thr, d)
    assert abs(float(summary["Q"] - Q)) <= 1e-13 * abs(float(Q))
    assert abs(float(summary["R"] - R)) <= 1e-13 * abs(float(R))
    v_grid = jax.jit(lambda s: flow.velocity(s, {"attention": box.centres()}, args))(state)["attention"]
    v_part = ch.charted_velocity(_chart(), c, data.Z0, data.y, lam, thr, d)["attention"]
    np.testing.assert_allclose(v_grid, v_part, rtol=1e-11, atol=1e-14)
    diss = float(jnp.sum(v_part**2)) / (cfg.M * cfg.L)
    assert abs(float(summary["dissipation"]) - diss) <= 1e-12 * diss


def test_zero_data_leaves_the_weight_decay_drift():
    cfg = CFG.replace(lam=0.7)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1), (1, 0, 1, 1)))
    box = gd.Box((-2.0, -2.0), (2.0, 2.0), (6, 5))
    flow = gd.GridFlow(cfg, chart, {"attention": box})
    state = flow.initial_state({"attention": gl.gaussian_masses(box, (0.3, -0.2), 0.6)})
    faces = box.faces(1)
    v = flow.velocity(state, {"attention": faces}, make_args(cfg, gl.zero_data(cfg)))["attention"]
    np.testing.assert_allclose(v, -0.7 * np.broadcast_to(faces, v.shape), rtol=1e-14, atol=1e-16)


@pytest.mark.slow  # the 2-D chart's velocity is autodiff's in test_chart.py
def test_two_dimensional_grid_with_the_mlp_kept():
    chart = ch.Chart(
        _chart().attention.repeat(2, 0) * np.array([1.0, 0.5])[:, None, None, None], np.eye(3)[None, :2] * 0.7
    )
    boxes = {"attention": gd.Box((-3.0, -3.0), (4.0, 4.0), (10, 10)), "mlp": gd.Box((-3.0,), (4.0,), (14,))}
    flow = gd.GridFlow(CFG, chart, boxes, temperature=0.02, flux="muscl")
    masses = {
        "attention": gl.gaussian_masses(boxes["attention"], (0.5, 0.2), 0.5),
        "mlp": gl.gaussian_masses(boxes["mlp"], 0.3, 0.5),
    }
    sol = gd.solve_grid(flow, np.linspace(0.0, 0.5, 3), masses)
    assert sol.ok, sol.message
    for g in ("attention", "mlp"):
        assert np.max(np.abs(sol.observables[g + "_mass"] - 1.0)) <= 1e-12
    assert np.ptp(sol.observables["mlp_mean"]) > 1e-5  # the MLP law moves too


def test_sampler_and_cell_masses_are_one_law():
    box = gd.Box((-1.0,), (2.0,), (30,))
    m = gl.gaussian_masses(box, 0.4, 0.5)
    x = gl.sample_gaussian(box, 0.4, 0.5, (20000,), 0)
    assert x.min() >= -1.0 and x.max() <= 2.0
    counts = np.histogram(x[:, 0], bins=box.edges(0))[0] / x.shape[0]
    assert np.max(np.abs(counts - m)) < 5 * np.sqrt(m.max() / x.shape[0])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="lower must be < upper"):
        gd.Box((1.0,), (0.0,), (4,))
    with pytest.raises(ValueError, match="cells"):
        gd.Box((0.0,), (1.0,), (1,))
    box = gd.Box((0.0,), (1.0,), (4,))
    with pytest.raises(ValueError, match="boxes"):
        gd.GridFlow(CFG, _chart(), {"mlp": box})
    with pytest.raises(ValueError, match="flux"):
        gd.GridFlow(CFG, _chart(), {"attention": box}, flux="central")
    with pytest.raises(ValueError, match="temperature"):
        gd.GridFlow(CFG, _chart(), {"attention": box}, temperature=-1.0)
    flow = gd.GridFlow(CFG, _chart(), {"attention": box})
    with pytest.raises(ValueError, match="masses\\['attention'\\]"):
        flow.initial_state({"attention": np.full(4, 0.3)})
    # the spec's "grid" limit starts from cell masses only (its state is not the network's parameters)
    assert gd.grid_limit(flow) is gd.grid_limit(gd.GridFlow(CFG, _chart(), {"attention": box}))
    spec = mf.system(CFG).replace(reduced={"grid": gd.grid_limit(flow)})
    with pytest.raises(ValueError, match="y0"):
        flows.solve_flow(spec, [0.0, 1.0], reduced="grid")
    with pytest.raises(ValueError, match="flow"):
        gd.grid_limit(_chart())


@pytest.mark.slow
def test_implicit_solver_for_stiff_diffusion():
    """kvaerno5 (its Newton steps differentiate the grid field in forward mode) agrees with tsit5."""
    cfg = CFG.replace(lam=1.0, L=1)
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1),))
    box = gd.Box((-3.0,), (3.0,), (30,))
    flow = gd.GridFlow(cfg, chart, {"attention": box}, temperature=0.3, flux="muscl")
    m0 = {"attention": gl.gaussian_masses(box, 0.5, 0.4)}
    kw = dict(data=gl.zero_data(cfg), save_states=True, rtol=1e-8, atol=1e-11, mass_tol=1e-4)
    implicit = gd.solve_grid(flow, [0.0, 0.5], m0, solver="kvaerno5", **kw)
    explicit = gd.solve_grid(flow, [0.0, 0.5], m0, **kw)
    assert implicit.ok and explicit.ok
    np.testing.assert_allclose(implicit.states["attention"][-1], explicit.states["attention"][-1], atol=1e-7)
    assert abs(implicit.observables["attention_mass"][-1, 0] - 1.0) <= 1e-12
