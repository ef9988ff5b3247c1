"""Deprecated alias of `flows.training` for the network-record names, kept for one release: import that module
instead."""

import importlib
import warnings

_MOVED_TO = "flows.training"
_NAMES = ("TrainingError", "event_time", "first_nonfinite_step", "flow_time")


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(name)
    warnings.warn(f"{__name__} is deprecated: import {_MOVED_TO}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_MOVED_TO), name)
