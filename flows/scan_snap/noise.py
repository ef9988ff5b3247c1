"""The SGD SDE of Scan and Snap at finite context length T and batch size B.

`population` enumerates every distinct (class, context counts) pair with its probability, so that the drift and
the covariance of the batch gradient of `train(classes, "sgd", ...)` are exact (a ValueError past
`MAX_POPULATION` pairs); `solve_sgd_sde` integrates the Itô SDE d theta = -grad L ds + sqrt(eta / B) G dW on
the clock s = eta * step, taking and returning times in steps (one rate for Y and Z). See
docs/systems/scan_snap.md."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import check_bool, check_int, check_real, real_array
from .._solve import Trajectory
from ..optim_limits import noise as _noise
from .data import ClassArrays, SequenceClasses
from .model import count_loss, observe
from .network import train_sweep
from .spec import system

__all__ = ["MAX_POPULATION", "per_sample_loss", "population", "sgd_runs", "sgd_sde", "solve_sgd_sde"]

#: the largest enumerated population (distinct (class, count vector) pairs)
MAX_POPULATION = 4096


def population(classes: SequenceClasses, T: int, dtype: Any = None) -> tuple[dict[str, jax.Array], np.ndarray]:
    """(data, weights): every distinct (class, context counts) pair at context length T - 1 as per-sample
    data {"query" (J,), "next" (J,) token indices, "query_row" (J,) the row of the query token among
    `classes.query_tokens`, "counts" (J, M)} and its probability w (J,) (summing to 1)."""
    if not isinstance(classes, SequenceClasses):
        raise ValueError(f"classes must be a SequenceClasses, got {type(classes).__name__}")
    T = check_int("T", T, 2)
    sizes = classes.support.sum(axis=1)
    total = sum(math.comb(T - 2 + int(s), int(s) - 1) for s in sizes)
    if total > MAX_POPULATION:
        raise ValueError(
            f"T = {T} with supports of sizes {sorted(set(sizes.tolist()))} gives {total} distinct "
            f"(class, count vector) pairs, more than MAX_POPULATION = {MAX_POPULATION}: lower T or "
            f"use smaller classes"
        )
    M, class_probs = classes.vocab_size, np.asarray(classes.class_probs)
    query, nxt, counts, weights = [], [], [], []
    row_of = {q: i for i, q in enumerate(classes.query_tokens)}
    for n in range(classes.num_classes):
        sup = np.flatnonzero(classes.support[n])
        p = classes.cond_probs[n, sup]
        for combo in itertools.combinations_with_replacement(range(sup.size), T - 1):
            N = np.bincount(combo, minlength=sup.size)
            coef = math.factorial(T - 1) / math.prod(math.factorial(int(k)) for k in N)
            row = np.zeros(M)
            row[sup] = N
            query.append(classes.query[n])
            nxt.append(classes.next_token[n])
            counts.append(row)
            weights.append(class_probs[n] * coef * float(np.prod(p**N)))
    dtype = dtype or jnp.result_type(float)
    w = np.asarray(weights)
    data = {
        "query": jnp.asarray(query, jnp.int32),
        "next": jnp.asarray(nxt, jnp.int32),
        "query_row": jnp.asarray([row_of[q] for q in query], jnp.int32),
        "counts": jnp.asarray(np.asarray(counts), dtype),
    }
    return data, w / w.sum()


def per_sample_loss(params: dict[str, jax.Array], sample: dict[str, jax.Array]) -> jax.Array:
    """`model.count_loss` of one (class, counts) pair {"query_row", "next", "counts" (M,)} (Z as its query rows)."""
    unread: Any = None  # count_loss reads the class's query row and next token only
    one = ClassArrays(*[unread] * len(ClassArrays._fields))
    one = one._replace(query_row=sample["query_row"][None], next_token=sample["next"][None])
    return count_loss(params, one, jnp.zeros((1,), jnp.int32), sample["counts"][None])


def _observe(t, theta, args):
    return observe(theta, args["arrays"])


def sgd_sde(classes: SequenceClasses, T: int, batch_size: int, lr: float, *, noise: bool = True) -> _noise.SGDSDE:
    """The `optim_limits.noise.SGDSDE` of `train(classes, "sgd", lr=lr, T=T, batch_size=batch_size)` on the
    clock s = lr * step; its args also hold the class arrays (`"arrays"`)."""
    data, w = population(classes, T)
    lr = check_real("lr", lr, low=0.0, strict=True)
    sde = _noise.sgd_sde(per_sample_loss, data, batch_size, lr, replacement=True, noise=noise, weights=w)
    return sde._replace(args={**sde.args, "arrays": classes.arrays()})


def solve_sgd_sde(
    classes: SequenceClasses,
    T: int,
    batch_size: int,
    lr: float,
    ts: Any,
    num_paths: int,
    seed: int = 0,
    *,
    init: str = "zero",
    init_seed: int = 0,
    dt_steps: float = 0.25,
    noise: bool = True,
    max_steps: int | None = None,
    brownian: str = "increments",
) -> Trajectory:
    """`num_paths` Euler-Maruyama paths of the SGD SDE from `train`'s initialisation (`init`, `init_seed`
    as `train(init=, seed=)`), with the observables of `model.observe` (the attention observables `attention` (K, M),
    `entropy`, `entropy_distinct`, `common_mass` (K,), and `loss` the T -> infinity population loss, as on the
    flow and the record) at the times `ts` IN STEPS.

    `dt_steps`: the SDE step in units of one SGD step (default a quarter step, dt = lr * dt_steps on the
    clock s); `noise=False` gives the finite-T gradient flow. Returns the batched `flows.Trajectory` with
    `ts` in steps."""
    num_paths = check_int("num_paths", num_paths, 1)
    dt_steps = check_real("dt_steps", dt_steps, low=0.0, strict=True)
    noise = check_bool("noise", noise)
    ts = real_array("ts", ts)
    if ts.ndim != 1 or ts.size == 0 or np.any(ts < 0):
        raise ValueError(f"ts must be a non-empty 1-D array of step counts >= 0, got {ts!r}")
    sde = sgd_sde(classes, T, batch_size, lr, noise=noise)
    spec = system(classes, init=init, seed=init_seed)
    theta0 = spec.initial_params(spec.keys()["init"])
    kw: dict[str, Any] = dict(seed=check_int("seed", seed, 0), num_paths=num_paths, observables=_observe)
    kw |= dict(dt=sde.lr * dt_steps, save_states=False, brownian=brownian, max_steps=max_steps)
    tr = _noise.solve_sgd_sde(sde, theta0, sde.lr * ts, **kw)
    return dataclasses.replace(tr, ts=tr.ts / sde.lr)


def sgd_runs(
    classes: SequenceClasses, T: int, batch_size: int, lr: float, steps: int, seeds: Any, *, init: str = "zero"
) -> dict[str, np.ndarray]:
    """`network.train_sweep` (one vmapped program: `train(classes, "sgd", lr, lr, T, batch_size, steps,
    seed=s)` for every s in `seeds`) and `model.observe` of each final (Y, Z): {"attention" (R, K, M),
    "entropy", "entropy_distinct", "common_mass" (R, K), "loss" (R,)}."""
    lr = check_real("lr", lr, low=0.0, strict=True)
    seeds = np.asarray(seeds)
    rates = np.full(seeds.shape, lr)
    _, params = train_sweep(classes, "sgd", rates, rates, seeds, T, batch_size, steps, init=init)
    arrays = classes.arrays()
    rows = {"Y": jnp.asarray(params["Y"]), "Z": jnp.asarray(params["Z"][:, list(classes.query_tokens)])}
    out = jax.jit(jax.vmap(lambda p: observe(p, arrays)))(rows)
    return {k: np.asarray(v) for k, v in out.items()}
