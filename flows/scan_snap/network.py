"""The finite-T 1-layer Y/Z transformer of Scan and Snap, trained with optax (Tian et al. 2023, Sec. 3.1).

Model (digest §1): the query m = x_T attends over the T-1 contexts with logits z_{m, x_t} (the query is
masked), b_t = softmax_t(z_{m x_t}); the attended one-hot average X^T b is normalised, f = X^T b / ||X^T b||,
and the output logits are Y^T f; the loss is the cross-entropy of the next token n (minus eq. 2):

    loss = -log softmax(Y^T f)_n,     Y, Z in R^{M x M}.

Exact count-vector reduction (digest §2, [ours]): X^T b = u with u_l = N_l e^{z_ml} / sum_l' N_l' e^{z_ml'},
N the context counts. `count_loss` uses this form (no token sequences; shapes (B, M)); `token_loss` is the
literal implementation on token sequences (B, T-1), used to cross-check it. Gradients are `jax.grad` of these
losses, i.e. Lemma 1: grad_Y = f (alpha - e_n)^T, grad_{z_m} = diag(u) P^perp_f Y (alpha - e_n) / ||u||.

`train_embedding` trains the embedding form (U, W_Q, W_K, W_V) of the same model (digest §1, §6) and records
Y = U W_V^T U^T and Z = U W_Q W_K^T U^T / sqrt(d), so the same observables apply.

`train` runs SGD (optional heavy-ball momentum) or Adam with separate learning rates for Y and Z, batch-mean
gradients, zero or random (uniform +-1/sqrt(M), PyTorch's nn.Linear default) initialisation. Time
convention: one batch-mean step of learning rate eta is one unit of flow time of the flow with rate eta
(digest §3.2 [ours]); with momentum beta the effective rate is eta / (1 - beta), so `record.ts` is
step / (1 - beta) for SGD and the step count for Adam (the learning rates are rates of the flow, not part
of its clock; `solve_flow(..., paper_time=...)` chooses the flow's class weights, see `flow.flow_args`).

A run whose Y or Z goes non-finite or past `blowup_bound` (ln of the largest float) raises
`flows.TrainingError` with the record of the saved steps before it, as in every system: the loss and its
gradients are bounded here, so an absurd learning rate saturates the softmaxes (loss exactly 0, Y and Z huge
but finite) instead of producing NaN.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._prng import fused
from .._xla import device_array
from .._xla import jit as xla_jit
from ..network_records import TrainingError, first_nonfinite_step
from . import observables as obs
from .data import ClassArrays, SequenceClasses, sample_counts, sample_tokens

__all__ = ["TrainRecord", "blowup_bound", "count_loss", "observe", "embedding_loss", "embedding_to_yz",
           "init_embedding", "init_params", "token_loss", "train", "train_embedding", "train_sweep"]

OPTIMIZERS = ("sgd", "adam")
INITS = ("zero", "random")


def _attended(counts, zq):
    """u = N e^{z} / <N, e^{z}> (B, M), stable (max-shifted over the support)."""
    on = counts > 0
    zmax = jax.lax.stop_gradient(jnp.max(jnp.where(on, zq, -jnp.inf), axis=-1, keepdims=True))
    w = counts * jnp.exp(jnp.where(on, zq - zmax, 0.0))
    return w / jnp.sum(w, axis=-1, keepdims=True)


def _ce(f, Y, target):
    logits = f @ Y  # (B, M): Y^T f per sample
    picked = jnp.take_along_axis(logits, target[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)


def count_loss(params, arrays: ClassArrays, cls, counts):
    """Batch-mean cross-entropy through the count-vector reduction; `counts` (B, M), `cls` (B,)."""
    zq = params["Z"][arrays.query[cls]]
    u = _attended(counts, zq)
    f = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    return _ce(f, params["Y"], arrays.next_token[cls])


def token_loss(params, arrays: ClassArrays, cls, tokens):
    """The same loss on literal token sequences `tokens` (B, T-1): b = softmax_t(z_{m x_t}), X^T b."""
    M = arrays.cond.shape[1]
    zq = params["Z"][arrays.query[cls]]  # (B, M)
    b = jax.nn.softmax(jnp.take_along_axis(zq, tokens, axis=1), axis=-1)  # (B, T-1)
    X = jax.nn.one_hot(tokens, M, dtype=zq.dtype)  # (B, T-1, M)
    xb = jnp.einsum("bt,btm->bm", b, X)
    f = xb / jnp.linalg.norm(xb, axis=-1, keepdims=True)
    return _ce(f, params["Y"], arrays.next_token[cls])


def embedding_to_yz(emb):
    """The reparametrisation of Sec. 3.1: {"Y": U W_V^T U^T, "Z": U W_Q W_K^T U^T / sqrt(d)}, both (M, M),
    from `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}."""
    U = emb["U"]
    d = U.shape[1]
    return {"Y": U @ emb["W_V"].T @ U.T, "Z": U @ emb["W_Q"] @ emb["W_K"].T @ U.T / math.sqrt(d)}


def embedding_loss(emb, arrays: ClassArrays, cls, counts):
    """The embedding form (U, W_Q, W_K, W_V) of the same model (eqs. 1-2, normalisation on X^T b):

    Z = U W_Q W_K^T U^T / sqrt(d), Y = U W_V^T U^T, with `emb` = {"U": (M, d), "W_Q", "W_K", "W_V": (d, d)}.
    """
    return count_loss(embedding_to_yz(emb), arrays, cls, counts)


def init_embedding(M: int, d: int, key, init_scale: float = 1.0, dtype=None):
    """Seeded init of the embedding form: U_ij ~ N(0, 1/d) (rows of norm ~1, nearly orthogonal for d >> 1),
    W_Q, W_K ~ N(0, init_scale^2 / d) entrywise, W_V = 0 (so Y(0) = 0 as in the theory; Z(0) is small but
    nonzero, since W_Q = W_K = 0 is a saddle where Z never moves). Returns {"U": (M, d), "W_Q", "W_K", "W_V":
    (d, d)}."""
    dtype = dtype or jnp.result_type(float)
    kU, kQ, kK = jax.random.split(fused(key), 3)
    s = init_scale / math.sqrt(d)
    return {"U": jax.random.normal(kU, (M, d), dtype) / math.sqrt(d),
            "W_Q": s * jax.random.normal(kQ, (d, d), dtype), "W_K": s * jax.random.normal(kK, (d, d), dtype),
            "W_V": jnp.zeros((d, d), dtype)}


def init_params(M: int, init: str, key, dtype=None):
    """{"Y", "Z"}: zeros, or i.i.d. uniform(-1/sqrt(M), 1/sqrt(M)) (PyTorch nn.Linear default)."""
    dtype = dtype or jnp.result_type(float)
    if init == "zero":
        return {"Y": jnp.zeros((M, M), dtype), "Z": jnp.zeros((M, M), dtype)}
    if init != "random":
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    kY, kZ = jax.random.split(fused(key))
    bound = 1.0 / math.sqrt(M)
    return {"Y": jax.random.uniform(kY, (M, M), dtype, -bound, bound),
            "Z": jax.random.uniform(kZ, (M, M), dtype, -bound, bound)}


def _optimizer(name, lr, momentum):
    if name == "sgd":
        return optax.sgd(lr, momentum=momentum if momentum > 0 else None)
    return optax.adam(lr)


def observe(params, arrays: ClassArrays):
    """The observables of the flow's `Trajectory` (`flow.solve_flow`, full flow) on one (Y, Z): the attention
    observables `observables.ATTENTION_OBSERVABLES` (`attention` c_n (K, M), `entropy`, `entropy_distinct`,
    `common_mass` (K,), by `observables.attention_observables`) and `loss` the population loss
    sum_n P(n) CE_n (the T -> infinity loss)."""
    M = arrays.cond.shape[1]
    dtype = arrays.cond.dtype
    c = obs.attention(params["Z"], arrays.cond, jax.nn.one_hot(arrays.query, M, dtype=dtype))
    logits = obs.normalized_attention(c) @ params["Y"]
    picked = jnp.take_along_axis(logits, arrays.next_token[:, None], axis=1)[:, 0]
    ce = jax.nn.logsumexp(logits, axis=-1) - picked
    return {**obs.attention_observables(c, arrays.cond), "loss": jnp.sum(arrays.class_probs * ce)}


def blowup_bound(dtype) -> float:
    """The largest |entry| of Y or Z that `train` accepts: ln of the dtype's largest float (709.8 in float64,
    88.7 in float32), past which e^{entry} overflows. Y and Z are logits (Y^T f with |f| = 1, and z_m), so
    well before it the softmaxes are saturated to the float resolution: the loss rounds to 0 and the gradients
    vanish exactly, and the run no longer follows any flow. A run that gets there was driven by a learning
    rate far too large (its gradients are bounded, so it moves at most ~lr per step), not trained."""
    return float(np.log(np.finfo(np.dtype(dtype)).max))


def _finite(params):
    """All entries finite and within `blowup_bound` of their dtype (False on NaN and inf)."""
    return jnp.all(jnp.stack([jnp.all(jnp.abs(v) <= blowup_bound(v.dtype))
                              for v in jax.tree_util.tree_leaves(params)]))


def _run(arrays, key, eta_Y, eta_Z, params0, *, optimizer, momentum, T, batch_size, steps, form, history,
         save_every=1):
    """The jittable training loop (lax.scan over saved segments of `save_every` steps); learning rates are
    traced. Returns (batch losses (steps,), final params, params at the saved steps or None, observables at
    the saved steps, first non-finite step or -1)."""
    opt_Y = _optimizer(optimizer, eta_Y, momentum)
    opt_Z = _optimizer(optimizer, eta_Z, momentum)
    loss_fn = {"counts": count_loss, "tokens": token_loss}[form]
    sampler = {"counts": sample_counts, "tokens": sample_tokens}[form]

    def step(carry, k):
        params, sY, sZ, i, bad = carry
        cls, data = sampler(arrays, k, batch_size, T)
        loss, grads = jax.value_and_grad(loss_fn)(params, arrays, cls, data)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes python floats and int counts
            uY, sY = opt_Y.update(grads["Y"], sY, params["Y"])
            uZ, sZ = opt_Z.update(grads["Z"], sZ, params["Z"])
        params = {"Y": params["Y"] + uY, "Z": params["Z"] + uZ}
        bad = jnp.where((bad < 0) & ~_finite(params), i + 1, bad)
        return (params, sY, sZ, i + 1, bad), loss

    def segment(carry, ks):
        carry, losses = jax.lax.scan(step, carry, ks)
        return carry, (losses, carry[0] if history else None, observe(carry[0], arrays))

    keys = jax.random.split(fused(key), steps)
    n_seg, rem = divmod(steps, save_every)
    carry = (params0, opt_Y.init(params0["Y"]), opt_Z.init(params0["Z"]), jnp.asarray(0, jnp.int32),
             jnp.asarray(-1, jnp.int32))
    first = (params0 if history else None, observe(params0, arrays))
    carry, (losses, hist, series) = jax.lax.scan(segment, carry, keys[:n_seg * save_every].reshape(
        (n_seg, save_every) + keys.shape[1:]))
    parts = [(hist, series)]
    losses = [losses.reshape(-1)]
    if rem:
        carry, (l2, h2, o2) = segment(carry, keys[n_seg * save_every:])
        losses.append(l2)
        parts.append(jax.tree_util.tree_map(lambda x: x[None], (h2, o2)))
    hist, series = jax.tree_util.tree_map(lambda a, *b: jnp.concatenate([a[None], *b]), first, *parts)
    return jnp.concatenate(losses), carry[0], hist, series, carry[4]


@dataclasses.dataclass(frozen=True)
class TrainRecord:
    """Result of `train` (and `train_embedding`), in the vocabulary of every system's network record.

    - `ts`: (k,) flow time of each saved step (step / (1 - momentum) for SGD, step for Adam);
      `steps`: (k,) the saved step numbers (0, save_every, 2 save_every, ..., and the last step).
    - `observables`: name -> array with leading axis k, the same names as the flow's `Trajectory`
      (`solve_flow`, full flow): `attention` c_n (k, K, M), `entropy`, `entropy_distinct` and `common_mass`
      (k, K) (`observables.attention_observables`) and `loss` the population loss (k,), computed from the
      saved (Y, Z). Also reachable as `record["attention"]`, `record.attention`, `record["loss"]`.
    - `batch_loss`: (steps,) batch-mean training loss at each step (before its update).
    - `Y`, `Z`: (k, M, M) parameters at the saved steps (index 0 = initialisation), or only the final
      (M, M) values when `history=False`.
    - `config`: the arguments; `compile_s`, `run_s`: compile and training wall time.
    - Deprecated: `t` (use `ts`; with `save_every=1` they are equal), `loss` (the per-step batch loss, now
      `batch_loss`; `record["loss"]` is the population loss at the saved steps, as on the flow).
    """

    ts: np.ndarray
    steps: np.ndarray
    observables: dict
    batch_loss: np.ndarray
    Y: np.ndarray
    Z: np.ndarray
    config: dict
    compile_s: float = math.nan
    run_s: float = math.nan

    def __getitem__(self, name):
        return self.observables[name]

    def __getattr__(self, name):
        if name != "observables" and name in self.__dict__.get("observables", {}):
            return self.__dict__["observables"][name]
        raise AttributeError(name)

    @property
    def t(self):
        warnings.warn("TrainRecord.t is deprecated; use TrainRecord.ts (the same flow times)", DeprecationWarning,
                      stacklevel=2)
        return self.ts

    @property
    def loss(self):
        warnings.warn("TrainRecord.loss (the per-step batch loss) is deprecated; use TrainRecord.batch_loss "
                      "(record['loss'] is the population loss at the saved steps, as on the flow)",
                      DeprecationWarning, stacklevel=2)
        return self.batch_loss


#: seeds become uint32 `jax.random.PRNGKey` seeds
_SEED_MAX = 2**32 - 1


def _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, init, seed, form, sweep=False):
    if not isinstance(classes, SequenceClasses):
        raise ValueError("classes must be a SequenceClasses")
    check_choice("optimizer", optimizer, OPTIMIZERS)
    for field, v in (("eta_Y", eta_Y), ("eta_Z", eta_Z)):
        a = real_array(field, v, finite=False)
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{field} must be finite and > 0, got {v!r}")
        if a.ndim and not sweep:
            raise ValueError(f"{field} must be a number (train_sweep takes arrays of rates), got shape {a.shape}")
    for field, v, lo in (("T", T, 2), ("batch_size", batch_size, 1), ("steps", steps, 1)):
        check_int(field, v, lo, integral_float=True)
    momentum = check_real("momentum", momentum, low=0.0, high=1.0, high_strict=True)
    if optimizer == "adam" and momentum:
        raise ValueError("momentum must be 0 with optimizer='adam' (Adam has its own moments)")
    check_choice("init", init, INITS)
    check_int("seed", seed, 0, _SEED_MAX, integral_float=True)
    check_choice("form", form, ("counts", "tokens"))


@partial(xla_jit, static_argnames=("optimizer", "momentum", "T", "batch_size", "steps", "form", "history",
                                   "init", "M", "save_every"))
def _train_jit(arrays, seed, eta_Y, eta_Z, *, optimizer, momentum, T, batch_size, steps, form, history,
               init, M, save_every=1):
    k_init, k_data = jax.random.split(fused(jax.random.PRNGKey(seed)))
    params0 = init_params(M, init, k_init, arrays.cond.dtype)
    losses, final, hist, series, bad = _run(arrays, k_data, eta_Y, eta_Z, params0, optimizer=optimizer,
                                            momentum=momentum, T=T, batch_size=batch_size, steps=steps,
                                            form=form, history=history, save_every=save_every)
    return losses, (hist if history else final), series, bad


def _saved_steps(steps, save_every):
    out = np.arange(0, steps + 1, save_every, dtype=np.int64)
    return out if out[-1] == steps else np.concatenate([out, [steps]])


def _record(losses, params, series, bad, *, save, scale, history, config, compile_s, run_s):
    """The TrainRecord, or a TrainingError carrying the record of the saved steps before the first non-finite one."""
    series = {k: np.asarray(v) for k, v in series.items()}
    bad = first_nonfinite_step(save, series, int(bad))
    keep = np.ones(save.shape, bool) if bad < 0 else save < bad
    Y, Z = np.asarray(params["Y"]), np.asarray(params["Z"])
    if history:
        Y, Z = Y[keep], Z[keep]
    losses = np.asarray(losses)
    record = TrainRecord(ts=save[keep] * scale, steps=save[keep], observables={k: v[keep] for k, v in series.items()},
                         batch_loss=losses if bad < 0 else losses[:bad], Y=Y, Z=Z, config=config,
                         compile_s=compile_s, run_s=run_s)
    if bad >= 0:
        raise TrainingError(f"training went non-finite at step {bad} (optimizer={config['optimizer']!r}, "
                            f"eta_Y={config['eta_Y']:g}, eta_Z={config['eta_Z']:g}): the parameters or the "
                            f"observables hold NaN or inf, or Y or Z an entry beyond {blowup_bound(Y.dtype):.4g} "
                            f"in magnitude (ln of the largest float: its exponential overflows; see "
                            f"blowup_bound); lower the learning rates. error.record holds the "
                            f"{int(keep.sum())} saved steps before it", step=bad, record=record)
    return record


def rate_pairs(eta_Y, eta_Z, lr):
    """((name, eta_Y), (name, eta_Z)) from `eta_Y, eta_Z` or from `lr` (one rate for both groups, or
    {"Y": eta_Y, "Z": eta_Z}), each named as it was passed (`lr`, `lr['Y']`, `eta_Y`, ...) for the error
    messages of the caller's value checks (numbers in `train`, arrays in `train_sweep` and `solve_flow`)."""
    if lr is None:
        if eta_Y is None or eta_Z is None:
            raise ValueError("lr must be given (a number, or {'Y': eta_Y, 'Z': eta_Z}) when eta_Y, eta_Z are not")
        return ("eta_Y", eta_Y), ("eta_Z", eta_Z)
    if eta_Y is not None or eta_Z is not None:
        raise ValueError("lr must not be given together with eta_Y, eta_Z (pass one or the other)")
    if isinstance(lr, dict):
        if set(lr) != {"Y", "Z"}:
            raise ValueError("lr must be a number or a dict with the keys 'Y' and 'Z', got keys "
                             f"{sorted(map(str, lr))}")
        return ("lr['Y']", lr["Y"]), ("lr['Z']", lr["Z"])
    return ("lr", lr), ("lr", lr)


def _learning_rates(eta_Y, eta_Z, lr):
    """(eta_Y, eta_Z) of `train`: `rate_pairs`, validated as positive numbers when given as `lr`."""
    pairs = rate_pairs(eta_Y, eta_Z, lr)
    if lr is None:
        return eta_Y, eta_Z  # checked (as arrays or numbers) by _validate
    return tuple(check_real(name, v, low=0.0, strict=True) for name, v in pairs)


def train(classes: SequenceClasses, optimizer: str, eta_Y: float | None = None, eta_Z: float | None = None,
          T: int | None = None, batch_size: int | None = None, steps: int | None = None, momentum: float = 0.0,
          init: str = "zero", seed: int = 0, *, form: str = "counts", history: bool = True, save_every: int = 1,
          lr=None) -> TrainRecord:
    """Train the finite-T Y/Z model; see the module docstring.

    **Arguments:** `classes`; `optimizer` "sgd" | "adam"; `eta_Y`, `eta_Z` > 0 (or, as in every system,
    `lr=` a number for both groups or `{"Y": eta_Y, "Z": eta_Z}`); `T` >= 2 (T-1 contexts);
    `batch_size`; `steps`; `momentum` in [0, 1) (SGD only); `init` "zero" | "random"; `seed` (the same seed
    gives the same record); `form` "counts" (exact count-vector reduction) or "tokens" (literal sequences,
    same random numbers); `save_every` (>= 1: record Y, Z and the observables every k steps and at the last
    step; the training is the same for every `save_every`); `history` (keep Y and Z at the saved steps;
    `False`: only the final Y, Z, the observables are still recorded).

    **Time:** `record.ts` = step / (1 - momentum) for SGD (t = eta step / (1 - beta) in units where the flow
    rates are eta_Y, eta_Z), step for Adam (its clock t = lr * step, as in every system).

    **Raises:** `ValueError` naming a bad argument; `flows.network_records.TrainingError` (a
    `flows.FlowError`) naming the first step whose Y or Z is not finite or has an entry beyond `blowup_bound`
    (ln of the largest float: at an absurd learning rate the bounded gradients drive Y, Z to huge finite values
    and the loss to exactly 0, not to NaN), with the partial record as `error.record`.
    """
    eta_Y, eta_Z = _learning_rates(eta_Y, eta_Z, lr)
    _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, init, seed, form)
    history = check_bool("history", history)
    save_every = check_int("save_every", save_every, 1)
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    call = (arrays, device_array(seed, jnp.uint32), device_array(eta_Y, dtype), device_array(eta_Z, dtype))
    static = dict(optimizer=optimizer, momentum=float(momentum), T=int(T), batch_size=int(batch_size),
                  steps=int(steps), form=form, history=history, init=init, M=classes.vocab_size,
                  save_every=min(int(save_every), int(steps)))
    start = time.perf_counter()
    compiled = _train_jit.lower(*call, **static).compile()  # cached in memory: a repeated call compiles nothing
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(*call))
    run_s = time.perf_counter() - start
    scale = 1.0 / (1.0 - float(momentum)) if optimizer == "sgd" else 1.0
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=float(eta_Y), eta_Z=float(eta_Z), T=int(T),
                  batch_size=int(batch_size), steps=int(steps), momentum=float(momentum), init=init,
                  seed=int(seed), form=form, save_every=int(save_every))
    return _record(*out, save=_saved_steps(int(steps), static["save_every"]), scale=scale, history=history,
                   config=config, compile_s=compile_s, run_s=run_s)


@partial(xla_jit, static_argnames=("optimizer", "momentum", "T", "batch_size", "steps", "init", "M"))
def _sweep_jit(arrays, seeds, eta_Y, eta_Z, *, optimizer, momentum, T, batch_size, steps, init, M):
    def one(seed, eY, eZ):
        return _train_jit.__wrapped__(arrays, seed, eY, eZ, optimizer=optimizer, momentum=momentum, T=T,
                                      batch_size=batch_size, steps=steps, form="counts", history=False, init=init,
                                      M=M, save_every=steps)[:2]

    return jax.vmap(one)(seeds, eta_Y, eta_Z)


def train_sweep(classes: SequenceClasses, optimizer: str, eta_Y=None, eta_Z=None, seeds=None, T: int | None = None,
                batch_size: int | None = None, steps: int | None = None, momentum: float = 0.0, init: str = "zero",
                *, lr=None):
    """Many trainings in one vmapped, once-compiled call: `eta_Y`, `eta_Z`, `seeds` are 1-D arrays of one
    length R (or `lr=` an array for both groups, or {"Y": eta_Y, "Z": eta_Z}, as in `train`). Returns (loss
    (R, steps), final params {"Y", "Z"}: (R, M, M)). Member i equals `train(classes, optimizer, eta_Y[i],
    eta_Z[i], ..., seed=seeds[i])` (final state)."""
    (nY, eta_Y), (nZ, eta_Z) = rate_pairs(eta_Y, eta_Z, lr)
    names = (nY, nZ)
    for name, v in (("seeds", seeds), ("T", T), ("batch_size", batch_size), ("steps", steps)):
        if v is None:
            raise ValueError(f"{name} must be given")
    eta_Y, eta_Z, seeds = (np.atleast_1d(real_array(name, a, finite=False)) for name, a in
                           ((names[0], eta_Y), (names[1], eta_Z), ("seeds", seeds)))
    for name, a in ((names[0], eta_Y), (names[1], eta_Z)):
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be finite and > 0, got {a!r}")
    if not (eta_Y.shape == eta_Z.shape == seeds.shape) or eta_Y.ndim != 1:
        raise ValueError(f"eta_Y, eta_Z and seeds must be 1-D of one length, got {eta_Y.shape}, "
                         f"{eta_Z.shape}, {seeds.shape}")
    if not np.all(np.isfinite(seeds)) or np.any(seeds != np.round(seeds)) or np.any(seeds < 0) \
            or np.any(seeds > _SEED_MAX):
        raise ValueError(f"seeds must be integers in [0, {_SEED_MAX}], got {seeds!r}")
    seeds = seeds.astype(np.int64)
    _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, init, 0, "counts", sweep=True)
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    losses, params = _sweep_jit(arrays, jnp.asarray(seeds, jnp.uint32), jnp.asarray(eta_Y, dtype),
                                jnp.asarray(eta_Z, dtype), optimizer=optimizer, momentum=float(momentum),
                                T=int(T), batch_size=int(batch_size), steps=int(steps), init=init,
                                M=classes.vocab_size)
    return np.asarray(losses), {k: np.asarray(v) for k, v in params.items()}


@partial(xla_jit, static_argnames=("optimizer", "momentum", "T", "batch_size", "steps", "history", "M", "d"))
def _train_embedding_jit(arrays, seed, lrs, init_scale, *, optimizer, momentum, T, batch_size, steps, history,
                         M, d):
    k_init, k_data = jax.random.split(fused(jax.random.PRNGKey(seed)))
    emb0 = init_embedding(M, d, k_init, 1.0, arrays.cond.dtype)
    emb0 = dict(emb0, W_Q=emb0["W_Q"] * init_scale, W_K=emb0["W_K"] * init_scale)
    opts = {k: _optimizer(optimizer, lrs[k], momentum) for k in EMBEDDING_PARAMS}

    def step(carry, k):
        emb, states = carry[:2]
        cls, counts = sample_counts(arrays, k, batch_size, T)
        loss, grads = jax.value_and_grad(embedding_loss)(emb, arrays, cls, counts)
        new, new_states = {}, {}
        with jax.numpy_dtype_promotion("standard"):
            for name in EMBEDDING_PARAMS:
                u, new_states[name] = opts[name].update(grads[name], states[name], emb[name])
                new[name] = emb[name] + u
        yz = embedding_to_yz(new)
        bad = jnp.where((carry[2] < 0) & ~(_finite(new) & _finite(yz)), carry[3] + 1, carry[2])
        return (new, new_states, bad, carry[3] + 1), (loss, yz if history else None, observe(yz, arrays))

    states = {k: opts[k].init(emb0[k]) for k in EMBEDDING_PARAMS}
    start = (emb0, states, jnp.asarray(-1, jnp.int32), jnp.asarray(0, jnp.int32))
    (final, _, bad, _), (losses, hist, series) = jax.lax.scan(step, start, jax.random.split(k_data, steps))
    yz0 = embedding_to_yz(emb0)
    series = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), observe(yz0, arrays), series)
    if history:
        hist = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), yz0, hist)
    else:
        hist = embedding_to_yz(final)
    return losses, hist, series, bad, final


EMBEDDING_PARAMS = ("U", "W_Q", "W_K", "W_V")


def train_embedding(classes: SequenceClasses, optimizer: str, eta_Y: float, eta_Z: float, T: int,
                    batch_size: int, steps: int, d: int, momentum: float = 0.0, seed: int = 0, *, eta_U=None,
                    init_scale: float = 1.0, history: bool = True):
    """Train the embedding form (U, W_Q, W_K, W_V) of the 1-layer model (eqs. 1-2; loss `embedding_loss`)
    with optax, batch-mean gradients on count vectors (the exact finite-T reduction, digest §2).

    **Learning rates.** W_V is trained at `eta_Y`, W_Q and W_K at `eta_Z`, U at `eta_U` (default `eta_Z`;
    0 freezes U). The paper leaves the map to the Y/Z rates open (App. G; digest §6). To first order in the
    step, with U^T U = I_d and G_Y, G_Z the Y/Z gradients (Lemma 1):
    - dY = -eta_Y P G_Y P with P = U U^T (the projector on the embedding span; P = I when d >= M and U is
      orthogonal), so eta_Y maps to itself on that span;
    - dZ = -(eta_Z / d) P [G_Z U W_K W_K^T U^T + U W_Q W_Q^T U^T G_Z] P, i.e. an effective Z-rate
      ~ eta_Z (s_Q^2 + s_K^2) / d when W_Q W_Q^T ~ s_Q^2 I, W_K W_K^T ~ s_K^2 I: state-dependent (it grows with
      the attention weights) and ~ 2 eta_Z init_scale^2 / d at the init below (s^2 ~ init_scale^2);
    - training U adds terms of the same order to both (quadratic in U), so the Y/Z flow with constant rates
      is at best a local description of this form.

    **Init** (`init_embedding`): U ~ N(0, 1/d), W_Q, W_K ~ N(0, init_scale^2 / d), W_V = 0 (Y(0) = 0).

    **Arguments:** as `train` (`optimizer` "sgd" | "adam", `momentum` SGD only), plus `d` >= 1 the embedding
    width, `eta_U` >= 0, `init_scale` > 0. Returns a `TrainRecord` whose `Y`, `Z` are the (steps + 1, M, M)
    histories (or final (M, M) values when `history=False`) of Y = U W_V^T U^T and Z = U W_Q W_K^T U^T /
    sqrt(d); `config["final_embedding"]` holds the final {"U", "W_Q", "W_K", "W_V"} arrays; `ts`, `steps`,
    `observables` as in `train` (saved at every step; `compile_s` is nan, `run_s` includes a first compile).
    """
    _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, "zero", seed, "counts")
    check_int("d", d, 1, integral_float=True)
    eta_U = eta_Z if eta_U is None else check_real("eta_U", eta_U, low=0.0)
    init_scale = check_real("init_scale", init_scale, low=0.0, strict=True)
    history = check_bool("history", history)
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    lrs = {"U": eta_U, "W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    start = time.perf_counter()
    losses, yz, series, bad, final = _train_embedding_jit(
        arrays, jnp.asarray(seed, jnp.uint32), {k: jnp.asarray(v, dtype) for k, v in lrs.items()},
        jnp.asarray(init_scale, dtype), optimizer=optimizer, momentum=float(momentum), T=int(T),
        batch_size=int(batch_size), steps=int(steps), history=history, M=classes.vocab_size, d=int(d))
    scale = 1.0 / (1.0 - float(momentum)) if optimizer == "sgd" else 1.0
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=float(eta_Y), eta_Z=float(eta_Z),
                  eta_U=float(eta_U), T=int(T), batch_size=int(batch_size), steps=int(steps),
                  momentum=float(momentum), init="embedding", init_scale=float(init_scale), seed=int(seed),
                  form="embedding", d=int(d), final_embedding={k: np.asarray(v) for k, v in final.items()})
    run_s = time.perf_counter() - start  # compile included on a first call
    return _record(losses, yz, series, bad, save=np.arange(int(steps) + 1), scale=scale, history=history,
                   config=config, compile_s=math.nan, run_s=run_s)
