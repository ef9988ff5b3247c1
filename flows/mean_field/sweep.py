"""Batched GD runs of the mean-field transformer: many seeds of one shape in one compiled, vmapped program.

Rate fits need >= 5 seeds per (L, M) (theory digest §4). Runs of equal shape differ only in their data and
initial particles, so `train_gd_seeds` stacks them on a leading seed axis and runs the GD program of
`network.train_gd` under `jax.vmap`: one compilation per shape, no Python loop over seeds. The seed-`s`
member is exactly `train_gd(config.replace(seed=s), ...)` (tests).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import SEED_MAX, check_int, real_array
from . import observables as obs
from .data import Config, Prompts, held_out_set, training_set
from .network import (
    _check_data,
    _check_eta,
    _gd_run,
    _save_steps,
    check_particles,
    compile_cached,
    gd_optimizer,
    init_particles,
)

__all__ = ["GDBatchRecord", "train_gd_batch", "train_gd_seeds"]

_BATCH_RUN = jax.jit(jax.vmap(_gd_run, in_axes=(0, 0, None, 0)))
_BATCH_COMPILED: dict = {}


@dataclasses.dataclass(frozen=True)
class GDBatchRecord:
    """GD runs of several seeds of one shape.

    - `tau` `(k,)`, `steps` `(k,)`: flow time tau = step * eta_tau of the saved steps (shared by all seeds).
    - `observables`: name -> array `(num_seeds, k)` (the names of `observables.OBSERVABLES`); also
      `record["Q"]`.
    - `particles`: the final particles with a leading seed axis; `seeds`: the seeds (the run labels of
      `train_gd_batch`).
    - `eta_tau`, `compile_s`, `run_s`.
    """

    tau: np.ndarray
    steps: np.ndarray
    observables: dict
    particles: dict
    seeds: tuple
    eta_tau: float
    compile_s: float
    run_s: float

    def __getitem__(self, name):
        return self.observables[name]


def train_gd_seeds(config: Config, eta_tau: float, steps: int, seeds, save_every: int = 1) -> GDBatchRecord:
    """Full-batch GD (learning rate eta_tau M L, as `train_gd`) for every seed in `seeds` at once.

    Each seed draws its own training set, test prompts and initial particles (`config.replace(seed=s)`).
    Returns a `GDBatchRecord`; raises `ValueError` for bad arguments and `flows.FlowError` when a run's Q
    becomes non-finite (naming the seed).
    """
    raw = np.atleast_1d(real_array("seeds", seeds))
    if raw.ndim != 1 or np.any(raw != np.round(raw)) or np.any(raw < 0) or np.any(raw > SEED_MAX):
        raise ValueError(f"seeds must be distinct integers in [0, 2**63 - 1], got {seeds!r}")
    seeds = tuple(int(s) for s in np.atleast_1d(np.asarray(seeds)).ravel())
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"seeds must be distinct non-negative integers, got {seeds!r}")
    cfgs = [config.replace(seed=s) for s in seeds]
    return train_gd_batch(config, eta_tau, steps, [init_particles(c) for c in cfgs],
                          [training_set(c) for c in cfgs], [held_out_set(c) for c in cfgs], save_every,
                          labels=seeds, label_name="seed")


def train_gd_batch(config: Config, eta_tau: float, steps: int, particles, data, test=None,
                   save_every: int = 1, *, labels=None, label_name: str = "run") -> GDBatchRecord:
    """Full-batch GD (learning rate eta_tau M L, as `train_gd`) for a batch of runs of one shape at once.

    `particles`: a list of particle dicts (each of `config`'s shapes, e.g. coupled subsamples of a reference
    cloud); `data`, `test`: a list of `Prompts` of the same length (or one `Prompts` shared by every run;
    `test` defaults to `data`). Member i is exactly `train_gd(config, eta_tau, steps, particles=particles[i],
    data=data[i], test=test[i])` (tests); one compilation per shape. `labels` name the members in errors and
    in `record.seeds` (default 0, 1, ...). Raises `ValueError` for bad arguments and `flows.FlowError` when a
    run's Q becomes non-finite.
    """
    from ..solve import FlowError

    eta_tau = _check_eta(eta_tau)
    steps = check_int("steps", steps, 1)
    if not isinstance(particles, (list, tuple)) or not particles:
        raise ValueError("particles must be a non-empty list of particle dicts")
    size = len(particles)
    particles = [check_particles(config, p) for p in particles]

    def as_list(name, value):
        value = [value] * size if isinstance(value, Prompts) else value
        if not isinstance(value, (list, tuple)) or len(value) != size:
            raise ValueError(f"{name} must be one Prompts or a list of {size} Prompts (one per run)")
        return [_check_data(config, v, name) for v in value]

    data = as_list("data", data)
    test = data if test is None else as_list("test", test)
    labels = tuple(range(size)) if labels is None else tuple(labels)
    if len(labels) != size:
        raise ValueError(f"labels must have one entry per run ({size}), got {len(labels)}")
    save = _save_steps(int(steps), save_every)
    args = [obs.make_args(config, d, t) for d, t in zip(data, test, strict=True)]
    dtype = particles[0]["V"].dtype
    opt = gd_optimizer(config, eta_tau)
    states = [jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(
        jnp.result_type(x), jnp.floating) else x, opt.init(p)) for p in particles]
    stack = lambda trees: jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)  # noqa: E731
    call = (stack(particles), stack(states), jnp.asarray(np.diff(save), dtype=jnp.int32), stack(args))
    compiled, compile_s = compile_cached(_BATCH_COMPILED, _BATCH_RUN, call)
    start = time.perf_counter()
    final, series = jax.block_until_ready(compiled(*call))
    run_s = time.perf_counter() - start
    series = {k: np.asarray(v) for k, v in series.items()}
    record = GDBatchRecord(tau=eta_tau * save.astype(float), steps=save, observables=series, particles=final,
                           seeds=labels, eta_tau=eta_tau, compile_s=compile_s, run_s=run_s)
    bad = ~np.isfinite(series["Q"])
    if np.any(bad):
        i, k = np.argwhere(bad)[0]
        raise FlowError(f"GD diverged for {label_name} {labels[i]}: Q is not finite at step {int(save[k])} "
                        f"(tau = {save[k] * eta_tau:.6g}); lower eta_tau", record)
    return record
