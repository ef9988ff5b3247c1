"""Deprecated alias of `flows.experiments.records`, kept for one release: import that module instead."""

import importlib
import warnings

_MOVED_TO = "flows.experiments.records"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(f"{__name__} is deprecated: import {_MOVED_TO}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED_TO), name)
