"""Scan and Snap as a `flows.System`: the spec that `network.train` and `solve_flow` run on the shared driver
(`flows.train`, `flows.solve_flow`, `flows.compare`).

- `init`: the network's initial parameters (`model.init_params`, Z as its query rows; or the embedding form's
  `model.init_embedding`), drawn from the `"init"` stream of the seed (`model.seed_keys`).
- `data`: {"arrays": `classes.arrays()`} (with `eta_U=0` in the embedding form, also the frozen "U").
- `loss(params, batch)`: the batch-mean cross-entropy of a minibatch of sequences of length T (`"counts"`,
  the exact count-vector reduction, or `"tokens"`, literal sequences), or on the full data the T -> infinity
  population loss sum_n P(n) CE_n (the loss the paper's flows descend).
- `sample`: `batch_size` fresh sequences of length T per step (`data.sample_counts` / `data.sample_tokens`),
  step i drawing with the i-th key of `split(batch key, steps)` (`key_schedule="split"`).
- `rate_scale`: {"Y": eta_Y, "Z": eta_Z} (the embedding form: W_V at eta_Y, W_Q and W_K at eta_Z, U at eta_U):
  `flows.train(system, lr=1.0)` trains every group at its rate with the clock t = step, and every limit runs
  the groups at those rates.
- `finite`: Y and Z within `model.blowup_bound` (a run past it is a failed run).
- `observe`: `model.observe` (the attention observables and the population loss).
- `reduced`: `"population"`, `"reduced"`, `"decoder"`, `"symmetric"` (`limits`), for the Y/Z forms.

`solve_flow` below is the system's own entry point to those limits (and to the optimiser limits of the driver),
with its rate sweeps.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import driver
from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._solve import FlowError, solve_batch
from ..optim_limits.problem import OPTIMIZERS
from ..system import System, default_streams
from ..trajectory import Trajectory
from . import observables as obs
from .data import SequenceClasses, sample_counts, sample_tokens, syn_small
from .flow import check_ts
from .limits import limits
from .model import (
    INITS,
    count_loss,
    embedding_rows,
    embedding_to_yz,
    full_Z,
    init_embedding,
    init_params,
    observe,
    seed_init,
    seed_keys,
    token_loss,
    within_bound,
)

__all__ = ["FORMS", "check_rates", "demo", "loss", "solve_flow", "system"]

#: the forms of the network: the Y/Z model on count vectors or on token sequences, and the embedding form.
FORMS = ("counts", "tokens", "embedding")
#: the default options of the solves of this system.
SOLVER = {"solver": "auto", "rtol": 1e-8, "atol": 1e-10}


def loss(params: dict, batch: dict) -> jax.Array:
    """The loss of the Y/Z network: on a minibatch (`batch` with `"cls"` and `"counts"` or `"tokens"`)
    `model.count_loss` / `model.token_loss`; on the full data (`{"arrays": ClassArrays}`) the T -> infinity
    population loss sum_n P(n) CE(Y^T f_n, n) (`observables.population_loss`)."""
    arrays = batch["arrays"]
    if "counts" in batch:
        return count_loss(params, arrays, batch["cls"], batch["counts"])
    if "tokens" in batch:
        return token_loss(params, arrays, batch["cls"], batch["tokens"])
    c = obs.attention(params["Z"], arrays.cond, arrays.query_onehot)
    return obs.population_loss(c, params["Y"], arrays.next_token, arrays.class_probs)


def _embedding(params, data):
    """The (Y, Z query rows) of the embedding parameters (with a frozen U from the data)."""
    return embedding_rows({**params, "U": data["U"]} if "U" in data else params, data["arrays"])


def embedding_loss(params: dict, batch: dict) -> jax.Array:
    """`loss` of the embedding form, at Y = U W_V^T U^T, Z = U W_Q W_K^T U^T / sqrt(d)."""
    return loss(_embedding(params, batch), batch)


def observe_yz(params: dict, data: dict) -> dict:
    """`model.observe` on the system's data."""
    return observe(params, data["arrays"])


def observe_embedding(params: dict, data: dict) -> dict:
    """`model.observe` at the (Y, Z) of the embedding parameters."""
    return observe(_embedding(params, data), data["arrays"])


def _embedding_finite(params):
    return within_bound(params) & within_bound(embedding_to_yz(params))


def _frozen_finite(U, params):
    return within_bound(params) & within_bound(embedding_to_yz({**params, "U": U}))


def _sample(T, tokens, key, data, batch_size):
    """`batch_size` sequences of length T drawn with `key` (counts or tokens), with the data."""
    if T is None:
        raise ValueError("T: this system was built without a context length T; give T to train on sequences")
    cls, x = (sample_tokens if tokens else sample_counts)(data["arrays"], key, batch_size, T)
    return {**data, "cls": cls, "tokens" if tokens else "counts": x}


@functools.cache
def _sampler(T: int | None, tokens: bool) -> functools.partial:
    """The minibatch sampler of sequences of length T (one object per (T, form): one compiled loop)."""
    return functools.partial(_sample, T, tokens)


def _yz_init(M, rows, init, key):
    params = init_params(M, init, key)
    return {"Y": params["Y"], "Z": params["Z"][np.asarray(rows)]}


def _embedding_init(M, d, init_scale, frozen, key):
    emb = init_embedding(M, d, key, 1.0)
    emb = dict(emb, W_Q=emb["W_Q"] * init_scale, W_K=emb["W_K"] * init_scale)
    return {k: v for k, v in emb.items() if k != "U"} if frozen else emb


def _embedding_data(arrays, M, d, key):
    return {"arrays": arrays, "U": init_embedding(M, d, key, 1.0)["U"]}


def _streams(seed):
    k_init, k_data = seed_keys(seed)
    return {"init": k_init, "data": k_init, "batch": k_data, "noise": default_streams(seed)["noise"]}


def check_rates(eta_Y: Any, eta_Z: Any, lr: Any = None, *, sweep: bool = True) -> list[tuple[str, np.ndarray]]:
    """[(name, eta_Y), (name, eta_Z)], validated as finite positive numbers (`sweep`: or non-empty 1-D arrays),
    from `eta_Y, eta_Z` or from `lr` (one rate for both groups, or {"Y": eta_Y, "Z": eta_Z}), each named as it
    was passed (`lr`, `lr['Y']`, `eta_Y`, ...) in the ValueError of a bad one."""
    if lr is None:
        if eta_Y is None or eta_Z is None:
            raise ValueError("lr must be given (a number, or {'Y': eta_Y, 'Z': eta_Z}) when eta_Y, eta_Z are not")
        pairs = [("eta_Y", eta_Y), ("eta_Z", eta_Z)]
    elif eta_Y is not None or eta_Z is not None:
        raise ValueError("lr must not be given together with eta_Y, eta_Z (pass one or the other)")
    elif isinstance(lr, dict):
        if set(lr) != {"Y", "Z"}:
            raise ValueError(
                f"lr must be a number or a dict with the keys 'Y' and 'Z', got keys {sorted(map(str, lr))}"
            )
        pairs = [("lr['Y']", lr["Y"]), ("lr['Z']", lr["Z"])]
    else:
        pairs = [("lr", lr), ("lr", lr)]
    out = []
    for field, v in pairs:
        a = real_array(field, v, finite=False)
        if a.ndim > int(sweep) or a.size == 0:
            what = "a number or a non-empty 1-D array of numbers" if sweep else "a number"
            raise ValueError(f"{field} must be {what}, got shape {a.shape}")
        if not (np.all(np.isfinite(a)) and np.all(a > 0)):
            raise ValueError(f"{field} must be finite and > 0, got {v!r}")
        out.append((field, a))
    return out


@functools.lru_cache(maxsize=64)
def _system(classes, eta_Y, eta_Z, T, init, seed, form, d, eta_U, init_scale, options) -> System:
    M, arrays = classes.vocab_size, classes.arrays()
    common = dict(
        name="scan_snap",
        sample=_sampler(T, form == "tokens"),
        seed=seed,
        streams=_streams,
        key_schedule="split",
        solver=SOLVER,
        config=dict(classes=classes.name, eta_Y=eta_Y, eta_Z=eta_Z, T=T, init=init, seed=seed, form=form),
    )
    if form != "embedding":
        return System(
            init=functools.partial(_yz_init, M, classes.query_tokens, init),
            loss=loss,
            data={"arrays": arrays},
            observe=observe_yz,
            rate_scale={"Y": eta_Y, "Z": eta_Z},
            finite=within_bound,
            reduced=limits(classes, eta_Y, eta_Z, dict(options)),
            **common,
        )
    frozen = eta_U == 0.0
    common["config"] |= dict(d=d, eta_U=eta_U, init_scale=init_scale)
    scale = {"W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    return System(
        init=functools.partial(_embedding_init, M, d, init_scale, frozen),
        loss=embedding_loss,
        data=functools.partial(_embedding_data, arrays, M, d) if frozen else {"arrays": arrays},
        observe=observe_embedding,
        rate_scale=scale if frozen else {"U": eta_U, **scale},
        finite=functools.partial(_frozen_finite, _embedding_data(arrays, M, d, seed_keys(seed)[0])["U"])
        if frozen
        else _embedding_finite,
        **common,
    )


def system(
    classes: SequenceClasses,
    eta_Y: float = 1.0,
    eta_Z: float = 1.0,
    T: int | None = None,
    *,
    init: str = "zero",
    seed: int = 0,
    form: str = "counts",
    d: int | None = None,
    eta_U: float | None = None,
    init_scale: float = 1.0,
    paper_time: bool | None = None,
    exact_slaving: bool = False,
    decoder_size: float | None = None,
) -> System:
    """The `flows.System` of the Scan-and-Snap network on `classes` (module docstring), with the arguments of
    `network.train` and `solve_flow`.

    **Arguments:**

    - `classes`: the `SequenceClasses`; `eta_Y`, `eta_Z` (> 0): the groups' rates (`rate_scale`).
    - `T` (>= 2): the context length of the minibatches (`None`: full-batch training and the limits only).
    - `init`: "zero" | "random" (uniform +-1/sqrt(M)); `seed`: the system's seed (an integer < 2^32).
    - `form`: "counts" (the exact count-vector reduction), "tokens" (literal sequences, the same random
      numbers) or "embedding" (U, W_Q, W_K, W_V; `init` is then `model.init_embedding`).
    - Embedding form: `d` (>= 1) the width, `eta_U` (>= 0, default `eta_Z`; 0 freezes U, which the data then
      holds), `init_scale` (> 0) the scale of W_Q, W_K.
    - The conventions of the named limits: `paper_time` (`None`: the paper's time for the reduced flows, the
      network's clock for the population flow; `True` runs the population flow's Z at K eta_Z, `False` the
      reduced flows on class weights P(n)), `exact_slaving`, `decoder_size` (the M of gamma).

    **Returns:** the `flows.System` (the same object for the same arguments).

    **Raises:** `ValueError` naming a bad argument.
    """
    if not isinstance(classes, SequenceClasses):
        raise ValueError(f"classes must be a SequenceClasses, got {type(classes).__name__}")
    eta_Y, eta_Z = (float(a) for _, a in check_rates(eta_Y, eta_Z, sweep=False))
    if T is not None:
        T = check_int("T", T, 2, integral_float=True)
    check_choice("init", init, INITS)
    seed_keys(seed)  # checks the seed
    form = check_choice("form", form, FORMS)
    if form == "embedding":
        if d is None:
            raise ValueError("d (the embedding width) must be given with form='embedding'")
        d = check_int("d", d, 1, integral_float=True)
        eta_U = eta_Z if eta_U is None else check_real("eta_U", eta_U, low=0.0)
        init_scale = check_real("init_scale", init_scale, low=0.0, strict=True)
    elif d is not None or eta_U is not None or init_scale != 1.0:
        raise ValueError("d, eta_U and init_scale are for form='embedding'")
    if paper_time is not None:
        paper_time = check_bool("paper_time", paper_time)
    exact_slaving = check_bool("exact_slaving", exact_slaving)
    if decoder_size is not None:  # gamma and the slaved decoder divide by M - 1
        decoder_size = check_real("decoder_size", decoder_size, low=1.0, strict=True)
    options = (("paper_time", paper_time), ("exact_slaving", exact_slaving), ("decoder_size", decoder_size))
    return _system(classes, eta_Y, eta_Z, T, init, int(seed), form, d, eta_U, init_scale, options)


# -- solve_flow ---------------------------------------------------------------------------------------------------


def _rates(eta_Y, eta_Z, lr=None):
    """Validated rates (`check_rates`): two floats, or two 1-D arrays of one length R (a sweep), and R."""
    (nY, eY), (nZ, eZ) = check_rates(eta_Y, eta_Z, lr)
    if eY.ndim == 0 and eZ.ndim == 0:
        return float(eY), float(eZ), None
    try:
        eY, eZ = np.broadcast_arrays(np.atleast_1d(eY), np.atleast_1d(eZ))
    except ValueError:
        raise ValueError(f"{nY} and {nZ} must have one length, got {eY.shape} and {eZ.shape}") from None
    return eY, eZ, eY.size


def _square(name, a, M):
    a = real_array(name, a).astype(np.dtype(jnp.result_type(float)))
    if a.shape != (M, M):
        raise ValueError(f"{name} must be an (M, M) = ({M}, {M}) array, got shape {a.shape}")
    return a


def _as_given(traj, Z0, qt, first, sweep):
    """The trajectory at the times asked for (from save `first` on) with ys["Z"] rebuilt as (..., M, M)
    (`model.full_Z`); an optimiser limit's state {"theta": {"Y", "Z"}, moments...} flattened to {"Y", "Z",
    moments...}."""
    if traj is None:
        return traj
    index = (slice(None),) * bool(sweep) + (slice(first, None),)
    ys, observables = jax.tree_util.tree_map(lambda a: np.asarray(a)[index], (traj.ys, traj.observables))
    if ys is not None and "theta" in ys:
        ys = {**ys["theta"], **{k: v for k, v in ys.items() if k != "theta"}}
    if ys is not None and "Z" in ys:
        ys = {**ys, "Z": full_Z(ys["Z"], Z0, qt)}
    return dataclasses.replace(traj, ts=np.asarray(traj.ts)[index], ys=ys, observables=observables)


def solve_flow(
    classes: SequenceClasses,
    eta_Y: Any = None,
    eta_Z: Any = None,
    ts: Any = None,
    reduced: bool = False,
    *,
    lr: Any = None,
    Y0: Any = None,
    Z0: Any = None,
    paper_time: bool | None = None,
    exact_slaving: bool = False,
    decoder_size: float | None = None,
    solver: str = "auto",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int | None = None,
    throw: bool = True,
    init: str = "zero",
    seed: int = 0,
    optimizer: str | None = None,
    optim_args: dict | None = None,
) -> Trajectory:
    """Integrate the full (Y, Z) flow (`reduced=False`, the `"population"` limit) or the reduced Z-flow
    (`reduced=True`, the `"reduced"` limit) of `system(classes, eta_Y, eta_Z, ...)` on the shared driver, from
    Y0 = Z0 = 0 (default; or the given (M, M) arrays) and save at `ts`.

    `lr`: the rates as in every system, one number for both groups or {"Y": eta_Y, "Z": eta_Z} (instead of
    `eta_Y`, `eta_Z`; arrays for a sweep). `init`, `seed`: as in `network.train`: `init="random"` starts from
    the initialisation `train(..., init="random", seed=seed)` draws (not with `Y0`/`Z0`); `"zero"` from zeros.

    Observables saved: the attention observables of the network record (`observables.ATTENTION_OBSERVABLES`:
    `attention` (K, M) c_n, `entropy`, `entropy_distinct`, `common_mass` (K,)), and `loss` (full flow) or
    `gamma` (reduced flow). States: full {"Y", "Z"}; reduced {"Z", "h" = h(t/K), "B" (K,) = B_n(t)}, with Z
    rebuilt as (M, M) (its other rows never move). `decoder_size` is the M of gamma (default the vocabulary
    size); it and `exact_slaving` (the slaved decoder) shape the reduced flow only. Other arguments as in
    `flows.solve`.

    **Time** (`paper_time`, `True` or `False`; when not given, `True` for the reduced flow and `False` for
    the full flow). `False` runs on the network's clock (one batch-mean step of rate eta = one unit; class
    weights P(n)). `True` is the paper's time of Lemma 4, which drops P(n) = 1/K from the Z-flow only: the
    reduced flow weights its Z rows w_n = K P(n) (P(n) with `exact_slaving=True`), and the full flow moves Z
    at the rate K eta_Z. The optimiser limits run on the network's clock only.

    **Sweeps.** `eta_Y` and/or `eta_Z` may be 1-D arrays (broadcast against each other): the flow is then
    solved for every pair in one vmapped, once-compiled `flows.solve_batch` call, every field of the
    `Trajectory` gains a leading axis, and failed members are reported in `status`.

    **Optimiser limits** (full flow, one (eta_Y, eta_Z) pair): `optimizer` `"gd"`, `"momentum"`, `"sign"`,
    `"adam"`: `flows.solve_flow(system(...), ts, optimizer, optim_args)`, the limits of `train(optimizer="sgd")`,
    `train(optimizer="sgd", momentum=beta)`, sign SGD and `train(optimizer="adam")` on the population loss, each
    group on its own clock eta_g * step. `optim_args` as in every system, less `"lr"` (the rates are eta_Y,
    eta_Z: lr = 1); the sign smoothing defaults to eps = 1e-3. States: {"Y", "Z"} plus the optimiser's own.
    """
    if not isinstance(classes, SequenceClasses):
        raise ValueError("classes must be a SequenceClasses")
    eta_Y, eta_Z, n = _rates(eta_Y, eta_Z, lr)
    reduced = check_bool("reduced", reduced)
    if ts is None:
        raise ValueError("ts must be given (the save times)")
    ts = check_ts(ts)
    first = int(ts[0] > 0)  # the limits start at t = 0: a grid that does not is solved from 0, that save dropped
    grid = np.concatenate([[0.0], ts]) if first else ts
    driver.check_optim_args(optimizer, optim_args)
    if optimizer is not None:
        check_choice("optimizer", optimizer, OPTIMIZERS)
        if reduced or n:
            raise ValueError(
                "optimizer applies to the full flow at one (eta_Y, eta_Z) pair: reduced=False, scalar eta_Y and eta_Z"
            )
        if paper_time:
            raise ValueError(
                "paper_time must be False (or not given) with an optimizer: the optimiser limits "
                "run on the network's clock (class weights P(n))"
            )
        optim_args = _unit_lr(optimizer, optim_args)
    check_choice("init", init, INITS)
    if init == "random" and (Y0 is not None or Z0 is not None):
        raise ValueError("init='random' draws Y0 and Z0: do not pass Y0 or Z0 with it")
    conventions: dict[str, Any] = dict(paper_time=paper_time, exact_slaving=exact_slaving, decoder_size=decoder_size)
    spec = system(classes, 1.0 if n else eta_Y, 1.0 if n else eta_Z, init=init, seed=seed, **conventions)
    M, qt = classes.vocab_size, list(classes.query_tokens)
    Zfull = np.asarray(seed_init(M, init, seed)["Z"]) if Z0 is None else _square("Z0", Z0, M)
    params = spec.initial_params(spec.keys()["init"])
    if Y0 is not None or Z0 is not None:
        params = {"Y": params["Y"] if Y0 is None else _square("Y0", Y0, M), "Z": Zfull[qt]}
    name = "reduced" if reduced else "population"
    options: dict[str, Any] = dict(solver=solver, rtol=rtol, atol=atol, max_steps=max_steps, throw=throw)
    try:
        if n:
            traj = _sweep(spec, name, params, eta_Y, eta_Z, grid, options)
        elif optimizer is not None:
            traj = driver.solve_flow(spec, grid, optimizer, optim_args, y0=params, **options)
        else:
            y0 = spec.reduced[name].initial(params, spec.dataset(None))
            traj = driver.solve_flow(spec, grid, reduced=name, y0=y0, **options)
    except FlowError as err:
        raise FlowError(str(err), _as_given(err.trajectory, Zfull, qt, first, n)) from None
    return _as_given(traj, Zfull, qt, first, n)


def _unit_lr(optimizer, optim_args):
    """`optim_args` with lr = 1 (the rates eta_Y, eta_Z are the groups' clocks) where the optimiser takes one."""
    given = dict(optim_args or {})
    if "lr" in given:
        allowed = {"momentum": "['beta']", "adam": "['b1', 'b2', 'c1', 'c2', 'eps']"}.get(optimizer, "")
        raise ValueError(
            f"optim_args: unknown keys ['lr'] for optimizer {optimizer!r} (allowed: {allowed}): Scan and Snap's "
            "rates are eta_Y, eta_Z"
        )
    if optimizer == "momentum" or (optimizer == "adam" and not {"c1", "c2"} & set(given)):
        given["lr"] = 1.0
    return given


def _sweep(spec, name, params, eta_Y, eta_Z, ts, options):
    """The limit `name` for every (eta_Y[i], eta_Z[i]) in one `flows.solve_batch` call: the args of the system
    at unit rates (with the paper's time, the population flow's eta_Z is K there) broadcast, times the rates."""
    red = spec.reduced[name]
    data = spec.dataset(None)
    args = {k: jnp.broadcast_to(v, (len(eta_Y),) + v.shape) for k, v in red.field_args(data).items()}
    dtype = args["eta_Y"].dtype
    args["eta_Y"] = args["eta_Y"] * jnp.asarray(eta_Y, dtype)
    args["eta_Z"] = args["eta_Z"] * jnp.asarray(eta_Z, dtype)
    y0 = red.initial(params, data)
    return solve_batch(red.vector_field, y0, t1=float(ts[-1]), ts=ts, args=args, observables=red.observe, **options)


def demo() -> System:
    """A small instance for the tests that run over every spec (`flows.registry`): Syn-Small, eta_Z = 2 eta_Y,
    T = 8, random initialisation."""
    return system(syn_small(), 1.0, 2.0, 8, init="random", seed=2)
