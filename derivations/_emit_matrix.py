"""The body of a generated module for a `MatrixFlowSystem` (a state of matrices at symbolic sizes): the
constants and `vector_field`, printed with matmul (`@`), `.T` and `jnp.trace` after `sympy.cse`, so that one
module runs at every size and its graph has a handful of matrix operations, never n^2 scalar terms.

The state and `args` are dicts of arrays (a vector as a 1-D array, a scalar as a 0-d array); the size names
are bound from the arrays' shapes by the shared runtime, which also refuses wrong keys and shapes."""

from __future__ import annotations

import sympy as sp

__all__ = ["MATRIX_HELPERS", "matrix_module_body", "print_matrix_methods"]

#: what a generated module of a matrix system defines after `vector_field`
MATRIX_HELPERS = '''

def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`): `{name: array}` for every name in STATE, of the shapes in
    SHAPES (sizes consistent), as arrays of `dtype` (default JAX's default float)."""
    return _runtime.pack_named(values, {name: SHAPES[name] for name in STATE}, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[name]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_named(ys, STATE, SYSTEM)
'''


def _is_vector(s) -> bool:
    return isinstance(s, sp.MatrixSymbol) and s.shape[1] == 1


class _MatrixMethods:
    """Printing methods for matrix expressions, mixed into the scalar printer of `codegen`."""

    def _print_MatMul(self, expr):
        coeff, mats = expr.as_coeff_matrices()
        scalars = [a for a in expr.args if not isinstance(a, sp.MatrixExpr)]
        product = " @ ".join(self.parenthesize(m, 100) for m in mats)
        scalar = sp.Mul(*scalars) if scalars else coeff
        return product if scalar == 1 else f"({self._print(scalar)}) * ({product})"

    def _print_MatAdd(self, expr):
        return " + ".join(f"({self._print(a)})" for a in expr.args)

    def _print_Transpose(self, expr):
        return f"({self._print(expr.arg)}).T"

    def _print_Trace(self, expr):
        return f"jnp.trace({self._print(expr.arg)})"

    def _print_Identity(self, expr):
        return f"jnp.eye({self._print(expr.rows)})"

    def _print_ZeroMatrix(self, expr):
        return f"jnp.zeros(({self._print(expr.rows)}, {self._print(expr.cols)}))"

    def _print_MatPow(self, expr):
        if not (expr.exp.is_Integer and expr.exp > 0):
            raise ValueError(f"system: cannot print the matrix power {expr} (a positive integer power only)")
        return " @ ".join([self.parenthesize(expr.base, 100)] * int(expr.exp))

    def _print_MatrixSymbol(self, expr):
        return expr.name


def print_matrix_methods(printer_class: type) -> type:
    """`printer_class` with the matrix printing methods added."""
    return type(f"Matrix{printer_class.__name__}", (_MatrixMethods, printer_class), {})


def _shape_text(s) -> str:
    if not isinstance(s, sp.MatrixSymbol):
        return "()"
    dims = [str(n) if not isinstance(n, sp.Integer | int) else str(int(n)) for n in s.shape]
    dims = dims[:1] if _is_vector(s) else dims
    return "(" + ", ".join(repr(d) if not d.isdigit() else d for d in dims) + ("," if len(dims) == 1 else "") + ")"


def matrix_module_body(system, local: dict, printer, cse_symbols, reduced_names) -> list[str]:
    """The lines of the constants and `vector_field` of a matrix system: `local` maps each symbol (state,
    params, sizes) to its local name, `printer` prints expressions in local names, `cse_symbols` numbers the
    temporaries."""
    rename = {}
    for s, n in local.items():
        if isinstance(s, sp.MatrixSymbol):
            rename[s] = sp.MatrixSymbol(n, *s.shape)
        else:
            rename[s] = sp.Symbol(n, **s.assumptions0)
    exprs = [sp.sympify(e).xreplace(rename) for e in system.rhs]
    # the shapes of the renamed matrix symbols refer to the sizes by their local names
    exprs = [e.xreplace({k: v for k, v in rename.items() if not isinstance(k, sp.MatrixSymbol)}) for e in exprs]
    # no "basic" optimisations: their rewriting of negative factors turns a scaled matrix into a scalar Mul
    replacements, reduced = sp.cse(exprs, symbols=cse_symbols, optimizations=None, order="canonical")
    assigned = [(sym, printer.doprint(expr)) for sym, expr in replacements]
    outs = [printer.doprint(e) for e in reduced]
    state_names = ", ".join(s.name for s in system.state)
    shapes = ", ".join(f"{ascii(s.name)}: {_shape_text(s)}" for s in (*system.state, *system.params))
    body = [
        f"STATE = {ascii(tuple(s.name for s in system.state))}",
        f"PARAMS = {ascii(tuple(p.name for p in system.params))}",
        f"SHAPES = {{{shapes}}}",
        f"SYSTEM = {ascii(system.name)}\n\n",
        "def vector_field(t, y, args):",
        f'    """d({reduced_names(state_names)})/dt of the state `y` (a dict of arrays of the shapes in SHAPES, one',
        "    state: vmap for batches) and `args` (exactly the keys in PARAMS); the sizes are read from the",
        '    arrays, so one module runs at every size."""',
        "    _sizes = _runtime.check_named(y, args, STATE, PARAMS, SHAPES, SYSTEM)",
    ]
    for s in system.state:
        suffix = "[:, None]" if _is_vector(s) else ""
        body.append(f"    {local[s]} = y[{ascii(s.name)}]{suffix}")
    for p in system.params:
        suffix = "[:, None]" if _is_vector(p) else ""
        body.append(f"    {local[p]} = args[{ascii(p.name)}]{suffix}")
    used = set().union(*(sp.sympify(e).free_symbols for e in reduced), *(e.free_symbols for _, e in replacements))
    for size in system.sizes:
        if rename[size] in used or any(rename[size] in getattr(e, "free_symbols", ()) for e in exprs):
            body.append(f"    {local[size]} = _sizes[{ascii(size.name)}]")
    body += [f"    {sym} = {text}" for sym, text in assigned]
    body.append("    return {")
    for s, e, text in zip(system.state, reduced, outs, strict=True):
        if sp.sympify(e).is_zero or isinstance(e, sp.ZeroMatrix):
            text = f"jnp.zeros_like(y[{ascii(s.name)}])"
        elif _is_vector(s):
            text = f"({text})[:, 0]"
        elif not isinstance(s, sp.MatrixSymbol):
            text = f"jnp.asarray({text})"
        body.append(f"        {ascii(s.name)}: {text},")
    body.append("    }")
    return body
