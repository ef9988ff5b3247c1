"""The charted mean-field transformer (flows.mean_field.chart) and the law as weighted atoms (model weights)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.mean_field import Config, init_particles, training_set
from flows.mean_field import chart as ch
from flows.mean_field import gradients as gr
from flows.mean_field import model as mm
from flows.mean_field import observables as obs

CFG = Config(d=2, D=3, N=4, L=3, M=5, M_mlp=4, n_train=6, lam=0.05, seed=3)


def _chart(p=2, q=1, seed=0):
    rng = np.random.default_rng(seed)
    return ch.Chart(rng.normal(size=(p, 2, 3, 3)) / 3, rng.normal(size=(q, 2, 3)) / 2 if q else None)


def _cparticles(config, chart, seed=1):
    rng = np.random.default_rng(seed)
    return {
        "attention": jnp.asarray(rng.normal(size=(config.L, config.M, chart.dims["attention"]))),
        "mlp": jnp.asarray(rng.normal(size=(config.L, config.M_mlp, chart.dims["mlp"]))),
    }


def _consts(config, data):
    return jnp.asarray(config.lam), jnp.asarray(config.threshold), jnp.asarray(config.d, jnp.int32)


@pytest.mark.parametrize(
    "p, q", [pytest.param(1, 0, marks=pytest.mark.slow), pytest.param(2, 1, marks=pytest.mark.slow), (2, 2)]
)
def test_charted_velocity_is_autodiff_of_the_charted_objective(p, q):
    chart = _chart(p, q)
    data = training_set(CFG)
    c = _cparticles(CFG, chart)
    lam, threshold, d = _consts(CFG, data)
    # jitted: eagerly, both sides dispatch op by op (seconds)
    v = jax.jit(lambda c: ch.charted_velocity(chart, c, data.Z0, data.y, lam, threshold, d))(c)
    g = jax.jit(jax.grad(lambda c: ch.charted_objective(chart, c, data.Z0, data.y, lam, threshold, d)))(c)
    want = {"attention": -CFG.M * CFG.L * g["attention"], "mlp": -CFG.M_mlp * CFG.L * g["mlp"]}
    for k in ch.CHARTED_GROUPS:
        assert v[k].shape == c[k].shape
        if v[k].size:
            scale = float(jnp.max(jnp.abs(want[k])))
            assert float(jnp.max(jnp.abs(v[k] - want[k]))) <= 1e-12 * max(scale, 1.0)
    assert float(jnp.max(jnp.abs(v["attention"]))) > 1e-3  # not a trivial zero


def test_orthonormal_chart_decay_is_plain_ou_drift():
    """Zero prompts switch the data term off: the velocity is -lam A^T A c = -lam c for an orthonormal chart."""
    chart = ch.coordinate_chart(3, attention=((0, 2, 2, 1), (1, 0, 1, -1)), mlp=((1, 2, 1),))
    assert np.allclose(chart.gram("attention"), np.eye(2)) and np.allclose(chart.gram("mlp"), np.eye(1))
    c = _cparticles(CFG, chart)
    Z0, y = jnp.zeros((4, 3, 5)), jnp.zeros(4)
    lam, threshold, d = _consts(CFG, None)
    v = ch.charted_velocity(chart, c, Z0, y, lam, threshold, d)
    for k in ch.CHARTED_GROUPS:
        np.testing.assert_allclose(v[k], -CFG.lam * c[k], rtol=1e-14, atol=1e-16)


def test_expand_and_pullback_are_transposes():
    chart = _chart(2, 2, seed=4)
    c = _cparticles(CFG, chart, seed=5)
    full = init_particles(CFG)
    lhs = sum(float(jnp.sum(expand_k * full[k])) for k, expand_k in ch.expand(chart, c).items())
    pb = ch.pullback(chart, full)
    rhs = sum(float(jnp.sum(c[k] * pb[k])) for k in ch.CHARTED_GROUPS)
    assert abs(lhs - rhs) <= 1e-13 * max(1.0, abs(lhs))


def _ones(config):
    return {"attention": jnp.ones((config.L, config.M)), "mlp": jnp.ones((config.L, config.M_mlp))}


def test_equal_weights_reproduce_the_particle_numbers_bit_for_bit():
    data = training_set(CFG)
    parts = init_particles(CFG)
    w = _ones(CFG)
    assert np.array_equal(mm.forward(CFG, parts, data.Z0), mm.forward(CFG, parts, data.Z0, weights=w))
    assert np.array_equal(mm.risk(CFG, parts, data), mm.risk(CFG, parts, data, weights=w))
    assert np.array_equal(mm.objective(CFG, parts, data), mm.objective(CFG, parts, data, weights=w))
    lam, threshold, d = _consts(CFG, data)
    a = gr.adjoint_states(parts, data.Z0, data.y, threshold, d)
    b = gr.adjoint_states(parts, data.Z0, data.y, threshold, d, w)
    for x, z in zip(a, b, strict=True):
        assert np.array_equal(x, z)


def test_a_repeated_atom_is_an_atom_of_double_weight():
    """The law (1/M) sum_j m_j delta_j: atoms 0 and 1 equal, weights (1, 1, ...) against (2, 0, ...)."""
    data = training_set(CFG)
    parts = init_particles(CFG)
    dup = {k: v.at[:, 1].set(v[:, 0]) for k, v in parts.items()}
    w = _ones(CFG)
    w2 = {k: v.at[:, 0].set(2.0).at[:, 1].set(0.0) for k, v in w.items()}
    q1, q2 = mm.objective(CFG, dup, data), mm.objective(CFG, parts, data, weights=w2)
    assert abs(float(q1 - q2)) <= 1e-14 * abs(float(q1))
    r1, r2 = mm.risk(CFG, dup, data), mm.risk(CFG, parts, data, weights=w2)
    assert abs(float(r1 - r2)) <= 1e-14 * abs(float(r1))
    assert abs(float(r1 - mm.risk(CFG, parts, data))) > 1e-8  # atom 1 differs from atom 0
    # the attention and the MLP weights each enter the forward pass
    for group in ("attention", "mlp"):
        only = {**w, group: w2[group]}
        other = {
            k: (dup if k in {"attention": ("V", "W"), "mlp": ("W1", "W2")}[group] else parts)[k] for k in mm.GROUPS
        }
        y1, y2 = mm.forward(CFG, other, data.Z0), mm.forward(CFG, parts, data.Z0, weights=only)
        np.testing.assert_allclose(y2, y1, rtol=1e-13, atol=1e-15)
    # the weight decay of a weighted law: lam/(2 M L) sum m |theta|^2 (and lam/(2 M_mlp L) for the MLP)
    w4 = {k: v.at[:, 2].set(0.0).at[:, 3].set(2.5) for k, v in w.items()}
    m = {"V": w4["attention"], "W": w4["attention"], "W1": w4["mlp"], "W2": w4["mlp"]}
    scale = {"V": CFG.M * CFG.L, "W": CFG.M * CFG.L, "W1": CFG.M_mlp * CFG.L, "W2": CFG.M_mlp * CFG.L}
    want = sum(
        0.5 * CFG.lam / scale[k] * float(jnp.sum(m[k] * jnp.sum(parts[k] ** 2, axis=tuple(range(2, parts[k].ndim)))))
        for k in mm.GROUPS
    )
    assert abs(float(mm.decay(parts, CFG.lam, w4)) - want) <= 1e-14 * want
    # non-uniform weights change the numbers (the weights are used)
    w3 = {k: v.at[:, 2].set(3.0) for k, v in w.items()}
    assert abs(float(mm.objective(CFG, dup, data, weights=w3) - q1)) > 1e-8


@pytest.mark.slow  # the probe is -grad of the first variation (above), which the particle velocity is too
def test_probe_velocity_at_the_particles_is_the_particle_velocity():
    data = training_set(CFG)
    parts = init_particles(CFG)
    lam, threshold, d = _consts(CFG, data)
    v = gr.probe_velocity(parts, data.Z0, data.y, lam, threshold, d, probes=parts)
    want = gr.velocity_adjoint(parts, data.Z0, data.y, lam, threshold, d)
    for k in mm.GROUPS:
        np.testing.assert_allclose(v[k], want[k], rtol=1e-12, atol=1e-14)
    # charted: the probe field at the atoms (equal weights) is the charted particle velocity
    chart = _chart(2, 1)
    c = _cparticles(CFG, chart)
    vc = ch.charted_probe_velocity(chart, c, c, data.Z0, data.y, lam, threshold, d, weights=_ones(CFG))
    wc = ch.charted_velocity(chart, c, data.Z0, data.y, lam, threshold, d)
    for k in ch.CHARTED_GROUPS:
        np.testing.assert_allclose(vc[k], wc[k], rtol=1e-11, atol=1e-13)


def test_probe_velocity_is_minus_the_gradient_of_the_first_variation():
    """The existing first variation, unchanged, at expanded charted probes: -grad_c (g + lam/2 |A c|^2)."""
    chart = _chart(2, 1, seed=7)
    data = training_set(CFG)
    c = _cparticles(CFG, chart)
    probe = jnp.asarray(np.random.default_rng(8).normal(size=(1, 1, 2)))
    lam, threshold, d = _consts(CFG, data)
    full = ch.expand(chart, c)

    def g(pc):
        pr = ch.expand(chart, {"attention": pc, "mlp": jnp.zeros((1, 1, 1))})
        probes = {"V": pr["V"][0], "W": pr["W"][0]}
        fv = obs._first_variation(full, data.Z0, data.y, threshold, d, (probes["V"], probes["W"]), None)
        return fv["attention"][0, 0] + 0.5 * lam * (jnp.sum(pr["V"] ** 2) + jnp.sum(pr["W"] ** 2))

    grad = jax.jit(jax.grad(g))(probe)  # jitted: eagerly it dispatches op by op (seconds)
    probes = {"attention": jnp.broadcast_to(probe, (CFG.L, 1, 2)), "mlp": jnp.zeros((CFG.L, 0, 1))}
    v = jax.jit(lambda c, probes: ch.charted_probe_velocity(chart, c, probes, data.Z0, data.y, lam, threshold, d))(
        c, probes
    )
    np.testing.assert_allclose(v["attention"][0, 0], -grad[0, 0], rtol=1e-11, atol=1e-13)


def test_euler_flow_is_gd():
    chart = _chart(2, 1)
    c = _cparticles(CFG, chart)
    eta, steps = 0.01, 5
    final, Q = ch.train_charted(CFG, chart, c, eta, steps)
    traj = ch.solve_charted(
        CFG, chart, np.linspace(0, eta * steps, steps + 1), c, dt=eta, solver="euler", save_states=True
    )
    np.testing.assert_allclose(traj.observables["Q"], Q, rtol=1e-12)
    for k in ch.CHARTED_GROUPS:
        np.testing.assert_allclose(traj.ys[k][-1], final[k], rtol=1e-11, atol=1e-13)
    assert Q[-1] < Q[0]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="attention"):
        ch.Chart(np.zeros((3, 2, 3, 3)))
    with pytest.raises(ValueError, match="mlp"):
        ch.Chart(np.zeros((1, 2, 3, 3)), np.zeros((1, 2, 4)))
    chart = _chart(2, 1)
    c = _cparticles(CFG, chart)
    with pytest.raises(ValueError, match="cparticles\\['attention'\\]"):
        ch.check_charted(CFG, chart, {"attention": c["attention"][:, :2], "mlp": c["mlp"]})
    with pytest.raises(ValueError, match="temperature"):
        ch.solve_charted(CFG, chart, [0.0, 0.1], c, temperature=-1.0)
    with pytest.raises(ValueError, match="weights\\['mlp'\\]"):
        mm.objective(
            CFG,
            init_particles(CFG),
            training_set(CFG),
            weights={"attention": jnp.ones((3, 5)), "mlp": -jnp.ones((3, 4))},
        )


def test_solve_charted_forwards_its_solve_keywords(monkeypatch):
    """`solve_charted` passes its keywords to the solver that defines them: at T = 0 `flows.solve` (with
    "auto" and states off by default, `dt` as constant steps), at T > 0 `flows.solve_sde` ("euler", `dt`, the
    seed); a keyword the solver of that temperature lacks is a ValueError naming it."""
    seen = {}
    monkeypatch.setattr(ch, "solve", lambda *a, **kw: seen.update(kw) or "ode")
    monkeypatch.setattr(ch, "solve_sde", lambda *a, **kw: seen.update(kw) or "sde")
    chart = _chart(2, 1)
    c = _cparticles(CFG, chart)
    assert ch.solve_charted(CFG, chart, [0.0, 0.1], c) == "ode"
    assert (seen["solver"], seen["save_states"]) == ("auto", False) and "rtol" not in seen and "dt0" not in seen
    seen.clear()
    passed = dict(solver="tsit5", rtol=1e-5, atol=1e-6, max_steps=9, progress=True, throw=False, save_states=True)
    assert ch.solve_charted(CFG, chart, [0.0, 0.1], c, dt=0.01, **passed) == "ode"
    assert {k: seen[k] for k in passed} == passed and (seen["dt0"], seen["constant_step"]) == (0.01, True)
    seen.clear()
    assert ch.solve_charted(CFG, chart, [0.0, 0.1], c, temperature=0.5, dt=0.01, seed=4, max_steps=20) == "sde"
    assert {k: seen[k] for k in ("solver", "dt", "seed", "max_steps", "save_states")} == {
        "solver": "euler",
        "dt": 0.01,
        "seed": 4,
        "max_steps": 20,
        "save_states": False,
    }
    assert seen["sigma"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rtol"):
        ch.solve_charted(CFG, chart, [0.0, 0.1], c, temperature=0.5, dt=0.01, rtol=1e-3)
    with pytest.raises(ValueError, match="^dt"):
        ch.solve_charted(CFG, chart, [0.0, 0.1], c, temperature=0.5)
    with pytest.raises(ValueError, match="rtoll"):
        ch.solve_charted(CFG, chart, [0.0, 0.1], c, rtoll=1e-3)
