"""Batched GD runs of the mean-field transformer: many seeds of one shape in one compiled, vmapped program.

Rate fits need several seeds per (L, M). Runs of equal shape differ only in their data and initial
particles, so `train_gd_seeds` stacks them on a leading seed axis and runs the training loop of the spec's
`loss` and `observe` (`spec.system`, `flows.training.training_program`) under `jax.vmap`: one compilation per
shape, no Python loop over seeds. The seed-`s` member is exactly `train(config.replace(seed=s), "gd", ...)`
(tests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import training
from .._checks import SEED_MAX, check_int, check_real, real_array
from ..training import NetworkRecord
from . import observables as obs
from .data import Config, Particles, Prompts, held_out_set, training_set
from .flow import nest, particles_of
from .initial import init_particles
from .model import check_data, check_particles
from .spec import loss, observe

__all__ = ["train_gd_batch", "train_gd_seeds"]


def train_gd_seeds(config: Config, eta_tau: float, steps: int, seeds: Any, save_every: int = 1) -> NetworkRecord:
    """Full-batch GD (learning rate eta_tau M L, as `network.train`) for every seed in `seeds` at once.

    Each seed draws its own training set, test prompts and initial particles (`config.replace(seed=s)`).
    Returns the record of `train_gd_batch`; raises `ValueError` for bad arguments and `flows.TrainingError`
    when a run goes non-finite (naming the seed).
    """
    raw = np.atleast_1d(real_array("seeds", seeds))
    ints = tuple(int(s) for s in np.atleast_1d(np.asarray(seeds)).ravel())
    bad = raw.ndim != 1 or np.any((raw != np.round(raw)) | (raw < 0) | (raw > SEED_MAX))
    if bad or not ints or len(set(ints)) != len(ints):
        raise ValueError(f"seeds must be distinct integers in [0, 2**63 - 1], got {seeds!r}")
    cfgs = [config.replace(seed=s) for s in ints]
    return train_gd_batch(
        config,
        eta_tau,
        steps,
        [init_particles(c) for c in cfgs],
        [training_set(c) for c in cfgs],
        [held_out_set(c) for c in cfgs],
        save_every,
        labels=ints,
        label_name="seed",
    )


_GROUPS = {"attention": "attention", "mlp": "mlp"}


def _program(particles, data, batch):
    return loss(particles, data)


def _batched():
    """The full-batch GD loop of the spec (`spec.loss`, `spec.observe`, the optimiser state carrying the rates)
    vmapped over the runs (parameters, optimiser state, data; shared saved steps); the first non-finite step
    is the earliest over the runs."""
    template = training.make_optimizer("gd", dict.fromkeys(_GROUPS, 1.0), labels=_GROUPS)
    run = jax.vmap(training.training_program(_program, observe, template), in_axes=(0, 0, None, None, 0, None))

    def batched(*call):
        final, series, snaps, losses, bad = run(*call)
        return final, series, snaps, losses, jnp.min(jnp.where(bad < 0, np.iinfo(np.int32).max, bad))

    return batched


def train_gd_batch(
    config: Config,
    eta_tau: float,
    steps: int,
    particles: Sequence[Particles],
    data: Prompts | Sequence[Prompts],
    test: Prompts | Sequence[Prompts] | None = None,
    save_every: int = 1,
    *,
    labels: Sequence | None = None,
    label_name: str = "run",
) -> NetworkRecord:
    """Full-batch GD (learning rate eta_tau M L, as `network.train`) for a batch of runs of one shape at once.

    **Arguments:**

    - `particles`: a list of particle dicts (each of `config`'s shapes, e.g. coupled subsamples of a
      reference cloud).
    - `data`, `test`: a list of `Prompts` of the same length (or one `Prompts` shared by every run; `test`
      defaults to `data`).
    - `labels` name the members in errors and in `record.seeds` (default 0, 1, ...).

    Member i is exactly `train(config, "gd", eta_tau, steps, particles=particles[i], data=data[i],
    test=test[i])` (tests); one compilation per shape.

    **Returns:** a `flows.training.NetworkRecord` whose observables have a leading run axis `(runs, k)` and
    whose `params` (in the spec's groups) and `extras["particles"]` the final parameters with a leading run
    axis; `extras`: `seeds` (the labels), `tau`, `eta_tau`. **Raises:** `ValueError` for bad arguments and
    `flows.TrainingError` when a run goes non-finite, naming it and carrying every run's record truncated
    before that step.
    """
    eta_tau = check_real("eta_tau", eta_tau, low=0.0, strict=True)
    steps = check_int("steps", steps, 1)
    if not isinstance(particles, (list, tuple)) or not particles:
        raise ValueError("particles must be a non-empty list of particle dicts")
    size = len(particles)
    particles = [check_particles(config, p) for p in particles]

    def as_list(name: str, value: Any) -> list[Prompts]:
        value = [value] * size if isinstance(value, Prompts) else value
        if not isinstance(value, (list, tuple)) or len(value) != size:
            raise ValueError(f"{name} must be one Prompts or a list of {size} Prompts (one per run)")
        return [check_data(config, v, name) for v in value]

    datas = as_list("data", data)
    tests = datas if test is None else as_list("test", test)
    labels = tuple(range(size)) if labels is None else tuple(labels)
    if len(labels) != size:
        raise ValueError(f"labels must have one entry per run ({size}), got {len(labels)}")
    save = training.save_steps(steps, save_every)
    stack = lambda trees: jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)  # noqa: E731
    args = stack([obs.make_args(config, d, t) for d, t in zip(datas, tests, strict=True)])
    scale = {"attention": float(config.M * config.L), "mlp": float(config.M_mlp * config.L)}  # type: ignore[operator]
    optimizer = training.make_optimizer("gd", eta_tau, labels=_GROUPS, scale=scale)
    params = stack([nest(p) for p in particles])
    states = stack([optimizer.init(nest(p)) for p in particles])
    final, series, _, _, bad, compile_s, run_s = training.run_training(
        "mean_field.train_gd_batch", "all", _batched, params, states, None, save, args
    )
    bad = -1 if bad == np.iinfo(np.int32).max else bad
    steps_first = {k: np.moveaxis(v, 0, 1) for k, v in series.items()}  # the layer's layout: saved steps first
    extras = {"particles": particles_of(final), "seeds": labels, "eta_tau": eta_tau}
    fields = dict(optimizer="gd", lr=eta_tau, config=config, compile_s=compile_s, run_s=run_s, extras=extras)
    try:
        record = training.finish(save, steps_first, bad, params=final, clock=eta_tau, **fields)
    except training.TrainingError as error:
        runs = _runs(error.record)
        failed = [labels[i] for i in range(size) if not np.all(np.isfinite(series["Q"][i]))] or list(labels)
        runs.extras["tau"] = runs.ts
        raise training.TrainingError(
            f"GD diverged for {label_name} {failed[0]}: {error}", step=error.step, record=runs
        ) from None
    record = _runs(record)
    record.extras["tau"] = record.ts
    return record


def _runs(record: NetworkRecord) -> NetworkRecord:
    """`record` with its observables back in the runs-first layout `(runs, k)`."""
    return dataclasses.replace(record, observables={k: np.moveaxis(v, 0, 1) for k, v in record.observables.items()})
