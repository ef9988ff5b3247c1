"""Derivations at symbolic sizes (`derivations.matrix`, matrix code generation): gradients of trace losses
against `jax.grad` at several sizes, the co-occurrence Gram push-forward against `jax.jvp` of the Grams along
the parameters' gradient flow, one generated module whose graph does not grow with the size, the written-out
instance, and the refusals."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

import derivations
from derivations import MatrixFlowSystem, ParameterGroup, codegen, gradient_flow
from derivations.matrix import matrix_push_forward, matrix_terms
from flows._generated import cooccurrence_gram, linear_attention_zfb
from flows.cooccurrence.observables import gram_state

TOL = 1e-12
n, k = sp.symbols("n k", integer=True, positive=True)
X = sp.MatrixSymbol("X", n, k)
P = sp.MatrixSymbol("P", n, n)
Q = sp.MatrixSymbol("Q", k, k)
x = sp.MatrixSymbol("x", n, 1)
c = sp.Symbol("c", real=True)
eta = sp.Symbol("eta", positive=True)


def _jax_losses():
    """The same losses written in JAX (independent of the symbolic ones below)."""
    return {
        "quadratic": lambda X, c, P, Q, x: jnp.trace(X.T @ P @ X @ Q) + c * jnp.trace(X @ Q @ X.T),
        "chain": lambda X, c, P, Q, x: jnp.log(1 + jnp.trace(X @ X.T)) * jnp.trace(P @ X @ Q @ X.T) + c**2 * x @ P @ x,
        "nested": lambda X, c, P, Q, x: jnp.trace(jnp.trace(Q) * X.T @ P @ X) * c + x @ X @ Q @ X.T @ x,
    }


def _sym_losses():
    return {
        "quadratic": sp.Trace(X.T * P * X * Q) + c * sp.Trace(X * Q * X.T),
        "chain": sp.log(1 + sp.Trace(X * X.T)) * sp.Trace(P * X * Q * X.T) + c**2 * sp.Trace(x.T * P * x),
        "nested": sp.Trace(sp.Trace(Q) * X.T * P * X) * c + sp.Trace(x.T * X * Q * X.T * x),
    }


@pytest.mark.parametrize("name", ["quadratic", "chain", "nested"])
def test_matrix_gradient_flow_is_minus_autodiff_at_several_sizes(name):
    """One derivation, one compiled module: dX/dt = -eta dL/dX and dc/dt = -eta dL/dc against jax.grad at
    (n, k) = (2, 3), (3, 2), (5, 4) (non-square X, non-symmetric P and Q), 1e-12."""
    system = gradient_flow(_sym_losses()[name], [ParameterGroup("p", (X, c), eta)], name=name)
    assert isinstance(system, MatrixFlowSystem) and system.sizes == (k, n)
    mod = codegen.compile_system(system)
    field, grad = jax.jit(mod.vector_field), jax.jit(jax.grad(_jax_losses()[name], argnums=(0, 1)))
    rng = np.random.default_rng(1)
    for rows, cols in ((2, 3), (3, 2), (5, 4)):
        args = {"P": rng.normal(size=(rows, rows)), "Q": rng.normal(size=(cols, cols)), "x": rng.normal(size=rows)}
        args = {key: jnp.asarray(v) for key, v in args.items()} | {"eta": jnp.asarray(0.7)}
        y = {"X": jnp.asarray(rng.normal(size=(rows, cols)) * 0.5), "c": jnp.asarray(0.3)}
        gX, gc = grad(y["X"], y["c"], args["P"], args["Q"], args["x"])
        got = field(0.0, y, {key: args[key] for key in mod.PARAMS})
        scale = float(np.abs(gX).max())
        np.testing.assert_allclose(got["X"], -0.7 * np.asarray(gX), rtol=TOL, atol=TOL * scale)
        np.testing.assert_allclose(float(got["c"]), -0.7 * float(gc), rtol=TOL, atol=TOL * scale)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_cooccurrence_gram_flow_is_the_push_forward_of_the_parameter_flow(d):
    """The generated Gram rows equal jax.jvp of the Grams (`observables.gram_state`) along the parameters'
    gradient flow -grad of z^T G(theta) + tr(B^T A(theta)) / sqrt(m) (jax.grad), a in {+-1}, to 1e-12."""
    rng = np.random.default_rng(d)
    m, m1 = 6, 4
    params = {"W": rng.normal(size=(m1, m)), "W_V": rng.normal(size=(m, d))}
    params |= {"W_K": rng.normal(size=(m, d)), "W_Q": rng.normal(size=(m, d))}
    params = {key: jnp.asarray(v) for key, v in params.items()}
    a = jnp.asarray(rng.choice([-1.0, 1.0], size=m1))
    z, B, sqrt_m = jnp.asarray(rng.normal(size=d)), jnp.asarray(rng.normal(size=(d, d))), jnp.sqrt(float(m))

    def linearised(theta):
        grams = gram_state(theta, a)
        return -(z @ grams["G"]) - jnp.sum(B * grams["A"]) / sqrt_m

    @jax.jit
    def reference(theta):
        velocity = jax.tree_util.tree_map(lambda g: -g, jax.grad(linearised)(theta))
        return jax.jvp(lambda th: gram_state(th, a), (theta,), (velocity,))

    grams, want = reference(params)
    args = {"z": z, "B": B, "m1": jnp.asarray(float(m1)), "sqrt_m": sqrt_m}
    got = jax.jit(cooccurrence_gram.vector_field)(0.0, grams, args)
    for key in want:
        scale = float(np.abs(want[key]).max())
        np.testing.assert_allclose(np.asarray(got[key]), np.asarray(want[key]), rtol=TOL, atol=TOL * scale, err_msg=key)


def test_a_generated_matrix_flow_does_not_unroll_with_the_size():
    """The traced graph of ZFB's field has as many equations at d = 8 as at d = 3 (matmuls, not d^2 terms)."""

    def count(d):
        y = {"u": jnp.asarray(0.5), "U": jnp.eye(d)}
        args = {"Lambda": jnp.eye(d), "N": jnp.asarray(5.0)}
        return len(jax.make_jaxpr(linear_attention_zfb.vector_field)(0.0, y, args).jaxpr.eqns)

    assert count(8) == count(3) < 60


def test_instantiate_writes_the_same_flow_out_entry_by_entry():
    system = gradient_flow(_sym_losses()["quadratic"], [ParameterGroup("p", (X, c), eta)], name="quadratic")
    flat = system.instantiate({"n": 2, "k": 3})
    assert flat.state[:3] == tuple(sp.symbols("X11 X12 X13", real=True)) and flat.state[-1] == c
    assert len(flat.state) == 7 and flat.loss is not None
    mod = codegen.compile_system(system)
    rng = np.random.default_rng(3)
    Xv, Pv, Qv = rng.normal(size=(2, 3)), rng.normal(size=(2, 2)), rng.normal(size=(3, 3))
    values = dict(zip(flat.state, [*Xv.ravel(), 0.4], strict=True))
    values |= {sp.Symbol(f"P{i + 1}{j + 1}", real=True): Pv[i, j] for i in range(2) for j in range(2)}
    values |= {sp.Symbol(f"Q{i + 1}{j + 1}", real=True): Qv[i, j] for i in range(3) for j in range(3)}
    values[eta] = 0.7
    got = np.array([float(e.xreplace(values)) for e in flat.rhs])
    want = mod.vector_field(0.0, {"X": Xv, "c": 0.4}, {"P": Pv, "Q": Qv, "eta": 0.7})
    np.testing.assert_allclose(got, [*np.asarray(want["X"]).ravel(), float(want["c"])], rtol=TOL, atol=TOL)


def test_refusals_name_what_is_wrong():
    with pytest.raises(ValueError, match="Inverse, which the matrix calculus of derivations does not differentiate"):
        matrix_terms(sp.Inverse(P) * X)
    with pytest.raises(ValueError, match="does not appear in the loss"):
        gradient_flow(sp.Trace(P), [ParameterGroup("p", (X,), 1)], name="absent")
    W = sp.MatrixSymbol("W", n, n)
    G = sp.MatrixSymbol("G", n, n)
    with pytest.raises(
        ValueError, match=r"push-forward of G does not close on the observables: it still holds \['W'\]"
    ):
        matrix_push_forward({W: P * W}, {G: W.T * W}, {}, name="open")  # W^T (P + P^T) W is no product of Grams
    with pytest.raises(ValueError, match="sizes: missing"):
        gradient_flow(_sym_losses()["quadratic"], [ParameterGroup("p", (X, c), eta)], name="q").instantiate({"n": 2})


def test_pack_and_unpack_a_state_by_name():
    """The generated helpers of a matrix system: pack_state checks names, shapes and sizes; unpack_state takes
    saved states by name or a trajectory (`flows.solve` of this module: the reduced ZFB flow of
    `flows.linear_attention`)."""
    gen = linear_attention_zfb
    y0 = gen.pack_state({"u": 0.2, "U": 0.2 * np.eye(3)})
    assert y0["U"].dtype == jnp.result_type(float) and y0["u"].shape == ()
    with pytest.raises(ValueError, match=r"values of 'linear_attention-zfb': unknown key 'V'; missing 'U'"):
        gen.pack_state({"u": 0.2, "V": np.eye(3)})
    with pytest.raises(ValueError, match=r"values\['U'\] of 'linear_attention-zfb' must have shape \('d', 'd'\)"):
        gen.pack_state({"u": 0.2, "U": np.ones(3)})
    saved = types.SimpleNamespace(ts=np.zeros(2), ys={"u": np.zeros(2), "U": np.zeros((2, 3, 3))})
    out = gen.unpack_state(saved)
    assert set(out) == {"u", "U"} and out["U"].shape == (2, 3, 3)
    with pytest.raises(ValueError, match="ys must be a dict of states by name"):
        gen.unpack_state(np.zeros(4))


@pytest.mark.parametrize("name", ["cooccurrence-gram", "linear_attention-zfb"])
def test_derivations_at_symbolic_sizes_print_every_step(name):
    d = derivations.derive(name)
    text, latex = d.to_text(), d.to_latex()
    assert "False" not in text.splitlines() and "False" not in latex.splitlines()
    if name == "cooccurrence-gram":
        assert "Eq(S, a.T*W*W.T*a)" in text and "dS/dt = 2*m1*Trace(G.T*z)" in text
