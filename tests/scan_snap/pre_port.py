"""Scan and Snap's training loops and flows as they were before they ran on the shared driver, kept verbatim
(losses, initialisation, seeds, optimiser state, the failed-run bound, observables, the limits' states and
args) as the reference of tests/test_spec_equality.py. The physics they call (the samplers of `data`, the
functions of `observables`, the vector fields and `flow_args` of `flow`) is the package's own."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flows import training
from flows._prng import fused
from flows._solve import solve
from flows.optim_limits.problem import limit_problem as optimizer_limit
from flows.scan_snap import observables as obs
from flows.scan_snap.data import sample_counts, sample_tokens
from flows.scan_snap.flow import flow_args, full_vector_field, population_loss, reduced_vector_field
from flows.scan_snap.theory import gamma_of_h

# -- the network (flows/scan_snap/network.py) ---------------------------------------------------------------------


def count_loss(params, arrays, cls, counts):
    u = obs.attention_weights(counts, params["Z"][arrays.query[cls]])
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(u) @ params["Y"], arrays.next_token[cls]))


def token_loss(params, arrays, cls, tokens):
    M = arrays.cond.shape[1]
    zq = params["Z"][arrays.query[cls]]  # (B, M)
    b = jax.nn.softmax(jnp.take_along_axis(zq, tokens, axis=1), axis=-1)  # (B, T-1)
    X = jax.nn.one_hot(tokens, M, dtype=zq.dtype)  # (B, T-1, M)
    xb = jnp.einsum("bt,btm->bm", b, X)
    return jnp.mean(obs.cross_entropy(obs.normalized_attention(xb) @ params["Y"], arrays.next_token[cls]))


def embedding_to_yz(emb):
    U = emb["U"]
    d = U.shape[1]
    return {"Y": U @ emb["W_V"].T @ U.T, "Z": U @ emb["W_Q"] @ emb["W_K"].T @ U.T / math.sqrt(d)}


def embedding_loss(emb, arrays, cls, counts):
    return count_loss(embedding_to_yz(emb), arrays, cls, counts)


def init_embedding(M, d, key, init_scale=1.0, dtype=None):
    dtype = dtype or jnp.result_type(float)
    kU, kQ, kK = jax.random.split(fused(key), 3)
    s = init_scale / math.sqrt(d)
    return {
        "U": jax.random.normal(kU, (M, d), dtype) / math.sqrt(d),
        "W_Q": s * jax.random.normal(kQ, (d, d), dtype),
        "W_K": s * jax.random.normal(kK, (d, d), dtype),
        "W_V": jnp.zeros((d, d), dtype),
    }


def init_params(M, init, key, dtype=None):
    dtype = dtype or jnp.result_type(float)
    if init == "zero":
        return {"Y": jnp.zeros((M, M), dtype), "Z": jnp.zeros((M, M), dtype)}
    kY, kZ = jax.random.split(fused(key))
    bound = 1.0 / math.sqrt(M)
    return {
        "Y": jax.random.uniform(kY, (M, M), dtype, -bound, bound),
        "Z": jax.random.uniform(kZ, (M, M), dtype, -bound, bound),
    }


def observe(params, arrays):
    M = arrays.cond.shape[1]
    dtype = arrays.cond.dtype
    c = obs.attention(params["Z"], arrays.cond, jax.nn.one_hot(arrays.query, M, dtype=dtype))
    return {
        **obs.attention_observables(c, arrays.cond),
        "loss": obs.population_loss(c, params["Y"], arrays.next_token, arrays.class_probs),
    }


def blowup_bound(dtype):
    return float(np.log(np.finfo(np.dtype(dtype)).max))


def _finite(params):
    return jnp.all(jnp.stack([jnp.all(jnp.abs(v) <= blowup_bound(v.dtype)) for v in jax.tree_util.tree_leaves(params)]))


def _keys(seed, steps):
    k_init, k_data = jax.random.split(fused(jax.random.PRNGKey(seed)))
    return k_init, jax.random.key_data(jax.random.split(fused(k_data), steps))


def _optimizer(optimizer, lr, momentum):
    return training.make_optimizer(optimizer, lr, momentum if momentum > 0 else None, labels={k: k for k in lr})


def _state(optimizer, lr, momentum, params):
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(params))
    state = _optimizer(optimizer, lr, momentum).init(params)
    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x, state
    )


def _program(template, *, form, T, batch_size, history, observed=True):
    loss = {"counts": count_loss, "tokens": token_loss, "embedding": embedding_loss}[form]
    sampler = sample_tokens if form == "tokens" else sample_counts
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


def _fit(arrays, optimizer, lr, momentum, params0, keys, save, opts):
    template = _optimizer(optimizer, dict.fromkeys(lr, 1.0), 0.5 if momentum else 0.0)
    opts = {"observed": True, **opts}
    state = _state(optimizer, lr, momentum, params0)
    structure = ("reference", optimizer, bool(momentum), ("groups", tuple(lr)), *sorted(opts.items()))
    return training.run_training(
        "reference.scan_snap.train",
        structure,
        lambda: _program(template, **opts),
        params0,
        state,
        keys,
        save,
        arrays,
        batch_loss=True,
    )


def _finish(optimizer, lr, momentum, save, out):
    final, series, snaps, losses, bad, compile_s, run_s = out
    kw = dict(params={k: np.asarray(v) for k, v in final.items()}, snapshots=snaps, clock=1.0, optimizer=optimizer)
    kw |= dict(momentum=momentum, batch_loss=losses, lr=lr, compile_s=compile_s, run_s=run_s)
    return training.finish(save, series, bad, **kw)


def train(classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, momentum=0.0, init="zero", seed=0, *, form="counts"):
    """`flows.scan_snap.train` (history kept, every step saved) before the port."""
    save = training.save_steps(steps, 1)
    arrays = classes.arrays()
    k_init, keys = _keys(jnp.asarray(seed, jnp.uint32), steps)
    params0 = init_params(classes.vocab_size, init, k_init, arrays.cond.dtype)
    rates = {"Y": eta_Y, "Z": eta_Z}
    opts = dict(form=form, T=T, batch_size=batch_size, history=True)
    out = _fit(arrays, optimizer, rates, momentum, params0, keys, save, opts)
    return _finish(optimizer, rates, momentum, save, out)


def train_embedding(
    classes, optimizer, eta_Y, eta_Z, T, batch_size, steps, d, momentum=0.0, seed=0, *, eta_U=None, init_scale=1.0
):
    """`flows.scan_snap.train_embedding` (history kept) before the port."""
    eta_U = eta_Z if eta_U is None else eta_U
    arrays = classes.arrays()
    k_init, keys = _keys(jnp.asarray(seed, jnp.uint32), steps)
    emb0 = init_embedding(classes.vocab_size, d, k_init, 1.0, arrays.cond.dtype)
    emb0 = dict(emb0, W_Q=emb0["W_Q"] * init_scale, W_K=emb0["W_K"] * init_scale)
    rates = {"U": eta_U, "W_Q": eta_Z, "W_K": eta_Z, "W_V": eta_Y}
    save = np.arange(steps + 1)
    opts = dict(form="embedding", T=T, batch_size=batch_size, history=True)
    final, *rest = _fit(arrays, optimizer, rates, momentum, emb0, keys, save, opts)
    return _finish(optimizer, rates, momentum, save, (embedding_to_yz(final), *rest))


# -- the flows (flows/scan_snap/flow.py) --------------------------------------------------------------------------


def _obs_full(t, y, args):
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {
        **obs.attention_observables(c, args["cond"]),
        "loss": obs.population_loss(c, y["Y"], args["next"], args["p"]),
    }


def _obs_reduced(t, y, args):
    c = obs.attention(y["Z"], args["cond"], args["Q"])
    return {**obs.attention_observables(c, args["cond"]), "gamma": gamma_of_h(y["h"], args["Md"])}


def _obs_limit(t, y, args):
    return _obs_full(t, y["theta"] if "theta" in y else y, args["batch"])


def _full_Z(traj, Z0, qt):
    ys = traj.ys
    if "theta" in ys:
        ys = {**ys["theta"], **{k: v for k, v in ys.items() if k != "theta"}}
    zq = np.asarray(ys["Z"])
    Z = np.array(np.broadcast_to(Z0, zq.shape[:-2] + Z0.shape))
    Z[..., qt, :] = zq
    return dataclasses.replace(traj, ys={**ys, "Z": Z})


def solve_flow(
    classes,
    eta_Y,
    eta_Z,
    ts,
    reduced=False,
    *,
    paper_time=None,
    exact_slaving=False,
    decoder_size=None,
    init="zero",
    seed=0,
    optimizer=None,
    optim_args=None,
    rtol=1e-8,
    atol=1e-10,
) -> Any:
    """One (eta_Y, eta_Z) pair of `flows.scan_snap.solve_flow` before the port."""
    ts = np.asarray(ts, float)
    paper_time = reduced if paper_time is None else paper_time
    if optimizer is not None:
        data = flow_args(classes, eta_Y, eta_Z, query_rows=True)
        limit, limit_args = optimizer_limit(
            population_loss, optimizer, optim_args, data, lr=1.0, rates={"Y": eta_Y, "Z": eta_Z}
        )
    M = classes.vocab_size
    Y0 = Z0 = None
    if init == "random":
        k_init = jax.random.split(fused(jax.random.PRNGKey(jnp.asarray(seed, jnp.uint32))))[0]
        drawn = init_params(M, "random", k_init)
        Y0, Z0 = np.asarray(drawn["Y"]), np.asarray(drawn["Z"])
    dtype = jnp.result_type(float)
    np_dtype = np.dtype(dtype)
    opts = dict(paper_time=paper_time, exact_slaving=exact_slaving, decoder_size=decoder_size, dtype=dtype)
    args = flow_args(classes, eta_Y, eta_Z, query_rows=True, **opts)
    if paper_time and not reduced and optimizer is None:
        args["eta_Z"] = args["eta_Z"] * classes.num_classes
    qt = list(classes.query_tokens)
    Z0 = np.zeros((M, M), np_dtype) if Z0 is None else Z0
    common = dict(t1=float(ts[-1]), ts=ts, args=args, solver="tsit5", rtol=rtol, atol=atol, max_steps=200_000)
    if not reduced:
        Y0 = np.zeros((M, M), np_dtype) if Y0 is None else Y0
    if optimizer is not None:
        vf, observables, y0 = limit.vector_field, _obs_limit, limit.initial_state({"Y": Y0, "Z": Z0[qt]})
        common["args"] = limit_args
    elif reduced:
        vf, observables = reduced_vector_field, _obs_reduced
        y0 = {"Z": Z0[qt], "h": np.zeros((), np_dtype), "B": np.zeros((classes.num_classes,), np_dtype)}
    else:
        vf, observables, y0 = full_vector_field, _obs_full, {"Y": Y0, "Z": Z0[qt]}
    return _full_Z(solve(vf, y0, observables=observables, **common), Z0, qt)
