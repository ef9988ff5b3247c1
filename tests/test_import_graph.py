"""The import graph of the library (`flows/`, `derivations/`), read from the source with `ast`: no import cycle
between modules, no module reaching a `_`-prefixed name of another module, no environment variable read at
import time.

Imports anywhere in a module count (inside functions too: a cycle closed at call time is still a cycle), except
those under `if TYPE_CHECKING:`. Importing a private *module* (`from .. import _program`,
`from .._checks import check_int`) is fine; the rule is about private *names* (`from .solve import _signature`,
`network._objective`). Nor does the library keep a deprecated shim: no module names `DeprecationWarning` (nothing
has been released, so an old name is renamed and its callers updated). `flows/_generated/` (emitted by
`derivations/`) is exempt from the private-name rule.

`KNOWN_VIOLATIONS` lists what still breaks a rule in code being restructured; each entry must still exist
(a fixed one is removed from the list), so the list only shrinks.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flows", "derivations")
EXEMPT_PRIVATE = ("flows._generated",)

#: Violations that remain in modules under restructuring, by rule: `cycles` (the sorted modules of each
#: strongly connected component of the import graph), `private` ("importer: module.name"), `environ`
#: ("module:line" of a read at import time), `deprecated` ("module:line" naming `DeprecationWarning`).
KNOWN_VIOLATIONS: dict[str, set] = {"cycles": set(), "private": set(), "environ": set(), "deprecated": set()}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the library."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(importer: str, module: str | None, level: int) -> str:
    """The absolute name of `from <level dots><module> import ...` written in module `importer`."""
    if level == 0:
        return module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _type_checking(node) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The internal modules a module imports, the private names it takes from other modules, and the names it
    binds to internal modules (for `module._name` attribute access)."""

    def __init__(self, name: str):
        self.name = name
        self.edges: set[str] = set()
        self.private: set[str] = set()
        self.aliases: dict[str, str] = {}

    def visit_If(self, node):
        if _type_checking(node):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            if alias.name in MODULES:
                self.edges.add(alias.name)
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    self.aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        source = _resolve(self.name, node.module, node.level)
        if source not in MODULES:
            return
        for alias in node.names:
            target = f"{source}.{alias.name}"
            if target in MODULES:  # a module: fine whatever its name
                self.edges.add(target)
                self.aliases[alias.asname or alias.name] = target
                continue
            self.edges.add(source)
            if _private(alias.name) and source != self.name:
                self.private.add(f"{source}.{alias.name}")

    def visit_Attribute(self, node):
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in self.aliases:
            module = self.aliases[value.id]
            for attr in reversed(chain):
                if f"{module}.{attr}" in MODULES:
                    module = f"{module}.{attr}"
                    continue
                if _private(attr) and module != self.name:
                    self.private.add(f"{module}.{attr}")
                break
        self.generic_visit(node)


def _parse(name: str) -> _Imports:
    visitor = _Imports(name)
    visitor.visit(ast.parse(MODULES[name].read_text(), filename=str(MODULES[name])))
    return visitor


PARSED = {name: _parse(name) for name in MODULES}


def _cycles() -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (or a module importing itself), by Tarjan."""
    graph = {name: sorted(PARSED[name].edges - {name}) for name in MODULES}
    index, low, stack, on_stack, out = {}, {}, [], set(), set()
    counter = [0]

    def connect(v):  # iterative: the graph is deep enough for Python's recursion limit to matter
        work = [(v, iter(graph[v]))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    out.add(tuple(sorted(component)))

    for v in graph:
        if v not in index:
            connect(v)
    return out


def _private_imports() -> set[str]:
    return {
        f"{name}: {target}"
        for name, parsed in PARSED.items()
        if not name.startswith(EXEMPT_PRIVATE)
        for target in parsed.private
        if not target.startswith(EXEMPT_PRIVATE)
    }


class _ImportTimeEnviron(ast.NodeVisitor):
    """`os.environ` / `os.getenv` / `environ` reads that run when the module is imported: everywhere but in the
    bodies of functions (decorators and default values run at import)."""

    def __init__(self):
        self.lines: list[int] = []

    def _function(self, node):
        for child in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if child is not None:
                self.visit(child)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node):
        for child in [*node.args.defaults, *node.args.kw_defaults]:
            if child is not None:
                self.visit(child)

    def visit_Attribute(self, node):
        if node.attr in ("environ", "getenv", "environb"):
            self.lines.append(node.lineno)
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in ("environ", "getenv"):
            self.lines.append(node.lineno)


def _environ_reads() -> set[str]:
    out = set()
    for name, path in MODULES.items():
        visitor = _ImportTimeEnviron()
        visitor.visit(ast.parse(path.read_text()))
        out |= {f"{name}:{line}" for line in visitor.lines}
    return out


def _deprecation_warnings() -> set[str]:
    return {
        f"{name}:{node.lineno}"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name) and node.id == "DeprecationWarning"
    }


FOUND = {
    "cycles": _cycles(),
    "private": _private_imports(),
    "environ": _environ_reads(),
    "deprecated": _deprecation_warnings(),
}


@pytest.mark.parametrize("rule", sorted(KNOWN_VIOLATIONS))
def test_no_new_violations(rule):
    new = sorted(FOUND[rule] - KNOWN_VIOLATIONS[rule])
    assert not new, f"{rule}: " + "; ".join(map(str, new))


@pytest.mark.parametrize("rule", sorted(KNOWN_VIOLATIONS))
def test_known_violations_still_exist(rule):
    gone = sorted(KNOWN_VIOLATIONS[rule] - FOUND[rule])
    assert not gone, f"{rule}: fixed, remove from KNOWN_VIOLATIONS: " + "; ".join(map(str, gone))


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    """Each rule finds its violation in a small package written for the purpose (so that an empty result means
    the rule holds, not that the parser saw nothing)."""
    pkg = tmp_path / "flows"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from . import a\n",
        "a.py": "import os\nHOME = os.environ.get('HOME')\n\ndef f():\n    from . import b\n    return b\n",
        "b.py": "from .a import f\nfrom . import _c\nfrom .sub import d\nd._hidden()\n",
        "_c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import f\nX = 1\n",
        "sub/__init__.py": "",
        "sub/d.py": "from .._c import X\nfrom ..a import _private\nimport os\n\ndef g():\n    return os.environ['X']\n",
        "old.py": "import warnings\n\ndef __getattr__(name):\n    warnings.warn(name, DeprecationWarning)\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("flows",))
    modules = _modules()
    monkeypatch.setattr(sys.modules[__name__], "MODULES", modules)
    monkeypatch.setattr(sys.modules[__name__], "PARSED", {name: _parse(name) for name in modules})
    assert _cycles() == {("flows.a", "flows.b", "flows.sub.d")}
    assert _private_imports() == {"flows.b: flows.sub.d._hidden", "flows.sub.d: flows.a._private"}
    assert _environ_reads() == {"flows.a:2"}
    assert _deprecation_warnings() == {"flows.old:4"}
