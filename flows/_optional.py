"""Imports of optional packages that fail with a message saying what to install.

A function that needs a package the core install may lack imports it through :func:`require` at call time,
so that ``import flows`` never needs it and a missing package is reported as
``pip install 'transformer-gradient-flows[EXTRA]'`` instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["require"]

#: the distribution that provides an import name, where the two differ (for the message)
_DISTRIBUTIONS = {"ot": "POT", "ott": "ott-jax", "torch": "torch", "threadpoolctl": "threadpoolctl"}


def require(module: str, extra: str, *, purpose: str | None = None) -> ModuleType:
    """Import and return ``module``, or raise an `ImportError` that names the extra to install.

    **Arguments:**

    - `module`: the dotted import name, e.g. ``"ot"`` or ``"ott.tools.sinkhorn_divergence"``.
    - `extra`: the extra of ``transformer-gradient-flows`` that installs it, e.g. ``"ot"`` or ``"bench"``.
    - `purpose`: what needs it, for the message (e.g. ``"w2_per_slice(method='exact')"``).

    **Returns:** the imported module.

    **Raises:** `ImportError` (with ``name`` set to the missing top-level package) when the package is not
    installed; an `ImportError` raised while the installed package itself is being imported (a broken
    install) propagates unchanged.
    """
    if not isinstance(module, str) or not module:
        raise ValueError(f"module must be a non-empty import name, got {module!r}")
    if not isinstance(extra, str) or not extra:
        raise ValueError(f"extra must be a non-empty extra name, got {extra!r}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        top = module.split(".")[0]
        # only the package itself being absent is ours to explain; a module missing inside an installed
        # package, or a dependency it lacks, is a broken install whose own error says more
        if not _absent(top):
            raise
        dist = _DISTRIBUTIONS.get(top, top)
        what = f"{purpose} needs" if purpose else "this needs"
        raise ImportError(
            f"{what} the package {dist!r} (import {top!r}), which is not installed; install it with "
            f"pip install 'transformer-gradient-flows[{extra}]'",
            name=top,
        ) from err


def _absent(top: str) -> bool:
    """Whether the top-level package `top` cannot be found at all (None in sys.modules counts as absent)."""
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):  # a half-imported package without a spec: present, but broken
        return False
