"""The SDE limits of a spec (`flows.System`) for `flows.solve_flow(noise=True)`: the SGD SDE and the Adam SDE of
`flows.optim_limits.noise` on the per-row losses of the system's data, solved by `flows.solve_sde`.

The per-row loss of row i is `System.loss(params, batch of row i)` (the loss of a batch must be the mean of its
rows' losses); the data outside `System.rows` is held whole in every batch. The compiled program is one per
system and seed: the data outside the rows is a constant of the per-row loss.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from ._checks import check_choice, check_int, check_options
from .optim_limits import noise as sde_limits
from .sde import solve_sde
from .system import System, num_rows, params_like
from .trajectory import Trajectory

__all__ = ["solve_noise"]


def _split_rows(system, data):
    """(rows, the rest) of the data: the sample axis the SDE's per-sample gradients run over."""
    if system.rows is None:
        return data, {}
    return {k: data[k] for k in system.rows}, {k: v for k, v in data.items() if k not in system.rows}


def _per_sample(system, rest):
    """The loss of one row, `loss(params, batch of that row)`, and the observables on the full data, with the
    data outside the rows (`rest`) held as constants."""

    def one(params, row):
        batch = jax.tree_util.tree_map(lambda a: a[None], row)
        return system.loss(params, {**rest, **batch} if system.rows is not None else batch)

    def observe(t, params, args):
        rows = args["data"]
        return system.observables(params, {**rest, **rows} if system.rows is not None else rows)

    return one, observe


@functools.lru_cache(maxsize=32)
def _prepared(system, seed):
    """(data, per-row loss, observables) of `system` and `seed`, built once: the same functions on every call,
    so that solves at other rates, paths or keys reuse one compiled program."""
    data = system.dataset(system.keys(seed)["data"])
    return (data, *_per_sample(system, _split_rows(system, data)[1]))


def solve_noise(
    system: System,
    ts: np.ndarray,
    optimizer: str = "gd",
    optim_args: dict | None = None,
    *,
    seed: int | None = None,
    batch_size: int | None = None,
    y0: Any = None,
    **options: Any,
) -> Trajectory:
    """`flows.solve_flow(system, ts, optimizer, optim_args, noise=True, ...)`: the SGD SDE (`optimizer` "gd" or
    "sgd": `optim_args` `{"lr"}` required and `{"replacement"}`, `batch_size` required; `dt` default lr / 10) or
    the Adam SDE (`"adam"`: `optim_args` `{"c1", "c2", "sigma0", "eps0"}`, `dt` required), over the rows of
    the data, from the initial parameters (or `y0`), Brownian motion from the `"noise"` stream of `seed` (or
    the `key` of `options`); `options` go to `flows.solve_sde`. The saved times `ts` are checked by the caller.

    **Raises:** `ValueError` naming a bad argument; `flows.FlowError` for a failed solve.
    """
    optimizer = check_choice("optimizer", optimizer, ("gd", "sgd", "adam"))
    if system.rate_scale:
        raise ValueError("noise=True needs one clock for every group: System.rate_scale must be None")
    keys = system.keys(seed)
    params = system.initial_params(keys["init"])
    if y0 is not None:
        params = params_like(y0, params)
    data, one, observe = _prepared(system, seed)
    rows = _split_rows(system, data)[0]
    n = num_rows(data, system.rows)
    kw = {"save_states": False, "key": keys["noise"], **options}
    if optimizer == "adam":
        given = check_options("optim_args", optim_args, ("c1", "c2", "sigma0", "eps0"), "the Adam SDE")
        missing = [k for k in ("c1", "c2", "sigma0", "eps0") if k not in given]
        if missing:
            raise ValueError(f"optim_args must give {missing} for the Adam SDE (flows.optim_limits.adam_sde)")
        if batch_size is not None:
            raise ValueError("batch_size: the Adam SDE's noise scale is optim_args['sigma0'] (lr sqrt(c / B))")
        if "dt" not in kw:
            raise ValueError("dt (the SDE's step, on the clock t = lr^2 * step) must be given for the Adam SDE")
        adam = sde_limits.adam_sde(one, rows, **given)
        field, state, params_of = adam[:4], adam.initial_state(params), adam.params
    else:
        given = check_options("optim_args", optim_args, ("lr", "replacement"), "the SGD SDE")
        if "lr" not in given:
            raise ValueError("optim_args must give lr for the SGD SDE (its noise scale is lr c / B)")
        if batch_size is None:
            raise ValueError("batch_size must be given with noise=True (the SGD SDE's noise scale is lr c / B)")
        batch_size = check_int("batch_size", batch_size, 1, n)
        sgd = sde_limits.sgd_sde(one, rows, batch_size, given["lr"], replacement=given.get("replacement", False))
        field, state, params_of = sgd[:4], params, None
        kw.setdefault("dt", float(given["lr"]) / 10.0)
    drift, diffusion, noise_shape, args = field
    return solve_sde(
        drift,
        state,
        diffusion=diffusion,
        noise_shape=noise_shape,
        args=args,
        t1=float(ts[-1]),
        ts=ts,
        observables=_noise_observe(observe, params_of),
        **kw,
    )


def _noise_observe(observe, params_of):
    if params_of is None:
        return observe

    def observables(t, y, args):
        return observe(t, params_of(y), args)

    return observables
