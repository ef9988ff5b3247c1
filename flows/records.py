"""Deprecated alias of `flows.experiments.records`, kept for one release: import that module instead."""

from ._deprecated import forwarder

__getattr__ = forwarder(__name__, "flows.experiments.records")
