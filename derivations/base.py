"""`Derivation`: the shape of every registered derivation (what `python -m flows derive NAME` prints).

A subclass sets `name` (registry name), `module` (generated module under `flows/_generated/`, or `None` for a
derivation that is printed and checked but not emitted, see `derivations.mean_field`), `source`
(where the derivation lives), builds `self.system` (a `FlowSystem`) in `__init__`, and lists its steps in
`_steps()` as `(title, [sympy objects])`. `result_rhs()` may return a more readable form of the right-hand
sides than `system.rhs` (e.g. with intermediate symbols kept), for printing only.
"""

from __future__ import annotations

import sympy as sp

from .gradient_flow import FlowSystem

__all__ = ["Derivation"]


class Derivation:
    name: str
    module: str | None
    source: str
    system: FlowSystem
    result_title: str = "result"

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
            out.extend(sp.sstr(e) for e in exprs)
        out.append(f"\n## {self.result_title}")
        out.extend(f"d{s}/dt = {sp.sstr(e)}" for s, e in self._result())
        return "\n".join(out)

    def to_latex(self) -> str:
        out = [f"% {self.name}"]
        for title, exprs in self._steps():
            out.append(f"% {title}")
            out.extend(sp.latex(e) for e in exprs)
        out.append(f"% {self.result_title}")
        lines = [rf"\frac{{d {sp.latex(s)}}}{{dt}} = {sp.latex(e)}" for s, e in self._result()]
        out.append("\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}")
        return "\n".join(out)
