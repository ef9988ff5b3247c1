"""Every public function and class of the library carries type annotations (the names in each public
module's `__all__`): each parameter but `self`/`cls`, and the return of every function and public method."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import derivations
import flows


def public_modules() -> list[str]:
    names = []
    for package in (flows, derivations):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or parts[-1] == "__main__":
                continue
            names.append(info.name)
    return names


def _missing(fn, qualname: str) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    out = [
        f"{qualname}({p.name})"
        for p in sig.parameters.values()
        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
    ]
    if sig.return_annotation is inspect.Signature.empty and not qualname.endswith("__init__"):
        out.append(f"{qualname} -> ?")
    return out


def unannotated(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    out = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name, None)
        if getattr(obj, "__module__", module_name) != module_name:
            continue  # re-exported: checked where it is defined
        if inspect.isfunction(obj):
            out += _missing(obj, f"{module_name}.{name}")
        elif inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if inspect.isfunction(member) and not getattr(member, "__dataclass_fields__", None):
                    if attr == "__init__" and "__dataclass_fields__" in vars(obj):
                        continue
                    out += _missing(member, f"{module_name}.{name}.{attr}")
    return out


@pytest.mark.parametrize("module_name", public_modules())
def test_public_names_are_annotated(module_name):
    missing = unannotated(module_name)
    assert not missing, f"{len(missing)} unannotated: " + ", ".join(missing[:40])
