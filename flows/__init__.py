"""transformer-flows: continuous-time limits of transformer training, solved and held against networks.

The public surface (explicit re-exports; nothing is defined here):

- `solve`, `solve_batch`, `Trajectory`, `Event`, `FlowError`, `linear_grid`, `log_grid`: the one
  diffrax wrapper every flow goes through (`flows.solve`); `batch_mesh` splits a `solve_batch` sweep over
  devices.
- `solve_sde`: SDEs with additive noise by diffrax (`flows.sde`: Euler-Maruyama, Heun, SEA, SRA1, ShARK).
- `scan_snap`: Tian et al. 2023, *Scan and Snap* (sequence classes, finite-T Y/Z training, the T->inf
  and reduced flows, the decoder h-flow, closed forms).
- `cooccurrence`: Yang et al. 2024, word co-occurrence (data, the eq. (1) network, the exact Gram flow,
  sympy reductions).
- `fitting`: power-law fits (log-log least squares, joint M^a L^b fits, model comparison) with bootstrap
  confidence intervals.
- `records`: run records (metrics.json, series.npz, PNGs, meta.json), written atomically.
- `event_time`, `TrainingError` (`flows.network_records`): the first crossing of an observable on a network
  record or a `Trajectory` (T1, a knee), and the error a training run raises when it goes non-finite.

Subpackages are imported on first use.
"""

from .solve import SOLVERS as SOLVERS
from .solve import Event as Event
from .solve import FlowError as FlowError
from .solve import Trajectory as Trajectory
from .solve import batch_mesh as batch_mesh
from .solve import linear_grid as linear_grid
from .solve import log_grid as log_grid
from .solve import solve as solve
from .solve import solve_batch as solve_batch

__version__ = "0.1.0"

# The subpackages and flows.sde are imported on first use (`flows.scan_snap`, `from flows import fitting`):
# a script that needs one system does not pay for the others, nor for scipy.stats (flows.fitting), at import
# (issue 9: the first call counts; `import flows` took about 1.5 s of imports it did not use).
_SUBMODULES = ("compile_cache", "cooccurrence", "fitting", "mean_field", "network_records", "optim_limits", "plotting",
               "records", "scan_snap", "sde")
_LAZY_NAMES = {"solve_sde": "sde", "event_time": "network_records", "TrainingError": "network_records"}


def __getattr__(name):
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'flows' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
