"""User flows from the user's own folder (issue 11, item 1): codegen.write(out_dir=...) + load, compile_system,
derivations.register, without writing into the package."""

import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
from derivations import Derivation, FlowSystem, ParameterGroup, codegen, gradient_flow

TOL = 1e-12


def _quadratic(name="quad", c=1.0):
    """d(a, b)/dt = -eta (a - c b, b - c a + lambda): hand-written below as the reference."""
    a, b = sp.symbols("a b", real=True)
    eta, lam = sp.Symbol("eta", positive=True), sp.Symbol("lambda", real=True)
    loss = (a**2 + b**2) / 2 - sp.nsimplify(c) * a * b + lam * b
    return gradient_flow(loss, [ParameterGroup("w", (a, b), eta)], name=name)


def _reference(Y, eta, lam, c=1.0):
    A, B = Y[..., 0], Y[..., 1]
    return -eta * np.stack([A - c * B, B - c * A + lam], axis=-1)


def test_write_into_a_user_folder_and_load(tmp_path):
    out_dir = tmp_path / "nested" / "generated"  # created by write
    system = _quadratic()
    path = codegen.write(system, out_dir=out_dir, module="quad", source="my_project/flows.py")
    assert path == out_dir / "quad.py" and path.is_file()
    assert not (codegen.GENERATED_DIR / "quad.py").exists()  # nothing written into the package
    mod = codegen.load(path)
    assert mod.STATE == ("a", "b") and mod.PARAMS == ("eta", "lambda") and mod.SYSTEM == "quad"
    assert "my_project/flows.py" in mod.__doc__ and "python -m derivations --write" not in mod.__doc__
    Y = np.random.default_rng(0).normal(size=(4, 2))
    out = np.asarray(mod.vector_field(0.0, jnp.asarray(Y), {"eta": 0.7, "lambda": -0.3}))
    np.testing.assert_allclose(out, _reference(Y, 0.7, -0.3), rtol=TOL, atol=TOL)


def test_compile_system_in_memory_equals_the_written_module(tmp_path):
    system = _quadratic()
    mod = codegen.compile_system(system)
    written = codegen.load(codegen.write(system, out_dir=tmp_path, module="quad"))
    Y = np.random.default_rng(1).normal(size=(3, 2))
    args = {"eta": 1.3, "lambda": 0.4}
    np.testing.assert_array_equal(
        np.asarray(mod.vector_field(0.0, jnp.asarray(Y), args)),
        np.asarray(written.vector_field(0.0, jnp.asarray(Y), args)),
    )
    assert mod.STATE == written.STATE and mod.PARAMS == written.PARAMS and "def vector_field" in mod.SOURCE


def test_default_module_name_and_diff(tmp_path):
    system = _quadratic(name="my-quad flow")
    path = codegen.write(system, out_dir=tmp_path)
    assert path.name == "my_quad_flow.py"
    assert codegen.diff(system, module="my_quad_flow", out_dir=tmp_path) == ""
    path.write_text(path.read_text().replace("eta", "eta2"))
    assert "fresh emission" in codegen.diff(system, module="my_quad_flow", out_dir=tmp_path)


def test_same_module_name_in_two_folders_does_not_clash(tmp_path):
    one = codegen.load(codegen.write(_quadratic(c=1.0), out_dir=tmp_path / "one", module="flow"))
    two = codegen.load(codegen.write(_quadratic(c=0.5), out_dir=tmp_path / "two", module="flow"))
    Y = np.array([[0.3, -1.1]])
    args = {"eta": 1.0, "lambda": 0.2}
    np.testing.assert_allclose(
        np.asarray(one.vector_field(0.0, jnp.asarray(Y), args)), _reference(Y, 1.0, 0.2, c=1.0), rtol=TOL, atol=TOL
    )
    np.testing.assert_allclose(
        np.asarray(two.vector_field(0.0, jnp.asarray(Y), args)), _reference(Y, 1.0, 0.2, c=0.5), rtol=TOL, atol=TOL
    )


def test_load_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        codegen.load(tmp_path / "missing.py")
    with pytest.raises(ValueError, match="path must name a .py file"):
        codegen.load(tmp_path / "flow.txt")
    (tmp_path / "other.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="not a generated flow module: it has no vector_field, STATE, PARAMS"):
        codegen.load(tmp_path / "other.py")
    with pytest.raises(ValueError, match="path must be a path"):
        codegen.load(3)


# ------------------------------------------------------------------ register


class _MyFlow(Derivation):
    name = "test-user-quad"
    module = "test_user_quad"
    source = "tests/derivations/test_user_flows.py"

    def __init__(self):
        self.system = _quadratic(name=self.name)


@pytest.fixture
def registered():
    derivations.register(_MyFlow)
    yield _MyFlow
    derivations.unregister(_MyFlow.name)


def test_register_makes_derive_find_it(registered):
    assert registered.name in derivations.available()
    d = derivations.derive(registered.name)
    assert isinstance(d.system, FlowSystem) and "da/dt" in d.to_text() and r"\frac" in d.to_latex()
    # the package's write_all / check_generated stay with the package's own derivations
    assert registered.name not in derivations.generated_names()


def test_register_refusals(registered):
    with pytest.raises(ValueError, match="already registered; pass replace=True"):
        derivations.register(_MyFlow)
    assert derivations.register(_MyFlow, replace=True) is _MyFlow

    class Clash(_MyFlow):
        name = "scan_snap-decoder"

    with pytest.raises(ValueError, match="is a derivation of the package"):
        derivations.register(Clash)

    class BadModule(_MyFlow):
        name, module = "test-bad-module", "bad-name"

    with pytest.raises(ValueError, match="cls.module must be a Python identifier or None"):
        derivations.register(BadModule)
    with pytest.raises(ValueError, match="cls must be a subclass of derivations.Derivation"):
        derivations.register(object)
    with pytest.raises(ValueError, match="was not added by register"):
        derivations.unregister("scan_snap-decoder")


def test_register_as_decorator_and_a_derivation_without_system():
    @derivations.register
    class NoSystem(Derivation):
        name, module, source = "test-no-system", None, "here"

        def __init__(self):
            pass

    try:
        with pytest.raises(ValueError, match="did not set self.system to a FlowSystem"):
            derivations.derive("test-no-system")
    finally:
        derivations.unregister("test-no-system")
    assert "test-no-system" not in derivations.available()


def test_derivation_contract_is_documented():
    doc = Derivation.__doc__
    for word in ("`name`", "`module`", "`source`", "`system`", "`to_text()`", "`to_latex()`", "`None`"):
        assert word in doc, word
    assert "embed" not in derivations.verify.__doc__  # no function of that name exists
    assert not hasattr(derivations.verify, "embed")


def test_source_defaults_to_each_class_own_qualified_name():
    """`Derivation` sets `source` per subclass (its module and qualified name), never an inherited one, and
    keeps one a class gives; the package's derivations record where they live (the generated headers)."""

    class Parent(Derivation):
        name, module = "test-parent", None

    class Child(Parent):
        name = "test-child"

    class Given(Derivation):
        name, module, source = "test-given", None, "my_flows.py"

    here = f"{__name__}:test_source_defaults_to_each_class_own_qualified_name.<locals>"
    assert Parent.source == f"{here}.Parent"
    assert Child.source == f"{here}.Child"
    assert Given.source == "my_flows.py"
    assert derivations._REGISTRY["linear_attention-zfb"].source == "derivations.linear_attention:ZFBDerivation"
    assert derivations._REGISTRY["scan_snap-decoder"].source == "derivations.scan_snap:decoder_h_flow"
