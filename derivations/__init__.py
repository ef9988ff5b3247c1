"""The symbolic layer: sympy models -> gradient-flow equations -> LaTeX and generated JAX code.

The engine (`gradient_flow`, `push_forward`, `project`, `ParameterGroup`, `FlowSystem`; at symbolic sizes
`MatrixFlowSystem` and `derivations.matrix`), reductions by symmetry (`reduce_by_symmetry`,
`find_symmetries`, `SymmetryReduction`), `codegen` (JAX emission), `verify` (checks against `jax.grad`),
`readable` (printing), `Derivation` (the contract of a registered derivation), the registry behind
``python -m flows derive NAME`` (`available`, `derive`, `register`, `unregister`) and `write_all` /
`check_generated` for the modules in `flows/_generated/` (derivations with `module = None` are printed and
checked only)."""

from __future__ import annotations

from flows import registry as _systems

from . import codegen as codegen
from . import verify as verify
from ._printing import readable as readable
from .base import Derivation as Derivation
from .gradient_flow import ParameterGroup as ParameterGroup
from .gradient_flow import Projection as Projection
from .gradient_flow import gradient_flow as gradient_flow
from .gradient_flow import naive_reduced_gradient as naive_reduced_gradient
from .gradient_flow import project as project
from .gradient_flow import push_forward as push_forward
from .matrix_system import MatrixFlowSystem as MatrixFlowSystem
from .symmetry import SymmetryReduction as SymmetryReduction
from .symmetry import reduce_by_symmetry as reduce_by_symmetry
from .symmetry_search import find_symmetries as find_symmetries
from .system import FlowSystem as FlowSystem

# name -> derivation class with .name, .module, .source, .system, .to_text(), .to_latex()
# (.module is None: printed and checked only, no generated module); see `Derivation`. The package's own are
# those of the systems registered in `flows.registry`, the one list of systems and derivations.
_REGISTRY: dict[str, type[Derivation]] = {cls.name: cls for cls in map(_systems.load, _systems.derivation_paths())}
# names added by `register` (a user's derivations: never written into the package by write_all)
_USER: set = set()


def register(cls=None, *, replace: bool = False):
    """Register a user's `Derivation` subclass so that `derive(cls.name)` finds it; returns `cls`.

    Usable as a decorator (`@derivations.register`). The class needs the attributes of the `Derivation`
    contract: `name` (a new, non-empty string), `module` (an identifier, or `None` for print/check only) and
    `source` (a string; `Derivation` gives each subclass its `"module:QualifiedName"` unless it sets one). A
    name the package already uses is refused; re-registering one of your own names needs `replace=True`.
    Registration lasts for this Python process; `write_all` and `check_generated` stay with the package's own
    derivations (write yours with `codegen.write(d.system, out_dir=...)`).
    """
    if cls is None:
        return lambda c: register(c, replace=replace)
    if not isinstance(cls, type) or not issubclass(cls, Derivation):
        raise ValueError(f"cls must be a subclass of derivations.Derivation, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"cls.name must be a non-empty string (the registry name), got {name!r}")
    module = getattr(cls, "module", None)
    if module is not None and (not isinstance(module, str) or not module.isidentifier()):
        raise ValueError(f"cls.module must be a Python identifier or None, got {module!r}")
    source = getattr(cls, "source", None)
    if not isinstance(source, str):
        raise ValueError(f"cls.source must be a string (where the derivation lives), got {source!r}")
    if name in _REGISTRY and name not in _USER:
        raise ValueError(f"cls.name {name!r} is a derivation of the package; choose another name")
    if name in _REGISTRY and not replace:
        raise ValueError(f"cls.name {name!r} is already registered; pass replace=True to replace it")
    _REGISTRY[name] = cls
    _USER.add(name)
    return cls


def unregister(name: str) -> None:
    """Remove a derivation added by `register` (the package's own cannot be removed)."""
    if name not in _USER:
        raise ValueError(f"name {name!r} was not added by register (registered by you: {sorted(_USER)})")
    _USER.discard(name)
    _REGISTRY.pop(name, None)


def available() -> list[str]:
    """Names accepted by `derive` (and by `python -m flows derive`)."""
    return sorted(_REGISTRY)


def derive(name: str):
    """Run the derivation `name`; the result has `.system`, `.to_text()` and `.to_latex()`."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown derivation {name!r}; available: {', '.join(available())}")
    d = _REGISTRY[name]()
    if not isinstance(getattr(d, "system", None), FlowSystem | MatrixFlowSystem):
        raise ValueError(
            f"derivation {name!r} did not set self.system to a FlowSystem or MatrixFlowSystem in __init__ "
            f"(got {type(getattr(d, 'system', None)).__name__})"
        )
    return d


def generated_names() -> list[str]:
    """The package's registered names that have a generated module (`module` is not None)."""
    return [name for name in available() if name not in _USER and getattr(_REGISTRY[name], "module", None) is not None]


def write_all() -> list:
    """Re-derive every system of the package that has a generated module and write it into
    `flows/_generated/`; returns the paths."""
    return [codegen.write(d.system, module=d.module, source=d.source) for d in map(derive, generated_names())]


def check_generated() -> dict:
    """{name: unified diff} for every generated module of the package that differs from a fresh emission."""
    deltas = {d.name: codegen.diff(d.system, module=d.module, source=d.source) for d in map(derive, generated_names())}
    return {name: delta for name, delta in deltas.items() if delta}
