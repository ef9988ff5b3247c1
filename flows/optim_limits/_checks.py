"""What the optimiser limits and the discrete runs are given, and how a discrete run fails.

- `make_args_of`: a limit's `make_args(batch, **rates)` with every bad call a `ValueError` naming the keyword
  and the fix (a keyword of another limit, a missing rate, the rates given positionally, no data).
- `check_limit_args`: the `args` of a limit's vector field are its `make_args` (not the data itself).
- `check_field_traces`: a limit's vector field (or an SDE's drift) runs on the initial state and the data.
- `raise_if_nonfinite`: the failed-run rule of `flows.training.finish` for `run_optax` and `run_sgd`, whose
  records are dicts: a `TrainingError` carrying the record truncated at the first non-finite step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import jax
import numpy as np

from .._checks import check_finite_tree
from ..training import TrainingError, first_nonfinite_step

__all__ = ["ARG_KEYS", "FACTORIES", "check_field_traces", "check_limit_args", "make_args_of", "raise_if_nonfinite"]

#: limit name -> the factory of `flows.optim_limits` that builds it
FACTORIES = {"gd": "gradient_flow", "momentum": "heavy_ball", "sign": "sign_descent", "adam": "adam"}
#: limit name -> the keys its vector field reads from `args` (`make_args` adds "rates" when given)
ARG_KEYS = {
    "gd": ("batch",),
    "momentum": ("batch", "friction"),
    "sign": ("batch", "eps"),
    "adam": ("batch", "c1", "c2", "eps"),
}
#: a rate keyword -> (the limits whose make_args take it, how to compute it): the fix in a message
_RATES = {
    "friction": ("heavy_ball", "momentum_friction(lr, beta)"),
    "eps": ("sign_descent and adam", "the smoothing, e.g. 1e-3 for sign_descent (adam's default is 1e-8)"),
    "c1": ("adam", "adam_rates(lr, b1, b2)[0]"),
    "c2": ("adam", "adam_rates(lr, b1, b2)[1]"),
    "rates": ("every limit", "one number or a pytree like theta of positive numbers"),
}


def _signature(name: str, keywords: tuple) -> str:
    return f"{FACTORIES[name]}(loss).make_args(batch{''.join(f', {k}=...' for k in keywords)})"


def make_args_of(name: str, keywords: tuple, required: tuple = ()) -> Callable:
    """Decorate the `make(batch, **kw)` of limit `name`: batch is the one positional argument (the data, every
    leaf numeric and finite), `keywords` the only keywords, `required` those that must be given (not None).
    Anything else is a `ValueError` naming the argument and the fix."""

    def wrap(make):
        @functools.wraps(make)
        def make_args(*batch, **kwargs):
            if "batch" in kwargs and not batch:
                batch = (kwargs.pop("batch"),)
            if len(batch) != 1:
                raise ValueError(
                    f"make_args takes the data as its one positional argument batch, then the rates by name: "
                    f"{_signature(name, keywords)}; got {len(batch)} positional arguments"
                )
            unknown = sorted(k for k in kwargs if k not in keywords)
            if unknown:
                owners = "; ".join(f"{k} is for {_RATES[k][0]}" for k in unknown if k in _RATES)
                raise ValueError(
                    f"make_args of the {FACTORIES[name]} limit takes no {', '.join(unknown)}: it is "
                    f"{_signature(name, keywords)}" + (f" ({owners})" if owners else "")
                )
            missing = [k for k in required if kwargs.get(k) is None]
            if missing:
                raise ValueError(
                    f"make_args of the {FACTORIES[name]} limit needs {', '.join(missing)}: "
                    f"{_signature(name, keywords)}, with "
                    + "; ".join(f"{k} = {_RATES[k][1]}" for k in missing if k in _RATES)
                )
            check_finite_tree("batch", batch[0])
            return make(batch[0], **kwargs)

        return make_args

    return wrap


def check_limit_args(name: str, args) -> None:
    """`args` must be what the limit `name`'s `make_args` builds: a mapping with the data under "batch" and the
    rates of `ARG_KEYS[name]` (a `ValueError` naming `args` and the fix otherwise: passing the data itself as
    `args`, or the `make_args` of another limit)."""
    fix = f"pass args={_signature(name, ARG_KEYS[name][1:])} (the data goes in batch)"
    if not isinstance(args, Mapping) or "batch" not in args:
        got = f"a mapping with keys {sorted(map(str, args))}" if isinstance(args, Mapping) else type(args).__name__
        raise ValueError(f"args must be the limit's make_args (the data itself goes in it): {fix}; got {got}")
    missing = [k for k in ARG_KEYS[name] if k not in args]
    if missing:
        raise ValueError(
            f"args lacks {missing}, which the {FACTORIES[name]} limit reads (args of another limit's make_args?): {fix}"
        )


def raise_if_nonfinite(save: np.ndarray, series: dict, bad, record_at: Callable, *, setting: str, hint: str) -> None:
    """The failed-run rule (`flows.training.finish`) for `run_optax` and `run_sgd`.

    **Arguments:** `save` the saved steps (k,); `series` name -> array (runs, k, ...) of the saved
    observables, `bad` (runs,) the first step with non-finite parameters (-1: none) of each run (one run:
    `series` arrays (1, k, ...), `bad` (1,)); `record_at(keep)` the record of the saved steps where `keep` (k,)
    is true; `setting` (which run: the function, its rate) and `hint` (what to do) go in the message.

    **Raises:** `TrainingError` at the first step at which any run is non-finite (its parameters, or an
    observable at a saved step), carrying `record_at(save < step)`.
    """
    bad = np.atleast_1d(np.asarray(bad))
    firsts = [
        first_nonfinite_step(save, {k: np.asarray(v)[r] for k, v in series.items()}, int(b)) for r, b in enumerate(bad)
    ]
    failed = [(step, r) for r, step in enumerate(firsts) if step >= 0]
    if not failed:
        return
    step, run = min(failed)
    keep = np.asarray(save) < step
    which = f", run {run} of {len(bad)}" if len(bad) > 1 else ""
    raise TrainingError(
        f"training went non-finite at step {step} ({setting}{which}): the parameters or the observables "
        f"hold NaN or inf; {hint}. error.record holds the {int(keep.sum())} saved steps before it",
        step=step,
        record=record_at(keep),
    )


def check_field_traces(field: Callable, y0, args: Mapping, theta0, *, loss: str, data: str, source: str) -> None:
    """Trace `field(0, y0, args)` abstractly (no compile): a loss that fails on the state or the data (a wrong
    shape, a missing key) is a `ValueError` naming theta0 and `args[data]` with their shapes, not an error from
    inside the solve. `theta0`: the parameters in `y0` (for the message); `loss`: what the caller calls the loss;
    `source`: where the data came from."""
    try:
        jax.eval_shape(field, 0.0, y0, args)
    except Exception as err:  # noqa: BLE001 -- any error of the user's loss, reported with the shapes
        shapes = lambda tree: jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), tree)  # noqa: E731
        raise ValueError(
            f"the {loss} failed on theta0 (shapes {shapes(theta0)}) and {source}, {data} (shapes "
            f"{shapes(args[data])}): {type(err).__name__}: {str(err)[:400]}; check that {data} and theta0 have the "
            f"structure and shapes the {loss} expects"
        ) from err
