"""Deprecated alias of `flows.experiments.findings`, kept for one release: import that module instead."""

from ._deprecated import forwarder

__getattr__ = forwarder(__name__, "flows.experiments.findings")
