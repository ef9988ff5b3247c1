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
(digest §3.2 [ours]); with momentum beta the effective rate is eta / (1 - beta), so `record.t` is
step / (1 - beta) for SGD and the step count for Adam.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._checks import check_bool, check_choice, check_int, check_real, real_array
from .._xla import jit as xla_jit
from .data import ClassArrays, SequenceClasses, sample_counts, sample_tokens

__all__ = ["TrainRecord", "count_loss", "embedding_loss", "embedding_to_yz", "init_embedding", "init_params",
           "token_loss", "train", "train_embedding", "train_sweep"]

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
    kU, kQ, kK = jax.random.split(key, 3)
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
    kY, kZ = jax.random.split(key)
    bound = 1.0 / math.sqrt(M)
    return {"Y": jax.random.uniform(kY, (M, M), dtype, -bound, bound),
            "Z": jax.random.uniform(kZ, (M, M), dtype, -bound, bound)}


def _optimizer(name, lr, momentum):
    if name == "sgd":
        return optax.sgd(lr, momentum=momentum if momentum > 0 else None)
    return optax.adam(lr)


def _run(arrays, key, eta_Y, eta_Z, params0, *, optimizer, momentum, T, batch_size, steps, form, history):
    """The jittable training loop (lax.scan over steps); learning rates are traced."""
    opt_Y = _optimizer(optimizer, eta_Y, momentum)
    opt_Z = _optimizer(optimizer, eta_Z, momentum)
    loss_fn = {"counts": count_loss, "tokens": token_loss}[form]
    sampler = {"counts": sample_counts, "tokens": sample_tokens}[form]

    def step(carry, k):
        params, sY, sZ = carry
        cls, data = sampler(arrays, k, batch_size, T)
        loss, grads = jax.value_and_grad(loss_fn)(params, arrays, cls, data)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes python floats and int counts
            uY, sY = opt_Y.update(grads["Y"], sY, params["Y"])
            uZ, sZ = opt_Z.update(grads["Z"], sZ, params["Z"])
        params = {"Y": params["Y"] + uY, "Z": params["Z"] + uZ}
        out = (loss, params) if history else (loss, None)
        return (params, sY, sZ), out

    carry = (params0, opt_Y.init(params0["Y"]), opt_Z.init(params0["Z"]))
    (final, _, _), (losses, hist) = jax.lax.scan(step, carry, jax.random.split(key, steps))
    return losses, final, hist


@dataclasses.dataclass(frozen=True)
class TrainRecord:
    """Result of `train`.

    - `loss`: (steps,) batch-mean training loss at each step (before its update).
    - `Y`, `Z`: (steps + 1, M, M) parameter histories (index 0 = initialisation), or only the final
      (M, M) values when `history=False`.
    - `t`: (steps + 1,) flow time of each saved state (step / (1 - momentum) for SGD, step for Adam).
    - `config`: the arguments.
    """

    loss: np.ndarray
    Y: np.ndarray
    Z: np.ndarray
    t: np.ndarray
    config: dict


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
                                   "init", "M"))
def _train_jit(arrays, seed, eta_Y, eta_Z, *, optimizer, momentum, T, batch_size, steps, form, history,
               init, M):
    k_init, k_data = jax.random.split(jax.random.PRNGKey(seed))
    params0 = init_params(M, init, k_init, arrays.cond.dtype)
    losses, final, hist = _run(arrays, k_data, eta_Y, eta_Z, params0, optimizer=optimizer,
                               momentum=momentum, T=T, batch_size=batch_size, steps=steps, form=form,
                               history=history)
    if history:
        hist = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), params0, hist)
        return losses, hist
    return losses, final


def train(classes: SequenceClasses, optimizer: str, eta_Y: float, eta_Z: float, T: int, batch_size: int,
          steps: int, momentum: float = 0.0, init: str = "zero", seed: int = 0, *, form: str = "counts",
          history: bool = True) -> TrainRecord:
    """Train the finite-T Y/Z model; see the module docstring.

    **Arguments:** `classes`; `optimizer` "sgd" | "adam"; `eta_Y`, `eta_Z` > 0; `T` >= 2 (T-1 contexts);
    `batch_size`; `steps`; `momentum` in [0, 1) (SGD only); `init` "zero" | "random"; `seed` (the same seed
    gives the same record); `form` "counts" (exact count-vector reduction) or "tokens" (literal sequences,
    same random numbers); `history` (keep Y and Z after every step).
    """
    _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, init, seed, form)
    history = check_bool("history", history)
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    losses, params = _train_jit(arrays, jnp.asarray(seed, jnp.uint32), jnp.asarray(eta_Y, dtype),
                                jnp.asarray(eta_Z, dtype), optimizer=optimizer, momentum=float(momentum),
                                T=int(T), batch_size=int(batch_size), steps=int(steps), form=form,
                                history=history, init=init, M=classes.vocab_size)
    scale = 1.0 / (1.0 - float(momentum)) if optimizer == "sgd" else 1.0
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=float(eta_Y), eta_Z=float(eta_Z), T=int(T),
                  batch_size=int(batch_size), steps=int(steps), momentum=float(momentum), init=init,
                  seed=int(seed), form=form)
    return TrainRecord(loss=np.asarray(losses), Y=np.asarray(params["Y"]), Z=np.asarray(params["Z"]),
                       t=np.arange(int(steps) + 1) * scale, config=config)


@partial(xla_jit, static_argnames=("optimizer", "momentum", "T", "batch_size", "steps", "init", "M"))
def _sweep_jit(arrays, seeds, eta_Y, eta_Z, *, optimizer, momentum, T, batch_size, steps, init, M):
    def one(seed, eY, eZ):
        return _train_jit.__wrapped__(arrays, seed, eY, eZ, optimizer=optimizer, momentum=momentum, T=T,
                          batch_size=batch_size, steps=steps, form="counts", history=False, init=init, M=M)

    return jax.vmap(one)(seeds, eta_Y, eta_Z)


def train_sweep(classes: SequenceClasses, optimizer: str, eta_Y, eta_Z, seeds, T: int, batch_size: int,
                steps: int, momentum: float = 0.0, init: str = "zero"):
    """Many trainings in one vmapped, once-compiled call: `eta_Y`, `eta_Z`, `seeds` are 1-D arrays of one
    length R. Returns (loss (R, steps), final params {"Y", "Z"}: (R, M, M)). Member i equals
    `train(classes, optimizer, eta_Y[i], eta_Z[i], ..., seed=seeds[i])` (final state)."""
    eta_Y, eta_Z, seeds = (np.atleast_1d(real_array(name, a, finite=False)) for name, a in
                           (("eta_Y", eta_Y), ("eta_Z", eta_Z), ("seeds", seeds)))
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
    k_init, k_data = jax.random.split(jax.random.PRNGKey(seed))
    emb0 = init_embedding(M, d, k_init, 1.0, arrays.cond.dtype)
    emb0 = dict(emb0, W_Q=emb0["W_Q"] * init_scale, W_K=emb0["W_K"] * init_scale)
    opts = {k: _optimizer(optimizer, lrs[k], momentum) for k in EMBEDDING_PARAMS}

    def step(carry, k):
        emb, states = carry
        cls, counts = sample_counts(arrays, k, batch_size, T)
        loss, grads = jax.value_and_grad(embedding_loss)(emb, arrays, cls, counts)
        new, new_states = {}, {}
        with jax.numpy_dtype_promotion("standard"):
            for name in EMBEDDING_PARAMS:
                u, new_states[name] = opts[name].update(grads[name], states[name], emb[name])
                new[name] = emb[name] + u
        return (new, new_states), (loss, embedding_to_yz(new) if history else None)

    states = {k: opts[k].init(emb0[k]) for k in EMBEDDING_PARAMS}
    (final, _), (losses, hist) = jax.lax.scan(step, (emb0, states), jax.random.split(k_data, steps))
    yz0 = embedding_to_yz(emb0)
    if history:
        hist = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), yz0, hist)
    else:
        hist = embedding_to_yz(final)
    return losses, hist, final


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
    sqrt(d); `config["final_embedding"]` holds the final {"U", "W_Q", "W_K", "W_V"} arrays; `t` as in `train`.
    """
    _validate(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum, "zero", seed, "counts")
    check_int("d", d, 1, integral_float=True)
    eta_U = eta_Z if eta_U is None else check_real("eta_U", eta_U, low=0.0)
    init_scale = check_real("init_scale", init_scale, low=0.0, strict=True)
    history = check_bool("history", history)
    arrays = classes.arrays()
    dtype = arrays.cond.dtype
    lrs = {"U": eta_U, "W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    losses, yz, final = _train_embedding_jit(
        arrays, jnp.asarray(seed, jnp.uint32), {k: jnp.asarray(v, dtype) for k, v in lrs.items()},
        jnp.asarray(init_scale, dtype), optimizer=optimizer, momentum=float(momentum), T=int(T),
        batch_size=int(batch_size), steps=int(steps), history=history, M=classes.vocab_size, d=int(d))
    scale = 1.0 / (1.0 - float(momentum)) if optimizer == "sgd" else 1.0
    config = dict(classes=classes.name, optimizer=optimizer, eta_Y=float(eta_Y), eta_Z=float(eta_Z),
                  eta_U=float(eta_U), T=int(T), batch_size=int(batch_size), steps=int(steps),
                  momentum=float(momentum), init="embedding", init_scale=float(init_scale), seed=int(seed),
                  form="embedding", d=int(d), final_embedding={k: np.asarray(v) for k, v in final.items()})
    return TrainRecord(loss=np.asarray(losses), Y=np.asarray(yz["Y"]), Z=np.asarray(yz["Z"]),
                       t=np.arange(int(steps) + 1) * scale, config=config)
