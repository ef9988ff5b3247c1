"""flows.solve_sde: additive-noise SDEs with diffrax (OU moments over many paths, strong order on a shared
Brownian path, sigma = 0 is the ODE solve, reproducible keys, failures and bad arguments)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flows
from flows.sde import STRONG_ORDER, solve_sde
from tests._xla_level import default_level

A, S, Y0 = 1.5, 0.7, 1.0
TS = (0.25, 0.5, 1.0)
# one compiled program (shapes, batch of 2000 keys, tol, max_steps) shared by the OU and strong-order tests
BATCH = dict(t1=1.0, ts=TS, tol=2.0**-10, max_steps=2**8 + 1)


def scalar_drift(t, y, args):
    """-a y (OU) plus b (sin y - y^3 / 2 + cos t) (nonlinear)."""
    return -args["a"] * y + args["b"] * (jnp.sin(y) - 0.5 * y**3 + jnp.cos(t))


def tree_drift(t, y, args):
    """A pytree ODE; with args["p"] > 0 and a large y["b"] it blows up (b' ~ p b^3)."""
    return {
        "a": jnp.sin(y["a"]) - 0.5 * y["a"] ** 3 + jnp.cos(t),
        "b": -y["b"] * jnp.sum(y["a"]) + args["p"] * y["b"] ** 3,
    }


def tree_y0(b=1.2):
    return {"a": jnp.array([0.5, -0.3, 0.1]), "b": jnp.array([b, 0.4])}


ARGS_OU = {"a": jnp.asarray(A), "b": jnp.asarray(0.0)}
ARGS_NL = {"a": jnp.asarray(0.0), "b": jnp.asarray(1.0)}
KEYS = jax.random.split(jax.random.key(3), 2000)


@pytest.fixture(scope="module")
def ou_paths():
    """2000 independent Euler-Maruyama paths of the OU process at dt = 2^-6 (one vmapped program), compiled
    at XLA's default level: the program of the Monte Carlo strong-order test (marked xla_default), which
    then compiles nothing (at level 0 here, that test compiled the program a second time: 7.6 s, and these
    paths ran 3.4 s instead of 0.6 s)."""
    with default_level():  # a module fixture: built before conftest's per-test switch (tests/_xla_level.py)
        return solve_sde(scalar_drift, jnp.array([Y0]), args=ARGS_OU, sigma=S, dt=2.0**-6, key=KEYS, **BATCH)


def test_ou_mean_and_variance_match_closed_forms(ou_paths):
    """mean e^{-a t} y0 and variance s^2 (1 - e^{-2 a t}) / (2 a) within 4 standard errors (measured: all
    within 1.6 SE; Euler-Maruyama's O(dt) bias is below the 2000-path noise)."""
    assert ou_paths.ok and ou_paths.ys.shape == (2000, 3, 1)
    ys = np.asarray(ou_paths.ys)[:, :, 0]
    n = ys.shape[0]
    for i, t in enumerate(TS):
        mean, var = np.exp(-A * t) * Y0, S**2 * (1 - np.exp(-2 * A * t)) / (2 * A)
        se_mean = np.sqrt(var / n)
        se_var = var * np.sqrt(2.0 / (n - 1))
        assert abs(ys[:, i].mean() - mean) < 4 * se_mean, (t, ys[:, i].mean(), mean)
        assert abs(ys[:, i].var(ddof=1) - var) < 4 * se_var, (t, ys[:, i].var(ddof=1), var)
    # the batched record: per-path statuses, leading path axis, indexable
    assert len(ou_paths.status) == 2000 and ou_paths[7].status == "ok"
    assert ou_paths.ts.shape == (2000, 3) and int(ou_paths.num_steps[0]) == 64


@pytest.mark.xla_default  # Monte Carlo: its cost is running (tests/conftest.py)
def test_euler_maruyama_strong_and_weak_order_one_for_additive_noise(ou_paths):
    """Nonlinear drift, sigma = 0.8: RMS error at t = 0.25, 0.5, 1 against dt = 2^-8 on the SAME Brownian
    paths (2000 keys, one VirtualBrownianTree tol) for dt = 2^-3 .. 2^-5; the fitted slope of log error vs
    log dt is Euler-Maruyama's strong order 1 for additive noise (order 1/2 would give ~0.5). Same program
    as the OU fixture (other args), so no new compilation."""
    opts = dict(args=ARGS_NL, sigma=0.8, key=KEYS, **BATCH)
    y0 = jnp.array([0.5])
    fine = solve_sde(scalar_drift, y0, dt=2.0**-8, **opts)
    assert fine.compile_s == 0.0  # the fixture's program
    ref = np.asarray(fine.ys)
    ks = np.arange(3, 6)
    ys = [np.asarray(solve_sde(scalar_drift, y0, dt=2.0**-k, **opts).ys) for k in ks]
    errs = np.array([np.sqrt(np.mean((y - ref) ** 2)) for y in ys])
    slope = np.polyfit(-ks * np.log(2.0), np.log(errs), 1)[0]
    assert 0.8 <= slope <= 1.3, (errs, slope)  # measured 1.13 (errors 0.052, 0.023, 0.011)
    assert STRONG_ORDER["euler"] == 1.0
    # weak error of E[y(1)^2] on the same (common) paths: order 1 too (measured slope 1.05, errors 0.053,
    # 0.029, 0.012, each > 10 standard errors of the paired difference)
    diffs = [y[:, -1, 0] ** 2 - ref[:, -1, 0] ** 2 for y in ys]
    weak = np.array([abs(np.mean(g)) for g in diffs])
    assert all(w > 4 * np.std(g) / np.sqrt(g.size) for w, g in zip(weak, diffs, strict=True)), weak
    weak_slope = np.polyfit(-ks * np.log(2.0), np.log(weak), 1)[0]
    assert 0.7 <= weak_slope <= 1.5, (weak, weak_slope)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("solver", "lo", "hi"), [("heun", 0.8, 1.3), ("sea", 0.8, 1.6), ("sra1", 1.4, 2.5), ("shark", 1.4, 2.5)]
)
def test_strong_orders_of_the_other_solvers(solver, lo, hi):
    """dt = 2^-3 .. 2^-6 against 2^-10 on 256 shared paths (measured slopes: heun 1.00, sea 1.07, sra1 1.85,
    shark 1.85; the claimed additive-noise strong orders are 1, 1, 1.5, 1.5)."""
    keys = jax.random.split(jax.random.key(3), 256)
    opts = dict(args=ARGS_NL, sigma=0.8, t1=1.0, key=keys, tol=2.0**-12, max_steps=2**10 + 1, solver=solver)
    y0 = jnp.array([0.5, -0.3])
    ref = np.asarray(solve_sde(scalar_drift, y0, dt=2.0**-10, **opts).ys)
    ks = np.arange(3, 7)
    errs = np.array(
        [np.sqrt(np.mean((np.asarray(solve_sde(scalar_drift, y0, dt=2.0**-k, **opts).ys) - ref) ** 2)) for k in ks]
    )
    slope = np.polyfit(-ks * np.log(2.0), np.log(errs), 1)[0]
    assert lo <= slope <= hi, (solver, errs, slope)
    assert slope >= STRONG_ORDER[solver] - 0.2


TREE = dict(t1=1.0, dt=0.05, ts=np.linspace(0.0, 1.0, 6), args={"p": jnp.asarray(0.0)})


def test_zero_noise_is_the_ode_solve():
    """sigma = 0 equals flows.solve(..., solver="euler", constant_step=True) to 1e-12 (pytree state)."""
    sde = solve_sde(tree_drift, tree_y0(), sigma=0.0, seed=1, **TREE)
    ode = flows.solve(
        tree_drift, tree_y0(), t1=1.0, ts=TREE["ts"], args=TREE["args"], dt0=0.05, constant_step=True, solver="euler"
    )
    for k in ("a", "b"):
        assert np.max(np.abs(np.asarray(sde.ys[k]) - np.asarray(ode.ys[k]))) <= 1e-12, k
    assert int(sde.num_steps) == int(ode.num_steps) == 20


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["heun", "sea", "sra1", "shark"])
def test_zero_noise_is_a_deterministic_solve(solver):
    """heun: flows.solve's Heun to 1e-12; the Levy-area solvers at sigma = 0: a consistent ODE solve."""
    sde = solve_sde(tree_drift, tree_y0(), sigma=0.0, seed=1, solver=solver, **TREE)
    if solver == "heun":
        ode = flows.solve(
            tree_drift, tree_y0(), t1=1.0, ts=TREE["ts"], args=TREE["args"], dt0=0.05, constant_step=True, solver="heun"
        )
    else:
        ode = flows.solve(
            tree_drift, tree_y0(), t1=1.0, ts=TREE["ts"], args=TREE["args"], solver="dopri8", rtol=1e-12, atol=1e-12
        )
    # SEA treats the drift at first order (measured 0.016 at dt = 0.05, like Euler); SRA1, ShARK: second order
    tol = {"heun": 1e-12, "sea": 3e-2, "sra1": 1e-2, "shark": 1e-2}[solver]
    for k in ("a", "b"):
        assert np.max(np.abs(np.asarray(sde.ys[k]) - np.asarray(ode.ys[k]))) <= tol, k


@pytest.mark.parametrize("brownian", [pytest.param("tree", marks=pytest.mark.slow), "increments"])
def test_brownian_paths_are_diffrax_on_the_callers_key(brownian):
    """dy = dW (zero drift, Euler): y(t) is the sum of the Brownian increments, so it is W(t) of the diffrax
    Brownian motion built on the caller's plain threefry key (solve_sde draws through flows._prng.fused):
    `VirtualBrownianTree(0, 1, tol=dt / 8).evaluate(0, t)`, or the sum of `UnsafeBrownianPath.evaluate` over
    the steps, to 1e-12, for two keys of a batch and for the single key."""
    import diffrax

    dt, ts = 2.0**-4, (0.5, 1.0)
    keys = jax.random.split(jax.random.key(11), 2)
    zero = lambda t, y, a: jnp.zeros_like(y)  # noqa: E731
    shape = jax.ShapeDtypeStruct((3,), jnp.float64)

    def brownian_at(key, t):
        if brownian == "tree":
            bm = diffrax.VirtualBrownianTree(
                0.0, 1.0, tol=dt / 8, shape=shape, key=key, levy_area=diffrax.BrownianIncrement
            )
            return np.asarray(bm.evaluate(0.0, t))
        bm = diffrax.UnsafeBrownianPath(shape=shape, key=key, levy_area=diffrax.BrownianIncrement)
        grid = np.arange(int(round(t / dt)) + 1) * dt
        return sum(np.asarray(bm.evaluate(a, b)) for a, b in zip(grid[:-1], grid[1:], strict=True))

    batch = solve_sde(
        zero, jnp.zeros(3), sigma=1.0, t1=1.0, ts=ts, dt=dt, key=keys, brownian=brownian, save_states=True
    )
    one = solve_sde(
        zero, jnp.zeros(3), sigma=1.0, t1=1.0, ts=ts, dt=dt, key=keys[1], brownian=brownian, save_states=True
    )
    for p, key in enumerate(keys):
        want = np.stack([brownian_at(key, t) for t in ts])
        assert np.max(np.abs(np.asarray(batch.ys)[p] - want)) <= 1e-12, p
        assert np.max(np.abs(want)) > 0.1  # a non-trivial path
    assert np.max(np.abs(np.asarray(one.ys) - np.asarray(batch.ys)[1])) <= 1e-12


def test_keys_reproducible_and_sigma_pytree():
    """Same seed (or the same key) -> the same path; another seed -> another; sigma per coordinate (a zero
    entry leaves its coordinate deterministic). Reuses the program of test_zero_noise_is_the_ode_solve."""
    sigma = {"a": jnp.array([0.0, 1.0, 2.0]), "b": 0.5}
    one = solve_sde(tree_drift, tree_y0(), sigma=sigma, seed=5, **TREE)
    same = solve_sde(tree_drift, tree_y0(), sigma=sigma, key=jax.random.key(5), **TREE)
    other = solve_sde(tree_drift, tree_y0(), sigma=sigma, seed=6, **TREE)
    quiet = solve_sde(tree_drift, tree_y0(), sigma=0.0, seed=5, **TREE)
    raw = solve_sde(tree_drift, tree_y0(), sigma=sigma, key=jax.random.PRNGKey(5), **TREE)  # raw uint32 key
    assert np.array_equal(np.asarray(one.ys["b"]), np.asarray(same.ys["b"]))
    assert np.array_equal(np.asarray(one.ys["b"]), np.asarray(raw.ys["b"]))
    assert not np.array_equal(np.asarray(one.ys["b"]), np.asarray(other.ys["b"]))
    assert not np.array_equal(np.asarray(one.ys["a"][:, 2]), np.asarray(quiet.ys["a"][:, 2]))
    # coordinate 0 has no noise and a drift of its own: it is not moved by the others' noise
    assert np.max(np.abs(np.asarray(one.ys["a"][:, 0]) - np.asarray(quiet.ys["a"][:, 0]))) == 0.0
    assert same.compile_s == 0.0 and other.compile_s == 0.0  # one program for every seed and sigma


def test_nonfinite_raises_flow_error():
    """b' ~ b^3 from b = 3 overflows within a few Euler steps (same program as above, other args)."""
    opts = dict(TREE, args={"p": jnp.asarray(1.0)})
    with pytest.raises(flows.FlowError, match="non-finite"):
        solve_sde(tree_drift, tree_y0(3.0), sigma=0.1, seed=0, **opts)
    tr = solve_sde(tree_drift, tree_y0(3.0), sigma=0.1, seed=0, throw=False, **opts)
    assert tr.status == "nonfinite" and not tr.ok and "non-finite" in tr.message


def test_nonfinite_observable_before_t1_is_a_failure():
    """A saved observable that is NaN from t = 0.5 on, the state finite to the end: status nonfinite, the
    message naming the first saved time where it happened."""
    obs = {"late": lambda t, y, a: jnp.where(t > 0.4, jnp.nan, 1.0)}
    tr = solve_sde(
        scalar_drift,
        jnp.asarray(Y0),
        sigma=S,
        seed=0,
        args={"a": A, "b": 0.0},
        dt=0.05,
        t1=1.0,
        ts=TS,
        observables=obs,
        throw=False,
    )
    assert np.isfinite(np.asarray(tr.ys)[-1])
    assert tr.status == "nonfinite" and "by t = 0.5" in tr.message, tr.message


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(sigma=-0.1), "sigma"),
        (dict(sigma={"x": 1.0}), "sigma"),
        (dict(dt=0.0), "dt"),
        (dict(dt=-0.1), "dt"),
        (dict(solver="rk4"), "solver"),
        (dict(ts=[0.0, 1.5]), "ts"),
        (dict(ts=[0.5, 0.2]), "ts"),
        (dict(t1=0.0), "t1"),
        (dict(tol=0.0), "tol"),
        (dict(seed=None), "key"),
        (dict(seed=1.5), "seed"),
        (dict(num_paths=0), "num_paths"),
        (dict(max_steps=3), "max_steps"),
        (dict(save_states=False), "save_states"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, name):
    opts = dict(sigma=0.5, t1=1.0, dt=0.1, seed=0)
    opts.update(kwargs)
    with pytest.raises(ValueError, match=name):
        solve_sde(scalar_drift, jnp.array([1.0]), args=ARGS_OU, **opts)


# ---- general (multiplicative, non-commutative) Itô noise: diffusion=, noise_shape= ----------------------------

LIN_A = np.array([[-0.5, 0.3, 0.0], [-0.2, -0.4, 0.1], [0.0, 0.2, -0.3]])
LIN_B = np.array(
    [[[0.0, 0.6, 0.0], [-0.3, 0.2, 0.0], [0.0, 0.0, 0.4]], [[0.3, 0.0, 0.2], [0.0, 0.0, -0.5], [0.4, 0.1, 0.0]]]
)  # B_1, B_2 do not commute
LIN_Y0 = np.array([1.0, -0.5, 0.8])


def lin_split(y):
    return {"a": y[:2], "b": y[2:]}


def lin_drift(t, y, args):
    return lin_split(args["A"] @ jnp.concatenate([y["a"], y["b"]]))


def lin_diffusion(t, y, args):
    """Column k is B_k y: returns {"a": (2, 2), "b": (1, 2)} (leaf.shape + noise_shape with noise_shape (2,))."""
    z = jnp.concatenate([y["a"], y["b"]])
    return lin_split(jnp.einsum("kij,j->ik", args["B"], z))


def lin_moments(t, stratonovich=False):
    """Exact mean and second moment E[y y^T] of dy = A y dt + sum_k B_k y dW_k (Itô), by the linear moment
    ODEs dm/dt = A m, dM/dt = A M + M A^T + sum_k B_k M B_k^T (row-major vec: kron). Stratonovich: A gets
    the correction + 1/2 sum_k B_k^2."""
    from scipy.linalg import expm

    A = LIN_A + (0.5 * sum(b @ b for b in LIN_B) if stratonovich else 0.0)
    eye = np.eye(3)
    L = np.kron(A, eye) + np.kron(eye, A) + sum(np.kron(b, b) for b in LIN_B)
    mean = expm(A * t) @ LIN_Y0
    second = (expm(L * t) @ np.outer(LIN_Y0, LIN_Y0).ravel()).reshape(3, 3)
    return mean, second


LIN = dict(
    diffusion=lin_diffusion, noise_shape=(2,), t1=1.0, ts=(0.5, 1.0), dt=2.0**-7, num_paths=2000, brownian="increments"
)
LIN_ARGS = {"A": jnp.asarray(LIN_A), "B": jnp.asarray(LIN_B)}


def test_general_noise_moments_are_ito_for_a_pytree_state():
    """2000 Euler-Maruyama paths (Brownian increments) of a 3-D linear SDE with two non-commuting
    multiplicative noises (a pytree state of leaves (2,) and (1,)): the mean and E[y y^T] at t = 0.5, 1 match
    the exact Itô moments within 4 standard errors (measured max |z|: 1.7 for the mean, 1.7 for
    E[y y^T]), and the Stratonovich mean (drift + 1/2 sum B_k^2 y) is rejected (measured max |z| 12.6;
    asserted > 6). The same seed gives the same paths (no new compilation)."""
    tr = solve_sde(lin_drift, lin_split(jnp.asarray(LIN_Y0)), args=LIN_ARGS, seed=11, **LIN)
    assert all(s == "ok" for s in tr.status)
    ys = np.concatenate([np.asarray(tr.ys["a"]), np.asarray(tr.ys["b"])], axis=-1)  # (paths, 2, 3)
    assert ys.shape == (2000, 2, 3)
    n = ys.shape[0]
    z_strat = []
    for i, t in enumerate((0.5, 1.0)):
        mean, second = lin_moments(t)
        y = ys[:, i]
        z = (y.mean(0) - mean) / (y.std(0, ddof=1) / np.sqrt(n))
        assert np.max(np.abs(z)) < 4, (t, z)
        prods = y[:, :, None] * y[:, None, :]
        z2 = (prods.mean(0) - second) / (prods.std(0, ddof=1) / np.sqrt(n))
        assert np.max(np.abs(z2)) < 4, (t, z2)
        z_strat.append((y.mean(0) - lin_moments(t, stratonovich=True)[0]) / (y.std(0, ddof=1) / np.sqrt(n)))
    assert np.max(np.abs(z_strat)) > 6, z_strat
    again = solve_sde(lin_drift, lin_split(jnp.asarray(LIN_Y0)), args=LIN_ARGS, seed=11, **LIN)
    assert again.compile_s == 0.0 and np.array_equal(np.asarray(again.ys["a"]), np.asarray(tr.ys["a"]))


def test_general_noise_zero_factor_is_the_ode_solve():
    """B = 0 (the factor is zero; the program of the moments test, other args): every path is flows.solve's
    constant-step Euler to 1e-12 on the pytree state."""
    tr = solve_sde(
        lin_drift, lin_split(jnp.asarray(LIN_Y0)), args={"A": LIN_ARGS["A"], "B": 0 * LIN_ARGS["B"]}, seed=11, **LIN
    )
    ode = flows.solve(
        lin_drift,
        lin_split(jnp.asarray(LIN_Y0)),
        t1=1.0,
        ts=(0.5, 1.0),
        args=LIN_ARGS,
        dt0=2.0**-7,
        constant_step=True,
        solver="euler",
    )
    for k in ("a", "b"):
        assert np.max(np.abs(np.asarray(tr.ys[k]) - np.asarray(ode.ys[k])[None])) <= 1e-12, k


def test_general_noise_constant_factor_is_the_additive_path(ou_paths):
    """A constant (1, 1) factor S with noise_shape (1,) and the same keys (VirtualBrownianTree of the same
    shape) gives the SAME paths as additive sigma = S (the first 64 paths of the OU fixture: the paths are
    independent per key, and 2000 of them cost 2.7 s of running), to 1e-12 (measured 4e-16, this program at
    XLA level 0, the fixture's at the default level); a single key (no batch) gives path 0's record."""
    const = lambda t, y, a: jnp.full((1, 1), S, y.dtype)  # noqa: E731
    tr = solve_sde(
        scalar_drift,
        jnp.array([Y0]),
        args=ARGS_OU,
        diffusion=const,
        noise_shape=(1,),
        dt=2.0**-6,
        key=KEYS[:64],
        **BATCH,
    )
    assert np.max(np.abs(np.asarray(tr.ys) - np.asarray(ou_paths.ys)[:64])) <= 1e-12
    one = solve_sde(
        scalar_drift, jnp.array([Y0]), args=ARGS_OU, diffusion=const, noise_shape=(1,), dt=2.0**-6, key=KEYS[0], **BATCH
    )
    assert one.status == "ok" and np.max(np.abs(np.asarray(one.ys) - np.asarray(ou_paths.ys)[0])) <= 1e-12


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(sigma=0.5), "exactly one of sigma"),
        (dict(noise_shape=None), "noise_shape"),
        (dict(noise_shape=(0,)), "noise_shape"),
        (dict(noise_shape=(2.0,)), "noise_shape"),
        (dict(noise_shape=(3,)), "leaf.shape"),
        (dict(solver="heun"), "Stratonovich"),
        (dict(brownian="levy"), "brownian"),
        (dict(solver="sea"), "Stratonovich"),
        (dict(solver="sra1"), "additive"),
        (dict(diffusion=3.0), "diffusion must be callable"),
        (dict(diffusion=lambda t, y, a: {"a": y["a"][:, None]}), "structure"),
        (dict(diffusion=lambda t, y, a: 1 / 0), "diffusion"),
    ],
)
def test_general_noise_bad_arguments_name_the_field(kwargs, name):
    opts = dict(LIN, args=LIN_ARGS, seed=0)
    opts.update(kwargs)
    with pytest.raises(ValueError, match=name):
        solve_sde(lin_drift, lin_split(jnp.asarray(LIN_Y0)), **opts)


def test_noise_shape_without_diffusion_is_refused():
    with pytest.raises(ValueError, match="noise_shape goes with diffusion"):
        solve_sde(scalar_drift, jnp.array([1.0]), args=ARGS_OU, sigma=0.5, noise_shape=(2,), t1=1.0, dt=0.1, seed=0)
