"""Every entry point that takes a parameter or state pytree works for any pytree of float arrays: dicts and
tuples, nested, a container of one leaf (`{"w": vector}`, which once raised `KeyError: -1`), scalars, vectors,
matrices, and leaves of mixed precisions where the entry point allows them (property-based, tests/fuzzing.py's
habits: derandomized, few examples, since every new structure compiles new programs).

Each result is held against an independent reference:
- closed forms: linear decay y0 exp(-k t) (`flows.solve`, `flows.solve_batch`, over two save chunks so the
  state carried from one chunk to the next is checked too), gradient flow of a quadratic loss c + (theta0 - c)
  exp(-r k t) with per-leaf clocks r, GD on it c + (1 - lr k)^n (theta0 - c), and the exact mean and variance
  of Euler-Maruyama on an Ornstein-Uhlenbeck process (Monte Carlo, 5 standard errors);
- the same problem on the flattened array (`jax.flatten_util.ravel_pytree`; a bare 1-D state always worked):
  the SDEs path by path on the same key, heavy ball, sign descent and the Adam ODE, optax Adam, minibatch SGD
  on the same batch keys, the SGD SDE and the Adam SDE.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st
from jax.flatten_util import ravel_pytree

import flows
from flows import optim_limits as ol
from flows._chunked import SAVE_CHUNK
from tests.fuzzing import ENTRY

#: Few examples: each new tree structure compiles new programs (about 1 s each on 2 cores), and no shrinking
#: (each step would compile again: minutes; the failing example is reported as drawn). The default run: the
#: explicit examples per entry point (the suite's time); `-m slow`: 20 drawn ones besides.
TREES = settings(ENTRY, max_examples=1, phases=(Phase.explicit,))
TREES_MANY = settings(TREES, max_examples=20, phases=(Phase.explicit, Phase.generate))
SHAPES = ((), (1,), (3,), (2, 2), (1, 3), (2, 3))
KEYS = ("w", "b", "a", "kernel")  # not in sorted order: jax sorts dict keys, the references must agree
F64, F32 = "float64", "float32"


@st.composite
def _nest(draw, leaves):
    """The indices `leaves` arranged in dicts and tuples: a bare index for one leaf (sometimes), else a container
    whose children are consecutive runs of the indices (each nested the same way)."""
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    cuts = sorted(draw(st.sets(st.integers(1, len(leaves) - 1), max_size=len(leaves) - 1))) if len(leaves) > 1 else []
    runs = [leaves[i:j] for i, j in zip([0, *cuts], [*cuts, len(leaves)], strict=True)]
    if len(runs) == 1 and len(leaves) > 1:
        runs = [leaves[:1], leaves[1:]]
    children = [draw(_nest(run)) for run in runs]
    if draw(st.booleans()):
        names = draw(st.permutations(KEYS))
        return dict(zip(names, children, strict=False))
    return tuple(children)


@st.composite
def trees(draw, *, mixed: bool):
    """(structure, shapes, dtypes, seed): a nesting of leaf indices, one shape and one dtype per leaf (float32
    beside float64 only with `mixed`), and a seed for the values."""
    n = draw(st.integers(1, 4))
    spec = draw(_nest(list(range(n))))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n)]
    dtypes = [draw(st.sampled_from((F64, F32))) if mixed else F64 for _ in range(n)]
    return spec, shapes, dtypes, draw(st.integers(0, 2**16))


#: the issue's case (one vector in a dict), a tuple of mixed precisions, a nested dict of scalars and matrices
ONE_VECTOR = ({"w": 0}, [(3,)], [F64], 0)
MIXED_TUPLE = ((0, 1), [(3,), (2, 2)], [F64, F32], 1)
NESTED = ({"w": {"kernel": 0, "b": 1}, "a": (2,)}, [(2, 3), (), (1,)], [F64, F64, F64], 2)


def build(case, draw_values, *, low=-1.0, high=1.0):
    """The pytree of `case` with values uniform in [low, high) from the rng `draw_values` (numpy, float64 before
    the cast)."""
    spec, shapes, dtypes, _ = case
    leaves = [jnp.asarray(draw_values.uniform(low, high, size=s), dtype=d) for s, d in zip(shapes, dtypes, strict=True)]
    return jax.tree_util.tree_map(lambda i: leaves[i], spec)


def rng_of(case):
    return np.random.default_rng(case[3])


def leaves64(tree):
    return [np.asarray(x, dtype=np.float64) for x in jax.tree_util.tree_leaves(tree)]


def assert_close(got, want, case, *, f64: float, f32: float):
    """Leaf by leaf (same structure), |got - want| <= tol * (1 + |want|): `f64` for float64 leaves, `f32` for
    float32 ones (their rounding)."""
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    in_tree_order = [case[2][i] for i in jax.tree_util.tree_leaves(case[0])]  # dict keys are sorted
    for g, w, d in zip(leaves64(got), leaves64(want), in_tree_order, strict=True):
        assert g.shape == w.shape, (g.shape, w.shape)
        tol = f64 if d == F64 else f32
        err = np.max(np.abs(g - w) / (1.0 + np.abs(w)), initial=0.0)
        assert err <= tol, (err, tol, case)


def one_dtype(case) -> bool:
    return len(set(case[2])) == 1


def solver_tols(case):
    """Tight tolerances where a leaf is float64 (the solve then runs in float64: diffrax promotes mixed
    precisions), float32's otherwise."""
    return dict(rtol=1e-10, atol=1e-12) if F64 in case[2] else dict(rtol=1e-5, atol=1e-7)


def decay(t, y, k):
    return jax.tree_util.tree_map(lambda a, kk: -kk.astype(a.dtype) * a, y, k)


def sq_norm(t, y, k):
    return sum(jnp.sum(x.astype(jnp.float64) ** 2) for x in jax.tree_util.tree_leaves(y))


def f32_tol(case) -> float:
    """The tolerance of a float32 leaf: its rounding where the solve runs in float64 (a float64 leaf beside it),
    the float32 solve's tolerances otherwise."""
    return 1e-6 if F64 in case[2] else 1e-4


def leaves_like(tree):
    """`tree` with float64 numpy leaves (the references' precision)."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=np.float64), tree)


def ravel(tree):
    """`ravel_pytree` (a float64 vector from leaves of mixed precisions, also under strict promotion)."""
    with jax.numpy_dtype_promotion("standard"):
        return ravel_pytree(tree)


def flat_of(tree):
    return np.concatenate([x.ravel() for x in leaves64(tree)])


# -- flows.solve, flows.solve_batch ------------------------------------------------------------------------


def check_solve(case):
    """dy/dt = -k y leaf by leaf: flows.solve over SAVE_CHUNK + 6 save times (two chunks: the second starts from
    the state the first ended in) against y0 exp(-k t), the saved states in y0's structure and dtypes, an
    observable (|y|^2) against its closed form; flows.solve_batch over (y0, k) and (-y0, 2k) likewise."""
    rng = rng_of(case)
    y0, k = build(case, rng), build(case, rng, low=0.5, high=2.0)
    ts = np.linspace(0.0, 1.0, SAVE_CHUNK + 6)

    def closed(y, kk, t):
        return jax.tree_util.tree_map(
            lambda a, b: np.exp(-np.multiply.outer(t, b)) * a, leaves_like(y), leaves_like(kk)
        )

    tr = flows.solve(decay, y0, t1=1.0, ts=ts, args=k, observables={"sq": sq_norm}, **solver_tols(case))
    assert jax.tree_util.tree_map(lambda a: a.dtype, tr.ys) == jax.tree_util.tree_map(lambda a: a.dtype, y0)
    want = closed(y0, k, ts)
    assert_close(tr.ys, want, case, f64=1e-8, f32=f32_tol(case))
    sq = sum(np.sum(w.reshape(len(ts), -1) ** 2, axis=1) for w in leaves64(want))
    np.testing.assert_allclose(
        np.asarray(tr.observables["sq"]), sq, rtol=1e-8 if one_dtype(case) and F64 in case[2] else f32_tol(case)
    )

    stack = lambda a, b: jax.tree_util.tree_map(lambda x, y: jnp.stack([x, y]), a, b)  # noqa: E731
    neg, k2 = jax.tree_util.tree_map(jnp.negative, y0), jax.tree_util.tree_map(lambda x: 2 * x, k)
    batch = flows.solve_batch(
        decay, stack(y0, neg), t1=1.0, ts=ts[::8], args=stack(k, k2), batch_y0=True, **solver_tols(case)
    )
    for i, (y, kk) in enumerate(((y0, k), (neg, k2))):
        assert_close(batch[i].ys, closed(y, kk, ts[::8]), case, f64=1e-8, f32=f32_tol(case))


@TREES
@given(case=trees(mixed=True))
@example(case=ONE_VECTOR)
@example(case=MIXED_TUPLE)
def test_solve_and_solve_batch_on_any_pytree(case):
    check_solve(case)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=True))
def test_solve_and_solve_batch_on_many_pytrees(case):
    check_solve(case)


# -- flows.solve_sde: additive noise and the general (Itô) diffusion ----------------------------------------

PATHS, DT, STEPS = 1000, 0.05, 20  # to t = 1


def check_additive_sde(case, brownian):
    """dy = -k y dt + sigma dW (Euler-Maruyama), sigma a pytree like y0: over PATHS paths the mean and the
    variance of every entry at t = 1 against the exact ones of the scheme, y0 (1 - k dt)^N and
    sigma^2 dt sum_j (1 - k dt)^(2j) (5 standard errors; a sigma on the wrong leaf changes a variance up to 25x),
    no correlation between two entries (independent noise); a state of one dtype also path by path against the
    same problem on the flattened array with the same key (1e-12), with the Brownian motion `brownian`."""
    rng = rng_of(case)
    y0, k, sigma = build(case, rng), build(case, rng, low=0.5, high=2.0), build(case, rng, low=0.2, high=1.0)
    opts = dict(t1=1.0, dt=DT, args=k)
    if one_dtype(case):
        one = flows.solve_sde(decay, y0, sigma=sigma, seed=3, brownian=brownian, **opts)
        flat_y0, unravel = ravel(y0)
        flat = flows.solve_sde(
            lambda t, z, kk: -kk * z,
            flat_y0,
            sigma=ravel(sigma)[0],
            seed=3,
            brownian=brownian,
            **{**opts, "args": ravel(k)[0]},
        )
        assert_close(one.ys, jax.vmap(unravel)(flat.ys), case, f64=1e-12, f32=1e-6)
    paths = flows.solve_sde(decay, y0, sigma=sigma, seed=4, num_paths=PATHS, brownian="increments", **opts)
    assert jax.tree_util.tree_map(lambda a: a.dtype, paths.ys) == jax.tree_util.tree_map(lambda a: a.dtype, y0)
    end = np.concatenate([x[:, -1].reshape(PATHS, -1) for x in leaves64(paths.ys)], axis=1)  # (paths, entries)
    a, s = 1.0 - DT * flat_of(k), flat_of(sigma)
    mean = flat_of(y0) * a**STEPS
    var = s**2 * DT * np.sum(a[None, :] ** (2 * np.arange(STEPS)[:, None]), axis=0)
    assert np.all(np.abs(end.mean(0) - mean) <= 5 * np.sqrt(var / PATHS)), (end.mean(0), mean)
    assert np.all(np.abs(end.var(0) / var - 1) <= 5 * np.sqrt(2 / PATHS)), (end.var(0), var)
    if end.shape[1] > 1:
        corr = np.corrcoef(end.T)[np.triu_indices(end.shape[1], 1)]
        assert np.all(np.abs(corr) <= 5 / np.sqrt(PATHS)), corr


@pytest.mark.slow  # the pytree path is the solve core's: test_solve_and_solve_batch_on_any_pytree
@TREES
@given(case=trees(mixed=True), brownian=st.sampled_from(("tree", "increments")))
@example(case=ONE_VECTOR, brownian="tree")
@example(case=MIXED_TUPLE, brownian="increments")
def test_additive_sde_on_any_pytree(case, brownian):
    check_additive_sde(case, brownian)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=True), brownian=st.sampled_from(("tree", "increments")))
def test_additive_sde_on_many_pytrees(case, brownian):
    check_additive_sde(case, brownian)


def check_general_diffusion(case, m):
    """dy = -k y dt + (B y) dW with W of shape (m,), the diffusion a pytree of leaf.shape + (m,) arrays B_leaf
    * y_leaf (multiplicative): path by path (two paths, one key) against the same SDE on the flattened array,
    whose diffusion is the rows of every B_leaf in ravel order (1e-12)."""
    rng = rng_of(case)
    y0, k = build(case, rng), build(case, rng, low=0.5, high=2.0)
    b = jax.tree_util.tree_map(lambda x: jnp.asarray(rng.normal(size=x.shape + (m,))), y0)
    opts = dict(noise_shape=(m,), t1=1.0, dt=DT, ts=[0.5, 1.0], seed=5, num_paths=2, brownian="increments")
    tree = flows.solve_sde(
        lambda t, y, a: decay(t, y, a["k"]),
        y0,
        diffusion=lambda t, y, a: jax.tree_util.tree_map(lambda x, bl: bl * x[..., None], y, a["b"]),
        args={"k": k, "b": b},
        **opts,
    )
    flat_y0, unravel = ravel(y0)
    rows = jnp.concatenate([x.reshape(-1, m) for x in jax.tree_util.tree_leaves(b)], axis=0)
    flat = flows.solve_sde(
        lambda t, z, a: -a["k"] * z,
        flat_y0,
        diffusion=lambda t, z, a: a["rows"] * z[:, None],
        args={"k": ravel(k)[0], "rows": rows},
        **opts,
    )
    assert_close(tree.ys, jax.vmap(jax.vmap(unravel))(flat.ys), case, f64=1e-12, f32=1e-6)


@pytest.mark.slow  # the pytree path is the solve core's: test_solve_and_solve_batch_on_any_pytree
@TREES
@given(case=trees(mixed=False), m=st.integers(1, 3))
@example(case=ONE_VECTOR, m=2)
@example(case=NESTED, m=1)
def test_general_diffusion_on_any_pytree(case, m):
    check_general_diffusion(case, m)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=False), m=st.integers(1, 3))
def test_general_diffusion_on_many_pytrees(case, m):
    check_general_diffusion(case, m)


# -- the optimiser limits: gradient flow (closed form), heavy ball, sign descent, Adam (flattened) ----------


def quadratic(case, rng):
    """(theta0, loss, k, c): L = sum over the leaves of 1/2 sum k (theta - c)^2 (in float64) times the batch (a
    number)."""
    theta0, k, c = build(case, rng), build(case, rng, low=0.5, high=2.0), build(case, rng)

    def loss(theta, batch):
        terms = jax.tree_util.tree_map(
            lambda th, kk, cc: 0.5 * jnp.sum(kk.astype(F64) * (th.astype(F64) - cc.astype(F64)) ** 2), theta, k, c
        )
        return sum(jax.tree_util.tree_leaves(terms)) * batch

    return theta0, loss, k, c


LIMITS = {  # name -> (factory, make_args keywords)
    "momentum": (ol.heavy_ball, {"friction": 2.0}),
    "sign": (ol.sign_descent, {"eps": 0.5}),
    "adam": (ol.adam, {"c1": 2.0, "c2": 3.0, "eps": 0.1}),
}


def check_limits(case, name):
    """solve_limit on a quadratic loss: gradient flow with per-leaf clocks r (`rates`, a pytree like theta) against
    c + (theta0 - c) exp(-r k t); the limit `name` (heavy ball, sign descent or the Adam ODE) against the same
    limit of the loss of the flattened parameters (1e-7: the two states differ in layout, so do the steps)."""
    rng = rng_of(case)
    theta0, loss, k, c = quadratic(case, rng)
    ts, batch = np.linspace(0.0, 1.0, 5), jnp.asarray(1.0)
    rates = jax.tree_util.tree_map(lambda x: float(rng.choice([0.5, 1.0, 2.0])), theta0)
    gf = ol.gradient_flow(loss)
    got = gf.params(ol.solve_limit(gf, theta0, gf.make_args(batch, rates=rates), ts, **solver_tols(case)).ys)
    want = jax.tree_util.tree_map(
        lambda th, kk, cc, r: cc + (th - cc) * np.exp(-r * np.multiply.outer(ts, kk)),
        leaves_like(theta0),
        leaves_like(k),
        leaves_like(c),
        rates,
    )
    assert_close(got, want, case, f64=1e-8, f32=f32_tol(case))

    factory, kw = LIMITS[name]
    flat0, unravel = ravel(theta0)
    limit, flat_limit = factory(loss), factory(lambda z, b: loss(unravel(z), b))
    got = limit.params(ol.solve_limit(limit, theta0, limit.make_args(batch, **kw), ts, **solver_tols(case)).ys)
    ref = flat_limit.params(
        ol.solve_limit(flat_limit, flat0, flat_limit.make_args(batch, **kw), ts, **solver_tols(case)).ys
    )
    assert_close(got, jax.vmap(unravel)(ref), case, f64=1e-7, f32=f32_tol(case) * 10)


@pytest.mark.slow  # the pytree path is the solve core's: test_solve_and_solve_batch_on_any_pytree
@TREES
@given(case=trees(mixed=True), name=st.sampled_from(sorted(LIMITS)))
@example(case=ONE_VECTOR, name="adam")
@example(case=MIXED_TUPLE, name="momentum")
def test_optimizer_limits_on_any_pytree(case, name):
    check_limits(case, name)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=True), name=st.sampled_from(sorted(LIMITS)))
def test_optimizer_limits_on_many_pytrees(case, name):
    check_limits(case, name)


# -- run_optax, run_sgd -----------------------------------------------------------------------------------


def check_runs(case, which):
    """run_optax: GD on the quadratic against c + (1 - lr k)^n (theta0 - c); then `which`: optax Adam against
    Adam on the flattened parameters, or run_sgd (two runs) against the same runs of the flattened problem
    (the same batch keys: the same batches), at the saved steps."""
    rng = rng_of(case)
    theta0, loss, k, c = quadratic(case, rng)
    lr, steps, one = 0.1, 10, jnp.asarray(1.0)
    gd = ol.run_optax(loss, theta0, one, optax.sgd(lr), steps, 5)
    n = gd["steps"].astype(float)
    want = jax.tree_util.tree_map(
        lambda th, kk, cc: cc + np.moveaxis(np.power.outer(1.0 - lr * kk, n), -1, 0) * (th - cc),
        leaves_like(theta0),
        leaves_like(k),
        leaves_like(c),
    )
    assert_close(gd["params"], want, case, f64=1e-12, f32=1e-5)

    flat0, unravel = ravel(theta0)
    if which == "adam":
        adam = ol.run_optax(loss, theta0, one, optax.adam(lr), steps, 5)
        flat = ol.run_optax(lambda z, b: loss(unravel(z), b), flat0, one, optax.adam(lr), steps, 5)
        assert_close(adam["params"], jax.vmap(unravel)(flat["params"]), case, f64=1e-12, f32=1e-5)
        return

    def per_sample(theta, s):  # the quadratic with its centre moved by the sample
        return loss(jax.tree_util.tree_map(lambda th: th - s.astype(th.dtype), theta), one)

    data = jnp.asarray(rng.normal(size=8))
    opts = dict(num_runs=2, seed=7, save_every=5, observables={"theta": lambda t, th, a: ravel(th)[0]})
    runs = ol.run_sgd(per_sample, theta0, data, 3, lr, steps, **opts)
    flat_runs = ol.run_sgd(lambda z, s: per_sample(unravel(z), s), flat0, data, 3, lr, steps, **opts)
    np.testing.assert_array_equal(runs["steps"], flat_runs["steps"])
    for r in range(2):
        got, ref = (jax.vmap(unravel)(x["theta"][r]) for x in (runs, flat_runs))
        assert_close(got, ref, case, f64=1e-12, f32=1e-5)


@TREES
@given(case=trees(mixed=True), which=st.sampled_from(("adam", "sgd")))
@example(case=ONE_VECTOR, which="sgd")
@example(case=MIXED_TUPLE, which="adam")
def test_run_optax_and_run_sgd_on_any_pytree(case, which):
    check_runs(case, which)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=True), which=st.sampled_from(("adam", "sgd")))
def test_run_optax_and_run_sgd_on_many_pytrees(case, which):
    check_runs(case, which)


# -- the SDE limits: the SGD SDE, the Adam SDE ------------------------------------------------------------


def check_sde_limits(case, which):
    """The SGD SDE (`which="sgd"`: solve_sgd_sde, two paths) or the Adam SDE (`"adam"`: flows.solve_sde of its
    fields) of a per-sample quadratic, path by path against the same SDE of the flattened parameters on the
    same key (the noise W has the shape (n,) of the data whatever the layout of the state: the same paths),
    1e-12."""
    rng = rng_of(case)
    theta0, loss, _, _ = quadratic(case, rng)
    data = jnp.asarray(rng.normal(size=4))
    flat0, unravel = ravel(theta0)

    def per_sample(theta, s):
        return loss(jax.tree_util.tree_map(lambda th: th - s, theta), jnp.asarray(1.0))

    flat_per_sample = lambda z, s: per_sample(unravel(z), s)  # noqa: E731
    ts = [0.5, 1.0]
    if which == "sgd":
        tree = ol.solve_sgd_sde(ol.sgd_sde(per_sample, data, 2, 0.1), theta0, ts, dt=DT, seed=1, num_paths=2)
        flat = ol.solve_sgd_sde(ol.sgd_sde(flat_per_sample, data, 2, 0.1), flat0, ts, dt=DT, seed=1, num_paths=2)
        assert_close(tree.ys, jax.vmap(jax.vmap(unravel))(flat.ys), case, f64=1e-12, f32=1e-6)
        return
    runs = []
    for fn, th0 in ((per_sample, theta0), (flat_per_sample, flat0)):
        sde = ol.adam_sde(fn, data, c1=2.0, c2=3.0, sigma0=0.5, eps0=0.1)
        opts = dict(diffusion=sde.diffusion, noise_shape=sde.noise_shape, args=sde.args, t1=1.0, dt=DT, ts=ts, seed=2)
        opts["brownian"] = "increments"
        runs.append(sde.params(flows.solve_sde(sde.drift, sde.initial_state(th0), **opts).ys))
    assert_close(runs[0], jax.vmap(unravel)(runs[1]), case, f64=1e-12, f32=1e-6)


@pytest.mark.slow  # the pytree path is the solve core's: test_solve_and_solve_batch_on_any_pytree
@TREES
@given(case=trees(mixed=False), which=st.sampled_from(("sgd", "adam")))
@example(case=ONE_VECTOR, which="adam")
@example(case=NESTED, which="sgd")
def test_sde_limits_on_any_pytree(case, which):
    check_sde_limits(case, which)


@pytest.mark.slow
@TREES_MANY
@given(case=trees(mixed=False), which=st.sampled_from(("sgd", "adam")))
def test_sde_limits_on_many_pytrees(case, which):
    check_sde_limits(case, which)
