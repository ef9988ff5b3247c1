"""Finite-T Y/Z network: count-vector vs token-sequence training, embedding form, T -> inf tracking."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flows.scan_snap import observables as obs
from flows.scan_snap import solve_flow, syn_medium, syn_small, train, train_embedding, train_sweep, train_sweeps
from flows.scan_snap.flow import flow_args, population_loss
from flows.scan_snap.model import count_loss, embedding_loss, init_embedding, token_loss
from flows.training import TrainingError
from tests.scan_snap.population_flow import numpy_flow

# two training compiles per case (a case is a program of its own: optimizer, momentum and init are static).
# The default run keeps SGD with momentum from a random init (its sizes are those of
# test_same_seed_same_record_and_sweep_member, which reuses its program); Adam and plain SGD from a zero init
# run in -m slow only: the two forms give the optimizer the same gradients (the losses of both forms are
# compared in test_losses_and_embedding_form_agree), Adam is trained in test_embedding_form_trains and the zero
# init in test_pins_clock.py.
RUN = dict(T=24, batch_size=8, steps=15)


@pytest.mark.parametrize(
    "opt,mom,init",
    [
        ("sgd", 0.9, "random"),
        pytest.param("adam", 0.0, "random", marks=pytest.mark.slow),
        pytest.param("sgd", 0.0, "zero", marks=pytest.mark.slow),
    ],
)
def test_counts_equal_tokens(opt, mom, init):
    c = syn_small()
    kw = dict(RUN, momentum=mom, init=init, seed=5)
    a = train(c, opt, 2.0, 0.5, **kw)
    b = train(c, opt, 2.0, 0.5, form="tokens", **kw)
    assert np.max(np.abs(a.Z - b.Z)) <= 1e-10
    assert np.max(np.abs(a.Y - b.Y)) <= 1e-10
    assert np.max(np.abs(a.batch_loss - b.batch_loss)) <= 1e-10
    assert a.batch_loss[-1] < a.batch_loss[0]


def test_same_seed_same_record_and_sweep_member():
    c = syn_small()
    a = train(c, "sgd", 1.0, 1.0, **RUN, momentum=0.9, init="random", seed=2)
    b = train(c, "sgd", 1.0, 1.0, **RUN, momentum=0.9, init="random", seed=2)
    assert np.array_equal(a.Z, b.Z) and np.array_equal(a.Y, b.Y)
    timings: dict = {}
    loss, p = train_sweep(c, "sgd", [1.0, 3.0], [1.0, 0.5], [2, 7], **RUN, momentum=0.9, init="random", timings=timings)
    assert set(timings) == {"compile_s", "run_s"} and timings["run_s"] > 0 and timings["compile_s"] >= 0
    assert np.max(np.abs(p["Z"][0] - a.Z[-1])) <= 1e-12 and np.max(np.abs(p["Y"][0] - a.Y[-1])) <= 1e-12
    assert np.max(np.abs(loss[0] - a.batch_loss)) <= 1e-12
    assert np.max(np.abs(p["Z"][1] - a.Z[-1])) > 1e-3  # the other member (other rates, other seed) differs


def test_runs_of_one_seed_share_their_batches():
    """`train_sweep` draws each step's batch once per distinct seed and hands it to that seed's runs: with the
    seeds repeated and unsorted, every run is `train` at its own rates and seed (1e-12: the sweep's vmapped
    products against single ones), and runs of one seed at other rates differ."""
    c = syn_small()
    seeds, eta_Y, eta_Z = np.array([7, 2, 7, 5]), np.array([1.0, 3.0, 0.5, 2.0]), np.array([1.0, 0.5, 2.0, 1.5])
    loss, p = train_sweep(c, "sgd", eta_Y, eta_Z, seeds, **RUN, momentum=0.9, init="random")
    for i in range(seeds.size):
        ref = train(c, "sgd", eta_Y[i], eta_Z[i], **RUN, momentum=0.9, init="random", seed=int(seeds[i]))
        assert np.max(np.abs(p["Z"][i] - ref.Z[-1])) <= 1e-12 and np.max(np.abs(p["Y"][i] - ref.Y[-1])) <= 1e-12
        assert np.max(np.abs(loss[i] - ref.batch_loss)) <= 1e-12
    assert np.max(np.abs(p["Z"][0] - p["Z"][2])) > 1e-3


def test_validation():
    c = syn_small()
    with pytest.raises(ValueError, match="eta_Y"):
        train(c, "sgd", -1.0, 1.0, 16, 8, 10)
    with pytest.raises(ValueError, match="optimizer"):
        train(c, "rmsprop", 1.0, 1.0, 16, 8, 10)
    with pytest.raises(ValueError, match="momentum"):
        train(c, "sgd", 1.0, 1.0, 16, 8, 10, momentum=1.0)
    with pytest.raises(ValueError, match="T"):
        train(c, "sgd", 1.0, 1.0, 1, 8, 10)


def test_losses_and_embedding_form_agree():
    c = syn_small()
    a = c.arrays()
    from flows.scan_snap import sample_counts, sample_tokens

    M, d = c.vocab_size, 7
    rng = np.random.default_rng(1)
    emb = {
        "U": rng.normal(size=(M, d)),
        "W_Q": rng.normal(size=(d, d)),
        "W_K": rng.normal(size=(d, d)),
        "W_V": rng.normal(size=(d, d)),
    }

    @jax.jit  # one program (sampling included), not one per eager op (suite time)
    def check(emb, key):
        cls, N = sample_counts(a, key, 6, 20)
        _, tok = sample_tokens(a, key, 6, 20)
        Z = emb["U"] @ emb["W_Q"] @ emb["W_K"].T @ emb["U"].T / math.sqrt(d)
        Y = emb["U"] @ emb["W_V"].T @ emb["U"].T
        yz = {"Y": Y, "Z": Z[a.query_tokens]}  # the network's parameters: Z's query rows
        losses = (embedding_loss(emb, a, cls, N), count_loss(yz, a, cls, N), token_loss(yz, a, cls, tok))
        # chain rule: dL/dW_V through Y equals the embedding gradient
        gY = jax.grad(count_loss)(yz, a, cls, N)["Y"]
        gV = jax.grad(embedding_loss)(emb, a, cls, N)["W_V"]
        return losses, jnp.max(jnp.abs(gV - emb["U"].T @ gY.T @ emb["U"]))

    (l1, l2, l3), chain_err = check(emb, jax.random.PRNGKey(0))
    assert abs(float(l1 - l2)) <= 1e-12 and abs(float(l2 - l3)) <= 1e-12
    assert float(chain_err) <= 1e-10


def _tracking_error(c, Zf, T, eta, tau, batch, seeds):
    steps = int(round(tau / eta))
    _, p = train_sweep(c, "sgd", np.full(seeds, eta), np.full(seeds, eta), np.arange(seeds), T, batch, steps)
    return float(np.linalg.norm(p["Z"].mean(axis=0) - Zf) / np.linalg.norm(Zf))


@pytest.mark.slow  # the finite-T rate is the scan_snap_finite_T example's
def test_finite_T_tracks_flow_error_shrinks_in_T():
    """Plain SGD (batch mean, lr 0.25) vs the T -> inf flow at t = 16: relative error of Z falls with T.

    The flow is the numpy population flow (tests/scan_snap/population_flow.py; it equals `solve_flow` here to
    2e-11, measured, and the slow test below uses `solve_flow`): no solve compile in the default run."""
    c = syn_small()
    tau = 16.0
    Zf = numpy_flow(c, 1.0, 1.0, np.array([0.0, tau]))[1][-1]
    e16 = _tracking_error(c, Zf, 16, 0.25, tau, 256, 2)
    e256 = _tracking_error(c, Zf, 256, 0.25, tau, 256, 2)
    rate = math.log(e16 / e256) / math.log(16)
    assert e256 < 0.2 and e256 < e16 / 4, (e16, e256)
    assert rate > 0.5, rate


@pytest.mark.slow
def test_finite_T_tracks_flow_error_shrinks_in_lr():
    """At T = 4096 (finite-T bias small) the error falls with the learning rate (Euler + SGD noise)."""
    c = syn_small()
    tau = 16.0
    Zf = np.asarray(solve_flow(c, 1.0, 1.0, [0.0, tau], rtol=1e-10, atol=1e-12).ys["Z"][-1])
    errs = [_tracking_error(c, Zf, 4096, eta, tau, 256, 4) for eta in (4.0, 2.0, 1.0)]
    assert errs[0] > errs[1] > errs[2], errs
    assert math.log(errs[0] / errs[2]) / math.log(4) > 0.5, errs


# the embedding-form trainings: one program per optimizer (test_embedding_form_trains), which the one-step
# check reuses for SGD (the first heavy-ball step is a plain SGD step: optax's momentum trace starts at 0)
EMBEDDING_RUN = dict(T=64, batch_size=32, steps=150, d=48)


def test_embedding_form_one_sgd_step_is_the_chain_rule_through_Y_Z():
    """The first SGD step of `train_embedding` equals emb0 - eta * (chain rule of the Y/Z gradients):
    dL/dW_V = U^T G_Y^T U, dL/dW_Q = U^T G_Z U W_K / sqrt d, dL/dW_K = U^T G_Z^T U W_Q / sqrt d,
    dL/dU = G_Y U W_V + G_Y^T U W_V^T + (G_Z U B^T + G_Z^T U B), B = W_Q W_K^T / sqrt d."""
    from flows.scan_snap import sample_counts

    c = syn_small()
    a = c.arrays()
    M, seed = c.vocab_size, 3
    d, T, B = EMBEDDING_RUN["d"], EMBEDDING_RUN["T"], EMBEDDING_RUN["batch_size"]
    eY, eZ, eU = 0.7, 0.3, 0.2
    rec = train_embedding(c, "sgd", eY, eZ, **EMBEDDING_RUN, momentum=0.9, seed=seed, eta_U=eU, init_scale=2.0)

    @jax.jit  # the record's init and first batch, and both points (vmapped), in one program (suite time)
    def chain_and_autodiff(key, W_V_generic):
        k_init, k_data = jax.random.split(key)
        emb = init_embedding(M, d, k_init, 1.0)
        emb = dict(emb, W_Q=2.0 * emb["W_Q"], W_K=2.0 * emb["W_K"])
        cls, N = sample_counts(a, jax.random.split(k_data, 1)[0], B, T)

        def at(W_V):
            e = dict(emb, W_V=W_V)
            U, Bm = e["U"], e["W_Q"] @ e["W_K"].T / math.sqrt(d)
            Y, Z = U @ W_V.T @ U.T, U @ Bm @ U.T
            # the gradient in the full Z: Z's query rows are the loss's parameters, the other rows unread
            GY, GZ = jax.grad(lambda Y, Z: count_loss({"Y": Y, "Z": Z[a.query_tokens]}, a, cls, N), (0, 1))(Y, Z)
            chain = {
                "W_V": U.T @ GY.T @ U,
                "W_Q": U.T @ GZ @ U @ e["W_K"] / math.sqrt(d),
                "W_K": U.T @ GZ.T @ U @ e["W_Q"] / math.sqrt(d),
                "U": GY @ U @ W_V + GY.T @ U @ W_V.T + GZ @ U @ Bm.T + GZ.T @ U @ Bm,
            }
            return e, chain, jax.grad(embedding_loss)(e, a, cls, N), Z

        # the record starts from W_V = 0; check the chain rule at a generic point, then the step at the init
        return jax.vmap(at)(jnp.stack([W_V_generic, emb["W_V"]]))

    e, chain, auto, Z = jax.tree_util.tree_map(
        np.asarray, chain_and_autodiff(jax.random.PRNGKey(seed), 0.3 * np.ones((d, d)))
    )
    for k in chain:
        assert float(np.max(np.abs(auto[k] - chain[k]))) <= 1e-10, k  # at both points
    e, chain = ({k: v[1] for k, v in x.items()} for x in (e, chain))
    Z = Z[1]
    assert np.all(e["W_V"] == 0)
    lrs = {"U": eU, "W_Q": eZ, "W_K": eZ, "W_V": eY}
    e1 = {k: e[k] - lrs[k] * chain[k] for k in chain}
    Y1 = e1["U"] @ e1["W_V"].T @ e1["U"].T
    Z1 = e1["U"] @ e1["W_Q"] @ e1["W_K"].T @ e1["U"].T / math.sqrt(d)
    assert np.max(np.abs(rec.Y[1] - Y1)) <= 1e-10
    assert np.max(np.abs(rec.Z[1] - Z1)) <= 1e-10
    assert np.max(np.abs(rec.Z[0] - Z)) <= 1e-12 and np.all(rec.Y[0] == 0)
    assert np.max(np.abs(rec.Y[1])) > 1e-3  # the step moved Y


@pytest.mark.parametrize("opt,mom", [("sgd", 0.9), ("adam", 0.0)])
def test_embedding_form_trains(opt, mom):
    """The embedding form learns: the loss falls, Z moves, and the same observables apply (discriminative
    bias of Theorem 2 in the trained Z: DT logits of the query row above CT logits)."""
    from flows.scan_snap import observables as obs

    c = syn_small()
    lr = 0.05 if opt == "adam" else 0.1  # quadratic in the weights: SGD+momentum diverges at lr ~ 1
    rec = train_embedding(c, opt, lr, lr, **EMBEDDING_RUN, momentum=mom, seed=1)
    assert rec.Y.shape == rec.Z.shape == (151, c.vocab_size, c.vocab_size)
    head, tail = rec.batch_loss[:10].mean(), rec.batch_loss[-10:].mean()
    assert tail < 0.5 * head, (head, tail)
    Q = np.zeros((2, c.vocab_size))
    Q[np.arange(2), c.query] = 1.0
    att = np.asarray(obs.attention(rec.Z[-1], c.cond_probs, Q))
    att0 = np.asarray(obs.attention(rec.Z[0], c.cond_probs, Q))
    mass = np.asarray(obs.common_mass(att, c.common_mask))
    mass0 = np.asarray(obs.common_mass(att0, c.common_mask))
    assert np.all(mass < mass0), (mass0, mass)


def test_embedding_form_validation():
    c = syn_small()
    with pytest.raises(ValueError, match="d must"):
        train_embedding(c, "sgd", 1.0, 1.0, 16, 8, 10, 0)
    with pytest.raises(ValueError, match="eta_U"):
        train_embedding(c, "sgd", 1.0, 1.0, 16, 8, 10, 4, eta_U=-1.0)
    with pytest.raises(ValueError, match="init_scale"):
        train_embedding(c, "sgd", 1.0, 1.0, 16, 8, 10, 4, init_scale=0.0)


# ------------------------------------------------- the shared vocabulary (tests/test_vocabulary.py), this system's part

VOCAB_RUN = dict(T=24, batch_size=8, steps=15, momentum=0.9, init="random", seed=2)


def test_save_every_batch_loss_history_and_flow_observables():
    c = syn_small()
    full = train(c, "sgd", 1.0, 1.0, **VOCAB_RUN)
    sparse = train(c, "sgd", 1.0, 1.0, **VOCAB_RUN, save_every=4)
    assert sparse.steps.tolist() == [0, 4, 8, 12, 15]
    np.testing.assert_allclose(sparse.ts, sparse.steps / (1 - 0.9), rtol=1e-14)
    np.testing.assert_allclose(full.ts, np.arange(16) / (1 - 0.9), rtol=1e-14)
    # the same training, kept at fewer steps
    assert np.max(np.abs(sparse.Z - full.Z[sparse.steps])) <= 1e-12
    assert np.max(np.abs(sparse.Y - full.Y[sparse.steps])) <= 1e-12
    assert np.max(np.abs(sparse.batch_loss - full.batch_loss)) <= 1e-12
    # the flow's observables, by the flow's names, from the saved (Y, Z)
    args = flow_args(c, 1.0, 1.0)
    for i, s in enumerate(sparse.steps):
        y = {"Y": full.Y[s], "Z": full.Z[s]}
        np.testing.assert_allclose(
            sparse["attention"][i], obs.attention(y["Z"], args["cond"], args["Q"]), rtol=1e-12, atol=1e-14
        )
        np.testing.assert_allclose(sparse["loss"][i], population_loss(y, args), rtol=1e-12)
    assert sparse.attention is sparse.observables["attention"]
    assert sparse["loss"][-1] < sparse["loss"][0]
    assert full.loss is full["loss"]  # the population loss, by the flow's name
    assert sparse.compile_s >= 0 and sparse.run_s > 0
    with pytest.raises(ValueError, match="save_every"):
        train(c, "sgd", 1.0, 1.0, **VOCAB_RUN, save_every=0)


def test_non_finite_run_truncates_the_batch_loss():
    """The shared failed-run rule (tests/test_vocabulary.py) on the per-step batch loss: one entry per step
    before the first non-finite one."""
    with pytest.raises(TrainingError, match="non-finite at step") as info:
        train(syn_small(), "sgd", 1e308, 1e308, **{**VOCAB_RUN, "steps": 40}, save_every=3)
    assert len(info.value.record.batch_loss) == info.value.step


def test_lr_keyword_equals_eta_and_is_validated():
    c = syn_small()
    base = train(c, "sgd", 1.0, 1.0, **VOCAB_RUN)  # the compiled program of the first test: no new compile
    for lr in (1.0, {"Y": 1.0, "Z": 1.0}):
        rec = train(c, "sgd", lr=lr, **VOCAB_RUN)
        assert np.array_equal(rec.Z, base.Z) and np.array_equal(rec.Y, base.Y)
    for kw, field in (
        (dict(lr={"Y": 1.0}), "lr"),
        (dict(lr=1.0, eta_Y=1.0), "lr"),
        (dict(eta_Y=1.0), "lr"),
        (dict(lr=-1.0), "lr"),
        (dict(lr={"Y": 1.0, "Z": 0.0}), r"lr\['Z'\]"),
        (dict(eta_Y=-1.0, eta_Z=1.0), "eta_Y"),
    ):  # a bad rate is named as it was passed
        with pytest.raises(ValueError, match=field):
            train(c, "sgd", **kw, **VOCAB_RUN)


def test_solve_flow_init_random_starts_where_train_does():
    from flows.scan_snap import solve_flow

    c = syn_small()
    rec = train(c, "sgd", 1.0, 1.0, **VOCAB_RUN)  # init="random", seed=2
    traj = solve_flow(c, 1.0, 1.0, [0.0, 1e-9], init="random", seed=2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(traj.ys["Z"][0], rec.Z[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(traj.ys["Y"][0], rec.Y[0], rtol=0, atol=1e-15)
    for kw, field in ((dict(init="nope"), "init"), (dict(seed=-1), "seed"), (dict(init="random", Z0=rec.Z[0]), "Z0")):
        with pytest.raises(ValueError, match=field):
            solve_flow(c, 1.0, 1.0, [0.0, 1.0], **kw)


def test_lr_keyword_of_solve_flow_and_train_sweep():
    from flows.scan_snap import solve_flow, train_sweep

    c = syn_small()
    ts = [0.0, 0.5, 1.0]
    base = solve_flow(c, 2.0, 1.0, ts, rtol=1e-9, atol=1e-11)
    same = solve_flow(c, ts=ts, lr={"Y": 2.0, "Z": 1.0}, rtol=1e-9, atol=1e-11)  # the same program
    np.testing.assert_array_equal(np.asarray(same.ys["Z"]), np.asarray(base.ys["Z"]))
    for kw, field in (
        (dict(lr={"Y": 1.0, "Z": -1.0}), r"lr\['Z'\]"),
        (dict(lr=1.0, eta_Y=1.0), "lr"),
        (dict(lr=float("nan")), "lr"),
        (dict(), "lr"),
        (dict(lr=1.0, ts=None), "ts"),
    ):
        kw = {"ts": ts, **kw}
        with pytest.raises(ValueError, match=field):
            solve_flow(c, **kw)
    sweep = dict(seeds=np.array([2, 3]), **{k: VOCAB_RUN[k] for k in ("T", "batch_size", "steps", "momentum", "init")})
    old = train_sweep(c, "sgd", np.array([1.0, 2.0]), np.array([1.0, 0.5]), **sweep)
    new = train_sweep(c, "sgd", lr={"Y": np.array([1.0, 2.0]), "Z": np.array([1.0, 0.5])}, **sweep)
    np.testing.assert_array_equal(new[1]["Z"], old[1]["Z"])
    with pytest.raises(ValueError, match=r"lr\['Y'\]"):
        train_sweep(c, "sgd", lr={"Y": np.array([1.0, -2.0]), "Z": np.array([1.0, 0.5])}, **sweep)


def test_normalized_weights_and_their_reverse_rule_equal_the_attention_they_replace():
    """`model._normalized_weights` (the sweep's f_s = w / ||w|| with its one-pass reverse rule) equals
    `normalized_attention(attention_weights(N, z))` and its autodiff gradient to 1e-14 (rows with zero counts
    included: f and its gradient are 0 there), and the gradient points along f's own (a sign or a dropped
    projection term fails)."""
    from flows.scan_snap import model

    rng = np.random.default_rng(4)
    counts = jnp.asarray(rng.integers(0, 4, (6, 9)).astype(float)).at[:, 0].set(2.0).at[2, 3:].set(0.0)
    z, g = (jnp.asarray(rng.normal(size=(6, 9)) * 3.0) for _ in range(2))

    def ref(z):
        return obs.normalized_attention(obs.attention_weights(counts, z))

    got = model._normalized_weights(counts, z)
    assert np.max(np.abs(np.asarray(got - ref(z)))) <= 1e-14
    grad = jax.grad(lambda z: jnp.sum(g * model._normalized_weights(counts, z)))(z)
    want = jax.grad(lambda z: jnp.sum(g * ref(z)))(z)
    assert np.max(np.abs(np.asarray(grad - want))) <= 1e-14 * max(1.0, float(np.max(np.abs(np.asarray(want)))))
    assert np.all(np.asarray(grad)[np.asarray(counts) == 0] == 0.0) and np.max(np.abs(np.asarray(want))) > 0.1


def test_support_placement_equals_the_scatter_and_its_gradient():
    """`model._place` (the sweep's f_s placed into the vocabulary by a gather, with a gather as its reverse rule)
    equals the scatter-add into zeros it replaces, values and gradients, to the last bit (padded entries, which
    repeat a token with f_s = 0, are dropped by the one and add 0 in the other)."""
    from flows.scan_snap import SequenceClasses, model, syn_medium

    base = syn_medium(3)
    cond = np.array(base.cond_probs)
    cond[0, np.flatnonzero(cond[0])[:5]] = 0.0  # class 0's support is 5 tokens shorter: its row is padded
    cond /= cond.sum(axis=1, keepdims=True)
    a = SequenceClasses(cond, base.query, base.next_token, base.class_probs).arrays()
    M = a.cond.shape[1]
    cls = jnp.array([0, 3, 5, 0, 3])
    idx = a.support_index[cls]
    padded = jnp.concatenate([jnp.zeros((5, 1), bool), idx[:, 1:] == idx[:, :-1]], axis=1)
    assert bool(jnp.any(padded))  # the classes' supports differ in size: some rows are padded
    f_s = jnp.where(padded, 0.0, jax.random.normal(jax.random.PRNGKey(0), idx.shape))
    position = model._support_position(a.support_index, M)[cls]
    w = jax.random.normal(jax.random.PRNGKey(1), (5, M))

    def scatter(f):
        return jnp.zeros((5, M)).at[jnp.arange(5)[:, None], idx].add(f)

    np.testing.assert_array_equal(np.asarray(model._place(f_s, idx, position)), np.asarray(scatter(f_s)))
    g_place = jax.grad(lambda f: jnp.sum(jnp.sin(model._place(f, idx, position)) * w))(f_s)
    g_scatter = jax.grad(lambda f: jnp.sum(jnp.sin(scatter(f)) * w))(f_s)
    np.testing.assert_array_equal(np.asarray(g_place), np.asarray(g_scatter))


def test_train_sweep_warns_naming_the_runs_past_the_bound():
    """A run of a sweep that leaves the bound (lr = 100: Y past `blowup_bound` at step 4, where `train` raises
    `TrainingError`) is named in a `RuntimeWarning` with that step; the other run stands (finite)."""
    classes = syn_small()
    kw = dict(T=16, batch_size=8, steps=6, momentum=0.9, init="random")
    with pytest.warns(RuntimeWarning, match=r"1 of 2 runs .* \(run 1 at step 4\)"):
        _, p = train_sweep(classes, "sgd", lr=np.array([1.0, 100.0]), seeds=np.array([1, 1]), **kw)
    with pytest.raises(TrainingError) as err:
        train(classes, "sgd", lr=100.0, seed=1, **kw)
    assert err.value.step == 4
    assert np.all(np.isfinite(p["Y"][0])) and np.max(np.abs(p["Y"][0])) < 10.0


def test_train_sweeps_are_the_sweeps_one_by_one():
    """`train_sweeps` prepares each job on a thread while the one before runs: its results are `train_sweep`'s
    for each job, bit for bit (two vocabularies, two optimisers), its timings one dict per job, and a job that
    leaves the bound warns as `train_sweep` does (the other jobs stand)."""
    kw = dict(T=16, batch_size=8, steps=6, init="random")
    jobs = [
        dict(classes=syn_small(), optimizer="sgd", lr=np.array([1.0, 100.0]), seeds=[1, 1], momentum=0.9, **kw),
        dict(classes=syn_medium(1), optimizer="adam", eta_Y=[0.01, 0.02], eta_Z=[0.03, 0.01], seeds=[4, 5], **kw),
    ]
    timings: list = []
    with pytest.warns(RuntimeWarning, match=r"train_sweeps, jobs\[0\]: 1 of 2 runs .* \(run 1 at step 4\)"):
        got = train_sweeps(jobs, timings=timings)
    assert len(got) == 2 and len(timings) == 2
    assert all(set(t) == {"compile_s", "run_s", "wait_s"} and t["run_s"] > 0 and t["wait_s"] >= 0 for t in timings)
    for job, (losses, params) in zip(jobs, got, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref_losses, ref = train_sweep(**job)
        np.testing.assert_array_equal(losses, ref_losses)
        np.testing.assert_array_equal(params["Y"], ref["Y"])
        np.testing.assert_array_equal(params["Z"], ref["Z"])
    assert train_sweeps([]) == []


def test_train_sweeps_prepare_at_the_callers_precision():
    """The preparing thread takes the caller's `jax_enable_x64`, a context manager's included (JAX's setting is
    per thread): float32 jobs under `jax.enable_x64(False)` give `train_sweep`'s float32 results."""
    job = dict(classes=syn_small(), optimizer="sgd", lr=np.array([0.5]), seeds=[3], T=16, batch_size=8, steps=4)
    with jax.enable_x64(False):
        ((losses, params),) = train_sweeps([job])
        ref_losses, ref = train_sweep(**job)
    assert params["Y"].dtype == np.float32 and losses.dtype == np.float32
    np.testing.assert_array_equal(params["Z"], ref["Z"])


@pytest.mark.parametrize(
    "jobs, match",
    [
        (5, "jobs must be a sequence"),
        ("sgd", "jobs must be a sequence"),
        ([1], r"jobs\[0\] must be a mapping"),
        ([{"optimizer": "sgd"}], r"jobs\[0\]: missing arguments \['classes'\]"),
        ([{"classes": None, "optimizer": "sgd", "rate": 1.0}], r"jobs\[0\]: unknown arguments \['rate'\]"),
        ([{"optimizer": "sgd", "seeds": [1], "lr": [1.0], "T": 1}], r"jobs\[0\]: T must be"),
    ],
)
def test_train_sweeps_name_the_bad_job_and_argument(jobs, match):
    if isinstance(jobs, list) and jobs and isinstance(jobs[0], dict) and "T" in jobs[0]:
        jobs = [{"classes": syn_small(), **jobs[0]}]
    with pytest.raises(ValueError, match=match):
        train_sweeps(jobs)
