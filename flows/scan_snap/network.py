"""Training the finite-T Scan-and-Snap network (Tian et al. 2023, Sec. 3.1, eqs. 1-2; App. G for the embedding
form) with optax: `train` and `train_embedding` are the shared driver `flows.train` on `spec.system`, with this
system's names (rates eta_Y, eta_Z, `momentum`, `init`, `seed`) and record (Y and Z at the saved steps, the
batch loss of every step); `train_sweep` runs many of them in one vmapped program.

A run whose Y or Z goes non-finite or past `model.blowup_bound` raises `flows.TrainingError`. Clock:
`record.ts` = step / (1 - beta) for SGD, the step for Adam (the flows' time at the rates eta_Y, eta_Z). See
docs/systems/scan_snap.md."""

from __future__ import annotations

import dataclasses
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import driver, training
from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._xla import jit as xla_jit
from ..training import NetworkRecord, TrainingError
from .data import SequenceClasses, sample_support_counts
from .model import (
    INITS,
    SEED_LIMIT,
    blowup_bound,
    embedding_to_yz,
    full_Z,
    init_params,
    seed_init,
    split_seed,
    support_loss,
    within_bound,
)
from .spec import check_rates, system

__all__ = ["train", "train_embedding", "train_sweep", "train_sweeps"]

OPTIMIZERS = ("sgd", "adam")


def _validate(classes, optimizer, T, batch_size, steps, momentum, init, seed, form):
    """The checked (T, batch_size, steps, momentum, seed) of a run (ValueError naming a bad argument)."""
    if not isinstance(classes, SequenceClasses):
        raise ValueError("classes must be a SequenceClasses")
    check_choice("optimizer", optimizer, OPTIMIZERS)
    sizes = [
        check_int(field, v, lo, integral_float=True)
        for field, v, lo in (("T", T, 2), ("batch_size", batch_size, 1), ("steps", steps, 1))
    ]
    momentum = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if optimizer == "adam" and momentum:
        raise ValueError("momentum must be 0 with optimizer='adam' (Adam has its own moments)")
    check_choice("init", init, INITS)
    seed = check_int("seed", seed, 0, SEED_LIMIT, integral_float=True)
    check_choice("form", form, ("counts", "tokens"))
    return (*sizes, momentum, seed)


def _run(spec, optimizer, rates, momentum, steps, batch_size, save, history, config, as_yz):
    """`flows.train(spec, lr=1.0, ...)` (every group at its rate, the clock the step), as this system's record:
    its optimiser's name, its rates, Y and Z (`as_yz` of the parameters), the batch loss of every step."""
    name, optim_args = ("momentum", {"beta": momentum}) if momentum else (optimizer, None)

    def as_here(record):
        extras = {"batch_loss": record.extras["batch_loss"]}
        params = as_yz(record.params)
        return dataclasses.replace(record, optimizer=optimizer, lr=rates, config=config, params=params, extras=extras)

    options = dict(save_steps=save, batch_size=batch_size, optim_args=optim_args, history=history, batch_loss=True)
    try:
        return driver.train_relabelled(as_here, spec, name, 1.0, steps, **options)
    except TrainingError as err:
        dtype = jnp.result_type(float)
        raise TrainingError(
            f"training went non-finite at step {err.step} (optimizer={optimizer!r}, lr={rates}): the parameters "
            f"or the observables hold NaN or inf, or Y or Z holds an entry beyond {blowup_bound(dtype):.4g} in "
            "magnitude (ln of the largest float: its exponential overflows; see blowup_bound); lower the "
            f"learning rates. error.record holds the saved steps before it",
            step=err.step,
            record=err.record,
        ) from None


def train(
    classes: SequenceClasses,
    optimizer: str,
    eta_Y: float | None = None,
    eta_Z: float | None = None,
    T: int | None = None,
    batch_size: int | None = None,
    steps: int | None = None,
    momentum: float = 0.0,
    init: str = "zero",
    seed: int = 0,
    *,
    form: str = "counts",
    history: bool = True,
    save_every: int = 1,
    lr: Any = None,
) -> NetworkRecord:
    """Train the finite-T Y/Z model (`model.count_loss`, or `model.token_loss` with `form="tokens"`): the shared
    driver `flows.train(spec.system(classes, eta_Y, eta_Z, T, init=init, seed=seed, form=form), ...)`.

    **Arguments:**

    - `classes`; `optimizer`: "sgd" | "adam"; `eta_Y`, `eta_Z` > 0 (or, as in every system, `lr=` a number for
      both groups or `{"Y": eta_Y, "Z": eta_Z}`); `T` >= 2 (T-1 contexts); `batch_size`; `steps`.
    - `momentum` in [0, 1) (SGD only); `init`: "zero" | "random" (uniform +-1/sqrt(M), PyTorch's nn.Linear
      default); `seed` (the same seed gives the same record).
    - `form`: "counts" (exact count-vector reduction) or "tokens" (literal sequences, same random numbers).
    - `save_every` (>= 1): record Y, Z and the observables every k steps and at the last step (the training is
      the same for every `save_every`); `history`: keep Y and Z at the saved steps (`False`: only the final ones).

    **Returns:** the `NetworkRecord` (Y, Z (M, M) as `record.Y`, `record.Z`; `record.batch_loss` per step);
    `record.ts` = step / (1 - momentum) for SGD (in units where the flow rates are eta_Y, eta_Z), the step for
    Adam.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` naming the first step whose Y or Z is
    not finite or has an entry beyond `model.blowup_bound` (at an absurd learning rate the bounded gradients
    drive Y, Z to huge finite values and the loss to exactly 0, not to NaN), with the partial record as
    `error.record`.
    """
    eta_Y, eta_Z = (float(a) for _, a in check_rates(eta_Y, eta_Z, lr, sweep=False))
    T, batch_size, steps, momentum, seed = _validate(
        classes, optimizer, T, batch_size, steps, momentum, init, seed, form
    )
    history = check_bool("history", history)
    save = training.save_steps(steps, check_int("save_every", save_every, 1))
    spec = system(classes, eta_Y, eta_Z, T, init=init, seed=seed, form=form)
    Z0, qt = np.asarray(seed_init(classes.vocab_size, init, seed)["Z"]), classes.query_tokens

    def as_yz(params):
        return {"Y": np.asarray(params["Y"]), "Z": full_Z(params["Z"], Z0, qt)}

    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=eta_Y, eta_Z=eta_Z, T=T, batch_size=batch_size)
    config |= dict(steps=steps, momentum=momentum, init=init, seed=seed, form=form, save_every=int(save_every))
    return _run(spec, optimizer, {"Y": eta_Y, "Z": eta_Z}, momentum, steps, batch_size, save, history, config, as_yz)


def train_embedding(
    classes: SequenceClasses,
    optimizer: str,
    eta_Y: float,
    eta_Z: float,
    T: int,
    batch_size: int,
    steps: int,
    d: int,
    momentum: float = 0.0,
    seed: int = 0,
    *,
    eta_U: float | None = None,
    init_scale: float = 1.0,
    history: bool = True,
) -> NetworkRecord:
    """Train the embedding form (U, W_Q, W_K, W_V) of the 1-layer model (eqs. 1-2; loss `model.embedding_loss`)
    with optax, batch-mean gradients on count vectors: the shared driver on `spec.system(..., form="embedding")`.

    **Learning rates.** W_V is trained at `eta_Y`, W_Q and W_K at `eta_Z`, U at `eta_U` (default `eta_Z`;
    0 freezes U); the paper leaves the map to the Y/Z rates open (App. G; the first-order map, state-dependent
    for Z, is in docs/systems/scan_snap.md).

    **Init** (`model.init_embedding`): U ~ N(0, 1/d), W_Q, W_K ~ N(0, init_scale^2 / d), W_V = 0 (Y(0) = 0).

    **Arguments:** as `train` (`optimizer` "sgd" | "adam", `momentum` SGD only), plus `d` >= 1 the embedding
    width, `eta_U` >= 0, `init_scale` > 0.

    **Returns:** a `NetworkRecord` whose `Y`, `Z` are the (steps + 1, M, M) histories (or final (M, M) values
    when `history=False`) of Y = U W_V^T U^T and Z = U W_Q W_K^T U^T / sqrt(d); `config["final_embedding"]`
    holds the final {"U", "W_Q", "W_K", "W_V"} arrays; `ts`, `steps`, `observables` as in `train` (saved at
    every step).
    """
    eta_Y, eta_Z = (float(a) for _, a in check_rates(eta_Y, eta_Z, sweep=False))
    T, batch_size, steps, momentum, seed = _validate(
        classes, optimizer, T, batch_size, steps, momentum, "zero", seed, "counts"
    )
    d = check_int("d", d, 1, integral_float=True)
    eta_U = eta_Z if eta_U is None else check_real("eta_U", eta_U, low=0.0)
    init_scale = check_real("init_scale", init_scale, low=0.0, strict=True)
    history = check_bool("history", history)
    spec = system(classes, eta_Y, eta_Z, T, seed=seed, form="embedding", d=d, eta_U=eta_U, init_scale=init_scale)
    U = spec.dataset(spec.keys()["data"]).get("U")  # the frozen U (eta_U = 0), else None
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=eta_Y, eta_Z=eta_Z, eta_U=eta_U, T=T)
    config |= dict(batch_size=batch_size, steps=steps, momentum=momentum, init="embedding", init_scale=init_scale)
    config |= dict(seed=seed, form="embedding", d=d)

    def as_yz(params):
        emb = {k: jnp.asarray(v) for k, v in params.items()}
        if U is not None:
            emb["U"] = jnp.broadcast_to(U, emb["W_V"].shape[:-2] + U.shape)
        final = {k: np.asarray(v[-1] if history else v) for k, v in emb.items()}
        config["final_embedding"] = final
        yz = jax.vmap(embedding_to_yz)(emb) if history else embedding_to_yz(emb)
        return {k: np.asarray(v) for k, v in yz.items()}

    rates = {"U": eta_U, "W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    return _run(spec, optimizer, rates, momentum, steps, batch_size, np.arange(steps + 1), history, config, as_yz)


def train_sweep(
    classes: SequenceClasses,
    optimizer: str,
    eta_Y: Any = None,
    eta_Z: Any = None,
    seeds: Any = None,
    T: int | None = None,
    batch_size: int | None = None,
    steps: int | None = None,
    momentum: float = 0.0,
    init: str = "zero",
    *,
    lr: Any = None,
    timings: dict | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Many trainings in one vmapped, once-compiled call (the sampler and bound of `spec.system`; the loss on the
    classes' supports, `model.support_loss`, which equals the spec's count loss).

    **Arguments:** as `train`, with `eta_Y`, `eta_Z`, `seeds` 1-D arrays of one length R (or `lr=` an array for
    both groups, or {"Y": eta_Y, "Z": eta_Z}); `timings`: a dict that receives `compile_s` (0 when the program
    was compiled already) and `run_s` of the call.

    **Returns:** (batch loss (R, steps), final params {"Y", "Z"}: (R, M, M)); member i equals
    `train(classes, optimizer, eta_Y[i], eta_Z[i], ..., seed=seeds[i])` (final state). Runs of one seed draw the
    same batches: each step's batch is drawn once per distinct seed and shared by that seed's runs.

    **Warns:** `RuntimeWarning` naming the runs whose Y or Z went non-finite or past `model.blowup_bound` and
    the first such step of each (where `train` raises `flows.TrainingError`; the other runs of the sweep stand).

    Several sweeps (one per vocabulary, say): `train_sweeps`, which prepares the next while one runs.
    """
    prepared = _prepare_sweep(classes, optimizer, eta_Y, eta_Z, seeds, T, batch_size, steps, momentum, init, lr)
    return _run_sweep(prepared, timings, "train_sweep", stacklevel=3)


def train_sweeps(jobs: Any, *, timings: list | None = None) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """`train_sweep` for each of `jobs` in order, each a mapping of its arguments (`classes` and `optimizer`
    included, e.g. `dict(classes=syn_medium(3), optimizer="sgd", seeds=..., lr=...)`). While one sweep runs, a
    thread draws the next one's start and compiles its program, so that a first call's compiles overlap the runs
    instead of adding to them.

    **Returns:** the list of `train_sweep`'s results, in the order of `jobs`. `timings`: a list that receives
    one dict per job, its `compile_s` and `run_s` as `train_sweep`'s and `wait_s`, the time the calling thread
    waited for the job's start and compile (the first job's in full); `wait_s + run_s` over the jobs is the
    call's time.

    **Raises:** `ValueError` naming the job (`jobs[j]: ...`) and its argument. The thread preparing a job runs
    at the caller's `jax_enable_x64`; set other JAX options with `jax.config.update`, not a context manager (a
    context manager's setting stays on its thread).

    **Warns:** as `train_sweep`, for each job, naming it (`train_sweeps, jobs[j]: ...`).
    """
    if isinstance(jobs, (str, bytes)) or not hasattr(jobs, "__len__") or not hasattr(jobs, "__getitem__"):
        raise ValueError(f"jobs must be a sequence of mappings of train_sweep's arguments, got {type(jobs).__name__}")
    for j, job in enumerate(jobs):
        if not hasattr(job, "keys"):
            raise ValueError(f"jobs[{j}] must be a mapping of train_sweep's arguments, got {type(job).__name__}")
        unknown = sorted(set(job) - _SWEEP_ARGUMENTS)
        missing = sorted({"classes", "optimizer"} - set(job))
        if unknown or missing:
            raise ValueError(
                f"jobs[{j}]: "
                + (f"unknown arguments {unknown}" if unknown else f"missing arguments {missing}")
                + f" (train_sweep's arguments: {sorted(_SWEEP_ARGUMENTS)})"
            )
    x64 = bool(jax.config.read("jax_enable_x64"))

    def prepare(j):
        try:
            with jax.enable_x64(x64):
                return _prepare_sweep(**{**_SWEEP_DEFAULTS, **jobs[j]})
        except ValueError as err:
            raise ValueError(f"jobs[{j}]: {err}") from err

    results: list = []
    if not len(jobs):
        return results
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="train_sweeps") as pool:
        pending = pool.submit(prepare, 0)
        for j in range(len(jobs)):
            begin = time.perf_counter()
            prepared = pending.result()
            wait_s = time.perf_counter() - begin
            if j + 1 < len(jobs):
                pending = pool.submit(prepare, j + 1)
            times: dict = {}
            results.append(_run_sweep(prepared, times, f"train_sweeps, jobs[{j}]", stacklevel=3))
            if timings is not None:
                timings.append({**times, "wait_s": wait_s})
    return results


#: `train_sweep`'s arguments, and the defaults of those that have one (`train_sweeps`' jobs)
_SWEEP_DEFAULTS = dict(
    eta_Y=None, eta_Z=None, seeds=None, T=None, batch_size=None, steps=None, momentum=0.0, init="zero", lr=None
)
_SWEEP_ARGUMENTS = frozenset({"classes", "optimizer", *_SWEEP_DEFAULTS})


@dataclasses.dataclass(frozen=True)
class _PreparedSweep:
    """A sweep ready to run: its compiled program, the arguments of its call and what `_run_sweep` reports."""

    program: Any
    call: tuple
    compile_s: float
    dtype: Any


def _prepare_sweep(classes, optimizer, eta_Y, eta_Z, seeds, T, batch_size, steps, momentum, init, lr):
    """`train_sweep`'s checks, start and compile (`_PreparedSweep`)."""
    (nY, eta_Y), (nZ, eta_Z) = check_rates(eta_Y, eta_Z, lr)
    eta_Y, eta_Z = np.atleast_1d(eta_Y), np.atleast_1d(eta_Z)
    seeds = np.atleast_1d(real_array("seeds", seeds, finite=False))
    if not (eta_Y.shape == eta_Z.shape == seeds.shape):
        raise ValueError(
            f"{nY}, {nZ} and seeds must be 1-D of one length, got {eta_Y.shape}, {eta_Z.shape}, {seeds.shape}"
        )
    if not np.all(np.isfinite(seeds)) or np.any(seeds != np.round(seeds)) or np.any((seeds < 0) | (seeds > SEED_LIMIT)):
        raise ValueError(f"seeds must be integers in [0, {SEED_LIMIT}], got {seeds!r}")
    T, batch_size, steps, momentum, _ = _validate(classes, optimizer, T, batch_size, steps, momentum, init, 0, "counts")
    data = {"arrays": jax.tree_util.tree_map(jnp.asarray, classes.arrays())}  # `spec.system`'s, without its limits
    dtype = data["arrays"].cond.dtype
    rates = {"Y": np.asarray(eta_Y, dtype), "Z": np.asarray(eta_Z, dtype)}
    heavy = momentum if momentum > 0 else None
    query = tuple(int(q) for q in classes.query_tokens)
    labels = {"Y": "Y", "Z": "Z"}
    template = training.make_optimizer(optimizer, {"Y": 1.0, "Z": 1.0}, None if heavy is None else 0.5, labels=labels)
    M, R = classes.vocab_size, seeds.size

    # runs of one seed draw the same batches: each step draws once per distinct seed (`data["batch_keys"]`, not
    # batched over the runs) and each run takes its seed's batch (the carried "key" is its row in that table)
    _, distinct, row = np.unique(seeds, return_index=True, return_inverse=True)

    def build():
        def sample(data, row, step):
            keys = data["batch_keys"][:, step]
            cls, counts = jax.vmap(
                lambda key: sample_support_counts(data["arrays"], key, batch_size, T, scatter=False)
            )(keys)
            return row, (cls[row], counts[row])

        program = training.training_program(
            lambda params, data, batch: support_loss(params, data["arrays"], *batch),
            lambda params, data: {},
            template,
            sample=sample,
            finite=within_bound,
        )
        runs = jax.vmap(program, in_axes=(0, 0, 0, None, None, None))

        def sweep(Y, Z_rows, state, rows, Z0, increments, data):
            params = {"Y": Y, "Z": Z_rows}
            final, _, _, losses, bad = runs(params, state, rows, increments, data, jnp.zeros((steps,), dtype))
            return final["Y"], Z0.at[:, np.asarray(query), :].set(final["Z"]), losses, bad

        return sweep

    # the start in a program of its own: a short compile (`one_shot`) where its draws are small
    start = _sweep_start_small if R * M * M <= _SMALL_START else _sweep_start
    keys, Z0, params, state = start(
        np.asarray(seeds.astype(np.int64), np.uint32), rates, M, init, steps, query, optimizer, heavy
    )
    data = {**data, "batch_keys": np.asarray(keys)[distinct]}  # numpy: no eager gather to compile
    call = (params["Y"], params["Z"], state, np.asarray(row, np.int32), Z0, np.asarray([steps], np.int32), data)
    structure = ("sweep", optimizer, heavy is not None, T, batch_size, init, query)
    key = ("scan_snap.train_sweep", structure, training.signature(call))
    # Y's and Z0's buffers become the final Y and Z
    program, compile_s = training.compiled(key, build, call, batched="training", donate=(0, 4))
    return _PreparedSweep(program, call, compile_s, dtype)


def _run_sweep(prepared: _PreparedSweep, timings: dict | None, name: str, stacklevel: int):
    """Run a prepared sweep: (losses, {"Y", "Z"}), the warning of `train_sweep` for its failed runs (`name`: what
    the warning names)."""
    begin = time.perf_counter()
    Y, Z, losses, bad = jax.block_until_ready(prepared.program(*prepared.call))
    run_s = time.perf_counter() - begin
    if timings is not None:
        timings.update(compile_s=prepared.compile_s, run_s=run_s)
    bad = np.asarray(bad)
    if np.any(bad >= 0):
        failed = np.flatnonzero(bad >= 0)
        shown = ", ".join(f"run {i} at step {bad[i]}" for i in failed[:8]) + (", ..." if failed.size > 8 else "")
        warnings.warn(
            f"{name}: {failed.size} of {bad.size} runs went non-finite or left the bound "
            f"{blowup_bound(prepared.dtype):.4g} on Y or Z ({shown}): their losses and parameters past that step "
            "are not a trained network; lower their learning rates (see model.blowup_bound)",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    return np.asarray(losses), {"Y": np.asarray(Y), "Z": np.asarray(Z)}


#: the most entries of the start's Z0 (R, M, M) for which `train_sweep` compiles its start at XLA's level 0
#: (`jit(one_shot=True)`: a shorter compile); past it the unoptimised draws run longer than the compile saves
#: (measured on Fig. 6's starts, 160 runs: level 0 pays at M = 79, not at M = 125)
_SMALL_START = 2**20


def _sweep_start_body(seeds, rates, M, init, steps, query, optimizer, heavy):
    """What `train_sweep` starts from: the batch keys of every run, the drawn Z0 (R, M, M), the trained start
    {"Y", "Z": Z0's `query` rows} and its optimiser state, in one program (a first call compiles one program,
    not one per eager step)."""

    def member(seed, r):
        k_init, k_batch = split_seed(seed)
        params = init_params(M, init, k_init, r["Y"].dtype)
        start = {"Y": params["Y"], "Z": params["Z"][np.asarray(query)]}
        state = training.make_optimizer(optimizer, r, heavy, labels={"Y": "Y", "Z": "Z"}).init(start)
        return jax.random.key_data(jax.random.split(k_batch, steps)), params["Z"], start, state

    return jax.vmap(member)(seeds, rates)


_sweep_start = xla_jit(_sweep_start_body, static_argnums=(2, 3, 4, 5, 6, 7))
_sweep_start_small = xla_jit(_sweep_start_body, one_shot=True, static_argnums=(2, 3, 4, 5, 6, 7))
