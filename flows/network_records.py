"""Deprecated alias of `flows.training` for the network-record names, kept for one release: import that module
instead."""

from ._deprecated import forwarder

__getattr__ = forwarder(
    __name__, "flows.training", ("TrainingError", "event_time", "first_nonfinite_step", "flow_time")
)
