"""The spec (`flows.System`, `flows.Reduced`) and the one driver (`flows.train`, `flows.solve_flow`) on a theory
written outside the package: validation that names the field, training against a literal optax loop (the
streams of the seed, the minibatch keys, the rate scale), the gradient flow of a quadratic loss against its
closed form, the optimiser limits and the SDEs against `flows.optim_limits` called directly, and a reduced limit
against the full flow on its invariant set."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

import flows
from flows import optim_limits as ol
from flows.system import default_streams, take_rows

N_ROWS, DIM = 12, 3


def _data(key):
    kx, kw = jax.random.split(key)
    x = jax.random.normal(kx, (N_ROWS, DIM))
    return {"x": x, "y": x @ jax.random.normal(kw, (DIM,)) + 0.1}


def _init(key):
    k1, k2 = jax.random.split(key)
    return {"w": 0.3 * jax.random.normal(k1, (DIM,)), "b": 0.3 * jax.random.normal(k2, ())}


def _loss(params, batch):
    return 0.5 * jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def _observe(params, data):
    return {"loss": _loss(params, data), "w": params["w"]}


LINEAR = flows.System(name="linear", init=_init, loss=_loss, data=_data, observe=_observe, seed=4)


def _literal(optimizer, steps, *, system=LINEAR, seed=4, batch_size=None, lr_of=None, schedule="chain"):
    """The parameters after each step of a plain Python loop over `optimizer.update`."""
    keys = default_streams(seed)
    params, data = _init(keys["init"]), _data(keys["data"])
    state = optimizer.init(params)
    key, per_step = keys["batch"], jax.random.split(keys["batch"], steps)
    out = [params]
    for i in range(steps):
        batch = data
        if batch_size is not None:
            if schedule == "chain":
                key, sub = jax.random.split(key)
            else:
                sub = per_step[i]
            idx = jax.random.permutation(sub, N_ROWS)[:batch_size]
            batch = {k: v[idx] for k, v in data.items()}
        grads = jax.grad(system.loss)(params, batch)
        with jax.numpy_dtype_promotion("standard"):
            updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        out.append(params)
    return out


def _close(record, params_path, rtol=1e-12):
    for k in ("w",):
        want = np.stack([np.asarray(p[k]) for p in params_path])[record.steps]
        np.testing.assert_allclose(record[k], want, rtol=rtol, atol=1e-14, err_msg=k)


# -- the spec ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(init=3), "System.init"),
        (dict(loss="mse"), "System.loss"),
        (dict(data=None), "System.data"),
        (dict(observe=1), "System.observe"),
        (dict(sample=[]), "System.sample"),
        (dict(rate_scale={"w": -1.0}), "rate_scale"),
        (dict(rate_scale={"w": float("nan")}), "rate_scale"),
        (dict(name="two words"), "System.name"),
        (dict(reduced={"r": lambda t, y, a: y}), "System.reduced"),
        (dict(seed=-1), "System.seed"),
        (dict(key_schedule="random"), "System.key_schedule"),
        (dict(sign_eps=0.0), "System.sign_eps"),
        (dict(solver=[1]), "System.solver"),
        (dict(rows=()), "System.rows"),
        (dict(data={"x": np.ones((3, 1))}, rows=("z",)), "System.rows"),
        (dict(predictions="yes"), "System.predictions"),
        (dict(finite=True), "System.finite"),
    ],
)
def test_a_bad_spec_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        LINEAR.replace(**changes)


def test_what_the_driver_builds_is_checked_where_it_is_built():
    bad_init = LINEAR.replace(init=lambda key: [jnp.ones(2)])
    with pytest.raises(ValueError, match="System.init"):
        flows.train(bad_init, steps=2)
    with pytest.raises(ValueError, match="System.rate_scale"):
        flows.train(LINEAR.replace(rate_scale={"v": 2.0}), steps=2)
    with pytest.raises(ValueError, match="System.streams"):
        flows.train(LINEAR.replace(streams=lambda seed: {"init": None}), steps=2)
    with pytest.raises(ValueError, match="system"):
        flows.train(_loss, steps=2)
    with pytest.raises(ValueError, match="Reduced.initial"):
        flows.Reduced(vector_field=lambda t, y, a: y, initial=None)
    ragged = flows.System(init=_init, loss=_loss, data={"x": jnp.ones((4, 3)), "y": jnp.ones(5)})
    with pytest.raises(ValueError, match="leading sample axis"):
        flows.train(ragged, "sgd", steps=2, batch_size=2)


def test_take_rows_draws_rows_without_replacement_and_keeps_the_rest():
    data = {"x": jnp.arange(10.0)[:, None] * jnp.ones((1, 2)), "y": jnp.arange(10.0), "c": jnp.ones((3, 3))}
    key = jax.random.PRNGKey(1)
    batch = take_rows(key, data, 4, ("x", "y"))
    idx = np.asarray(jax.random.permutation(key, 10)[:4])
    np.testing.assert_array_equal(batch["y"], idx)
    np.testing.assert_array_equal(batch["x"][:, 1], idx)
    assert batch["c"] is data["c"] and len(set(idx.tolist())) == 4


# -- train -------------------------------------------------------------------------------------------------------


def test_gd_and_adam_are_the_literal_optax_loops_from_the_seeds_streams():
    rec = flows.train(LINEAR, "gd", 0.1, 6, save_every=2)
    _close(rec, _literal(optax.sgd(0.1), 6))
    np.testing.assert_allclose(rec.ts, 0.1 * np.array([0, 2, 4, 6]), rtol=1e-15)
    adam = flows.train(LINEAR, "adam", 0.05, 5, save_every=1, optim_args={"b1": 0.8, "b2": 0.99, "eps": 1e-6})
    _close(adam, _literal(optax.adam(0.05, b1=0.8, b2=0.99, eps=1e-6), 5))
    other = flows.train(LINEAR, "gd", 0.1, 6, save_every=2, seed=5)
    _close(other, _literal(optax.sgd(0.1), 6, seed=5))


def test_minibatches_follow_the_key_schedule():
    """ "chain": key, sub = split(key) every step; "split": the i-th of split(key, steps); rows drawn by
    permutation(sub, n)[:B] (the default sampler), the heavy ball at its beta on the clock lr step / (1 - beta)."""
    rec = flows.train(LINEAR, "momentum", 0.1, 6, save_every=1, batch_size=4, optim_args={"beta": 0.5})
    _close(rec, _literal(optax.sgd(0.1, momentum=0.5), 6, batch_size=4))
    np.testing.assert_allclose(rec.ts, 0.1 * np.arange(7) / 0.5, rtol=1e-15)
    split = flows.train(LINEAR.replace(key_schedule="split"), "sgd", 0.1, 6, save_every=1, batch_size=4)
    _close(split, _literal(optax.sgd(0.1), 6, batch_size=4, schedule="split"))
    assert np.max(np.abs(split["w"] - flows.train(LINEAR, "sgd", 0.1, 6, save_every=1, batch_size=4)["w"])) > 1e-6


def test_rate_scale_trains_each_group_at_its_scaled_rate_on_the_common_clock():
    scaled = LINEAR.replace(rate_scale={"b": 3.0})
    rec = flows.train(scaled, "gd", 0.05, 5, save_every=1)
    loop = optax.multi_transform({"w": optax.sgd(0.05), "b": optax.sgd(0.15)}, {"w": "w", "b": "b"})
    _close(rec, _literal(loop, 5))
    np.testing.assert_allclose(rec.ts, 0.05 * np.arange(6), rtol=1e-15)


# -- the limits --------------------------------------------------------------------------------------------------


def _quadratic(system, seed=4):
    """The gradient flow of the least-squares loss in closed form: theta = (w, b), d theta/dt = -S (A theta - c),
    theta(t) = theta* + expm(-S A t)(theta0 - theta*), S the groups' clocks."""
    keys = default_streams(seed)
    p0, data = _init(keys["init"]), _data(keys["data"])
    X = np.concatenate([np.asarray(data["x"]), np.ones((N_ROWS, 1))], axis=1)
    A, c = X.T @ X / N_ROWS, X.T @ np.asarray(data["y"]) / N_ROWS
    S = np.diag([1.0] * DIM + [(system.rate_scale or {}).get("b", 1.0)])
    theta0, star = np.append(np.asarray(p0["w"]), float(p0["b"])), np.linalg.solve(A, c)
    return lambda t: star + scipy.linalg.expm(-S @ A * t) @ (theta0 - star)


@pytest.mark.parametrize("scale", [None, {"b": 3.0}], ids=["one-clock", "rate-scale"])
def test_the_gradient_flow_is_the_closed_form(scale):
    system = LINEAR.replace(rate_scale=scale)
    ts = np.array([0.0, 0.3, 1.0, 2.5])
    traj = flows.solve_flow(system, ts, rtol=1e-11, atol=1e-13)
    exact = _quadratic(system)
    np.testing.assert_allclose(np.asarray(traj.observables["w"]), [exact(t)[:DIM] for t in ts], rtol=1e-8, atol=1e-10)
    assert traj.ok and set(traj.observables) == {"loss", "w"}


@pytest.mark.parametrize(
    "optimizer, optim_args",
    [
        pytest.param("momentum", {"lr": 0.1, "beta": 0.5}, marks=pytest.mark.slow),
        pytest.param("sign", None, marks=pytest.mark.slow),
        ("adam", {"c1": 2.0, "c2": 1.0}),
    ],
)
def test_the_optimiser_limits_are_flows_optim_limits_on_the_spec(optimizer, optim_args):
    ts = np.array([0.0, 0.2, 0.5])
    traj = flows.solve_flow(LINEAR, ts, optimizer, optim_args)
    keys = default_streams(4)
    data = _data(keys["data"])
    limit, args = ol.limit_problem(_loss, optimizer, optim_args, data, sign_eps=LINEAR.sign_eps)
    ref = ol.solve_limit(
        limit, _init(keys["init"]), args, ts, observables=lambda t, y, a: _observe(limit.params(y), data)
    )
    for k in ("loss", "w"):
        np.testing.assert_allclose(traj.observables[k], ref.observables[k], rtol=1e-12, atol=1e-14, err_msg=k)
    assert float(traj.observables["loss"][-1]) < float(traj.observables["loss"][0])


def test_the_sgd_sde_is_flows_optim_limits_sgd_sde_on_the_rows():
    ts = np.array([0.0, 0.1, 0.2])
    traj = flows.solve_flow(LINEAR, ts, "gd", {"lr": 0.05}, noise=True, batch_size=4, num_paths=2)
    keys = default_streams(4)
    data = _data(keys["data"])

    def one(params, row):
        return _loss(params, jax.tree_util.tree_map(lambda a: a[None], row))

    sde = ol.sgd_sde(one, data, 4, 0.05)
    ref = ol.solve_sgd_sde(
        sde,
        _init(keys["init"]),
        ts,
        dt=0.005,
        key=keys["noise"],
        num_paths=2,
        save_states=False,
        brownian="tree",
        observables=lambda t, p, a: _observe(p, a["data"]),
    )
    np.testing.assert_allclose(traj.observables["w"], ref.observables["w"], rtol=1e-12, atol=1e-14)
    spread = np.abs(np.asarray(traj.observables["w"])[0, -1] - np.asarray(traj.observables["w"])[1, -1])
    assert spread.max() > 1e-6  # two paths, two noises


@pytest.mark.slow  # the SDE's wiring: test_the_sgd_sde_is_flows_optim_limits_sgd_sde_on_the_rows
def test_the_sgd_sde_without_noise_is_the_gradient_flow():
    """B = n without replacement: c = (n - B) / (n - 1) = 0, the SDE is Euler's scheme of the gradient flow
    (first order in dt against the closed form)."""
    ts = np.array([0.0, 0.5, 1.0])
    exact = _quadratic(LINEAR)
    errs = []
    for dt in (0.01, 0.005):
        traj = flows.solve_flow(LINEAR, ts, "gd", {"lr": 0.1}, noise=True, batch_size=N_ROWS, dt=dt)
        errs.append(np.max(np.abs(np.asarray(traj.observables["w"]) - [exact(t)[:DIM] for t in ts])))
    assert errs[0] < 1e-2 and 1.7 < errs[0] / errs[1] < 2.3


@pytest.mark.slow  # the SDE's wiring: test_the_sgd_sde_is_flows_optim_limits_sgd_sde_on_the_rows
def test_the_adam_sde_is_flows_optim_limits_adam_sde():
    ts = np.array([0.0, 0.1])
    given = {"c1": 2.0, "c2": 1.0, "sigma0": 0.3, "eps0": 1e-3}
    traj = flows.solve_flow(LINEAR, ts, "adam", given, noise=True, dt=0.01)
    keys = default_streams(4)
    data = _data(keys["data"])
    sde = ol.adam_sde(lambda p, row: _loss(p, jax.tree_util.tree_map(lambda a: a[None], row)), data, **given)
    ref = flows.solve_sde(
        sde.drift,
        sde.initial_state(_init(keys["init"])),
        diffusion=sde.diffusion,
        noise_shape=sde.noise_shape,
        args=sde.args,
        t1=0.1,
        ts=ts,
        dt=0.01,
        key=keys["noise"],
        save_states=False,
        observables=lambda t, y, a: _observe(sde.params(y), a["data"]),
    )
    np.testing.assert_allclose(traj.observables["w"], ref.observables["w"], rtol=1e-12, atol=1e-14)


def test_rows_keep_the_other_data_whole_in_training_and_in_the_noise():
    def data(key):
        return {**_data(key), "shift": jnp.asarray(0.5)}

    def loss(params, batch):
        return 0.5 * jnp.mean((batch["x"] @ params["w"] + params["b"] + batch["shift"] - batch["y"]) ** 2)

    system = LINEAR.replace(data=data, loss=loss, observe=None, rows=("x", "y"))
    rec = flows.train(system, "sgd", 0.1, 3, save_every=1, batch_size=4)
    shifted = _literal(
        optax.sgd(0.1), 3, batch_size=4, system=system.replace(loss=lambda p, b: loss(p, {**b, "shift": 0.5}))
    )
    keys = default_streams(4)
    full = {**_data(keys["data"]), "shift": jnp.asarray(0.5)}
    np.testing.assert_allclose(rec["loss"], [loss(p, full) for p in shifted], rtol=1e-12)
    traj = flows.solve_flow(system, np.array([0.0, 0.05]), "gd", {"lr": 0.1}, noise=True, batch_size=4)
    assert set(traj.observables) == {"loss"} and np.all(np.isfinite(traj.observables["loss"]))


# -- reduced limits ----------------------------------------------------------------------------------------------


def _product_loss(params, batch):
    return 0.5 * (params["a"] * params["b"] - batch["target"]) ** 2


BALANCED = flows.System(
    name="product",
    init=lambda key: {"a": jnp.asarray(0.2), "b": jnp.asarray(0.2)},
    loss=_product_loss,
    data={"target": jnp.asarray(1.0)},
    reduced={
        # a = b = u is invariant: du/dt = -(u^2 - target) u
        "balanced": flows.Reduced(
            vector_field=lambda t, u, args: -(u * u - args["target"]) * u,
            initial=lambda params, data: params["a"],
            to_params=lambda u: {"a": u, "b": u},
            args=lambda data: {"target": data["target"]},
        ),
        "own": flows.Reduced(
            vector_field=lambda t, u, args: -(u * u - args["target"]) * u,
            initial=lambda params, data: params["a"],
            observe=lambda t, u, args: {"product": u * u},
            args=lambda data: {"target": data["target"]},
        ),
    },
)


@pytest.mark.slow  # pinned per system: tests/linear_attention/test_flow.py (zfb, separate)
def test_a_reduced_limit_is_the_full_flow_on_its_invariant_set():
    ts = np.array([0.0, 1.0, 4.0])
    full = flows.solve_flow(BALANCED, ts, rtol=1e-11, atol=1e-13)
    red = flows.solve_flow(BALANCED, ts, reduced="balanced", rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(red.observables["loss"], full.observables["loss"], rtol=1e-9, atol=1e-12)
    own = flows.solve_flow(BALANCED, ts, reduced="own", rtol=1e-11, atol=1e-13)
    assert set(own.observables) == {"product"}
    np.testing.assert_allclose(
        own.observables["product"], 1.0 - np.sqrt(2.0 * np.asarray(full.observables["loss"])), rtol=1e-8
    )
    start = flows.solve_flow(BALANCED, ts, reduced="balanced", y0=jnp.asarray(0.5))
    assert float(start.observables["loss"][0]) == pytest.approx(0.5 * (0.25 - 1.0) ** 2)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(reduced="nope"), "reduced"),
        (dict(reduced="balanced", optimizer="momentum", optim_args={"lr": 0.1, "beta": 0.5}), "optimizer"),
        (dict(optimizer="rmsprop"), "optimizer"),
        (dict(optimizer="sign", noise=True), "optimizer"),
        (dict(noise=True, optim_args={"lr": 0.1}), "batch_size"),
        (dict(noise=True, batch_size=2), "lr"),
        (dict(batch_size=2), "batch_size"),
        (dict(y0={"a": 1.0}), "y0"),
        (dict(y0={"w": jnp.ones(2), "b": 1.0}), "y0"),
        (dict(optimizer="adam", optim_args={"c1": 1.0}), "c2"),
        (dict(noise="yes"), "noise"),
        (dict(optimzer="adam"), "unknown keys \\['optimzer'\\] for solve_flow"),
        (dict(rtl=1e-6), "unknown keys \\['rtl'\\] for solve_flow"),
    ],
)
def test_bad_solve_flow_arguments_name_the_field(kw, field):
    system = BALANCED if "reduced" in kw else LINEAR
    with pytest.raises(ValueError, match=field):
        flows.solve_flow(system, [0.0, 0.1], **kw)
    with pytest.raises(ValueError, match="ts"):
        flows.solve_flow(system, [0.1, 0.2])


# -- a system's own failed-run check, the parameter history, the batch losses -------------------------------------


def _bounded(params):  # a system's own acceptance check: |w| at most 2 (finite alone accepts any size)
    return jnp.all(jnp.abs(params["w"]) <= 2.0)


def test_finite_fails_a_run_where_the_system_says():
    """`System.finite` stops a run at the first step whose parameters fail it, as a NaN does: the error names
    that step, its record holds the saved steps before it; without the check the same run trains on."""
    free = flows.train(LINEAR, "gd", 0.5, 12, save_every=1)
    first = int(np.argmax(np.max(np.abs(free["w"]), axis=1) > 2.0))
    assert first > 0 and np.all(np.isfinite(free["w"]))  # the unchecked run passes the bound, finite throughout
    with pytest.raises(flows.TrainingError, match=f"non-finite at step {first} .*System.finite") as info:
        flows.train(LINEAR.replace(finite=_bounded), "gd", 0.5, 12, save_every=1)
    assert info.value.step == first and info.value.record.steps.tolist() == list(range(first))


def test_history_and_batch_loss():
    """`history=True` keeps the parameters at every saved step (the last one the final parameters of the same
    run without it); `batch_loss=True` the loss of each step on its batch, before the step: on the full batch,
    the loss the record saves at that step."""
    plain = flows.train(LINEAR, "gd", 0.1, 6, save_every=2)
    rec = flows.train(LINEAR, "gd", 0.1, 6, save_every=2, history=True, batch_loss=True)
    assert rec.params["w"].shape == (4, DIM) and rec.params["b"].shape == (4,)
    np.testing.assert_array_equal(rec.params["w"][-1], plain.params["w"])
    np.testing.assert_allclose(rec.params["w"], rec["w"], rtol=1e-15)  # the observable w at the same steps
    assert rec.extras["batch_loss"].shape == (6,)
    np.testing.assert_allclose(rec.extras["batch_loss"][rec.steps[:-1]], rec["loss"][:-1], rtol=1e-13)
    assert "batch_loss" not in plain.extras
    sgd = flows.train(LINEAR, "sgd", 0.1, 4, save_every=1, batch_size=4, batch_loss=True)
    path = _literal(optax.sgd(0.1), 4, batch_size=4)  # the literal loop's batches, drawn again
    keys, key = default_streams(4), default_streams(4)["batch"]
    data = _data(keys["data"])
    for i in range(4):
        key, sub = jax.random.split(key)
        idx = jax.random.permutation(sub, N_ROWS)[:4]
        want = _loss(path[i], {k: v[idx] for k, v in data.items()})
        np.testing.assert_allclose(sgd.extras["batch_loss"][i], want, rtol=1e-12)
    for kw in (dict(history=1), dict(batch_loss="yes")):
        with pytest.raises(ValueError, match=next(iter(kw))):
            flows.train(LINEAR, "gd", 0.1, 2, **kw)


def test_systems_of_the_same_functions_share_one_compiled_limit():
    """Two systems built from the same `loss` and `observe` (a system per learning rate, say) solve their limit
    with one compiled program."""
    ts = np.array([0.0, 0.1])
    flows.solve_flow(LINEAR.replace(rate_scale={"b": 2.0}), ts)
    again = flows.solve_flow(LINEAR.replace(rate_scale={"b": 3.0}), ts)
    assert again.compile_s == 0.0


@pytest.mark.parametrize("name", ["cooccurrence", "linear_attention", "mean_field", "scan_snap"])
def test_a_systems_own_flow_refuses_optim_args(name):
    """`solve_flow` without an optimizer (the system's own flow) takes no `optim_args`: every system says so
    with the driver's one message, before any solve; with an optimizer the same keyword is accepted."""
    from flows import registry

    with pytest.raises(ValueError, match=r"optim_args needs an optimizer \('gd', 'momentum', 'sign' or 'adam'\)"):
        flows.driver.check_optim_args(None, {"beta": 0.5})
    flows.driver.check_optim_args("momentum", {"beta": 0.5})
    module = getattr(flows, name)
    config = registry.demo(name).config
    ts = np.array([0.0, 0.1])
    if name == "scan_snap":  # the Y/Z flow of the demo's classes (Syn-Small) at the demo's rates
        classes = module.syn_small()
        call = lambda: module.solve_flow(classes, 1.0, 2.0, ts, optim_args={"beta": 0.5})  # noqa: E731
    else:
        call = lambda: module.solve_flow(config, ts, optim_args={"beta": 0.5})  # noqa: E731
    with pytest.raises(ValueError, match="optim_args needs an optimizer"):
        call()
