"""Continuous-time limits of transformer training, solved and held against networks (distribution
transformer-gradient-flows).

The public surface (names re-exported from the submodules, each imported on first use):

- `solve`, `solve_batch`, `Trajectory`, `Event`, `FlowError`, `linear_grid`, `log_grid`: the one
  diffrax wrapper every flow goes through (`flows._solve`); `batch_mesh` splits a `solve_batch` sweep over
  devices.
- `solve_sde`: SDEs with additive noise by diffrax (`flows.sde`: Euler-Maruyama, Heun, SEA, SRA1, ShARK).
- `System`, `Reduced`: a theory as a spec of plain functions (`flows.system`); `train`, `solve_flow`: the one
  driver of every spec (`flows.driver`: the network trained by optax, the optimiser's ODE or SDE limit);
  `compare`, `Comparison`: the network at several learning rates beside its limit, the gap's order in lr, the
  figure and the run record (`flows.comparison`).
- `registry`: the one list of the systems and their derivations.
- `scan_snap`: Tian et al. 2023, *Scan and Snap* (sequence classes, finite-T Y/Z training, the T->inf
  and reduced flows, the decoder h-flow, closed forms).
- `cooccurrence`: Yang et al. 2024, word co-occurrence (data, the eq. (1) network, the exact Gram flow,
  sympy reductions).
- `linear_attention`: Zhang, Frei, Bartlett 2024 and Zhang, Singh, Latham, Saxe 2025, linear self-attention
  learning linear regression in context (single, merged and separate heads; the exact population loss and
  its flows, the closed forms).
- `mean_field`: Gao et al. 2024, the mean-field transformer (data, the residual network trained by GD, the
  particle Wasserstein gradient flow, the continuous-depth reference, W2 per depth slice).
- `joma`: Tian et al. 2024, JoMA (the one-layer network of MLP and attention, its joint flow, the invariants,
  the flow of the MLP weights alone, the V-flow of Fig. 4).
- `fitting`: power-law fits (log-log least squares, joint M^a L^b fits, model comparison) with bootstrap
  confidence intervals.
- `training`: the one training layer of the systems' networks (`NetworkRecord`, the training loop, the
  optimiser factory); `event_time`, `TrainingError` from it: the first crossing of an observable on a network
  record or a `Trajectory` (T1, a knee), and the error a training run raises when it goes non-finite.
- `optim_limits`: the ODE/SDE limits of momentum, sign descent, Adam and SGD noise for any system's loss.
- `experiments`: the tooling of the examples (run records, REPORT.md, reproduce, findings, compile cache).

Everything is imported on first use (`import flows` alone imports neither jax nor diffrax).
"""

__version__ = "0.1.0"

from . import registry as _registry  # plain data: the systems' names

# Each name is imported on first use: a script that needs one system does not pay for the others, nor for
# scipy.stats (flows.fitting), and a records-only script (the CLI's main job) does not import diffrax.
_SUBMODULES = (
    *_registry.names(),
    *"comparison driver experiments fitting optim_limits registry sde system training".split(),
)
_SOLVE_NAMES = "SOLVERS Event FlowError Trajectory batch_mesh linear_grid log_grid solve solve_batch".split()
_LAZY_NAMES = {
    **dict.fromkeys(_SOLVE_NAMES, "_solve"),
    "solve_sde": "sde",
    "System": "system",
    "Reduced": "system",
    "train": "driver",
    "solve_flow": "driver",
    "compare": "comparison",
    "Comparison": "comparison",
    "event_time": "training",
    "TrainingError": "training",
}


def __getattr__(name):
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'flows' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | set(_LAZY_NAMES))
