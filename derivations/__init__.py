"""The symbolic layer: sympy models -> gradient-flow equations -> LaTeX and generated JAX code.

- `gradient_flow`, `push_forward`, `project`, `ParameterGroup`, `FlowSystem`: the engine
  (`derivations.gradient_flow`).
- `codegen`: vectorised JAX emission into `flows/_generated/` with CSE.
- `verify`: derived right-hand sides against `jax.grad` of the explicit loss.
- `available()`, `derive(name)`: the registry behind `python -m flows derive NAME [--latex]`.
- `write_all()`, `check_generated()`: regenerate / check the committed generated modules. Derivations with
  `module = None` (e.g. `mean_field-attention`, `mean_field-mlp`: printed and checked, while the full-size
  system is hand-written with array operations) have no generated module and are skipped.
"""

from __future__ import annotations

from . import codegen as codegen
from . import verify as verify
from .cooccurrence import Cooccurrence3TokenDerivation, CooccurrencePhase2Derivation
from .gradient_flow import FlowSystem as FlowSystem
from .gradient_flow import ParameterGroup as ParameterGroup
from .gradient_flow import Projection as Projection
from .gradient_flow import gradient_flow as gradient_flow
from .gradient_flow import naive_reduced_gradient as naive_reduced_gradient
from .gradient_flow import project as project
from .gradient_flow import push_forward as push_forward
from .mean_field import MeanFieldAttentionDerivation, MeanFieldMLPDerivation
from .scan_snap import DecoderDerivation, ReducedSymmetricDerivation

# name -> derivation class with .name, .module, .source, .system, .to_text(), .to_latex()
# (.module is None: printed and checked only, no generated module)
_REGISTRY = {cls.name: cls for cls in (DecoderDerivation, Cooccurrence3TokenDerivation,
                                         CooccurrencePhase2Derivation, ReducedSymmetricDerivation,
                                         MeanFieldAttentionDerivation, MeanFieldMLPDerivation)}


def available() -> list[str]:
    """Names accepted by `derive` (and by `python -m flows derive`)."""
    return sorted(_REGISTRY)


def derive(name: str):
    """Run the derivation `name`; the result has `.system`, `.to_text()` and `.to_latex()`."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown derivation {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]()


def generated_names() -> list[str]:
    """Registered names that have a generated module (`module` is not None)."""
    return [name for name in available() if getattr(_REGISTRY[name], "module", None) is not None]


def write_all() -> list:
    """Re-derive every registered system that has a generated module and write it; returns the paths."""
    paths = []
    for name in generated_names():
        d = derive(name)
        paths.append(codegen.write(d.system, module=d.module, source=d.source))
    return paths


def check_generated() -> dict:
    """{name: unified diff} for every generated module that differs from a fresh emission."""
    out = {}
    for name in generated_names():
        d = derive(name)
        delta = codegen.diff(d.system, module=d.module, source=d.source)
        if delta:
            out[name] = delta
    return out
