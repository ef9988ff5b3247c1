"""Emit a derived `FlowSystem` as vectorised JAX source (sympy's `JaxPrinter` after `sympy.cse`), write it
anywhere, load it, or compile it in memory.

The state is one array whose last axis holds the coordinates (`y[..., i]`); each parameter is read from
`args[name]`, and `args` must have exactly the keys in `PARAMS` (else a `ValueError` at trace time). The
module imports `jax.numpy`, the few other modules its functions need, and the shared runtime of the generated
modules (`flows._generated._runtime`: the `args` check, `pack_state`, `unpack_state`). A symbol whose name is
not a safe, unique Python identifier gets a renamed local (`local_names`); `STATE`, `PARAMS` and the `args` keys
keep the names. A `MatrixFlowSystem` (sizes as symbols) is emitted with matmul code on a state by name
(`derivations._emit_matrix`)."""

from __future__ import annotations

import ast
import builtins
import difflib
import importlib.util
import itertools
import keyword
import linecache
import os
import pathlib
import re
import types
import unicodedata

import sympy as sp
from sympy.printing.numpy import JaxPrinter

from ._emit_matrix import MATRIX_HELPERS, matrix_module_body, print_matrix_methods
from .matrix_system import MatrixFlowSystem
from .system import FlowSystem

__all__ = ["GENERATED_DIR", "compile_system", "diff", "emit", "generated_path", "load", "local_names", "write"]

_MAX_HEADER_EQUATIONS = 3000
PathLike = str | os.PathLike

GENERATED_DIR = pathlib.Path(__file__).resolve().parent.parent / "flows" / "_generated"

_HEADER = '''"""GENERATED FILE: do not edit by hand.

Derivation: {source}
System: {name}
{description}
Equations:
{equations}

{footer}
"""
'''
# What every emitted module defines after `vector_field`: thin wrappers of the shared runtime
# (`flows/_generated/_runtime.py`), which holds the checks and the packing once for all generated modules.
_HELPERS = '''

def pack_state(values, dtype=None):
    """The state `y` (e.g. `y0` for `flows.solve`) whose last axis holds `values[name]` for every name in
    STATE, in that order; arrays broadcast (shape `s` gives states of shape `s + (len(STATE),)`)."""
    return _runtime.pack_state(values, STATE, SYSTEM, dtype)


def unpack_state(ys):
    """`{name: ys[..., i]}` for every name in STATE: `ys` one state, saved states or a `flows.Trajectory`."""
    return _runtime.unpack_state(ys, STATE)
'''
#: the import of the shared runtime (absolute, so that a module written into any folder finds it)
RUNTIME_IMPORT = "from flows._generated import _runtime"

_PACKAGE_FOOTER = "Re-generate with `python -m derivations --write`; a test fails when this file is out of date."
_USER_FOOTER = "Re-generate with `derivations.codegen.write` (or build it in memory with `codegen.compile_system`)."

_CSE_PREFIX = "_x"
_CSE_NAME = re.compile(re.escape(_CSE_PREFIX) + r"\d+")
# names the emitted function body reads besides its locals: its arguments, the modules it may import
# (`jnp` always; `functools`, `jax` for reduce and jax.scipy.special) and every builtin (it calls `abs`).
_FUNCTION_NAMES = frozenset({"t", "y", "args"})
# module-level helpers the emitted function calls (a local of that name would shadow them)
_HELPER_NAMES = frozenset({"_runtime", "_sizes"})
_MODULE_NAMES = frozenset({"jnp", "jax", "functools", "numpy", "math", "scipy"})
_RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | _FUNCTION_NAMES | _MODULE_NAMES | _HELPER_NAMES

# math.* functions the Python printer falls back to, and their JAX versions
_MATH_TO_JAX = {
    "math.erf": "jax.scipy.special.erf",
    "math.erfc": "jax.scipy.special.erfc",
    "math.gamma": "jax.scipy.special.gamma",
    "math.lgamma": "jax.scipy.special.gammaln",
    "math.factorial": "jax.scipy.special.factorial",
}
_IMPORTABLE = {"functools": "import functools", "jax.scipy.special": "import jax.scipy.special"}


class _Printer(JaxPrinter):
    """JaxPrinter that prints `jnp.X` for `jax.numpy.X`, fully qualified names for the few other modules the
    emitted code may import (recorded in `imports`), and refuses anything JAX cannot trace."""

    def __init__(self, settings: dict | None = None) -> None:
        super().__init__(settings)
        self.imports: set[str] = set()

    def _module_format(self, fqn, register=True):
        if fqn in ("jax.numpy", "numpy", "jnp"):
            return "jnp"
        for prefix in ("jax.numpy.", "numpy.", "jnp."):
            if fqn.startswith(prefix):
                return "jnp." + fqn[len(prefix) :]
        if fqn == "abs":  # the builtin, reserved above
            return fqn
        fqn = _MATH_TO_JAX.get(fqn, fqn)
        module = fqn.rpartition(".")[0]
        if module in _IMPORTABLE:
            self.imports.add(_IMPORTABLE[module])
            return fqn
        raise ValueError(
            f"system: the right-hand side needs `{fqn}`, which the JAX code generator cannot emit "
            "(write this function with jax.numpy by hand, or rewrite the expression)"
        )


_MatrixPrinter = print_matrix_methods(_Printer)


def _identifier(name: str) -> str:
    """`name` as a Python identifier: NFKC-normalised (as Python reads identifiers), invalid characters as
    `_`, prefixed with `s_` when it would not start like one."""
    name = unicodedata.normalize("NFKC", name)
    out = "".join(c if ("_" + c).isidentifier() else "_" for c in name) or "_"
    return out if out.isidentifier() else f"s_{out}"


def _reserved(name: str) -> bool:
    return name in _RESERVED or _CSE_NAME.fullmatch(name) is not None


def local_names(system: FlowSystem | MatrixFlowSystem) -> dict:
    """{symbol: the local variable name the emitted code uses for it}, state first, then params.

    A symbol keeps its own name when that is a safe, unique identifier; otherwise it is sanitised (`eta.1` ->
    `eta_1`, `1x` -> `s_1x`) and suffixed with `_` until it is no keyword, builtin, name of the emitted code
    (`t`, `y`, `args`, `jnp`, `_runtime`, the CSE temporaries `_x0`, ...) or other local. Two different
    symbols with the same name (e.g. different assumptions) are a `ValueError`: their keys would be ambiguous.
    """
    symbols = tuple(system.state) + tuple(system.params) + tuple(getattr(system, "sizes", ()))
    by_name: dict = {}
    for s in symbols:
        if not isinstance(s, sp.Symbol | sp.MatrixSymbol):
            raise ValueError(f"system: state and params must be sympy Symbols, got {s!r} ({type(s).__name__})")
        other = by_name.setdefault(s.name, s)
        if other is not s and other != s:
            raise ValueError(
                f"system: {system.name!r} has two different symbols named {s.name!r} in its state and params "
                f"(assumptions {other.assumptions0} and {s.assumptions0}); their STATE / args keys would clash"
            )
    if len(set(symbols)) != len(symbols):
        dup = sorted({s.name for s in symbols if symbols.count(s) > 1})
        raise ValueError(f"system: {system.name!r} lists {dup} more than once in its state and params")
    names: list = [None] * len(symbols)
    taken: set = set()
    for i, s in enumerate(symbols):  # first pass: every symbol whose own name is safe keeps it
        cand = _identifier(s.name)
        if not _reserved(cand) and cand not in taken and cand == s.name:
            names[i] = cand
            taken.add(cand)
    for i, s in enumerate(symbols):  # second pass: the rest, sanitised, then suffixed until free
        if names[i] is not None:
            continue
        cand = _identifier(s.name)
        while _reserved(cand) or cand in taken:
            cand += "_"
        names[i] = cand
        taken.add(cand)
    return dict(zip(symbols, names, strict=True))


_QUOTE_RUN = re.compile(r'"(?=")|(?<=")"')


def _doc_text(text: str) -> str:
    """`text` safe inside a triple-quoted docstring: backslashes doubled, no two unescaped quotes in a row,
    control and unencodable characters as escapes."""
    out = []
    for c in text.replace("\\", "\\\\"):
        if c != "\n" and (not c.isprintable() or 0xD800 <= ord(c) <= 0xDFFF):
            out.append(c.encode("unicode_escape").decode("ascii"))
        else:
            out.append(c)
    return _QUOTE_RUN.sub(r'\\"', "".join(out))


def _check_system(system) -> None:
    if not isinstance(system, FlowSystem | MatrixFlowSystem):
        raise ValueError(f"system must be a derivations.FlowSystem or MatrixFlowSystem, got {type(system).__name__}")


def _check_module(module) -> str:
    if not isinstance(module, str) or not module.isidentifier() or keyword.iskeyword(module):
        raise ValueError(f"module must be a Python identifier (the file is <module>.py), got {module!r}")
    return module


def emit(system: FlowSystem | MatrixFlowSystem, *, module: str | None = None, source: str = "") -> str:
    """The source text of the generated module for `system` (deterministic), as written into the package.

    `source` says where the derivation lives (it goes into the header); `module`, when given, is only
    checked to be a valid module name.
    """
    return _emit(system, module=module, source=source, footer=_PACKAGE_FOOTER)


def _emit(system, *, module, source, footer) -> str:
    _check_system(system)
    if module is not None:
        _check_module(module)
    if not isinstance(source, str):
        raise ValueError(f"source must be a string (where the derivation lives), got {type(source).__name__}")
    local = local_names(system)
    for sym, e in zip(system.state, system.rhs, strict=True):
        bad = [c for c in (sp.zoo, sp.nan, sp.oo, -sp.oo) if sp.sympify(e).has(c)]
        if bad:
            raise ValueError(
                f"system: the right-hand side of {sym} contains {bad[0]} (a division by zero or an "
                f"undefined value in the derivation): {e}"
            )
    matrix = isinstance(system, MatrixFlowSystem)
    printer = (_MatrixPrinter if matrix else _Printer)(
        {"fully_qualified_modules": False, "inline": True, "allow_unknown_functions": False}
    )
    gen = sp.numbered_symbols(_CSE_PREFIX)
    try:
        lines = (matrix_module_body if matrix else _scalar_module_body)(system, local, printer, gen, _doc_text)
    except NotImplementedError as err:  # sympy's PrintMethodNotImplementedError
        raise ValueError(
            f"system: the JAX code generator cannot print part of the right-hand side: {str(err).splitlines()[0]}"
        ) from err
    eq_text = system.to_text()
    if len(eq_text) > _MAX_HEADER_EQUATIONS:
        eq_text = (
            f"({len(system.state)} equations, {len(eq_text)} characters: print them with "
            f"`python -m flows derive {system.name}`)"
        )
    eq_lines = "\n".join("    " + line for line in eq_text.splitlines())
    desc = "\n".join(line.rstrip() for line in system.description.strip().splitlines())
    fields = dict(source=source or "(not given)", name=system.name, description=desc, equations=eq_lines, footer=footer)
    imports = [*sorted(printer.imports, key=lambda line: ("jax" in line, line)), "import jax.numpy as jnp"]
    body = [
        _HEADER.format(**{k: _doc_text(v) for k, v in fields.items()}),
        "\n".join(imports) + "\n",
        RUNTIME_IMPORT + "\n",
    ]
    text = "\n".join(body + lines) + "\n" + (MATRIX_HELPERS if matrix else _HELPERS)
    try:
        ast.parse(text)
    except SyntaxError as err:  # a bug of this module, never of the user's names
        raise RuntimeError(f"codegen emitted invalid Python for {system.name!r}: {err}") from err
    return text


def _scalar_module_body(system, local, printer, gen, doc_text) -> list[str]:
    """The constants and `vector_field` of a system of scalar coordinates (one array, last axis the state)."""
    rename = {s: sp.Symbol(n) for s, n in local.items()}
    exprs = [sp.sympify(e).xreplace(rename) for e in system.rhs]
    replacements, reduced = sp.cse(exprs, symbols=gen, optimizations="basic", order="canonical")
    assigned = [(sym, printer.doprint(expr)) for sym, expr in replacements]
    outs = [printer.doprint(e) for e in reduced]
    body = [
        f"STATE = {ascii(tuple(s.name for s in system.state))}",
        f"PARAMS = {ascii(tuple(p.name for p in system.params))}",
        f"SYSTEM = {ascii(system.name)}\n\n",
        "def vector_field(t, y, args):",
        f'    """d({doc_text(", ".join(s.name for s in system.state))})/dt for state `y[..., i]` in STATE order and',
        "    `args` a mapping with exactly the keys in PARAMS (others are a ValueError); broadcasts over leading",
        '    axes."""',
        "    _runtime.check_args(args, PARAMS, SYSTEM)",
    ]
    # every local is read before any is written, so a state named like a parameter key cannot interfere
    body += [f"    {local[s]} = y[..., {i}]" for i, s in enumerate(system.state)]
    body += [f"    {local[p]} = args[{ascii(p.name)}]" for p in system.params]
    body += [f"    {sym} = {text}" for sym, text in assigned]
    stacked = [f"jnp.broadcast_to({o}, y[..., 0].shape)" for o in outs]
    if len(outs) == 1:
        return [*body, f"    return jnp.stack([{stacked[0]}], axis=-1)"]
    return [
        *body,
        "    return jnp.stack(",
        "        [",
        *(f"            {s}," for s in stacked),
        "        ],",
        "        axis=-1,",
        "    )",
    ]


def _out_dir(out_dir) -> pathlib.Path:
    if out_dir is None:
        return GENERATED_DIR
    if not isinstance(out_dir, str | os.PathLike):
        raise ValueError(f"out_dir must be a path (str or os.PathLike), got {type(out_dir).__name__}")
    return pathlib.Path(out_dir)


def generated_path(module: str, out_dir: PathLike | None = None) -> pathlib.Path:
    """`<out_dir>/<module>.py`; `out_dir` defaults to the package's `flows/_generated/`."""
    return _out_dir(out_dir) / f"{_check_module(module)}.py"


def _footer(out_dir) -> str:
    package = out_dir is None or _out_dir(out_dir).resolve() == GENERATED_DIR
    return _PACKAGE_FOOTER if package else _USER_FOOTER


def write(
    system: FlowSystem | MatrixFlowSystem,
    *,
    out_dir: PathLike | None = None,
    module: str | None = None,
    source: str = "",
) -> pathlib.Path:
    """Write the emitted module to `<out_dir>/<module>.py` (atomically, creating `out_dir`) and return its path.

    **Arguments:**

    - `out_dir`: any folder (e.g. your project's); default: the package's `flows/_generated/`, which is for
      the registered derivations of this package (`python -m derivations --write`).
    - `module`: the file's name without `.py`; default: `system.name` as an identifier (`-` -> `_`).
    - `source`: where the derivation lives, recorded in the header (e.g. `"my_project/flows.py"`).
    """
    _check_system(system)
    module = _identifier(system.name) if module is None else _check_module(module)
    if keyword.iskeyword(module):
        module += "_"
    path = generated_path(module, out_dir)
    text = _emit(system, module=module, source=source, footer=_footer(out_dir))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".py.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _check_flow_module(mod, where: str) -> types.ModuleType:
    missing = [a for a in ("vector_field", "STATE", "PARAMS") if not hasattr(mod, a)]
    if missing:
        raise ValueError(f"{where} is not a generated flow module: it has no {', '.join(missing)}")
    return mod


def load(path: PathLike) -> types.ModuleType:
    """Import a module written by `write` (or any file defining `vector_field`, `STATE`, `PARAMS`).

    The module is not added to `sys.modules`, so files of the same name in different folders do not clash.
    Returns the module: `vector_field(t, y, args)` for `flows.solve`, `STATE` (coordinate names, the order of
    `y[..., i]`), `PARAMS` (the keys `args` must have, no others), `SYSTEM` (the system's name), and (in modules
    written by `write`) `pack_state(values)` / `unpack_state(ys)` between `{name: value}` and state arrays.
    """
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"path must be a path to a .py file, got {type(path).__name__}")
    path = pathlib.Path(path)
    if path.suffix != ".py":
        raise ValueError(f"path must name a .py file, got {str(path)!r}")
    if not path.is_file():
        raise ValueError(f"path {str(path)!r} does not exist (write it first with codegen.write)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None  # a .py file always has a spec with a loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return _check_flow_module(mod, f"path {str(path)!r}")


_COMPILED_COUNT = itertools.count()


def compile_system(system: FlowSystem | MatrixFlowSystem, *, source: str = "") -> types.ModuleType:
    """The module `write` + `load` would give, built in memory from `emit(system)` (no file is written).

    The emitted text is kept as `mod.SOURCE` and in `linecache`, so tracebacks show the generated lines.
    """
    _check_system(system)
    text = _emit(
        system, module=None, source=source or "derivations.codegen.compile_system (in memory)", footer=_USER_FOOTER
    )
    filename = f"<derivations.codegen.compile_system {next(_COMPILED_COUNT)}: {system.name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    mod = types.ModuleType(_identifier(system.name), f"generated in memory from FlowSystem {system.name!r}")
    mod.__file__ = filename
    exec(compile(text, filename, "exec"), mod.__dict__)  # noqa: S102 - our own emitted source
    mod.SOURCE = text  # type: ignore[attr-defined]
    return _check_flow_module(mod, f"the module compiled from {system.name!r}")


def diff(
    system: FlowSystem | MatrixFlowSystem, *, module: str, source: str = "", out_dir: PathLike | None = None
) -> str:
    """Unified diff between the file `<out_dir>/<module>.py` and a fresh emission ('' when identical)."""
    path = generated_path(module, out_dir)
    fresh = _emit(system, module=module, source=source, footer=_footer(out_dir))
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if old == fresh:
        return ""
    return "".join(
        difflib.unified_diff(
            old.splitlines(True), fresh.splitlines(True), fromfile=f"committed {path.name}", tofile="fresh emission"
        )
    )
