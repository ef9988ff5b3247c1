"""The old module paths kept for one release: each forwards its names to the new module with a
`DeprecationWarning`."""

import importlib
import warnings


def forwarder(old: str, new: str, names: tuple[str, ...] | None = None):
    """A module-level `__getattr__` for the module `old`: warns, then returns the attribute of `new` (only those
    in `names`, if given)."""

    def __getattr__(name):
        if name.startswith("__") or (names is not None and name not in names):
            raise AttributeError(name)
        warnings.warn(f"{old} is deprecated: import {new}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
