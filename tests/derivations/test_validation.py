"""Bad input to the derivation engine is a ValueError naming the argument (issue 11, item 2)."""

import pytest
import sympy as sp

from derivations import FlowSystem, ParameterGroup, gradient_flow, project, push_forward

x, y = sp.symbols("x y", real=True)
eta = sp.Symbol("eta", positive=True)
M = sp.Symbol("M", positive=True, integer=True)


def _flow():
    return gradient_flow((x - 1) ** 2 + x * y + y**2, [ParameterGroup("p", (x, y), eta)], name="q")


# ------------------------------------------------------------------ multiplicities


@pytest.mark.parametrize("bad", [0, -2, sp.Integer(0), 1.5, sp.Rational(3, 2), sp.nan, sp.zoo, 1j])
def test_multiplicity_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match=r"multiplicities\[0\]"):
        ParameterGroup("w", (x,), eta, multiplicities=(bad,))


def test_multiplicity_known_non_positive_or_non_integer_symbolically():
    with pytest.raises(ValueError, match=r"multiplicities\[0\].*non-positive"):
        ParameterGroup("w", (x,), eta, multiplicities=(-M,))
    with pytest.raises(ValueError, match=r"multiplicities\[0\].*non-integer"):
        ParameterGroup("w", (x,), eta, multiplicities=(sp.Symbol("r", integer=False),))


def test_multiplicity_as_string_is_refused():
    with pytest.raises(ValueError, match=r"multiplicities\[1\].*not the string"):
        ParameterGroup("w", (x, y), eta, multiplicities=(1, "2"))


def test_integer_like_and_symbolic_multiplicities_are_accepted():
    g = ParameterGroup("w", (x, y), eta, multiplicities=(2.0, M - 1))
    assert g.multiplicities == (sp.Integer(2), M - 1) and isinstance(g.multiplicities[0], sp.Integer)
    system = gradient_flow(2 * x**2 + (M - 1) * y**2, [g], name="m")
    assert sp.simplify(system.rhs[0] + 2 * eta * x) == 0 and sp.simplify(system.rhs[1] + 2 * eta * y) == 0


# ------------------------------------------------------------------ learning rates


@pytest.mark.parametrize(
    "bad, match",
    [
        ("eta", "not the string"),
        (0, "must be positive"),
        (-1.0, "must be positive"),
        (-eta, "must be positive"),
        (sp.oo, "must be finite"),
        (True, "got bool"),
    ],
)
def test_bad_learning_rate(bad, match):
    with pytest.raises(ValueError, match=f"learning_rate.*{match}"):
        ParameterGroup("w", (x,), bad)


# ------------------------------------------------------------------ gradient_flow


def test_loss_given_as_string():
    with pytest.raises(ValueError, match="loss must be a sympy expression, not the string"):
        gradient_flow("(x - 1)**2", [ParameterGroup("p", (x,), eta)], name="s")


@pytest.mark.parametrize("bad", [[x**2], sp.Eq(x, 1), sp.Matrix([x**2]), 3])
def test_loss_not_a_scalar_expression(bad):
    with pytest.raises(ValueError, match="loss must be a scalar sympy expression"):
        gradient_flow(bad, [ParameterGroup("p", (x,), eta)], name="s")


def test_loss_not_finite():
    with pytest.raises(ValueError, match="loss must be finite"):
        gradient_flow(x**2 + sp.zoo, [ParameterGroup("p", (x,), eta)], name="s")


def test_group_symbol_absent_from_the_loss():
    z = sp.Symbol("z", real=True)
    with pytest.raises(ValueError, match="groups: symbol.* z of group 'p' do not appear in the loss"):
        gradient_flow(x**2 + y**2, [ParameterGroup("p", (x, z), eta)], name="a")


def test_same_name_other_assumptions_between_loss_and_groups():
    x_plain = sp.Symbol("x")  # the loss's x is real: a different sympy symbol, dL/dx_plain would be 0
    with pytest.raises(
        ValueError,
        match=r"groups \(group 'p'\) uses a symbol 'x' with assumptions none, but "
        r"loss uses a different symbol 'x'",
    ):
        gradient_flow((x - 1) ** 2, [ParameterGroup("p", (x_plain,), eta)], name="n")


def test_same_name_other_assumptions_between_loss_and_learning_rate():
    eta_plain = sp.Symbol("eta")
    with pytest.raises(ValueError, match=r"groups \(group 'p', learning_rate\) uses a symbol 'eta'"):
        gradient_flow(eta * x**2, [ParameterGroup("p", (x,), eta_plain)], name="n")


def test_groups_not_a_sequence_of_parameter_groups():
    with pytest.raises(ValueError, match="groups must be a sequence of ParameterGroup; wrap a single"):
        gradient_flow(x**2, ParameterGroup("p", (x,), eta), name="g")
    with pytest.raises(ValueError, match="groups must hold ParameterGroup objects, got tuple"):
        gradient_flow(x**2, [("p", (x,), eta)], name="g")
    with pytest.raises(ValueError, match="groups must contain at least one"):
        gradient_flow(x**2, [], name="g")
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        gradient_flow(x**2, [ParameterGroup("p", (x,), eta)], name="")


def test_parameter_group_fields():
    with pytest.raises(ValueError, match="ParameterGroup.symbols of 'p' must be a sequence"):
        ParameterGroup("p", x, eta)
    with pytest.raises(ValueError, match="ParameterGroup.symbols of 'p' lists a symbol twice"):
        ParameterGroup("p", (x, x), eta)
    with pytest.raises(ValueError, match="ParameterGroup.name must be a non-empty string"):
        ParameterGroup(3, (x,), eta)
    with pytest.raises(ValueError, match="ParameterGroup.multiplicities of 'p' must be a sequence"):
        ParameterGroup("p", (x,), eta, multiplicities=2)


# ------------------------------------------------------------------ project


def test_project_ansatz_value_as_string():
    h = sp.Symbol("h", real=True)
    with pytest.raises(ValueError, match=r"ansatz\[x\] must be a sympy expression.*not the string"):
        project(_flow(), {x: "h", y: 2 * h}, (h,), name="p")


def test_project_coordinate_absent_from_the_ansatz():
    h, g = sp.symbols("h g", real=True)
    with pytest.raises(ValueError, match="coords g do not appear in the ansatz"):
        project(_flow(), {x: h, y: 2 * h}, (h, g), name="p")


def test_project_same_name_other_assumptions():
    h_real, h_plain = sp.Symbol("h", real=True), sp.Symbol("h")
    with pytest.raises(ValueError, match=r"coords uses a symbol 'h' with assumptions none, but ansatz\[x\] uses"):
        project(_flow(), {x: h_real, y: 2 * h_real}, (h_plain,), name="p")
    x_plain = sp.Symbol("x")
    with pytest.raises(ValueError, match=r"ansatz \(key x\) uses a symbol 'x' with assumptions none, but system"):
        project(_flow(), {x_plain: h_real, y: 2 * h_real}, (h_real,), name="p")


def test_project_ansatz_key_not_a_state_symbol():
    h, z = sp.symbols("h z", real=True)
    with pytest.raises(ValueError, match="ansatz gives z, which are not state symbols of 'q'"):
        project(_flow(), {x: h, y: 2 * h, z: h}, (h,), name="p")


def test_project_bad_system_ansatz_coords():
    h = sp.Symbol("h", real=True)
    with pytest.raises(ValueError, match="system must be a FlowSystem"):
        project("q", {x: h, y: h}, (h,), name="p")
    with pytest.raises(ValueError, match="ansatz must be a mapping"):
        project(_flow(), [(x, h), (y, h)], (h,), name="p")
    with pytest.raises(ValueError, match="coords must be a sequence of sympy Symbols; wrap a single"):
        project(_flow(), {x: h, y: h}, h, name="p")
    with pytest.raises(ValueError, match="coords lists a symbol twice"):
        project(_flow(), {x: h, y: h}, (h, h), name="p")


def test_project_numbers_in_the_ansatz_are_fine():
    """A coordinate fixed to a number (phase-2 style A = 0) is a valid ansatz."""
    h = sp.Symbol("h", real=True)
    proj = project(_flow(), {x: h, y: 0}, (h,), name="p")
    assert sp.simplify(proj.system.rhs[0] + 2 * eta * (h - 1)) == 0


# ------------------------------------------------------------------ push_forward and FlowSystem


def test_push_forward_bad_observables():
    o = sp.Symbol("o")
    with pytest.raises(ValueError, match=r"observables\[o\] must be a sympy expression.*not the string"):
        push_forward(_flow(), {o: "x*y"})
    with pytest.raises(ValueError, match=r"observables\[o\] uses a symbol 'x' with assumptions none"):
        push_forward(_flow(), {o: sp.Symbol("x") * y})
    with pytest.raises(ValueError, match="observables must be a mapping"):
        push_forward(_flow(), [x * y])


def test_flow_system_rejects_rhs_symbols_outside_state_and_params():
    with pytest.raises(ValueError, match="neither state nor params"):
        FlowSystem(name="bad", state=(x,), rhs=(x * y,), params=(), metric=(1,))
