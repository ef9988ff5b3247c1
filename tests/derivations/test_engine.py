"""The derivation engine: gradient flows, push-forward, projection onto an invariant ansatz, codegen."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
from derivations import FlowSystem, ParameterGroup, codegen, gradient_flow, project, push_forward
from derivations.verify import autodiff_flow, compare


def test_gradient_flow_of_quadratic_with_two_learning_rates():
    x, y, a, b = sp.symbols("x y eta_a eta_b", real=True)
    loss = (x - 1) ** 2 + 3 * x * y + y**2
    system = gradient_flow(loss, [ParameterGroup("a", (x,), a), ParameterGroup("b", (y,), b)], name="q")
    assert sp.simplify(system.rhs[0] + a * (2 * (x - 1) + 3 * y)) == 0
    assert sp.simplify(system.rhs[1] + b * (3 * x + 2 * y)) == 0
    assert system.params == (a, b)


def test_multiplicity_divides_the_gradient():
    w, m, eta = sp.symbols("w m eta", positive=True)
    system = gradient_flow(m * w**2 / 2, [ParameterGroup("w", (w,), eta, multiplicities=(m,))], name="s")
    # m equal entries w, each with loss w^2 / 2: each moves like -eta w.
    assert sp.simplify(system.rhs[0] + eta * w) == 0


def test_bad_groups_raise():
    x = sp.Symbol("x")
    with pytest.raises(ValueError, match="multiplicities"):
        ParameterGroup("g", (x,), sp.Symbol("eta"), multiplicities=(1, 2))
    with pytest.raises(ValueError, match="symbols"):
        ParameterGroup("g", (), sp.Symbol("eta"))
    with pytest.raises(ValueError, match="more than one"):
        gradient_flow(x**2, [ParameterGroup("a", (x,), 1), ParameterGroup("b", (x,), 1)], name="d")


def test_push_forward_matches_jvp():
    x, y, eta = sp.symbols("x y eta", real=True)
    loss = sp.log(1 + sp.exp(-x * y)) + x**2 / 10
    system = gradient_flow(loss, [ParameterGroup("p", (x, y), eta)], name="p")
    obs = sp.tanh(x) * y
    rate = push_forward(system, {sp.Symbol("o"): obs})[sp.Symbol("o")]
    f_rate = sp.lambdify((x, y, eta), rate)
    flow = system.lambdify()
    obs_j = lambda p: jnp.tanh(p[0]) * p[1]
    rng = np.random.default_rng(0)
    for _ in range(10):
        p = rng.normal(size=2)
        e = float(rng.uniform(0.1, 2))
        pdot = jnp.asarray(flow(list(p), e))
        _, ref = jax.jvp(obs_j, (jnp.asarray(p),), (pdot,))
        assert abs(f_rate(*p, e) - float(ref)) < 1e-12


def test_projection_needs_the_metric():
    """h on the line (x, y) = (h, 2h) of loss x^2 + y^2: h_dot = -2 eta h, while d/dh of the loss gives -10 eta h."""
    x, y, h, eta = sp.symbols("x y h eta", real=True)
    system = gradient_flow(x**2 + y**2, [ParameterGroup("p", (x, y), eta)], name="line")
    proj = project(system, {x: h, y: 2 * h}, (h,), name="line-h")
    assert proj.invariant
    assert sp.simplify(proj.system.rhs[0] + 2 * eta * h) == 0
    naive = derivations.naive_reduced_gradient(x**2 + y**2, {x: h, y: 2 * h}, (h,), eta)
    assert sp.simplify(naive[0] + 10 * eta * h) == 0


def test_projection_detects_non_invariant_ansatz():
    x, y, h, eta = sp.symbols("x y h eta", real=True)
    system = gradient_flow((x - 1) ** 2 + y**2, [ParameterGroup("p", (x, y), eta)], name="ni")
    proj = project(system, {x: h, y: h}, (h,), name="ni-h")
    assert not proj.invariant
    with pytest.raises(ValueError, match="missing"):
        project(system, {x: h}, (h,), name="bad")


def test_flow_system_rejects_unknown_symbols():
    x, z = sp.symbols("x z")
    with pytest.raises(ValueError, match="neither state nor params"):
        FlowSystem(name="bad", state=(x,), rhs=(x * z,), params=(), metric=(1,))


def test_codegen_cse_output_evaluates_like_lambdify(tmp_path):
    """Emitted code (with CSE) equals sympy's lambdify on a system with shared subexpressions."""
    a, b, k = sp.symbols("a b k", real=True)
    shared = sp.exp(a * b) / (1 + (a - b) ** 2)
    system = FlowSystem(name="cse-demo", state=(a, b), rhs=(k * shared + a, shared**2 - b), params=(k,), metric=(1, 1))
    src = codegen.emit(system, module="cse_demo", source="tests")
    assert "_x0" in src  # the common subexpression was factored out
    path = tmp_path / "cse_demo.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("cse_demo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = system.lambdify()
    rng = np.random.default_rng(1)
    ys = rng.normal(size=(5, 2))
    out = np.asarray(mod.vector_field(0.0, jnp.asarray(ys), {"k": jnp.asarray(0.7)}))
    ref = np.array([f(list(y), 0.7) for y in ys])
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-13)
    assert mod.STATE == ("a", "b") and mod.PARAMS == ("k",)


def test_verify_compare_reports_mismatch():
    rep = compare(lambda p: p * 2.0, lambda p: p * 2.0 + 1e-6, [np.ones(3)], rtol=1e-9)
    assert not rep.passed and rep.max_abs_err == pytest.approx(1e-6)
    grad = autodiff_flow(lambda th: jnp.sum(th**2), 0.5)
    np.testing.assert_allclose(grad(jnp.array([1.0, -2.0])), [-1.0, 2.0])
