"""The finite-T 1-layer Y/Z transformer of Scan and Snap (Tian et al. 2023, Sec. 3.1, eqs. 1-2; App. G for the
embedding form), trained with optax on `flows.training`.

`count_loss` is the exact count-vector reduction (the loss on context counts), `token_loss` the same loss on
literal token sequences, `embedding_loss` the (U, W_Q, W_K, W_V) form; their `jax.grad` is Lemma 1. A run whose
Y or Z goes non-finite or past `blowup_bound` raises `flows.TrainingError`. Clock: `record.ts` = step / (1 - beta)
for SGD, the step for Adam. See docs/systems/scan_snap.md."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import training
from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._prng import fused
from .._xla import jit as xla_jit
from ..training import NetworkRecord
from . import observables as obs
from .data import ClassArrays, SequenceClasses, sample_counts, sample_support_counts, sample_tokens

__all__ = [
    "NetworkRecord",
    "TrainRecord",
    "blowup_bound",
    "count_loss",
    "observe",
    "embedding_loss",
    "embedding_to_yz",
    "init_embedding",
    "init_params",
    "seed_init",
    "token_loss",
    "train",
    "train_embedding",
    "train_sweep",
]

Params = dict[str, jax.Array]

OPTIMIZERS = ("sgd", "adam")
INITS = ("zero", "random")


def count_loss(params: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """Batch-mean cross-entropy through the count-vector reduction; `counts` (B, M), `cls` (B,)."""
    u = obs.attention_weights(counts, params["Z"][arrays.query[cls]])
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(u) @ params["Y"], arrays.next_token[cls]))


def _support_loss(params: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """`count_loss` computed on the support of each sequence's class (`counts` (B, S) as
    `data.sample_support_counts` draws them, entry j for token `arrays.support_index[cls, j]`): the counts are 0
    off the support, so c_n and f_n are too and only the decoder product needs the vocabulary. `params["Z"]` may
    hold only the query rows, with `arrays.query` indexing them. What `train_sweep` trains: its elementwise work
    runs on S entries instead of M (pinned equal to `train`, which uses `count_loss`)."""
    idx = arrays.support_index[cls]  # (B, S); padded entries repeat a token and have count 0
    zs = params["Z"][arrays.query[cls][:, None], idx]  # z_{psi(n), l} on the support, (B, S)
    f_s = obs.normalized_attention(obs.attention_weights(counts, zs))
    rows = jnp.arange(counts.shape[0])[:, None]
    f = jnp.zeros((counts.shape[0], params["Y"].shape[0]), f_s.dtype).at[rows, idx].add(f_s)
    return jnp.mean(obs.cross_entropy(f @ params["Y"], arrays.next_token[cls]))


def token_loss(params: Params, arrays: ClassArrays, cls: jax.Array, tokens: jax.Array) -> jax.Array:
    """The same loss on literal token sequences `tokens` (B, T-1): b = softmax_t(z_{m x_t}), X^T b."""
    M = arrays.cond.shape[1]
    zq = params["Z"][arrays.query[cls]]  # (B, M)
    b = jax.nn.softmax(jnp.take_along_axis(zq, tokens, axis=1), axis=-1)  # (B, T-1)
    X = jax.nn.one_hot(tokens, M, dtype=zq.dtype)  # (B, T-1, M)
    xb = jnp.einsum("bt,btm->bm", b, X)
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(xb) @ params["Y"], arrays.next_token[cls]))


def embedding_to_yz(emb: Params) -> Params:
    """The reparametrisation of Sec. 3.1: {"Y": U W_V^T U^T, "Z": U W_Q W_K^T U^T / sqrt(d)}, both (M, M),
    from `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}."""
    U = emb["U"]
    d = U.shape[1]
    return {"Y": U @ emb["W_V"].T @ U.T, "Z": U @ emb["W_Q"] @ emb["W_K"].T @ U.T / math.sqrt(d)}


def embedding_loss(emb: Params, arrays: ClassArrays, cls: jax.Array, counts: jax.Array) -> jax.Array:
    """The embedding form (U, W_Q, W_K, W_V) of the same model (eqs. 1-2, normalisation on X^T b):

    Z = U W_Q W_K^T U^T / sqrt(d), Y = U W_V^T U^T, with `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}.
    """
    return count_loss(embedding_to_yz(emb), arrays, cls, counts)


def init_embedding(M: int, d: int, key: jax.Array, init_scale: float = 1.0, dtype: Any = None) -> Params:
    """Seeded init of the embedding form: U_ij ~ N(0, 1/d) (rows of norm ~1, nearly orthogonal for d >> 1),
    W_Q, W_K ~ N(0, init_scale^2 / d) entrywise, W_V = 0 (so Y(0) = 0 as in the theory; Z(0) is small but
    nonzero, since W_Q = W_K = 0 is a saddle where Z never moves). Returns {"U": (M, d), "W_Q", "W_K", "W_V":
    (d, d)}."""
    dtype = dtype or jnp.result_type(float)
    kU, kQ, kK = jax.random.split(fused(key), 3)
    s = init_scale / math.sqrt(d)
    return {
        "U": jax.random.normal(kU, (M, d), dtype) / math.sqrt(d),
        "W_Q": s * jax.random.normal(kQ, (d, d), dtype),
        "W_K": s * jax.random.normal(kK, (d, d), dtype),
        "W_V": jnp.zeros((d, d), dtype),
    }


def init_params(M: int, init: str, key: jax.Array, dtype: Any = None) -> Params:
    """{"Y", "Z"}: zeros, or i.i.d. uniform(-1/sqrt(M), 1/sqrt(M)) (PyTorch nn.Linear default)."""
    dtype = dtype or jnp.result_type(float)
    if init == "zero":
        return {"Y": jnp.zeros((M, M), dtype), "Z": jnp.zeros((M, M), dtype)}
    if init != "random":
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    kY, kZ = jax.random.split(fused(key))
    bound = 1.0 / math.sqrt(M)
    return {
        "Y": jax.random.uniform(kY, (M, M), dtype, -bound, bound),
        "Z": jax.random.uniform(kZ, (M, M), dtype, -bound, bound),
    }


def observe(params: Params, arrays: ClassArrays) -> dict[str, jax.Array]:
    """The observables of the flow's `Trajectory` (`flow.solve_flow`, full flow) on one (Y, Z): the attention
    observables `observables.ATTENTION_OBSERVABLES` (`attention` c_n (K, M), `entropy`, `entropy_distinct`,
    `common_mass` (K,), by `observables.attention_observables`) and `loss` the population loss
    sum_n P(n) CE_n (the T -> infinity loss)."""
    M = arrays.cond.shape[1]
    dtype = arrays.cond.dtype
    c = obs.attention(params["Z"], arrays.cond, jax.nn.one_hot(arrays.query, M, dtype=dtype))
    return {
        **obs.attention_observables(c, arrays.cond),
        "loss": obs.population_loss(c, params["Y"], arrays.next_token, arrays.class_probs),
    }


def blowup_bound(dtype: Any) -> float:
    """The largest |entry| of Y or Z that `train` accepts: ln of the dtype's largest float (709.8 in float64,
    88.7 in float32), past which e^{entry} overflows. Y and Z are logits (Y^T f with |f| = 1, and z_m), so
    well before it the softmaxes are saturated to the float resolution: the loss rounds to 0 and the gradients
    vanish exactly, and the run no longer follows any flow. A run that gets there was driven by a learning
    rate far too large (its gradients are bounded, so it moves at most ~lr per step), not trained."""
    return float(np.log(np.finfo(np.dtype(dtype)).max))


def _finite(params):
    """All entries finite and within `blowup_bound` of their dtype (False on NaN and inf)."""
    return jnp.all(jnp.stack([jnp.all(jnp.abs(v) <= blowup_bound(v.dtype)) for v in jax.tree_util.tree_leaves(params)]))


#: the record of `train`, `train_embedding` (the one record of every system)
TrainRecord = NetworkRecord

#: seeds become uint32 `jax.random.PRNGKey` seeds
_SEED_MAX = 2**32 - 1


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
    seed = check_int("seed", seed, 0, _SEED_MAX, integral_float=True)
    check_choice("form", form, ("counts", "tokens"))
    return (*sizes, momentum, seed)


def _keys(seed, steps):
    """The initialisation key and the raw per-step batch keys (steps, 2) of a run with uint32 `seed`."""
    k_init, k_data = jax.random.split(fused(jax.random.PRNGKey(seed)))
    return k_init, jax.random.key_data(jax.random.split(fused(k_data), steps))


def seed_init(M: int, init: str, seed: int, dtype: Any = None) -> Params:
    """The initial {"Y", "Z"} that `train(..., init=init, seed=seed)` draws (`init_params` on its key)."""
    check_choice("init", init, INITS)
    seed = check_int("seed", seed, 0, _SEED_MAX, integral_float=True)
    return init_params(M, init, jax.random.split(fused(jax.random.PRNGKey(jnp.asarray(seed, jnp.uint32))))[0], dtype)


def _optimizer(optimizer, lr: dict, momentum):
    """One optax transformation per parameter group (Y, Z; or U, W_Q, W_K, W_V) at its rate."""
    return training.make_optimizer(optimizer, lr, momentum if momentum > 0 else None, labels={k: k for k in lr})


def _state(optimizer, lr: dict, momentum, params):
    """The optimiser state, its floating hyperparameters in the dtype of the parameters."""
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
    state = _optimizer(optimizer, lr, momentum).init(params)
    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, state
    )


def _program(template, *, form, T, batch_size, history, observed=True):
    """The spec of this system on `flows.training.training_program`: loss of `form` ("counts", "tokens",
    "embedding") on a batch of `batch_size` sequences of length `T` drawn with the step's key."""
    loss = {"counts": count_loss, "support": _support_loss, "tokens": token_loss, "embedding": embedding_loss}[form]
    sampler = {"tokens": sample_tokens, "support": sample_support_counts}.get(form, sample_counts)
    to_yz = embedding_to_yz if form == "embedding" else (lambda params: params)

    def sample(arrays, keys, step):
        return keys, sampler(arrays, keys[step], batch_size, T)

    def finite(params):
        return _finite(params) & _finite(to_yz(params)) if form == "embedding" else _finite(params)

    return training.training_program(
        lambda params, arrays, batch: loss(params, arrays, *batch),
        (lambda params, arrays: observe(to_yz(params), arrays)) if observed else (lambda params, arrays: {}),
        template,
        sample=sample,
        finite=finite,
        snapshot=to_yz if history else None,
    )


def _fit(arrays, optimizer, lr: dict, momentum, params0, keys, save, opts: dict, batched=False, state=None):
    """`flows.training.run_training` of this system with the `_program` options `opts` (`batched`: many runs,
    vmapped over the leading axis of `params0`, `keys` and the rates in `lr`; `state`: their optimiser state,
    when computed already)."""
    template = _optimizer(optimizer, dict.fromkeys(lr, 1.0), 0.5 if momentum else 0.0)
    opts = {"observed": True, **opts}
    if batched:
        if state is None:
            state = jax.vmap(lambda p, rates: _state(optimizer, rates, momentum, p))(params0, lr)
        build = lambda: jax.vmap(_program(template, **opts), in_axes=(0, 0, 0, None, None, None))  # noqa: E731
    else:
        state = _state(optimizer, lr, momentum, params0)
        build = lambda: _program(template, **opts)  # noqa: E731
    structure = (optimizer, bool(momentum), batched, ("groups", tuple(lr)), *sorted(opts.items()))
    return training.run_training(
        "scan_snap.train", structure, build, params0, state, keys, save, arrays, batch_loss=True
    )


def _finish(optimizer, lr, momentum, save, out, config):
    final, series, snaps, losses, bad, compile_s, run_s = out
    dtype = jax.tree_util.tree_leaves(final)[0].dtype
    hint = (
        f"or Y or Z holds an entry beyond {blowup_bound(dtype):.4g} in magnitude (ln of the largest float: its "
        "exponential overflows; see blowup_bound); lower the learning rates"
    )
    kw = dict(params={k: np.asarray(v) for k, v in final.items()}, snapshots=snaps, clock=1.0, optimizer=optimizer)
    kw |= dict(momentum=momentum, batch_loss=losses, lr=lr, config=config, compile_s=compile_s, run_s=run_s)
    return training.finish(save, series, bad, hint=hint, **kw)


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
    """Train the finite-T Y/Z model (`count_loss`, or `token_loss` with `form="tokens"`).

    **Arguments:**

    - `classes`; `optimizer`: "sgd" | "adam"; `eta_Y`, `eta_Z` > 0 (or, as in every system, `lr=` a number for
      both groups or `{"Y": eta_Y, "Z": eta_Z}`); `T` >= 2 (T-1 contexts); `batch_size`; `steps`.
    - `momentum` in [0, 1) (SGD only); `init`: "zero" | "random" (uniform +-1/sqrt(M), PyTorch's nn.Linear
      default); `seed` (the same seed gives the same record).
    - `form`: "counts" (exact count-vector reduction) or "tokens" (literal sequences, same random numbers).
    - `save_every` (>= 1): record Y, Z and the observables every k steps and at the last step (the training is
      the same for every `save_every`); `history`: keep Y and Z at the saved steps (`False`: only the final ones).

    **Returns:** the `NetworkRecord`; `record.ts` = step / (1 - momentum) for SGD (in units where the flow rates
    are eta_Y, eta_Z), the step for Adam.

    **Raises:** `ValueError` naming a bad argument; `flows.TrainingError` naming the first step whose Y or Z is
    not finite or has an entry beyond `blowup_bound` (at an absurd learning rate the bounded gradients drive
    Y, Z to huge finite values and the loss to exactly 0, not to NaN), with the partial record as `error.record`.
    """
    eta_Y, eta_Z = (float(a) for _, a in check_rates(eta_Y, eta_Z, lr, sweep=False))
    T, batch_size, steps, momentum, seed = _validate(
        classes, optimizer, T, batch_size, steps, momentum, init, seed, form
    )
    history = check_bool("history", history)
    save = training.save_steps(steps, check_int("save_every", save_every, 1))
    arrays = classes.arrays()
    k_init, keys = _keys(jnp.asarray(seed, jnp.uint32), steps)
    params0 = init_params(classes.vocab_size, init, k_init, arrays.cond.dtype)
    rates = {"Y": eta_Y, "Z": eta_Z}
    opts = dict(form=form, T=T, batch_size=batch_size, history=history)
    out = _fit(arrays, optimizer, rates, momentum, params0, keys, save, opts)
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=eta_Y, eta_Z=eta_Z, T=T, batch_size=batch_size)
    config |= dict(steps=steps, momentum=momentum, init=init, seed=seed, form=form, save_every=int(save_every))
    return _finish(optimizer, rates, momentum, save, out, config)


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
) -> tuple[jax.Array, dict[str, np.ndarray]]:
    """Many trainings in one vmapped, once-compiled call.

    **Arguments:** as `train`, with `eta_Y`, `eta_Z`, `seeds` 1-D arrays of one length R (or `lr=` an array for
    both groups, or {"Y": eta_Y, "Z": eta_Z}); `timings`: a dict that receives `compile_s` (0 when the program
    was compiled already) and `run_s` of the call.

    **Returns:** (batch loss (R, steps), final params {"Y", "Z"}: (R, M, M)); member i equals
    `train(classes, optimizer, eta_Y[i], eta_Z[i], ..., seed=seeds[i])` (final state).
    """
    (nY, eta_Y), (nZ, eta_Z) = check_rates(eta_Y, eta_Z, lr)
    eta_Y, eta_Z = np.atleast_1d(eta_Y), np.atleast_1d(eta_Z)
    seeds = np.atleast_1d(real_array("seeds", seeds, finite=False))
    if not (eta_Y.shape == eta_Z.shape == seeds.shape):
        raise ValueError(
            f"{nY}, {nZ} and seeds must be 1-D of one length, got {eta_Y.shape}, {eta_Z.shape}, {seeds.shape}"
        )
    if not np.all(np.isfinite(seeds)) or np.any(seeds != np.round(seeds)) or np.any((seeds < 0) | (seeds > _SEED_MAX)):
        raise ValueError(f"seeds must be integers in [0, {_SEED_MAX}], got {seeds!r}")
    T, batch_size, steps, momentum, _ = _validate(classes, optimizer, T, batch_size, steps, momentum, init, 0, "counts")
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    # Z's rows other than the query tokens' get no gradient (c_n reads row psi(n) only), so every optimiser
    # here leaves them as drawn: train the query rows (the loss on the class supports, `_support_loss`) and
    # put them back into Z0 after
    qt = tuple(int(q) for q in classes.query_tokens)
    row = {q: i for i, q in enumerate(qt)}
    arrays_q = arrays._replace(query=jnp.asarray([row[int(q)] for q in classes.query], jnp.int32))
    rates = {"Y": np.asarray(eta_Y, dtype), "Z": np.asarray(eta_Z, dtype)}
    seeds_u32 = np.asarray(seeds.astype(np.int64), np.uint32)
    keys, Z0, start, state = _sweep_start(
        seeds_u32, rates, M=classes.vocab_size, init=init, steps=steps, query=qt, optimizer=optimizer, momentum=momentum
    )
    opts = dict(form="support", T=T, batch_size=batch_size, history=False, observed=False)
    final, _, _, losses, _, compile_s, run_s = _fit(
        arrays_q, optimizer, rates, momentum, start, keys, np.asarray([0, steps]), opts, True, state
    )
    if timings is not None:
        timings.update(compile_s=compile_s, run_s=run_s)
    Z = np.array(Z0)
    Z[:, list(qt)] = np.asarray(final["Z"])
    return losses, {"Y": np.asarray(final["Y"]), "Z": Z}


@partial(xla_jit, one_shot=True, static_argnames=("M", "init", "steps", "query", "optimizer", "momentum"))
def _sweep_start(seeds, rates, *, M, init, steps, query, optimizer, momentum):
    """What `train_sweep` starts from, in one program (a first call compiles one program, not one per eager
    step): the batch keys of every run, the drawn Z0 (R, M, M), the trained start {"Y", "Z": Z0's `query`
    rows} and its optimiser state."""
    k_init, keys = jax.vmap(partial(_keys, steps=steps))(seeds)
    params0 = jax.vmap(lambda k: init_params(M, init, k, rates["Y"].dtype))(k_init)
    start = {"Y": params0["Y"], "Z": params0["Z"][:, list(query)]}
    state = jax.vmap(lambda p, r: _state(optimizer, r, momentum, p))(start, rates)
    return keys, params0["Z"], start, state


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
    """Train the embedding form (U, W_Q, W_K, W_V) of the 1-layer model (eqs. 1-2; loss `embedding_loss`)
    with optax, batch-mean gradients on count vectors (the exact finite-T reduction of `count_loss`).

    **Learning rates.** W_V is trained at `eta_Y`, W_Q and W_K at `eta_Z`, U at `eta_U` (default `eta_Z`;
    0 freezes U); the paper leaves the map to the Y/Z rates open (App. G; the first-order map, state-dependent
    for Z, is in docs/systems/scan_snap.md).

    **Init** (`init_embedding`): U ~ N(0, 1/d), W_Q, W_K ~ N(0, init_scale^2 / d), W_V = 0 (Y(0) = 0).

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
    arrays = classes.arrays()
    k_init, keys = _keys(jnp.asarray(seed, jnp.uint32), steps)
    emb0 = init_embedding(classes.vocab_size, d, k_init, 1.0, arrays.cond.dtype)
    emb0 = dict(emb0, W_Q=emb0["W_Q"] * init_scale, W_K=emb0["W_K"] * init_scale)
    rates = {"U": eta_U, "W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    save = np.arange(steps + 1)
    opts = dict(form="embedding", T=T, batch_size=batch_size, history=history)
    final, *rest = _fit(arrays, optimizer, rates, momentum, emb0, keys, save, opts)
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=eta_Y, eta_Z=eta_Z, eta_U=eta_U, T=T)
    config |= dict(batch_size=batch_size, steps=steps, momentum=momentum, init="embedding", init_scale=init_scale)
    config |= dict(seed=seed, form="embedding", d=d, final_embedding={k: np.asarray(v) for k, v in final.items()})
    return _finish(optimizer, rates, momentum, save, (embedding_to_yz(final), *rest), config)
