"""A built-in system's spec run by the shared driver gives the numbers of the system's own implementation before
the port, to 1e-12, for the same seeds: `flows.train(S.system(cfg), ...)` against the system's training loop and
`flows.solve_flow(S.system(cfg), ...)` against its limit.

The references are the systems' own loops and limits as they were before they ran on the driver, kept here
verbatim (loss, sampler, seeds, optimiser state, observables) as the independent reference. Parametrised over
`CASES`: a session that ports a system adds its reference and its cases (the Gram and particle flows, which
are other but equivalent forms, to the solvers' tolerance instead)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows import training
from flows._generated import linear_attention_separate as gen_separate
from flows._generated import linear_attention_zfb as gen_zfb
from flows.linear_attention import data as la_data
from flows.linear_attention import flow as la_flow
from flows.linear_attention import model as la_model
from flows.linear_attention import observables as la_obs
from flows.mean_field import data as mf_data
from flows.mean_field import flow as mf_flow
from flows.mean_field import initial as mf_initial
from flows.mean_field import model as mf_model
from flows.mean_field import observables as mf_obs
from flows.mean_field import reference as mf_ref
from flows.optim_limits.problem import limit_problem as optimizer_limit
from flows.scan_snap.model import embedding_to_yz
from tests.cooccurrence import pre_port as co_pre
from tests.scan_snap import pre_port as ss_ref

# -- linear attention before the port ----------------------------------------------------------------------------


def _la_reference_train(config, optimizer, lr, steps, *, batch_size=None, sample_size=None, momentum=None):
    """`flows.linear_attention.train` before it ran on the driver (population, online and fixed-sample modes)."""
    names = ("W_PV", "W_K", "W_Q") if config.form == "separate" else ("W_PV", "W_KQ")
    mode = "population" if sample_size is None and batch_size is None else "online" if sample_size is None else "sample"
    N = config.N

    def loss(params, data, batch):
        if mode == "population":
            lam = data["lam"]
            return la_model.moment_loss(params, lam, lam, jnp.eye(lam.shape[0], dtype=lam.dtype), data["N"])
        prompts = batch if mode == "online" else data["prompts"]
        if mode == "sample" and batch is not None:
            prompts = jax.tree_util.tree_map(lambda a: a[batch], prompts)
        return 0.5 * jnp.mean((la_model.predict(params, None, prompts) - prompts.yq) ** 2)

    def fresh(data, key, step):
        key, sub = jax.random.split(key)
        return key, la_data.draw(sub, batch_size, N, data["root"])

    def minibatch(data, key, step):
        key, sub = jax.random.split(key)
        return key, jax.random.permutation(sub, data["prompts"].yq.shape[0])[:batch_size]

    save = training.save_steps(steps, 1)
    params = la_model.init_params(config)
    labels = {k: k for k in names} if isinstance(lr, dict) else None
    opt_state = training.make_optimizer(optimizer, lr, momentum, labels=labels).init(params)
    template = training.make_optimizer(
        optimizer, dict.fromkeys(names, 1.0) if labels else 1.0, None if momentum is None else 0.5, labels=labels
    )
    data = {**la_obs.data_args(config), "root": la_data.sqrt_covariance(config)}
    key = config.key("data")
    if sample_size is not None:
        data["prompts"] = la_data.sample(config, key, sample_size)
        key = jax.random.fold_in(key, 1)
    sampler = None if batch_size is None else fresh if mode == "online" else minibatch
    structure = (optimizer, mode, batch_size, N, momentum is not None, labels is not None)
    final, series, *_ = training.run_training(
        "reference.linear_attention.train",
        structure,
        lambda: training.training_program(loss, lambda p, d: la_obs.observe(0.0, p, d), template, sample=sampler),
        params,
        opt_state,
        key,
        save,
        data,
    )
    return {"ts": training.flow_time(training.clock_rate(lr), save, momentum), "params": final, **series}


def _la_observe_limit(t, y, args):
    return la_obs.observe(t, y["theta"] if "theta" in y else y, args["batch"])


def _la_reference_flow(config, ts, *, optimizer=None, optim_args=None, reduced=None):
    """`flows.linear_attention.solve_flow` before it ran on the driver: the full flow by autodiff of the exact
    population loss and the optimiser limits on it, or the generated reduced flows with the observables of
    the full parameters at the reduced state."""
    options = dict(solver="tsit5", rtol=1e-10, atol=1e-12, max_steps=200_000, save_states=False)
    if reduced is None:
        limit, args = optimizer_limit(
            lambda p, b: la_obs.loss(0.0, p, b), optimizer or "gd", optim_args, la_obs.data_args(config)
        )
        field, state0, observe = (
            limit.vector_field,
            limit.initial_state(la_model.init_params(config)),
            _la_observe_limit,
        )
    else:
        lam = np.asarray(config.eigenvalues)
        cov = la_data.covariance(config)
        if reduced == "zfb":
            field, args = (
                gen_zfb.vector_field,
                # the generated module's args since it runs at any d: the (symmetrised) covariance and N
                {"Lambda": 0.5 * (cov + cov.T), "N": jnp.asarray(float(config.N), cov.dtype)},
            )
        else:
            field, args = gen_separate.vector_field, {"lam": lam, "N": float(config.N), "trace": float(lam.sum())}
        state0 = la_flow.initial_reduced_state(config, reduced)
        data = la_obs.data_args(config)

        def observe(t, y, a):
            return la_obs.observe(t, la_flow.reduced_params(config, reduced, y), data)

    traj = flows.solve(field, state0, t1=float(ts[-1]), ts=ts, args=args, observables=observe, **options)
    return {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}


# -- the mean field before the port ------------------------------------------------------------------------------

_MF_LABELS = {"V": "attention", "W": "attention", "W1": "mlp", "W2": "mlp"}


def _mf_args(config):
    particles = mf_model.check_particles(config, mf_initial.init_particles(config))
    data = mf_model.check_data(config, mf_data.training_set(config))
    test = mf_model.check_data(config, mf_data.held_out_set(config), "test")
    return particles, mf_obs.make_args(config, data, test)


def _mf_scale(config):
    return {"attention": config.M * config.L, "mlp": config.M_mlp * config.L}


def _mf_reference_train(config, lr, steps, *, momentum=0.0, observables="all"):
    """`flows.mean_field.train` before it ran on the driver: full-batch GD or heavy ball with optax at lr M L
    (attention) and lr M_mlp L (MLP) on the flat particle dict, recording `observables.summary` or Q and R."""
    basic, heavy = observables == "basic", momentum != 0.0

    def loss(particles, args, batch):
        return mf_model.objective_value(
            particles, args["Z0"], args["y"], args["lam"], args["threshold"], args["d"], True
        )

    def observe(particles, args):
        if basic:
            return {k: f(0.0, particles, args) for k, f in mf_obs.BASIC_OBSERVABLES.items()}
        return mf_obs.summary(0.0, particles, args)

    save = training.save_steps(steps, 1)
    particles, args = _mf_args(config)
    optimizer = training.make_optimizer(
        "sgd", lr, momentum if heavy else None, labels=_MF_LABELS, scale=_mf_scale(config)
    )
    dtype = particles["V"].dtype
    opt_state = jax.tree_util.tree_map(
        lambda x: jnp.asarray(x, dtype) if jnp.issubdtype(jnp.result_type(x), jnp.floating) else x,
        optimizer.init(particles),
    )
    template = training.make_optimizer("sgd", 1.0, 0.5 if heavy else None, labels=_MF_LABELS)
    final, series, *_ = training.run_training(
        "reference.mean_field.train",
        (observables, heavy),
        lambda: training.training_program(loss, observe, template),
        particles,
        opt_state,
        None,
        save,
        args,
    )
    return {"ts": training.flow_time(training.clock_rate(lr), save, momentum), "params": final, **series}


def _mf_limit_loss(particles, batch):
    return mf_model.objective_value(
        particles, batch["Z0"], batch["y"], batch["lam"], batch["threshold"], batch["d"], True
    )


def _mf_on_limit(observable):
    return lambda t, y, args: observable(t, y["theta"] if "theta" in y else y, args["batch"])


def _mf_reference_flow(config, ts, *, optimizer=None, optim_args=None, **options):
    """`flows.mean_field.solve_flow` before it ran on the driver (Q and R saved): the particle flow, or the
    optimiser limits on the flat particle dict with the clocks M L, M_mlp L. One change from the pre-port
    code, the port's fix: the sign and Adam limits run on those clocks too (they ran at unit rate, the limit
    of optax at lr, not of the network trained at lr M L: tests/mean_field/test_optim.py)."""
    particles, args = _mf_args(config)
    options = {"solver": "tsit5", "rtol": 1e-7, "atol": 1e-9, "max_steps": 100_000, "save_states": False, **options}
    field, y0, observe = mf_flow.field_for(options["solver"]), particles, mf_obs.BASIC_OBSERVABLES
    if optimizer is not None:
        scales = {k: float(_mf_scale(config)[g]) for k, g in _MF_LABELS.items()}
        limit, args = optimizer_limit(_mf_limit_loss, optimizer, optim_args, args, rates=scales, sign_eps=1e-6)
        field, y0 = limit.vector_field, limit.initial_state(particles)
        observe = {name: _mf_on_limit(f) for name, f in mf_obs.BASIC_OBSERVABLES.items()}
    traj = flows.solve(field, y0, t1=float(ts[-1]), ts=ts, args=args, observables=observe, **options)
    return {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}


def _mf_reference_depth(config, ts, K=5):
    """`flows.mean_field.reference.solve_reference` before it ran on the driver (Q and R, Tsit5 in depth)."""
    nodes = mf_ref.check_nodes(config, mf_ref.init_reference(config, K))
    data = mf_model.check_data(config, mf_data.training_set(config))
    test = mf_model.check_data(config, mf_data.held_out_set(config), "test")
    args = mf_ref.make_reference_args(config, data, test, 4)
    field, _, basic = mf_ref._bundle("tsit5")
    traj = flows.solve(
        field, nodes, t1=float(ts[-1]), ts=ts, args=args, observables=basic, rtol=1e-7, atol=1e-9, save_states=False
    )
    return {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}


# -- the cases ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One comparison: `reference()` and `spec()` return {"ts", observables..., optionally "params"}."""

    reference: Callable
    spec: Callable
    rtol: float = 1e-12
    atol: float = 1e-14
    #: observable -> (rtol, atol) where it differs from the case's (an equivalent form of the limit)
    tolerance: dict = dataclasses.field(default_factory=dict)


def _record(rec):
    return {"ts": rec.ts, "params": rec.params, **rec.observables}


def _traj(traj):
    return {"ts": np.asarray(traj.ts), **{k: np.asarray(v) for k, v in traj.observables.items()}}


_LA = la_data.Config(d=2, N=4, eigenvalues=(1.0, 0.4), init_scale=0.3, seed=5)
_LA_SEP = _LA.replace(form="separate", heads=2, init="random")
_LA_ZFB = la_data.Config(init_scale=0.2, seed=3)  # d = 4, the size of the generated (u, U) flow
_LA_BAL = la_data.Config(d=2, N=4, eigenvalues=(1.0, 0.4), form="separate", heads=2, rank=1, init_scale=0.3)


def _la_train(config, optimizer, lr, *, batch_size=None, sample_size=None, momentum=None):
    la = flows.linear_attention
    name, optim_args = ("momentum", {"beta": momentum}) if momentum is not None else (optimizer, None)
    return Case(
        lambda: _la_reference_train(
            config, optimizer, lr, 5, batch_size=batch_size, sample_size=sample_size, momentum=momentum
        ),
        lambda: _record(
            flows.train(
                la.system(config, sample_size=sample_size),
                name,
                lr,
                5,
                save_every=1,
                batch_size=batch_size,
                optim_args=optim_args,
            )
        ),
    )


def _la_flow(config, optimizer=None, optim_args=None, reduced=None):
    la = flows.linear_attention
    ts = np.array([0.0, 0.1, 0.4, 1.0])
    return Case(
        lambda: _la_reference_flow(config, ts, optimizer=optimizer, optim_args=optim_args, reduced=reduced),
        lambda: _traj(flows.solve_flow(la.system(config), ts, optimizer or "gd", optim_args, reduced=reduced)),
    )


# -- co-occurrence (the pre-port code: tests/cooccurrence/pre_port.py) -------------------------------------------

_CO = flows.cooccurrence.Config(n=6, L=3, d=3 + flows.cooccurrence.num_random_slots(6, 3), m=4, m1=2, seed=3)
_CO_TS = np.array([0.0, 0.1, 0.4, 1.0])
# The generic gradient flow of the parameters against the Gram flow: one flow in two coordinates, both solved at
# rtol 1e-10, atol 1e-12 (measured differences <= 1.5e-10 absolute, R; the rest <= 2.5e-11). The tolerance covers
# ten times the solvers' error; the discrete train_error is equal, and R = (sums of g) / (g_1 - g_2) is the one
# observable whose denominator is small (it is held absolutely).
_CO_TIGHT = {"rtol": 1e-10, "atol": 1e-12}
_CO_GRAM_TOL = {"R": (1e-8, 1e-9)}


def _co_train(optimizer, lr, *, batch_size=None, momentum=None, batch_seed=None):
    co = flows.cooccurrence
    name, optim_args = ("momentum", {"beta": momentum}) if momentum is not None else (optimizer, None)
    return Case(
        lambda: co_pre.train(_CO, optimizer, lr, 5, batch_size, momentum=momentum, num_test=4, batch_seed=batch_seed),
        lambda: _record(
            flows.train(
                co.system(_CO, num_test=4, batch_seed=batch_seed),
                name,
                lr,
                5,
                save_every=1,
                batch_size=batch_size,
                optim_args=optim_args,
            )
        ),
    )


def _co_flow(optimizer, optim_args=None):
    co = flows.cooccurrence
    return Case(
        lambda: co_pre.solve_flow(_CO, _CO_TS, num_test=4, optimizer=optimizer, optim_args=optim_args, locate_T1=False),
        lambda: _traj(flows.solve_flow(co.system(_CO, num_test=4), _CO_TS, optimizer, optim_args)),
    )


def _co_gram(generic):
    """The Gram flow before the port against the named limit "gram" on the driver (the same form: 1e-12), or
    against the generic gradient flow of the parameters (`generic`: an equivalent form, to the solvers'
    tolerance, observable by observable)."""
    co = flows.cooccurrence
    options = _CO_TIGHT if generic else {}
    return Case(
        lambda: co_pre.solve_flow(_CO, _CO_TS, num_test=4, locate_T1=False, **options),
        lambda: _traj(
            flows.solve_flow(co.system(_CO, num_test=4), _CO_TS, reduced=None if generic else "gram", **options)
        ),
        **({"rtol": 1e-8, "atol": 1e-10, "tolerance": _CO_GRAM_TOL} if generic else {}),
    )


def _co_sde():
    """The SGD SDE before the port against `flows.solve_flow(noise=True)` with the Brownian key of the pre-port
    seed (the per-sample gradients sum in another order: round-off)."""
    co = flows.cooccurrence
    ts = np.array([0.0, 0.1, 0.2])
    return Case(
        lambda: co_pre.solve_sgd_sde(_CO, ts, 2, 0.05, 3, seed=4, num_test=4),
        lambda: _traj(
            flows.solve_flow(
                co.system(_CO, num_test=4),
                ts,
                "sgd",
                {"lr": 0.05},
                noise=True,
                batch_size=2,
                key=jax.random.key(4),
                dt=0.05 / 4,
                num_paths=3,
                brownian="increments",
            )
        ),
    )


#: system -> case id -> (Case factory, slow): the default run covers each system's training and flow.
CASES: dict[str, dict[str, tuple[Callable[[], Case], bool]]] = {
    "linear_attention": {
        "train-population-gd": (lambda: _la_train(_LA, "gd", 0.05), False),
        "train-population-adam": (lambda: _la_train(_LA_SEP, "adam", 0.02), True),
        "train-population-momentum-groups": (
            lambda: _la_train(_LA, "sgd", {"W_PV": 0.05, "W_KQ": 0.02}, momentum=0.5),
            False,
        ),
        "train-online-sgd": (lambda: _la_train(_LA, "sgd", 0.05, batch_size=8), True),
        "train-online-momentum": (lambda: _la_train(_LA, "sgd", 0.05, batch_size=8, momentum=0.3), True),
        "train-online-adam": (lambda: _la_train(_LA_SEP, "adam", 0.02, batch_size=8), True),
        "train-sample-gd": (lambda: _la_train(_LA, "gd", 0.05, sample_size=16), True),
        "train-sample-sgd": (lambda: _la_train(_LA, "sgd", 0.05, batch_size=4, sample_size=16), True),
        "train-sample-adam": (lambda: _la_train(_LA_SEP, "adam", 0.02, batch_size=4, sample_size=16), True),
        "train-sample-momentum": (
            lambda: _la_train(_LA, "sgd", 0.05, batch_size=4, sample_size=16, momentum=0.5),
            True,
        ),
        "flow-gd": (lambda: _la_flow(_LA), True),
        "flow-momentum": (lambda: _la_flow(_LA, "momentum", {"lr": 0.05, "beta": 0.5}), True),
        "flow-sign": (lambda: _la_flow(_LA, "sign", {"eps": 1e-2}), True),
        "flow-adam": (lambda: _la_flow(_LA_SEP, "adam", {"c1": 2.0, "c2": 1.0}), True),
        "flow-zfb": (lambda: _la_flow(_LA_ZFB, reduced="zfb"), True),
        "flow-separate": (lambda: _la_flow(_LA_BAL, reduced="separate"), True),
    },
    "cooccurrence": {
        "train-gd": (lambda: _co_train("gd", 0.05), True),
        "train-sgd": (lambda: _co_train("sgd", 0.05, batch_size=2), False),
        "train-sgd-batch-seed": (lambda: _co_train("sgd", 0.05, batch_size=2, batch_seed=7), True),
        "train-momentum-groups": (
            lambda: _co_train("sgd", {"W": 0.05, "W_V": 0.02, "W_K": 0.05, "W_Q": 0.01}, batch_size=2, momentum=0.5),
            True,
        ),
        "train-adam": (lambda: _co_train("adam", 0.02), True),
        "flow-gram": (lambda: _co_gram(False), True),
        "flow-generic-gd-is-the-gram-flow": (lambda: _co_gram(True), True),
        "flow-momentum": (lambda: _co_flow("momentum", {"lr": 0.05, "beta": 0.5}), True),
        "flow-sign": (lambda: _co_flow("sign", {"eps": 1e-2}), True),
        "flow-adam": (lambda: _co_flow("adam", {"c1": 2.0, "c2": 1.0}), True),
        "sgd-sde": (lambda: _co_sde(), True),
    },
}


# -- Scan and Snap (the pre-port code: tests/scan_snap/pre_port.py) -------------------------------------------------

_SS = flows.scan_snap.syn_small()
_SS_ROWS = list(_SS.query_tokens)


def _ss_record(rec, rows=True):
    """The reference record as the spec's: the final parameters, Z as its query rows."""
    params = {"Y": rec.Y[-1], "Z": rec.Z[-1][_SS_ROWS] if rows else rec.Z[-1]}
    return {"ts": rec.ts, "params": params, **rec.observables}


def _ss_train(optimizer, *, momentum=0.0, form="counts", init="random", seed=3):
    ss = flows.scan_snap
    name, optim_args = ("momentum", {"beta": momentum}) if momentum else (optimizer, None)
    return Case(
        lambda: _ss_record(ss_ref.train(_SS, optimizer, 1.0, 0.5, 16, 4, 5, momentum, init, seed, form=form)),
        lambda: _record(
            flows.train(
                ss.system(_SS, 1.0, 0.5, 16, init=init, seed=seed, form=form),
                name,
                1.0,
                5,
                save_every=1,
                batch_size=4,
                optim_args=optim_args,
            )
        ),
    )


def _ss_embedding(optimizer, eta_U, momentum=0.0):
    ss = flows.scan_snap
    name, optim_args = ("momentum", {"beta": momentum}) if momentum else (optimizer, None)
    system = ss.system(_SS, 1.0, 0.5, 16, seed=3, form="embedding", d=6, eta_U=eta_U, init_scale=2.0)

    def spec():
        rec = flows.train(system, name, 1.0, 5, save_every=1, batch_size=4, optim_args=optim_args)
        U = rec.params["U"] if "U" in rec.params else system.dataset(system.keys()["data"])["U"]
        return {"ts": rec.ts, "params": embedding_to_yz({**rec.params, "U": U}), **rec.observables}

    def reference():
        rec = ss_ref.train_embedding(_SS, optimizer, 1.0, 0.5, 16, 4, 5, 6, momentum, 3, eta_U=eta_U, init_scale=2.0)
        return _ss_record(rec, rows=False)

    return Case(reference, spec)


def _ss_flow(reduced=None, optimizer=None, optim_args=None, init="zero", **conventions):
    ss = flows.scan_snap
    ts = np.array([0.0, 0.5, 2.0])
    name = {None: "population", True: "reduced"}[reduced] if optimizer is None else None
    spec_args = dict(optim_args or {})
    if optimizer == "momentum" or (optimizer == "adam" and "c1" not in spec_args):
        spec_args["lr"] = 1.0  # the clock is the step: the groups run at eta_Y, eta_Z
    system = ss.system(_SS, 1.0, 0.5, init=init, seed=4, **conventions)
    return Case(
        lambda: _traj(
            ss_ref.solve_flow(
                _SS,
                1.0,
                0.5,
                ts,
                bool(reduced),
                init=init,
                seed=4,
                optimizer=optimizer,
                optim_args=optim_args,
                **conventions,
            )
        ),
        lambda: _traj(flows.solve_flow(system, ts, optimizer or "gd", spec_args or None, reduced=name)),
    )


CASES["scan_snap"] = {
    "train-counts-sgd": (lambda: _ss_train("sgd"), False),
    "train-tokens-momentum": (lambda: _ss_train("sgd", momentum=0.5, form="tokens", init="zero"), True),
    "train-counts-adam": (lambda: _ss_train("adam", seed=1), True),
    "train-embedding-momentum": (lambda: _ss_embedding("sgd", 0.2, momentum=0.5), True),
    "train-embedding-frozen-U-adam": (lambda: _ss_embedding("adam", 0.0), True),
    "flow-population": (lambda: _ss_flow(init="random"), True),
    "flow-population-paper-time": (lambda: _ss_flow(paper_time=True), True),
    "flow-reduced": (lambda: _ss_flow(reduced=True), True),
    "flow-reduced-exact-slaving": (lambda: _ss_flow(reduced=True, exact_slaving=True, decoder_size=40.0), True),
    "flow-gd": (lambda: _ss_flow(optimizer="gd"), True),
    "flow-momentum": (lambda: _ss_flow(optimizer="momentum", optim_args={"beta": 0.5}), True),
    "flow-sign": (lambda: _ss_flow(optimizer="sign"), True),
    "flow-adam": (lambda: _ss_flow(optimizer="adam", init="random"), True),
}


_MF = mf_data.Config(d=2, D=3, N=4, L=2, M=4, M_mlp=6, lam=0.05, n_train=16, n_test=8, init_scale=2.0, seed=1)
_MF_TS = np.array([0.0, 0.1, 0.4, 1.0])


def _mf_train(optimizer, lr, momentum=0.0, observables="basic"):
    mf = flows.mean_field
    optim_args = {"beta": momentum} if momentum else None
    return Case(
        lambda: _mf_reference_train(_MF, lr, 5, momentum=momentum, observables=observables),
        lambda: _record(
            flows.train(mf.system(_MF, observables), optimizer, lr, 5, save_every=1, optim_args=optim_args)
        ),
    )


def _mf_flow(optimizer=None, optim_args=None, reduced=None, tolerance=(1e-12, 1e-14), ts=_MF_TS, **options):
    """The spec's limit against the pre-port solve: `reduced="particles"` and the optimiser limits are the same
    forms (1e-12); the driver's generic "gd" against the pre-port particle flow is the same vector field on
    another layout of the state (nested groups), equal to the solvers' tolerance."""
    mf = flows.mean_field
    spec_optimizer = optimizer or "gd"
    reference_optimizer = None if optimizer == "gd" else optimizer
    return Case(
        lambda: _mf_reference_flow(_MF, ts, optimizer=reference_optimizer, optim_args=optim_args, **options),
        lambda: _traj(
            flows.solve_flow(mf.system(_MF, "basic"), ts, spec_optimizer, optim_args, reduced=reduced, **options)
        ),
        *tolerance,
    )


def _mf_depth():
    mf = flows.mean_field
    config = _MF.replace(init="smooth")
    limit = mf_ref.reference_limit(config, 5, observables="basic")
    return Case(
        lambda: _mf_reference_depth(config, _MF_TS),
        lambda: _traj(
            flows.solve_flow(mf.system(config).replace(reduced={"reference": limit}), _MF_TS, reduced="reference")
        ),
    )


CASES["mean_field"] = {
    "train-gd-all": (lambda: _mf_train("gd", 0.1, observables="all"), False),
    "train-momentum-groups": (lambda: _mf_train("momentum", {"attention": 0.05, "mlp": 0.02}, momentum=0.5), True),
    "flow-particles": (lambda: _mf_flow(reduced="particles"), False),
    "flow-gd": (lambda: _mf_flow("gd", tolerance=(1e-9, 1e-11), rtol=1e-11, atol=1e-13), True),
    "flow-momentum": (lambda: _mf_flow("momentum", {"lr": 0.05, "beta": 0.5}), True),
    "flow-sign": (lambda: _mf_flow("sign", {"eps": 1e-2}), True),
    "flow-adam": (lambda: _mf_flow("adam", {"c1": 2.0, "c2": 1.0}, ts=_MF_TS / 10), True),
    "flow-reference": (_mf_depth, True),
}


def _params():
    for system, cases in CASES.items():
        for name, (factory, slow) in cases.items():
            yield pytest.param(factory, id=f"{system}-{name}", marks=pytest.mark.slow if slow else ())


@pytest.mark.parametrize("factory", _params())
def test_the_spec_on_the_driver_gives_the_reference_numbers(factory):
    case = factory()
    ref, got = case.reference(), case.spec()
    assert set(ref) == set(got), (sorted(ref), sorted(got))
    np.testing.assert_array_equal(got["ts"], ref["ts"])
    for key in sorted(set(ref) - {"ts"}):
        rtol, atol = case.tolerance.get(key, (case.rtol, case.atol))
        for a, b in zip(jax.tree_util.tree_leaves(got[key]), jax.tree_util.tree_leaves(ref[key]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=key)
