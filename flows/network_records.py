"""The network-record names' old home; they live in `flows.training`."""

from .training import TrainingError, event_time, first_nonfinite_step, flow_time

__all__ = ["TrainingError", "event_time", "first_nonfinite_step", "flow_time"]
