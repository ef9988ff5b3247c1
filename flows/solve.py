"""The module path `flows.solve` of the names now in `flows._solve` (import those from `flows` or from
`flows._solve`). While this module exists, importing it replaces the package attribute `flows.solve` (the
function) by this module, which `flows/__init__.py` undoes."""

from ._program import COMPILED as _COMPILED
from ._solve import (
    SAVE_CHUNK,
    SOLVERS,
    Event,
    FlowError,
    Trajectory,
    batch_mesh,
    linear_grid,
    log_grid,
    solve,
    solve_batch,
)

__all__ = ["SAVE_CHUNK", "SOLVERS", "Event", "FlowError", "Trajectory", "batch_mesh", "linear_grid", "log_grid",
           "solve", "solve_batch"]
_ = _COMPILED  # tests/scan_snap/test_decoder.py imports it
