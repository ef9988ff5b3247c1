"""Code generation that no symbol name can break (issue 11, item 2).

For each kind of collision (Python keywords, builtins the emitted code calls, the generated function's own
names `t`, `y`, `args`, the modules it uses, CSE temporaries `_x0`, names that are not identifiers or clash
after sanitising), a system with such a symbol, as a state coordinate and as a parameter, is emitted,
written, imported, and its vector field is compared with a hand-written numpy reference at a random point.
"""

import math
import zlib

import jax.numpy as jnp
import numpy as np
import pytest
import sympy as sp

from derivations import FlowSystem, codegen

TOL = 1e-12

COLLIDING = [
    # Python keywords (and the constants the printer reserves)
    "lambda",
    "class",
    "if",
    "None",
    "True",
    # builtins; the emitted code calls `abs` (from Abs)
    "abs",
    "sum",
    "max",
    "float",
    "print",
    # the emitted function's own names
    "t",
    "y",
    "args",
    # modules the emitted code uses (`functools.reduce` for Max, jax.scipy.special for erf)
    "jnp",
    "jax",
    "functools",
    # common-subexpression temporaries
    "_x0",
    "_x1",
    # not identifiers as they are, or the same identifier as another name once normalised
    "a.b",
    "1x",
    "x-y",
    'q"""',
    "a\\b",
    "\N{LATIN SMALL LIGATURE FI}",
]


def _system(name: str, role: str):
    """States (x, u), params (k, v); the colliding symbol is u (role "state") or v (role "param").

    dx/dt = k e + |v| - u,  du/dt = e / (1 + k^2) + max(u, v) x,  e = exp(u x) (shared: a CSE temporary).
    """
    x, k = sp.symbols("x k", real=True)
    u = sp.Symbol(name, real=True) if role == "state" else sp.Symbol("u", real=True)
    v = sp.Symbol(name, real=True) if role == "param" else sp.Symbol("v", real=True)
    e = sp.exp(u * x)
    system = FlowSystem(
        name=f"collide-{role}",
        state=(x, u),
        rhs=(k * e + sp.Abs(v) - u, e / (1 + k**2) + sp.Max(u, v) * x),
        params=(k, v),
        metric=(1, 1),
    )
    return system, (u if role == "state" else v)


def _reference(Y, K, V):
    """The same right-hand side by hand, in numpy, for states Y[..., 0:2] = (x, u)."""
    X, U = Y[..., 0], Y[..., 1]
    E = np.exp(U * X)
    return np.stack([K * E + abs(V) - U, E / (1 + K**2) + np.maximum(U, V) * X], axis=-1)


def _point(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(3, 2)), float(rng.uniform(0.2, 2.0)), float(rng.normal())


@pytest.mark.parametrize("role", ["state", "param"])
@pytest.mark.parametrize("name", COLLIDING)
def test_colliding_name_is_emitted_imported_and_evaluates(tmp_path, name, role):
    system, sym = _system(name, role)
    path = codegen.write(system, out_dir=tmp_path, module="collide", source="test_codegen_names")
    mod = codegen.load(path)
    # STATE, PARAMS and the args keys keep the original names
    assert mod.STATE == ("x", name if role == "state" else "u")
    assert mod.PARAMS == ("k", name if role == "param" else "v")
    local = codegen.local_names(system)[sym]
    assert local.isidentifier() and local not in {"t", "y", "args", "jnp", "abs", "functools", "jax"}
    assert local != "_x0" and local != "_x1"
    Y, K, V = _point(zlib.crc32(f"{name}/{role}".encode()))
    out = np.asarray(mod.vector_field(0.0, jnp.asarray(Y), {"k": K, mod.PARAMS[1]: V}))
    np.testing.assert_allclose(out, _reference(Y, K, V), rtol=TOL, atol=TOL)
    same = codegen.compile_system(system)  # in memory: the same code
    np.testing.assert_allclose(
        np.asarray(same.vector_field(0.0, jnp.asarray(Y), {"k": K, mod.PARAMS[1]: V})), out, rtol=0, atol=0
    )


def test_many_collisions_at_once_and_suffix_chains():
    """States y, t, lambda, _x0 and params args, jnp, y_, lambda_: the renamed `y` must skip the taken `y_`."""
    names_state = ["y", "t", "lambda", "_x0"]
    names_param = ["args", "jnp", "y_", "lambda_"]
    s = [sp.Symbol(n, real=True) for n in names_state]
    p = [sp.Symbol(n, real=True) for n in names_param]
    rng = np.random.default_rng(7)
    A = rng.normal(size=(4, 4))
    rhs = tuple(sum(sp.Float(A[i, j]) * s[j] for j in range(4)) * p[i] + sp.exp(s[0] * s[1]) for i in range(4))
    system = FlowSystem(
        name="many", state=tuple(s), rhs=rhs, params=tuple(sorted(p, key=lambda q: q.name)), metric=(1,) * 4
    )
    local = codegen.local_names(system)
    assert len(set(local.values())) == 8
    assert local[s[0]] not in {"y", "y_"} and local[s[2]] not in {"lambda", "lambda_"}
    mod = codegen.compile_system(system)
    Y = rng.normal(size=(5, 4))
    P = {n: float(rng.uniform(0.5, 1.5)) for n in names_param}
    out = np.asarray(mod.vector_field(0.0, jnp.asarray(Y), P))
    ref = (Y @ A.T) * np.array([P[n] for n in names_param]) + np.exp(Y[:, :1] * Y[:, 1:2])
    np.testing.assert_allclose(out, ref, rtol=TOL, atol=TOL)


def test_names_that_clash_after_sanitising_get_distinct_locals():
    """`a.b` and `a_b` both become the identifier a_b; the symbol really named a_b keeps it."""
    ab_dot, ab = sp.Symbol("a.b"), sp.Symbol("a_b")
    system = FlowSystem(name="clash", state=(ab_dot, ab), rhs=(2 * ab, -3 * ab_dot), params=(), metric=(1, 1))
    local = codegen.local_names(system)
    assert local[ab] == "a_b" and local[ab_dot] not in {"a_b"}
    out = np.asarray(codegen.compile_system(system).vector_field(0.0, jnp.array([0.5, -1.25]), {}))
    np.testing.assert_allclose(out, [2 * -1.25, -3 * 0.5], rtol=TOL, atol=TOL)


def test_hostile_header_text_still_imports(tmp_path):
    """Triple quotes, backslashes and control characters in the name, description and source go into the
    docstring escaped, so the file imports and its docstring says what was given."""
    x = sp.Symbol('x"""\\', real=True)
    system = FlowSystem(
        name='sys"""\\n',
        state=(x,),
        rhs=(-x,),
        params=(),
        metric=(1,),
        description='ends with a quote " and """ and \\frac and a tab\tand \x00',
    )
    path = codegen.write(system, out_dir=tmp_path, module="hostile", source='src """ \\')
    mod = codegen.load(path)
    assert 'ends with a quote " and """ and \\frac' in mod.__doc__ and 'src """ \\' in mod.__doc__
    assert mod.SYSTEM == system.name and mod.STATE == (x.name,)
    np.testing.assert_allclose(np.asarray(mod.vector_field(0.0, jnp.array([1.5]), {})), [-1.5], rtol=TOL)


def test_special_functions_map_to_jax():
    """erf, gamma, loggamma fall back to math.* in sympy's Python printer; the emitted code uses
    jax.scipy.special instead (imported in the emitted module)."""
    x = sp.Symbol("x", positive=True)
    system = FlowSystem(
        name="special", state=(x,), rhs=(sp.erf(x) + sp.gamma(x) - sp.loggamma(x),), params=(), metric=(1,)
    )
    mod = codegen.compile_system(system)
    assert "import jax.scipy.special" in mod.SOURCE
    X = np.array([0.3, 1.7, 4.2])
    ref = [math.erf(v) + math.gamma(v) - math.lgamma(v) for v in X]
    out = np.asarray(mod.vector_field(0.0, jnp.asarray(X[:, None]), {}))[:, 0]
    np.testing.assert_allclose(out, ref, rtol=TOL, atol=TOL)


def test_unprintable_and_undefined_rhs_raise_naming_system():
    x = sp.Symbol("x")
    with pytest.raises(ValueError, match="system: the JAX code generator cannot print"):
        codegen.emit(FlowSystem(name="w", state=(x,), rhs=(sp.LambertW(x),), params=(), metric=(1,)))
    with pytest.raises(ValueError, match="system: the right-hand side of x contains zoo"):
        codegen.emit(FlowSystem(name="z", state=(x,), rhs=(x * sp.zoo,), params=(), metric=(1,)))


def test_two_symbols_with_one_name_are_refused():
    x_real, x_plain = sp.Symbol("x", real=True), sp.Symbol("x")
    system = FlowSystem(name="dup", state=(x_real,), rhs=(x_plain * x_real,), params=(x_plain,), metric=(1,))
    with pytest.raises(ValueError, match="system: 'dup' has two different symbols named 'x'"):
        codegen.emit(system)


def test_bad_emit_arguments_raise_naming_them(tmp_path):
    x = sp.Symbol("x")
    system = FlowSystem(name="ok", state=(x,), rhs=(-x,), params=(), metric=(1,))
    with pytest.raises(ValueError, match="system must be a derivations.FlowSystem"):
        codegen.emit("dx/dt = -x")
    with pytest.raises(ValueError, match="module must be a Python identifier"):
        codegen.write(system, out_dir=tmp_path, module="my-module")
    with pytest.raises(ValueError, match="module must be a Python identifier"):
        codegen.write(system, out_dir=tmp_path, module="class")
    with pytest.raises(ValueError, match="source must be a string"):
        codegen.emit(system, source=3)
    with pytest.raises(ValueError, match="out_dir must be a path"):
        codegen.write(system, out_dir=3)
