"""Emit a derived `FlowSystem` as vectorised JAX source into `flows/_generated/<module>.py`.

The right-hand sides are printed with sympy's `JaxPrinter` after common-subexpression elimination
(`sympy.cse`). The state is one array whose last axis holds the coordinates (`y[..., i]`), and every
parameter is read from `args[name]`, so the emitted function broadcasts and vmaps without recompiling.
Generated files are committed; `check_generated()` re-emits every registered derivation and reports any
file that differs, which a test turns into a failure.
"""

from __future__ import annotations

import difflib
import pathlib

import sympy as sp
from sympy.printing.numpy import JaxPrinter

from .gradient_flow import FlowSystem

__all__ = ["GENERATED_DIR", "emit", "generated_path", "write"]

_MAX_HEADER_EQUATIONS = 3000

GENERATED_DIR = pathlib.Path(__file__).resolve().parent.parent / "flows" / "_generated"

_HEADER = '''"""GENERATED FILE: do not edit by hand.

Derivation: {source}
System: {name}
{description}
Equations:
{equations}

Re-generate with `python -m derivations --write`; a test fails when this file is out of date.
"""
'''


class _Printer(JaxPrinter):
    """JaxPrinter that prints `jnp.` instead of `jax.numpy.`."""

    def _module_format(self, fqn, register=True):
        fqn = fqn.replace("jax.numpy.", "jnp.")
        return super()._module_format(fqn, register=False) if not fqn.startswith("jnp.") else fqn


def _safe(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out.isidentifier() else f"s_{out}"


def emit(system: FlowSystem, *, module: str, source: str) -> str:
    """The source text of `flows/_generated/<module>.py` for `system` (deterministic)."""
    printer = _Printer({"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": False})
    state_names = [_safe(s.name) for s in system.state]
    param_names = [_safe(p.name) for p in system.params]
    if len(set(state_names + param_names)) != len(state_names) + len(param_names):
        raise ValueError(f"symbol names of {system.name} collide after sanitising")
    rename = {s: sp.Symbol(n) for s, n in zip(system.state + system.params,
                                              state_names + param_names, strict=True)}
    exprs = [sp.sympify(e).xreplace(rename) for e in system.rhs]
    gen = sp.numbered_symbols("_x")
    replacements, reduced = sp.cse(exprs, symbols=gen, optimizations="basic", order="canonical")
    eq_text = system.to_text()
    if len(eq_text) > _MAX_HEADER_EQUATIONS:
        eq_text = (f"({len(system.state)} equations, {len(eq_text)} characters: print them with "
                   f"`python -m flows derive {system.name}`)")
    eq_lines = "\n".join("    " + line for line in eq_text.splitlines())
    desc = "\n".join(line.rstrip() for line in system.description.strip().splitlines())
    body = [_HEADER.format(source=source, name=system.name, description=desc, equations=eq_lines)]
    body.append("import jax.numpy as jnp\n")
    body.append(f"STATE = {tuple(s.name for s in system.state)!r}")
    body.append(f"PARAMS = {tuple(p.name for p in system.params)!r}")
    body.append(f"SYSTEM = {system.name!r}\n\n")
    body.append("def vector_field(t, y, args):")
    body.append(f'    """d({", ".join(s.name for s in system.state)})/dt for state `y[..., i]` in STATE order and')
    body.append('    `args` a mapping with the keys in PARAMS; broadcasts over leading axes."""')
    for i, name in enumerate(state_names):
        body.append(f"    {name} = y[..., {i}]")
    for p_name, p in zip(param_names, system.params, strict=True):
        body.append(f"    {p_name} = args[{p.name!r}]")
    for sym, expr in replacements:
        body.append(f"    {sym} = {printer.doprint(expr)}")
    outs = [printer.doprint(e) for e in reduced]
    if len(outs) == 1:
        body.append(f"    return jnp.stack([jnp.broadcast_to({outs[0]}, y[..., 0].shape)], axis=-1)")
    else:
        body.append("    return jnp.stack(")
        body.append("        [")
        for o in outs:
            body.append(f"            jnp.broadcast_to({o}, y[..., 0].shape),")
        body.append("        ],")
        body.append("        axis=-1,")
        body.append("    )")
    return "\n".join(body) + "\n"


def generated_path(module: str) -> pathlib.Path:
    return GENERATED_DIR / f"{module}.py"


def write(system: FlowSystem, *, module: str, source: str) -> pathlib.Path:
    """Write the emitted module (atomically) and return its path."""
    path = generated_path(module)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = emit(system, module=module, source=source)
    tmp = path.with_suffix(".py.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def diff(system: FlowSystem, *, module: str, source: str) -> str:
    """Unified diff between the committed file and a fresh emission ('' when identical)."""
    path = generated_path(module)
    fresh = emit(system, module=module, source=source)
    old = path.read_text() if path.exists() else ""
    if old == fresh:
        return ""
    return "".join(difflib.unified_diff(old.splitlines(True), fresh.splitlines(True),
                                        fromfile=f"committed {path.name}", tofile="fresh emission"))
