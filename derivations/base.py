"""`Derivation`: the contract of every registered derivation (what `python -m flows derive NAME` prints);
see the class docstring."""

from __future__ import annotations

import sympy as sp

from ._printing import readable
from .matrix_system import MatrixFlowSystem
from .system import FlowSystem

__all__ = ["Derivation"]


class Derivation:
    """The contract of a derivation (subclass this one).

    A derivation is a class; `derivations.derive(name)` instantiates it with no arguments. The contract:

    - `name` (class attribute, str): the registry name, e.g. `"scan_snap-decoder"` or `"my-flow"`.
    - `module` (class attribute, str or None): the generated module's name (`<module>.py`, an identifier), or
      `None` for a derivation that is printed and checked only, with no generated code (e.g. the mean-field
      ones, whose full-size systems are written by hand with array operations: `derivations.mean_field`).
    - `source` (class attribute, str): where the derivation lives (`"package.module:function"`, a file name),
      recorded in the generated file's header; default `"<the class's module>:<its qualified name>"`, set for
      each subclass that does not give its own.
    - `system` (set in `__init__`): the derived `FlowSystem`, the thing that is emitted and solved.
    - `to_text()`, `to_latex()`: the derivation in words and in LaTeX. The defaults here print the steps of
      `_steps()` (override it: a list of `(title, [sympy objects])`) and then the result, `result_rhs()` (override
      it for a more readable form of the right-hand sides than `system.rhs`, e.g. with intermediate symbols
      kept; for printing only); `result_title` names that last section. Every printed expression is shown
      in its most readable equal form (`derivations.readable`: common factors pulled out, a
      fraction's denominator factored, logistic terms as 1/(1 + e^-a)), never the expanded one.

    The package's own derivations are listed in `derivations._REGISTRY` and written into `flows/_generated/` by
    `python -m derivations --write`. Your own: subclass `Derivation`, `derivations.register(MyDerivation)` (then
    `derivations.derive("my-flow")` finds it), and emit it where you like with
    `codegen.write(d.system, out_dir=..., module=d.module, source=d.source)` + `codegen.load(path)`, or in
    memory with `codegen.compile_system(d.system)`; neither touches the package.
    """

    name: str
    module: str | None
    source: str
    system: FlowSystem | MatrixFlowSystem
    result_title: str = "result"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # every class its own default, not an inherited one: the header names the class that derived the code
        if "source" not in cls.__dict__:
            cls.source = f"{cls.__module__}:{cls.__qualname__}"

    def _steps(self) -> list:
        return []

    def result_rhs(self) -> tuple:
        return self.system.rhs

    def _result(self):
        return list(zip(self.system.state, self.result_rhs(), strict=True))

    def to_text(self) -> str:
        out = [f"# {self.name}", self.system.description]
        for title, exprs in self._steps():
            out.append(f"\n## {title}")
            out.extend(sp.sstr(readable(e)) for e in exprs)
        out.append(f"\n## {self.result_title}")
        out.extend(f"d{s}/dt = {sp.sstr(readable(e))}" for s, e in self._result())
        return "\n".join(out)

    def to_latex(self) -> str:
        out = [f"% {self.name}"]
        for title, exprs in self._steps():
            out.append(f"% {title}")
            out.extend(sp.latex(readable(e)) for e in exprs)
        out.append(f"% {self.result_title}")
        lines = [rf"\frac{{d {sp.latex(s)}}}{{dt}} = {sp.latex(readable(e))}" for s, e in self._result()]
        out.append("\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}")
        return "\n".join(out)
