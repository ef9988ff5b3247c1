"""flows.optim_limits.noise: the SGD SDE against SGD on linear regression (n = 16 samples, P = 3, B = 4).

Linear regression has per-sample gradients affine in theta, so the first and second moments of SGD (every
batch of 4 distinct samples enumerated), of the SGD SDE (a matrix exponential) and of its Euler-Maruyama
scheme are exact (tests/optim_limits/_linreg.py): the weak-order claims are checked without sampling noise,
and the Monte Carlo programs (the vmapped SDE paths, the vmapped optax SGD runs) are checked against them
and against each other within their standard errors."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows.optim_limits import gradient_flow
from flows.optim_limits.noise import (
    batch_covariance_factor,
    gradient_covariance,
    noise_factor,
    per_sample_grads,
    run_sgd,
    sgd_sde,
    solve_sgd_sde,
)
from tests._xla_level import default_level
from tests.optim_limits._linreg import (
    DATA,
    OBS,
    THETA0,
    N,
    X,
    Y,
    em_moments,
    per_sample_loss,
    sde_moments,
    sgd_moments,
    summary,
)

B, T = 4, 2.0
LRS = (0.02, 0.005)
PATHS = 400
# one SDE program for both rates: dt = lr / 4 is traced, max_steps is the smaller dt's
SDE_OPTS = dict(num_paths=PATHS, observables=OBS, save_states=False, max_steps=int(T / (LRS[1] / 4)) + 1)


@functools.cache
def exact(kind, lr):
    """(E theta_0, Var theta_0, E loss) at t = T: "sgd" (enumerated batches), "sde", "em" (dt = lr / 4)."""
    if kind == "sgd":
        return summary(*sgd_moments(T, lr, B))
    if kind == "sde":
        return summary(*sde_moments(T, lr, B))
    return summary(*em_moments(T, lr / 4, lr, B))


def test_low_rank_factor_is_the_per_sample_covariance():
    """G G^T (G = noise_factor, columns (g_i - gbar) / sqrt(n)) equals the dense covariance of the per-sample
    gradients x_i (x_i . theta - y_i), computed here with numpy, to 1e-12; so does gradient_covariance."""
    theta = jnp.array([0.3, -0.2, 0.7])
    g = X * (X @ np.asarray(theta) - Y)[:, None]
    dense = (g - g.mean(0)).T @ (g - g.mean(0)) / N
    G = np.asarray(noise_factor(per_sample_loss, theta, DATA))
    assert G.shape == (3, N)
    assert np.max(np.abs(G @ G.T - dense)) <= 1e-12
    assert np.max(np.abs(np.asarray(gradient_covariance(per_sample_loss, theta, DATA)) - dense)) <= 1e-12
    assert np.max(np.abs(np.asarray(per_sample_grads(per_sample_loss, theta, DATA)) - g)) <= 1e-12


def test_weighted_population_factor():
    """With population weights w: G G^T = sum_i w_i (g_i - gbar)(g_i - gbar)^T, gbar = sum_i w_i g_i (numpy),
    to 1e-12; uniform weights give the unweighted factor; bad weights and weights without replacement are
    refused."""
    theta = jnp.array([0.3, -0.2, 0.7])
    w = np.random.default_rng(3).random(N)
    w /= w.sum()
    g = X * (X @ np.asarray(theta) - Y)[:, None]
    dev = g - w @ g
    dense = (dev * w[:, None]).T @ dev
    G = np.asarray(noise_factor(per_sample_loss, theta, DATA, w))
    assert np.max(np.abs(G @ G.T - dense)) <= 1e-12
    assert np.max(np.abs(np.asarray(gradient_covariance(per_sample_loss, theta, DATA, w)) - dense)) <= 1e-12
    uniform = np.asarray(noise_factor(per_sample_loss, theta, DATA, np.full(N, 1 / N)))
    assert np.max(np.abs(uniform - np.asarray(noise_factor(per_sample_loss, theta, DATA)))) <= 1e-14
    sde = sgd_sde(per_sample_loss, DATA, 4, 0.1, replacement=True, weights=w)
    assert float(sde.args["scale"]) == pytest.approx(0.1 / 4, rel=1e-15)
    with pytest.raises(ValueError, match="replacement"):
        sgd_sde(per_sample_loss, DATA, 4, 0.1, weights=w)
    with pytest.raises(ValueError, match="weights"):
        sgd_sde(per_sample_loss, DATA, 4, 0.1, replacement=True, weights=w[:5])


def test_batch_mean_covariance_factor_by_enumeration():
    """Cov of the batch-mean gradient over ALL batches: B distinct samples (1820 batches of 4) gives
    (n - B) / (n - 1) Sigma / B, ordered draws with replacement (16^2 pairs, B = 2) give Sigma / B, to 1e-12."""
    theta = np.array([0.3, -0.2, 0.7])
    g = X * (X @ theta - Y)[:, None]
    sigma = (g - g.mean(0)).T @ (g - g.mean(0)) / N
    for b, replacement, batches in (
        (4, False, itertools.combinations(range(N), 4)),
        (2, True, itertools.product(range(N), repeat=2)),
    ):
        means = np.array([g[list(idx)].mean(0) for idx in batches])
        cov = (means - means.mean(0)).T @ (means - means.mean(0)) / len(means)
        c = batch_covariance_factor(N, b, replacement)
        assert np.max(np.abs(cov - c * sigma / b)) <= 1e-12, (b, replacement)
    assert batch_covariance_factor(N, 4) == 12 / 15 and batch_covariance_factor(N, None) == 0.0


def test_sgd_moments_are_euler_maruyama_of_the_sde_at_step_lr():
    """For linear regression the first two moments of SGD(lr, B distinct samples) EQUAL those of the SDE's
    Euler-Maruyama scheme with dt = lr (the batch noise has covariance (n - B)/(n - 1) Sigma / B, the
    scheme's lr * scale * Sigma with scale = lr c / B), to 1e-12: the SGD-vs-SDE weak error is the
    discretisation error of Euler-Maruyama at dt = lr."""
    for lr in (0.08, 0.02):
        sgd, em = sgd_moments(T, lr, B), em_moments(T, lr, lr, B)
        assert np.max(np.abs(sgd[0] - em[0])) <= 1e-12 and np.max(np.abs(sgd[1] - em[1])) <= 1e-12, lr


def test_weak_order_one_exact_moments():
    """The SGD-vs-SDE mismatch at t = 2, exact (no sampling): E theta_0, Var theta_0 (relative; Var itself is
    O(lr)) and E loss, at lr = 0.02 and lr / 4: each falls by 3..5.5 (first order gives 4). Measured:
    biases 2.64e-3, 8.24e-3 (relative), -7.06e-4 at lr = 0.02; ratios 4.01, 4.04, 3.97."""

    def mismatch(lr):
        sgd, sde = exact("sgd", lr), exact("sde", lr)
        return np.array([sgd[0] - sde[0], sgd[1] / sde[1] - 1, sgd[2] - sde[2]])

    big, small = mismatch(LRS[0]), mismatch(LRS[1])
    ratios = big / small
    assert np.all((ratios > 3) & (ratios < 5.5)), (big, small, ratios)
    assert np.all(np.abs(big) > 1e-4), big  # a mismatch that is there to fall


def _z_mean(a, b):
    return (a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)


def _se_var(a):
    d = a - a.mean()
    return np.sqrt((np.mean(d**4) - np.mean(d**2) ** 2) / a.size)


def _z_var(a, b):
    return (a.var(ddof=1) - b.var(ddof=1)) / np.hypot(_se_var(a), _se_var(b))


@pytest.mark.parametrize("replacement", [False, True])
def test_sgd_batches_are_jax_random_on_the_callers_key(replacement):
    """Three runs of three SGD steps (lr = 0.1) against the documented batches drawn with `jax.random` on
    the plain keys (run_sgd draws through flows._prng.fused): key, sub = split(key), then
    permutation(sub, n)[:B] or randint(sub, (B,), 0, n); theta is the numpy SGD recursion on those batches
    to 1e-12 at every step."""
    lr, steps, runs = 0.1, 3, 3
    out = run_sgd(
        per_sample_loss,
        THETA0,
        DATA,
        B,
        lr,
        steps,
        num_runs=runs,
        seed=4,
        save_every=1,
        replacement=replacement,
        observables={"theta": lambda t, th, a: th},
    )
    for r, key in enumerate(jax.random.split(jax.random.key(4), runs)):
        theta, want = np.zeros(THETA0.shape), [np.zeros(THETA0.shape)]
        for _ in range(steps):
            key, sub = jax.random.split(key)
            idx = np.asarray(jax.random.randint(sub, (B,), 0, N) if replacement else jax.random.permutation(sub, N)[:B])
            theta = theta - lr * X[idx].T @ (X[idx] @ theta - Y[idx]) / B
            want.append(theta)
        assert np.max(np.abs(out["theta"][r] - np.stack(want))) <= 1e-12, r
    assert np.max(np.abs(out["theta"][0] - out["theta"][1])) > 1e-3  # the runs draw different batches


@pytest.fixture(scope="module")
def runs():
    """400 SDE paths (Euler-Maruyama, dt = lr / 4; one compiled program for both rates) and 400 optax SGD
    runs (one vmapped program) at each lr: the loss and theta_0 at t = 1, 2."""
    out = {}
    for lr in LRS:
        sde = sgd_sde(per_sample_loss, DATA, B, lr)
        with default_level():  # the SDE paths' cost is running (the rest compiles at level 0: tests/_xla_level.py)
            tr = solve_sgd_sde(sde, THETA0, (1.0, T), dt=lr / 4, seed=1, **SDE_OPTS)
        sgd = run_sgd(
            per_sample_loss,
            THETA0,
            DATA,
            B,
            lr,
            int(round(T / lr)),
            num_runs=PATHS,
            seed=2,
            save_every=int(round(1 / lr)),
            observables=OBS,
        )
        assert np.allclose(sgd["ts"], [0.0, 1.0, T])
        out[lr] = (
            {k: np.asarray(v)[:, -1] for k, v in tr.observables.items()},
            {k: sgd[k][:, -1] for k in OBS},
            tr.compile_s,
        )
    return out


def test_sde_paths_and_sgd_runs_agree_within_standard_errors(runs):
    """At lr = 0.02 and 0.005 (400 paths, 400 runs each): the mean and the variance of the loss and of theta_0
    at t = 2 agree within 3 standard errors of the difference (measured z, mean / variance: lr = 0.02 loss
    0.19 / -0.15, theta_0 -1.48 / -0.62; lr = 0.005 loss -0.03 / 0.00, theta_0 -0.13 / 1.16). The SDE
    program is compiled once for both rates. The exact mismatch (test_weak_order_one_exact_moments) is
    ~0.07 standard deviations of theta_0 at lr = 0.02, below what 400 paths resolve."""
    zs = {}
    for lr in LRS:
        sde, sgd, _ = runs[lr]
        for name in OBS:
            zs[lr, name] = (_z_mean(sde[name], sgd[name]), _z_var(sde[name], sgd[name]))
    assert all(abs(z) < 3 for pair in zs.values() for z in pair), zs
    assert runs[LRS[1]][2] == 0.0  # no recompilation for the second rate


def test_monte_carlo_matches_the_exact_moments(runs):
    """The SDE paths against the exact moments of Euler-Maruyama at their dt, the SGD runs against the
    exact SGD moments: E, Var of theta_0 and E loss within 4 standard errors (measured |z| <= 1.85). Without
    the factor
    (n - B)/(n - 1) = 0.8 the variances would be 25% off (~3.5 standard errors at 400 paths)."""
    for lr in LRS:
        sde, sgd, _ = runs[lr]
        for sample, ref in ((sde, exact("em", lr)), (sgd, exact("sgd", lr))):
            th, loss = sample["theta0"], sample["loss"]
            assert abs(th.mean() - ref[0]) < 4 * th.std() / np.sqrt(th.size), (lr, th.mean(), ref)
            assert abs(th.var() - ref[1]) < 4 * _se_var(th), (lr, th.var(), ref)
            assert abs(loss.mean() - ref[2]) < 4 * loss.std() / np.sqrt(loss.size), (lr, loss.mean(), ref)


def test_zero_noise_is_gradient_flow():
    """noise=False and batch_size=None: every SDE path is flows.solve's constant-step Euler of
    flows.optim_limits.gradient_flow (mean loss) to 1e-10 (the SDE program of the runs fixture, run to
    t = 0.2: 160 steps of dt = 0.00125; the horizon is an argument of that program and every path is the
    same, so the check does not need the 1600 steps to t = 2, whose two runs cost 3 s)."""

    def mean_loss(theta, data):
        return jnp.mean(jax.vmap(per_sample_loss, in_axes=(None, 0))(theta, data))

    dt = LRS[1] / 4
    limit = gradient_flow(mean_loss)

    def on_batch(f):
        return lambda t, y, a: f(t, y, {"data": a["batch"]})

    ode_obs = {k: on_batch(f) for k, f in OBS.items()}
    ts = (0.1, 0.2)
    ode = flows.solve(
        limit.vector_field,
        THETA0,
        t1=ts[-1],
        ts=ts,
        args=limit.make_args(DATA),
        dt0=dt,
        constant_step=True,
        solver="euler",
        observables=ode_obs,
    )
    assert int(ode.num_steps) == 160
    for sde in (sgd_sde(per_sample_loss, DATA, B, LRS[0], noise=False), sgd_sde(per_sample_loss, DATA, None, 0.1)):
        assert float(sde.args["scale"]) == 0.0
        with default_level():  # the runs fixture's program
            tr = solve_sgd_sde(sde, THETA0, ts, dt=dt, seed=1, **SDE_OPTS)
        for name in OBS:
            assert (
                np.max(np.abs(np.asarray(tr.observables[name]) - np.asarray(ode.observables[name])[None])) <= 1e-10
            ), name


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: sgd_sde(3.0, DATA, 4, 0.1), "per_sample_loss"),
        (lambda: sgd_sde(per_sample_loss, DATA, 0, 0.1), "batch_size"),
        (lambda: sgd_sde(per_sample_loss, DATA, 17, 0.1), "batch_size"),
        (lambda: sgd_sde(per_sample_loss, DATA, 4, 0.0), "lr"),
        (lambda: sgd_sde(per_sample_loss, DATA, 4, 0.1, replacement=1), "replacement"),
        (lambda: sgd_sde(per_sample_loss, {"x": DATA["x"], "y": DATA["y"][:5]}, 4, 0.1), "data"),
        (lambda: sgd_sde(per_sample_loss, {"x": DATA["x"][:1], "y": DATA["y"][:1]}, 1, 0.1), "data"),
        (lambda: solve_sgd_sde("sde", THETA0, (1.0,), dt=0.1, seed=0), "sde"),
        (lambda: run_sgd(per_sample_loss, THETA0, DATA, 4, 0.1, 10, num_runs=0, observables=OBS), "num_runs"),
        (
            lambda: run_sgd(per_sample_loss, THETA0, DATA, 4, 0.1, 10, num_runs=2, save_every=3, observables=OBS),
            "save_every",
        ),
        (lambda: run_sgd(per_sample_loss, THETA0, DATA, 4, 0.1, 10, num_runs=2, observables={}), "observables"),
    ],
)
def test_bad_arguments_name_the_field(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_solve_sgd_sde_forwards_its_options_to_solve_sde():
    """The options of `solve_sgd_sde` are `flows.solve_sde`'s: an unknown one is a TypeError naming it, and a
    given one reaches the solver (`num_paths` sets the leading axis of the saved states)."""
    sde = sgd_sde(per_sample_loss, DATA, 4, 0.1)
    with pytest.raises(TypeError, match="num_path"):
        solve_sgd_sde(sde, THETA0, (0.2,), dt=0.1, seed=0, num_path=2)
    tr = solve_sgd_sde(sde, THETA0, (0.2,), dt=0.1, seed=0, num_paths=3)
    assert jax.tree_util.tree_leaves(tr.ys)[0].shape[:2] == (3, 1)


def test_batch_size_above_n_allowed_with_replacement():
    sde = sgd_sde(per_sample_loss, DATA, 32, 0.1, replacement=True)
    assert float(sde.args["scale"]) == pytest.approx(0.1 / 32, rel=1e-15) and sde.noise_shape == (N,)
