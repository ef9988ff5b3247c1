"""Word co-occurrence's training loop, Gram flow, optimiser limits and SGD SDE as they were before they ran on
the shared driver, kept verbatim (data dict, initialisation, seeds, optimiser state, observables, the limits'
states and args, the T1 event) as the reference of tests/test_spec_equality.py. The physics they call (the
samplers of `data`, the functions of `observables`, the generated Gram rows, eq. (1)) is the package's own."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from flows import training
from flows._generated import cooccurrence_gram as _gram
from flows._solve import Event, solve
from flows.cooccurrence import observables as obs
from flows.cooccurrence.data import generator, sample_test, training_set
from flows.cooccurrence.network import network_loss
from flows.optim_limits import noise as _noise
from flows.optim_limits.problem import limit_problem as optimizer_limit

# -- the network (flows/cooccurrence/network.py) --------------------------------------------------------------


def init_params(config, key=None, dtype=None):
    rng = generator(config, "init", key)
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    std0, std1 = config.init_stds
    m1, m, d = config.m1, config.m, config.d
    a = np.where(rng.random(m1) < 0.5, 1.0, -1.0)
    params = {
        "W": std1 * rng.standard_normal((m1, m)),
        "W_V": std0 * rng.standard_normal((m, d)),
        "W_K": std0 * rng.standard_normal((m, d)),
        "W_Q": std0 * rng.standard_normal((m, d)),
    }
    return {k: jnp.asarray(v, dtype) for k, v in params.items()}, jnp.asarray(a, dtype)


def data_args(config, num_test=600, dtype=None):
    dtype = jnp.dtype(dtype or jnp.result_type(float))
    train = training_set(config)
    test = sample_test(config, num_test)
    host = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    return {
        "tokens": train.tokens,
        "labels": host(train.labels),
        "group_onehot": train.group_onehot(dtype),
        "test_tokens": test.tokens,
        "test_labels": host(test.labels),
        "sqrt_m": jnp.asarray(math.sqrt(config.m), dtype),
        "m1": jnp.asarray(float(config.m1), dtype),
    }


ARGS_KEYS = ("tokens", "labels", "group_onehot", "test_tokens", "test_labels", "sqrt_m", "m1")
_GROUPS = ("W", "W_V", "W_K", "W_Q")


def _training_program(batch_size, a_template):
    def loss(params, data, idx):
        tokens, labels = data["tokens"], data["labels"]
        if idx is not None:
            tokens, labels = tokens[idx], labels[idx]
        return network_loss(params, data["a"], tokens, labels)

    def sample(data, key, step):
        key, sub = jax.random.split(key)
        return key, jax.random.permutation(sub, data["tokens"].shape[0])[:batch_size]

    def observe(params, data):
        return obs.observe(0.0, obs.gram_state(params, data["a"]), data)

    return training.training_program(loss, observe, a_template, sample=None if batch_size is None else sample)


def train(
    config, optimizer="gd", lr=0.01, steps=1000, batch_size=None, *, momentum=None, num_test=600, batch_seed=None
):
    """`cooccurrence.train` before the port (saved at every step), returning {"ts", "params", observables}."""
    beta = training.check_momentum(optimizer, momentum)
    save = training.save_steps(int(steps), 1)
    args = data_args(config, num_test=num_test)
    params, a = init_params(config)
    labels = {k: k for k in _GROUPS} if isinstance(lr, dict) else None
    heavy = None if momentum is None else beta
    opt_state = training.make_optimizer(optimizer, lr, heavy, labels=labels).init(params)
    key = jax.random.fold_in(config.keys()[1], 1) if batch_seed is None else jax.random.PRNGKey(int(batch_seed))
    data = {**{k: args[k] for k in ARGS_KEYS}, "a": a}
    template = training.make_optimizer(
        optimizer, dict.fromkeys(_GROUPS, 1.0) if labels else 1.0, None if heavy is None else 0.5, labels=labels
    )
    structure = ("reference", optimizer, batch_size, heavy is not None, labels is not None)
    build = functools.partial(_training_program, batch_size, template)
    final, series, *_ = training.run_training(
        "reference.cooccurrence.train", structure, build, params, opt_state, key, save, data
    )
    return {"ts": training.flow_time(training.clock_rate(lr), save, beta), "params": final, **series}


# -- the Gram flow and the optimiser limits (flows/cooccurrence/flow.py) ----------------------------------------


def flow_gradients(state, args):
    tokens, labels = args["tokens"], args["labels"]
    n = tokens.shape[0]
    d = state["G"].shape[0]
    p, Gx, F = obs.outputs(state, tokens, args["sqrt_m"])
    c = jax.nn.sigmoid(-labels * F) * labels / n  # g_i y_i / n
    z = jnp.zeros((d,), p.dtype).at[tokens].add(c[:, None] * jnp.sum(p, axis=2))
    mean_G = jnp.einsum("nh,nhl->nl", Gx, p)  # Gx^T p_l
    r = p * (Gx[:, :, None] - mean_G[:, None, :])
    B = jnp.zeros((d, d), p.dtype).at[tokens[:, :, None], tokens[:, None, :]].add(c[:, None, None] * r)
    return z, B, F


def vector_field(t, state, args):
    z, B, _ = flow_gradients(state, args)
    return _gram.vector_field(t, state, {"z": z, "B": B, "m1": args["m1"], "sqrt_m": args["sqrt_m"]})


def initial_state(config):
    params, a = init_params(config)
    with np.errstate(over="ignore", invalid="ignore"):
        host = obs.gram_state({k: np.asarray(v) for k, v in params.items()}, np.asarray(a))
    return {k: jnp.asarray(v) for k, v in host.items()}


_T1_EVENT = Event(obs.min_margin, direction=True, stop=False, name="T1 (zero training error)")


def limit_loss(params, batch):
    return network_loss(params, batch["a"], batch["tokens"], batch["labels"])


def _grams_of(y, args):
    return obs.gram_state(y["theta"] if "theta" in y else y, args["batch"]["a"])


def _obs_limit(t, y, args):
    return obs.observe(t, _grams_of(y, args), args["batch"])


def _limit_margin(t, y, args):
    return obs.min_margin(t, _grams_of(y, args), args["batch"])


_LIMIT_T1_EVENT = Event(_limit_margin, direction=True, stop=False, name="T1 (zero training error)")


def solve_flow(config, ts, *, num_test=600, optimizer=None, optim_args=None, locate_T1=True, **options):
    """`cooccurrence.solve_flow` before the port: the Gram ODE (`optimizer=None`) or an optimiser's limit on
    the parameters, with the T1 event; {"ts", "t_event", observables}."""
    options = {"solver": "tsit5", "rtol": 1e-8, "atol": 1e-10, "max_steps": 200_000, "save_states": False, **options}
    ts = np.asarray(ts, dtype=float)
    args = data_args(config, num_test=num_test)
    if optimizer is not None:
        params, a = init_params(config)
        limit, args = optimizer_limit(limit_loss, optimizer, optim_args, dict(args, a=a))
        field, y0, observe, event = limit.vector_field, limit.initial_state(params), _obs_limit, _LIMIT_T1_EVENT
    else:
        field, y0, observe, event = vector_field, initial_state(config), obs.observe, _T1_EVENT
    traj = solve(
        field,
        y0,
        t1=float(ts[-1]),
        ts=ts,
        args=args,
        observables=observe,
        event=event if locate_T1 else None,
        **options,
    )
    if locate_T1 and float(traj.observables["min_margin"][0]) > 0:
        traj = dataclasses.replace(traj, t_event=0.0)
    out = {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}
    return out if not locate_T1 else {**out, "t_event": np.asarray(traj.t_event)}


# -- the SGD SDE (flows/cooccurrence/noise.py) ------------------------------------------------------------------


def per_sample_loss(params, sample):
    return network_loss(params, sample["a"], sample["tokens"][None], sample["labels"][None])


def per_sample_data(args, a):
    n = args["tokens"].shape[0]
    return {"tokens": args["tokens"], "labels": args["labels"], "a": jnp.broadcast_to(a, (n,) + a.shape)}


def _observe_sde(t, theta, args):
    return obs.observe(t, obs.gram_state(theta, args["a"]), args["obs"])


def solve_sgd_sde(config, ts, batch_size, lr, num_paths, seed=0, *, num_test=600, max_steps=None) -> Any:
    """`cooccurrence.noise.solve_sgd_sde` before the port (dt = lr / 4): {"ts", observables (paths, ...)}."""
    args = data_args(config, num_test=num_test)
    theta0, a = init_params(config)
    sde = _noise.sgd_sde(per_sample_loss, per_sample_data(args, a), batch_size, lr)
    sde = sde._replace(args={**sde.args, "a": a, "obs": args})
    traj = _noise.solve_sgd_sde(
        sde,
        theta0,
        ts,
        dt=lr / 4,
        seed=seed,
        num_paths=num_paths,
        observables=_observe_sde,
        save_states=False,
        brownian="increments",
        max_steps=max_steps,
    )
    return {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}
