"""What a user adding a flow meets: generated fields that refuse unknown or missing `args` keys, packing and
unpacking states by name, PARAMS in the order of declaration, and readable printed equations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
import flows
from derivations import ParameterGroup, codegen, gradient_flow, project, readable
from flows._generated import cooccurrence_phase2, scan_snap_decoder, scan_snap_reduced_symmetric

TOL = 1e-12


def _two_rates():
    """Loss in (u, v) with learning rates declared in the order eta_v, eta_u (not alphabetical) and a loss
    constant c: d(v, u)/dt = (-eta_v (v - c u), -eta_u (u - c v))."""
    u, v, c = sp.symbols("u v c", real=True)
    eta_u, eta_v = sp.symbols("eta_u eta_v", positive=True)
    loss = (u**2 + v**2) / 2 - c * u * v
    system = gradient_flow(loss, [ParameterGroup("v", (v,), eta_v), ParameterGroup("u", (u,), eta_u)], name="two-rates")
    return system, (u, v, c, eta_u, eta_v)


# --------------------------------------------------------------------------- args keys


@pytest.mark.parametrize("jit", [False, True])
def test_generated_field_refuses_a_misspelt_args_key(jit):
    f = jax.jit(scan_snap_decoder.vector_field) if jit else scan_snap_decoder.vector_field
    y = jnp.zeros((1,))
    good = {"M": 8.0, "eta_Y": 0.5}
    assert np.isfinite(float(f(0.0, y, good)[0]))
    with pytest.raises(ValueError, match=r"unknown key 'eta_y' \(did you mean 'eta_Y'\?\); missing 'eta_Y'"):
        f(0.0, y, {"M": 8.0, "eta_y": 0.5})
    with pytest.raises(ValueError, match=r"unknown key 'K'.*exactly PARAMS = \('eta_Y', 'M'\)"):
        f(0.0, y, {**good, "K": 3.0})  # an extra key changes nothing in the field: refused, not ignored


def test_generated_field_names_a_missing_key_instead_of_a_keyerror():
    with pytest.raises(ValueError, match=r"args of 'scan_snap-reduced-symmetric': missing 'gamma'"):
        scan_snap_reduced_symmetric.vector_field(
            0.0, jnp.zeros(2), {k: 1.0 for k in scan_snap_reduced_symmetric.PARAMS[:-1]}
        )
    with pytest.raises(ValueError, match="args must be a mapping with the keys PARAMS"):
        cooccurrence_phase2.vector_field(0.0, jnp.zeros(4), [7.0])


def test_flows_solve_reports_the_unknown_key_of_a_user_module():
    system, _ = _two_rates()
    gen = codegen.compile_system(system)
    y0 = gen.pack_state({"u": 0.1, "v": 0.3})
    args = {"eta_u": 1.0, "eta_v": 2.0, "c": 0.5}
    traj = flows.solve(gen.vector_field, y0, t1=1.0, args=args)
    assert traj.status == "ok"
    with pytest.raises(ValueError, match=r"unknown key 'C' \(did you mean 'c'\?\)"):
        flows.solve(gen.vector_field, y0, t1=1.0, args={"eta_u": 1.0, "eta_v": 2.0, "C": 0.5})


def test_a_system_without_parameters_accepts_no_args():
    x = sp.Symbol("x", real=True)
    gen = codegen.compile_system(gradient_flow((x - 2) ** 2 / 2, [ParameterGroup("x", (x,), 1)], name="np"))
    assert gen.PARAMS == ()
    for args in (None, {}):
        np.testing.assert_allclose(np.asarray(gen.vector_field(0.0, jnp.asarray([0.5]), args)), [1.5], rtol=TOL)
    with pytest.raises(ValueError, match="unknown key 'eta'"):
        gen.vector_field(0.0, jnp.asarray([0.5]), {"eta": 1.0})


def test_a_parameter_named_like_the_shared_runtime_is_renamed():
    x = sp.Symbol("x", real=True)
    k = sp.Symbol("_runtime", positive=True)
    system = derivations.FlowSystem(name="shadow", state=(x,), rhs=(-k * x,), params=(k,), metric=(1,))
    assert codegen.local_names(system)[k] != "_runtime"
    gen = codegen.compile_system(system)
    np.testing.assert_allclose(
        np.asarray(gen.vector_field(0.0, jnp.asarray([2.0]), {"_runtime": 3.0})), [-6.0], rtol=TOL
    )


# --------------------------------------------------------------------------- pack / unpack


def _modules():
    system, _ = _two_rates()
    return system, codegen.compile_system(system)


def test_pack_state_orders_by_state_on_the_system_and_the_generated_module():
    system, gen = _modules()
    assert gen.STATE == system.state_names() == ("v", "u")  # the groups' order, not the dict's
    values = {"u": 0.25, "v": -1.5}
    np.testing.assert_array_equal(system.pack_state(values), [-1.5, 0.25])
    np.testing.assert_array_equal(np.asarray(gen.pack_state(values)), [-1.5, 0.25])
    u, v = sp.symbols("u v", real=True)
    np.testing.assert_array_equal(system.pack_state({u: 0.25, v: -1.5}), [-1.5, 0.25])
    # arrays broadcast: a batch of states
    batch = gen.pack_state({"u": jnp.asarray([1.0, 2.0, 3.0]), "v": 0.0})
    assert batch.shape == (3, 2) and batch.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(batch[:, 1]), [1.0, 2.0, 3.0])
    assert system.pack_state({"u": np.ones((2, 1)), "v": np.zeros(4)}).shape == (2, 4, 2)


@pytest.mark.parametrize("where", ["system", "module"])
def test_pack_state_names_missing_and_unknown_names(where):
    system, gen = _modules()
    pack = system.pack_state if where == "system" else gen.pack_state
    with pytest.raises(ValueError, match=r"unknown 'w'.*missing 'v'|unknown key 'w'.*missing 'v'"):
        pack({"u": 0.1, "w": 0.2})
    with pytest.raises(ValueError, match="missing 'u'"):
        pack({"v": 0.1})
    with pytest.raises(ValueError, match=r"values\['u'\] must be (a )?real"):
        pack({"u": "0.1", "v": 0.2})
    with pytest.raises(ValueError, match="do not broadcast"):
        pack({"u": np.zeros(2), "v": np.zeros(3)})
    with pytest.raises(ValueError, match="values must be a mapping"):
        pack([0.1, 0.2])


def test_unpack_state_of_a_state_a_saved_ys_and_a_trajectory():
    system, gen = _modules()
    y0 = gen.pack_state({"u": 0.1, "v": 0.3})
    for unpack in (system.unpack_state, gen.unpack_state):
        one = unpack(y0)
        assert set(one) == {"u", "v"} and float(one["u"]) == 0.1 and float(one["v"]) == 0.3
    ts = flows.linear_grid(0.0, 2.0, 5)
    traj = flows.solve(gen.vector_field, y0, t1=2.0, ts=ts, args={"eta_u": 1.0, "eta_v": 2.0, "c": 0.5})
    for unpack in (system.unpack_state, gen.unpack_state):
        by_name = unpack(traj)
        assert by_name["u"].shape == (5,)
        np.testing.assert_array_equal(np.asarray(by_name["u"]), np.asarray(traj.ys[:, 1]))
        np.testing.assert_array_equal(np.asarray(unpack(traj.ys)["v"]), np.asarray(traj.ys[:, 0]))
        # round trip: pack(unpack(ys)) == ys
        np.testing.assert_array_equal(np.asarray(gen.pack_state(unpack(traj.ys))), np.asarray(traj.ys))
        with pytest.raises(ValueError, match=r"2 coordinates .*\('v', 'u'\).*shape \(5, 3\)"):
            unpack(np.zeros((5, 3)))


def test_unpack_state_of_a_trajectory_without_states():
    system, gen = _modules()
    traj = flows.solve(
        gen.vector_field,
        gen.pack_state({"u": 0.1, "v": 0.3}),
        t1=1.0,
        ts=flows.linear_grid(0.0, 1.0, 3),
        args={"eta_u": 1.0, "eta_v": 2.0, "c": 0.5},
        save_states=False,
        observables={"u": lambda t, y, a: y[..., 1]},
    )
    for unpack in (system.unpack_state, gen.unpack_state):
        with pytest.raises(ValueError, match="saved no states"):
            unpack(traj)


# --------------------------------------------------------------------------- PARAMS order


def test_params_follow_the_groups_then_the_loss_constants():
    system, (u, v, c, eta_u, eta_v) = _two_rates()
    assert system.params == (eta_v, eta_u, c)  # alphabetical would be (c, eta_u, eta_v)
    assert codegen.compile_system(system).PARAMS == ("eta_v", "eta_u", "c")


def test_params_of_the_shipped_systems_are_in_declaration_order():
    assert scan_snap_decoder.PARAMS == ("eta_Y", "M")  # the learning rate, then the multiplicity M - 1
    assert scan_snap_reduced_symmetric.PARAMS == ("p_d", "p_c", "D", "C", "K", "eta_Z", "gamma")
    assert derivations.derive("scan_snap-decoder").system.params == sp.symbols("eta_Y M", positive=True)


def test_explicit_params_order_and_its_errors():
    _, (u, v, c, eta_u, eta_v) = _two_rates()
    loss = (u**2 + v**2) / 2 - c * u * v
    groups = [ParameterGroup("v", (v,), eta_v), ParameterGroup("u", (u,), eta_u)]
    system = gradient_flow(loss, groups, name="ordered", params=(c, eta_u, eta_v))
    assert system.params == (c, eta_u, eta_v)
    with pytest.raises(ValueError, match="params: missing 'c'"):
        gradient_flow(loss, groups, name="short", params=(eta_u, eta_v))
    with pytest.raises(ValueError, match="params: unknown 'k'"):
        gradient_flow(loss, groups, name="long", params=(c, eta_u, eta_v, sp.Symbol("k")))
    with pytest.raises(ValueError, match="params: .*other assumptions"):
        gradient_flow(loss, groups, name="assume", params=(sp.Symbol("c"), eta_u, eta_v))


def test_project_keeps_the_order_of_the_projected_system():
    w_t, w_o = sp.symbols("w_t w_o", real=True)
    h, eta, M = sp.symbols("h eta M", positive=True)
    loss = -w_t + sp.log(sp.exp(w_t) + (M - 1) * sp.exp(w_o))
    full = gradient_flow(loss, [ParameterGroup("w", (w_t, w_o), eta, multiplicities=(1, M - 1))], name="w")
    assert full.params == (eta, M)
    proj = project(full, {w_t: (M - 1) * h, w_o: -h}, (h,), name="h")
    assert proj.system.params == (eta, M)
    assert project(full, {w_t: (M - 1) * h, w_o: -h}, (h,), name="h2", params=(M, eta)).system.params == (M, eta)


# --------------------------------------------------------------------------- readable equations


def _result_lines(name):
    return [line for line in derivations.derive(name).to_text().splitlines() if "/dt = " in line]


def test_decoder_equation_prints_as_before():
    assert _result_lines("scan_snap-decoder")[-1] == "dh/dt = eta_Y/(M + exp(M*h) - 1)"


def test_reduced_symmetric_denominator_is_factored():
    lines = _result_lines("scan_snap-reduced-symmetric")
    assert lines[-1] == (
        "dz_c/dt = -C*eta_Z*gamma*p_c**4*(K - 1)*exp(4*z_c)/((C*p_c**2*exp(2*z_c) + "
        "D*p_d**2*exp(2*z_d))*(C*K*p_c**2*exp(2*z_c) + D*p_d**2*exp(2*z_d)))"
    )


def test_cooccurrence_phase2_reads_like_the_paper():
    """dG1 = S (q1 g1 - q2 g2) with g_k = 1/(1 + e^{rho_k}), rho = (G1 + G2 + G3, -(G1 + G3), ...)."""
    lines = _result_lines("cooccurrence-phase2")
    assert lines[0] == "dG1/dt = S*(3/(exp(G1 + G2 + G3) + 1) - 1/(1 + exp(-(G1 + G3))))/6"
    assert "exp(-G1 - G2 - G3)" not in "\n".join(lines)
    assert "dG1/dt = " + lines[0].split(" = ", 1)[1] in cooccurrence_phase2.__doc__  # the generated header


@pytest.mark.parametrize("name", ["scan_snap-decoder", "scan_snap-reduced-symmetric", "cooccurrence-phase2"])
def test_readable_forms_are_equal_to_the_derived_right_hand_sides(name):
    system = derivations.derive(name).system
    rng = np.random.default_rng(3)
    symbols = (*system.state, *system.params)
    for e in system.rhs:
        r = readable(e)
        f = sp.lambdify(symbols, [e, r], modules="numpy")
        for _ in range(5):
            point = rng.uniform(0.5, 3.0, size=len(symbols))
            a, b = f(*point)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)


def test_readable_leaves_large_expressions_and_non_expressions_alone():
    xs = sp.symbols("x0:400", real=True)
    big = sum(x * sp.exp(x) for x in xs)
    assert readable(big) is big  # over MAX_NODES: no factoring cost
    assert readable(sp.Symbol("a")) == sp.Symbol("a")
    text = "not sympy"
    assert readable(text) is text
