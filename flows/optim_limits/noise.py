"""The SGD SDE: the diffusion limit of minibatch SGD, with a low-rank noise factor.

**The limit.** Minibatch SGD with learning rate lr and batch size B on n samples,

    theta_{k+1} = theta_k - lr * g_B(theta_k),     g_B = (1/B) sum_{i in batch} g_i,   g_i = grad l(theta, x_i),

has E[g_B] = grad L (L = (1/n) sum_i l(theta, x_i), the full-batch loss) and Cov[g_B] = c * Sigma(theta) / B
with the per-sample gradient covariance

    Sigma(theta) = (1/n) sum_i (g_i - gbar)(g_i - gbar)^T,       gbar = grad L,

and c = 1 for a batch drawn WITH replacement (B i.i.d. uniform indices), c = (n - B) / (n - 1) for a batch
drawn WITHOUT replacement (B distinct indices, the finite-population correction; c = 0 at B = n, full-batch
GD). On the clock t = lr * step the step is theta(t + lr) = theta(t) - lr grad L + lr * (noise of covariance
c Sigma / B), which is the Euler-Maruyama step of the Itô SDE

    d theta = -grad L(theta) dt + sqrt(lr c / B) * Sigma(theta)^{1/2} dW                    (the SGD SDE)

with time step lr (Li, Tai, E 2017/2019, "Stochastic modified equations and dynamics of stochastic gradient
algorithms", JMLR 20; the weak error of SGD against this SDE over a fixed horizon is O(lr): weak order 1).
The square root is never formed: Sigma = G G^T with the LOW-RANK factor

    G = [g_1 - gbar, ..., g_n - gbar] / sqrt(n)        (P x n, rank <= n - 1),

so the diffusion is `sqrt(lr c / B) * G` acting on an n-dimensional Brownian motion W (one column per
sample): the same law as any other square root of Sigma (the law of G dW is N(0, G G^T dt)), no dense P x P
matrix, cost O(n P) per step. `flows.solve_sde(..., diffusion=, noise_shape=(n,))` solves it (Euler-Maruyama,
the Itô solver; the noise is multiplicative and non-commutative).

**Which sampling our trainers use.** optax only applies updates; the batch is the trainer's choice.
`flows.cooccurrence.train` draws each step's batch as `jax.random.permutation(key, n)[:B]`: B distinct
samples (without replacement within a step), independently across steps, so c = (n - B) / (n - 1)
(`replacement=False`, the default here, and `run_sgd` below draws batches the same way). Scan and Snap
(`flows.scan_snap.train`) samples fresh sequences from the data distribution at every step: the population
is infinite, the batch is i.i.d., c = 1 with Sigma the population covariance of the per-sequence gradient
(`replacement=True` over a finite sample only estimates it).

**Zero noise.** `batch_size=None` (B -> infinity, or full batch) or `noise=False` sets the diffusion scale
to 0: the SDE is then gradient flow, and its Euler-Maruyama solve is `flows.solve`'s constant-step Euler of
`flows.optim_limits.gradient_flow` (a test, to 1e-10).

**A finite population** (`weights=`): when each batch is B i.i.d. draws from a weighted set of samples (a
population with probabilities w_i, e.g. Scan and Snap's enumerated (class, count vector) pairs), c = 1,
L = sum_i w_i l_i and G has the columns sqrt(w_i) (g_i - gbar), gbar = sum_i w_i g_i: the exact population
covariance, not an estimate.

The data are a pytree whose leaves share a leading sample axis n; `per_sample_loss(theta, sample)` is the
loss of ONE sample (a slice of every leaf), vmapped over the samples here. The drift and the diffusion read
the data and the scale lr c / B from `args` (`SGDSDE.args`), and they are cached per loss, so one compiled
program serves every rate and batch size of one shape.

**The Adam SDE** (`adam_sde`; Malladi, Lyu, Panigrahi, Arora 2022, "On the SDEs and scaling rules for
adaptive gradient algorithms", NeurIPS, the Adam SDE of their Definition and Theorem). Adam(lr, b1, b2, eps)
on a noisy gradient g~ = grad L + sigma * (noise of covariance Sigma) in the NOISE-DOMINATED regime the
theorem needs: with the square-root scaling

    c1 = (1 - b1) / lr^2,  c2 = (1 - b2) / lr^2,  sigma0 = sigma lr,  eps0 = eps lr  (held fixed as lr -> 0),

and the clock t = lr^2 * step, (theta, m, u = v / sigma^2) converge weakly to

    d theta = -(sqrt(gamma2) / gamma1) P^{-1} m dt,    P = sigma0 sqrt(u) + eps0 sqrt(gamma2)   (elementwise)
    d m     = c1 (grad L - m) dt + c1 sigma0 Sigma^{1/2} dW,
    d u     = c2 (diag Sigma - u) dt,                  gamma_i(t) = 1 - exp(-c_i t),

m(0) = u(0) = 0. The drift of theta is mhat / (sigma0 sqrt(uhat) + eps0) with mhat = m / gamma1, uhat =
u / gamma2: the Adam ODE's form with v -> sigma0^2 u (the squared mean gradient is negligible against the
noise, (lr grad L / sigma0)^2 -> 0, and u's own fluctuations average out on the clock lr^2). As in the Adam
ODE, gamma1, gamma2 are integrated as states (dw/dt = c (1 - w), w(0) = 0: Euler-Maruyama at dt = lr^2
gives Adam's 1 - b^step exactly) and at t = 0 mhat, uhat take their drift limits grad L, diag Sigma.
For minibatch SGD noise sigma^2 = c / B (`batch_covariance_factor`), so sigma0 = lr sqrt(c / B): the
square-root scaling rule (B -> kappa B: lr -> sqrt(kappa) lr, 1 - b_i -> kappa (1 - b_i), eps -> eps /
sqrt(kappa)). `adam_sde_hyper(lr, c1, c2, sigma0, eps0)` gives the discrete settings of one scaling.
Zero noise (sigma0 = 0) is NOT the Adam ODE: it is momentum SGD preconditioned by 1 / eps0 (the SDE only
describes the noise-dominated regime); `noise=False` keeps sigma0 in P but switches the Brownian term off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .._checks import INT_MAX, check_bool, check_int, check_real
from .._prng import fused
from .._xla import options_key
from .ode import bias_corrected, cached

__all__ = [
    "AdamSDE",
    "SGDSDE",
    "adam_sde",
    "adam_sde_hyper",
    "batch_covariance_factor",
    "gradient_covariance",
    "noise_factor",
    "per_sample_grads",
    "run_sgd",
    "sgd_sde",
    "solve_sgd_sde",
]

_tmap = jax.tree_util.tree_map


class SGDSDE(NamedTuple):
    """The SGD SDE of `sgd_sde` (module docstring).

    - `drift(t, theta, args)`: -grad L; `diffusion(t, theta, args)`: sqrt(args["scale"]) * G, each leaf of
      shape leaf.shape + (n,); `noise_shape`: (n,). The signatures of `flows.solve_sde`.
    - `args`: {"data": the data, "scale": lr * c / B (c the sampling factor; 0 without noise), "weights":
      the sample probabilities (1/n each unless a population is given)}.
    - `lr`, `batch_size`, `replacement`, `n`: the settings; the clock is t = lr * step.
    """

    drift: Callable
    diffusion: Callable
    noise_shape: tuple
    args: dict
    lr: float
    batch_size: int | None
    replacement: bool
    n: int


def _check_loss(per_sample_loss):
    if not callable(per_sample_loss):
        raise ValueError(
            f"per_sample_loss must be callable per_sample_loss(theta, sample) -> scalar, got {per_sample_loss!r}"
        )


def _num_samples(data) -> int:
    leaves = jax.tree_util.tree_leaves(data)
    if not leaves:
        raise ValueError("data must contain at least one array (leading axis = samples)")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        raise ValueError(
            f"data leaves must share one leading sample axis, got leading sizes {sorted(str(s) for s in sizes)}"
        )
    n = sizes.pop()
    if n < 2:
        raise ValueError(f"data must hold at least 2 samples, got {n}")
    return int(n)


def per_sample_grads(per_sample_loss, theta, data):
    """The per-sample gradients g_i = grad l(theta, x_i): theta's pytree, every leaf with a leading axis n."""
    return jax.vmap(jax.grad(per_sample_loss), in_axes=(None, 0))(theta, data)


def _weighted(per_sample_loss, theta, data, weights):
    """(per-sample gradients, their weighted mean gbar, weights w (n,)); uniform w = 1/n by default."""
    grads = per_sample_grads(per_sample_loss, theta, data)
    n = jax.tree_util.tree_leaves(grads)[0].shape[0]
    dtype = jax.tree_util.tree_leaves(grads)[0].dtype
    w = jnp.full((n,), 1.0 / n, dtype) if weights is None else jnp.asarray(weights).astype(dtype)
    gbar = _tmap(lambda g: jnp.tensordot(w, g, axes=1), grads)
    return grads, gbar, w


def noise_factor(per_sample_loss, theta, data, weights=None):
    """G = [g_1 - gbar, ..., g_n - gbar] / sqrt(n): for each leaf of theta an array of shape leaf.shape + (n,),
    so that Sigma = G G^T (leaves flattened) is the per-sample gradient covariance (1/n normalisation).
    With population `weights` w (n,) (summing to 1): columns sqrt(w_i) (g_i - gbar), gbar = sum_i w_i g_i."""
    grads, gbar, w = _weighted(per_sample_loss, theta, data, weights)
    root = jnp.sqrt(w)

    def leaf(g, m):
        dev = jnp.moveaxis(g - m[None], 0, -1)
        return dev * root.reshape((1,) * (dev.ndim - 1) + (-1,))

    return _tmap(leaf, grads, gbar)


def gradient_covariance(per_sample_loss, theta, data, weights=None):
    """The DENSE per-sample gradient covariance Sigma (P x P, theta flattened with `ravel_pytree`); for checks
    on small P only (the SDE uses `noise_factor`). `weights` as in `noise_factor`."""
    grads, _, w = _weighted(per_sample_loss, theta, data, weights)
    flat = jax.vmap(lambda g: ravel_pytree(g)[0])(grads)  # (n, P)
    dev = flat - jnp.tensordot(w, flat, axes=1)[None]
    return (dev * w[:, None]).T @ dev


def batch_covariance_factor(n, batch_size, replacement=False) -> float:
    """c in Cov[g_B] = c Sigma / B: 1 with replacement, (n - B) / (n - 1) without (0 for `batch_size=None`)."""
    n = check_int("n", n, 2)
    if batch_size is None:
        return 0.0
    batch_size = check_int("batch_size", batch_size, 1, INT_MAX if check_bool("replacement", replacement) else n)
    return 1.0 if replacement else (n - batch_size) / (n - 1)


@cached
def _fields(per_sample_loss):
    """(drift, diffusion) for one loss: the same function objects on every call (one compiled program)."""

    def mean_loss(theta, data, weights):
        losses = jax.vmap(per_sample_loss, in_axes=(None, 0))(theta, data)
        return jnp.sum(weights.astype(losses.dtype) * losses)

    grad = jax.grad(mean_loss)

    def drift(t, theta, args):
        return _tmap(jnp.negative, grad(theta, args["data"], args["weights"]))

    def diffusion(t, theta, args):
        G = noise_factor(per_sample_loss, theta, args["data"], args["weights"])
        root = jnp.sqrt(args["scale"])
        return _tmap(lambda g: root.astype(g.dtype) * g, G)

    return drift, diffusion


def _dtype_and_weights(data, n, weights):
    """(the float dtype of `data`, the sample weights w (n,)): uniform 1/n, or `weights` checked to be n
    non-negative probabilities summing to 1."""
    floats = [
        jnp.result_type(x) for x in jax.tree_util.tree_leaves(data) if jnp.issubdtype(jnp.result_type(x), jnp.floating)
    ]
    dtype = jnp.result_type(*floats) if floats else jnp.result_type(float)
    if weights is None:
        return dtype, np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=float)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9:
        raise ValueError(
            f"weights must be {n} non-negative probabilities summing to 1 (one per sample), got "
            f"shape {w.shape}, sum {w.sum() if w.size else 0.0}"
        )
    return dtype, w


def sgd_sde(
    per_sample_loss, data, batch_size, lr, *, replacement: bool = False, noise: bool = True, weights=None
) -> SGDSDE:
    """The SGD SDE d theta = -grad L dt + sqrt(lr c / B) G dW of SGD(lr, batch_size) on `data` (module
    docstring), clock t = lr * step.

    **Arguments:**

    - `per_sample_loss(theta, sample)`: the loss of one sample (a JAX function; vmapped over `data`).
    - `data`: a pytree of arrays sharing the leading sample axis n (>= 2).
    - `batch_size`: B in [1, n] (any B >= 1 with `replacement=True`); `None`: full batch, no noise.
    - `lr` (> 0): the learning rate (it sets the noise scale; the drift does not depend on it).
    - `replacement`: the batch is drawn with replacement (c = 1) or without (c = (n - B) / (n - 1), default,
      as `flows.cooccurrence.train` and `run_sgd` draw it).
    - `noise`: `False` gives the zero-noise SDE (gradient flow).
    - `weights`: (n,) probabilities (>= 0, summing to 1): `data` is then a finite POPULATION with these
      probabilities and each batch is B i.i.d. draws from it (needs `replacement=True`, c = 1):
      L = sum_i w_i l_i, Sigma = sum_i w_i (g_i - gbar)(g_i - gbar)^T (e.g. Scan and Snap's enumerated
      (class, count vector) population). Default: uniform 1/n.

    **Returns:** an `SGDSDE` (drift, diffusion, noise_shape, args for `flows.solve_sde`).
    """
    _check_loss(per_sample_loss)
    n = _num_samples(data)
    lr = check_real("lr", lr, low=0.0, strict=True)
    replacement, noise = check_bool("replacement", replacement), check_bool("noise", noise)
    c = batch_covariance_factor(n, batch_size, replacement)
    scale = lr * c / batch_size if (noise and batch_size is not None) else 0.0
    drift, diffusion = _fields(per_sample_loss)
    dtype, w = _dtype_and_weights(data, n, weights)  # the diffusion casts to theta's dtype
    if weights is not None:
        if not replacement:
            raise ValueError("weights (a population) need replacement=True: batches are i.i.d. draws from it")
    args = {"data": data, "scale": jnp.asarray(scale, dtype), "weights": jnp.asarray(w, dtype)}
    return SGDSDE(drift, diffusion, (n,), args, float(lr), batch_size, replacement, n)


def solve_sgd_sde(
    sde: SGDSDE,
    theta0,
    ts,
    *,
    dt: float,
    key=None,
    seed: int | None = None,
    num_paths: int | None = None,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    brownian: str = "increments",
    **kwargs,
):
    """`flows.solve_sde(sde.drift, theta0, diffusion=sde.diffusion, noise_shape=sde.noise_shape, args=sde.args,
    t1=ts[-1], ts=ts, dt=dt, ...)` from t0 = 0 (Euler-Maruyama). `dt` should be well below `sde.lr` (the SDE,
    not SGD's own discretisation of it). Observables are functions of (t, theta, args) with
    `args = sde.args`. `brownian="increments"` (default here: an independent Gaussian increment per step,
    the cheap choice for moments over many paths) or `"tree"`; `kwargs` go to `flows.solve_sde` (`tol`,
    `max_steps`, `throw`)."""
    from ..sde import solve_sde

    if not isinstance(sde, SGDSDE):
        raise ValueError(f"sde must be an SGDSDE (see sgd_sde), got {type(sde).__name__}")
    ts = np.asarray(ts, dtype=float)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    return solve_sde(
        sde.drift,
        theta0,
        diffusion=sde.diffusion,
        noise_shape=sde.noise_shape,
        args=sde.args,
        t1=float(ts[-1]),
        ts=ts,
        dt=dt,
        key=key,
        seed=seed,
        num_paths=num_paths,
        observables=observables,
        save_states=save_states,
        brownian=brownian,
        **kwargs,
    )


def run_sgd(
    per_sample_loss,
    theta0,
    data,
    batch_size,
    lr,
    steps,
    *,
    num_runs: int | None = None,
    seed: int = 0,
    keys=None,
    save_every: int | None = None,
    replacement: bool = False,
    observables: Mapping[str, Callable],
    extra_args: dict | None = None,
):
    """`num_runs` independent minibatch runs of `optax.sgd(lr)` (one vmapped program over batch seeds): the
    observables at steps 0, save_every, ..., steps, as `{"steps", "ts" (= lr * steps), name: (runs, saves)}`.

    Batches: run r uses the key `jax.random.split(jax.random.key(seed), num_runs)[r]` (or `keys[r]`, a
    1-D batch of keys given instead of `num_runs`); at each step
    `key, sub = split(key)` and the batch is `permutation(sub, n)[:B]` (without replacement, as
    `flows.cooccurrence.train` draws it) or `randint(sub, (B,), 0, n)` (`replacement=True`). The loss is the
    batch mean of `per_sample_loss`. `observables`: name -> f(t, theta, args) with args = {"data": data,
    **extra_args} (the signature of the SDE's observables; `extra_args` travel traced), or one function
    returning a dict of them."""

    _check_loss(per_sample_loss)
    n = _num_samples(data)
    replacement = check_bool("replacement", replacement)
    batch_size = check_int("batch_size", batch_size, 1, INT_MAX if replacement else n)
    lr = check_real("lr", lr, low=0.0, strict=True)
    steps = check_int("steps", steps, 1)
    save_every = steps if save_every is None else check_int("save_every", save_every, 1, steps)
    if steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide steps = {steps}")
    if (keys is None) == (num_runs is None):
        raise ValueError("give exactly one of num_runs (with seed) or keys (a 1-D batch of jax.random keys)")
    if keys is None:
        num_runs = check_int("num_runs", num_runs, 1)
        keys = jax.random.split(jax.random.key(check_int("seed", seed, 0, 2**32 - 1)), num_runs)
    elif not isinstance(keys, jax.Array) or jnp.ndim(keys) != (
        1 if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) else 2
    ):
        raise ValueError(f"keys must be a 1-D batch of jax.random keys, got {keys!r}")
    extra_args = {} if extra_args is None else dict(extra_args)
    if "data" in extra_args:
        raise ValueError("extra_args may not use the reserved name 'data'")
    if not callable(observables) and (
        not isinstance(observables, Mapping) or not observables or not all(callable(f) for f in observables.values())
    ):
        raise ValueError(
            "observables must be a non-empty mapping name -> f(t, theta, args), or one function "
            "f(t, theta, args) -> dict of named arrays"
        )
    obs_items = observables if callable(observables) else tuple(sorted(observables.items(), key=lambda kv: kv[0]))
    saved = np.arange(0, steps + 1, save_every)
    program = _sgd_program(per_sample_loss, batch_size, replacement, saved.size - 1, obs_items, options_key())
    theta0 = _tmap(jnp.asarray, theta0)
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(theta0))
    out = program(theta0, keys, data, jnp.asarray(lr, dtype), jnp.asarray(save_every, jnp.int32), extra_args)
    if {"steps", "ts"} & set(out):
        raise ValueError("observables may not use the reserved names 'steps', 'ts'")
    return {"steps": saved, "ts": lr * saved, **{k: np.asarray(v) for k, v in out.items()}}


@cached
def _sgd_program(per_sample_loss, batch_size, replacement, num_chunks, obs_items, options=None):
    """The vmapped SGD program of `run_sgd` for one structure; lr, the steps per save, theta0, data and the
    keys are arguments (optax.inject_hyperparams keeps lr in the optimiser state), so a new lr or horizon
    with the same number of saves compiles nothing. `options` (`flows._xla.options_key()`) keeps programs
    compiled under other XLA settings apart."""
    import optax

    grad = jax.grad(lambda th, batch: jnp.mean(jax.vmap(per_sample_loss, in_axes=(None, 0))(th, batch)))

    def one_run(theta0, key, data, lr, every, extra_args):
        n = jax.tree_util.tree_leaves(data)[0].shape[0]
        opt = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
        args = {"data": data, **extra_args}

        def observe(step, theta):
            t = lr * step.astype(lr.dtype)
            if callable(obs_items):
                return dict(obs_items(t, theta, args))
            return {k: f(t, theta, args) for k, f in obs_items}

        def step(_, carry):
            theta, state, key = carry
            key, sub = jax.random.split(key)
            idx = (
                jax.random.randint(sub, (batch_size,), 0, n)
                if replacement
                else jax.random.permutation(sub, n)[:batch_size]
            )
            g = grad(theta, _tmap(lambda x: x[idx], data))
            with jax.numpy_dtype_promotion("standard"):
                updates, state = opt.update(g, state, theta)
            return optax.apply_updates(theta, updates), state, key

        def chunk(carry, i):
            carry = jax.lax.fori_loop(0, every, step, carry)
            return carry, observe((i + 1) * every, carry[0])

        first = observe(jnp.asarray(0, jnp.int32), theta0)
        # fused: the same batches, drawn with the threefry hash unrolled (flows._prng)
        _, rest = jax.lax.scan(chunk, (theta0, opt.init(theta0), fused(key)), jnp.arange(num_chunks, dtype=jnp.int32))
        return _tmap(lambda a, b: jnp.concatenate([a[None], b]), first, rest)

    return jax.jit(jax.vmap(one_run, in_axes=(None, 0, None, None, None, None)))


# -- the Adam SDE (Malladi et al. 2022) ---------------------------------------------------------------------


class AdamSDE(NamedTuple):
    """The Adam SDE of `adam_sde` (module docstring).

    - `drift(t, y, args)`, `diffusion(t, y, args)`, `noise_shape` (n,): for `flows.solve_sde`; the state `y` is
      {"theta", "m", "u", "m_weight", "u_weight"} (`initial_state(theta0)`; `params(y)` reads theta back).
    - `args`: {"data", "weights", "c1", "c2", "sigma0", "eps0", "noise" (1 or 0: the Brownian term on/off)}.
    """

    drift: Callable
    diffusion: Callable
    noise_shape: tuple
    args: dict
    initial_state: Callable
    params: Callable
    n: int


def adam_sde_hyper(lr, c1, c2, sigma0, eps0) -> dict:
    """The discrete Adam settings of one square-root scaling of the Adam SDE (c1, c2, sigma0, eps0):
    {"lr", "b1" = 1 - c1 lr^2, "b2" = 1 - c2 lr^2, "eps" = eps0 / lr, "sigma" = sigma0 / lr (the gradient-noise
    scale), "steps_per_time" = 1 / lr^2}."""
    lr = check_real("lr", lr, low=0.0, strict=True)
    c1, c2 = check_real("c1", c1, low=0.0, strict=True), check_real("c2", c2, low=0.0, strict=True)
    sigma0 = check_real("sigma0", sigma0, low=0.0)
    eps0 = check_real("eps0", eps0, low=0.0, strict=True)
    for name, c in (("c1", c1), ("c2", c2)):
        if c * lr * lr >= 1.0:
            raise ValueError(f"{name} * lr^2 must be < 1 (b = 1 - {name} lr^2 in [0, 1)), got {c * lr * lr}")
    return {
        "lr": lr,
        "b1": 1.0 - c1 * lr * lr,
        "b2": 1.0 - c2 * lr * lr,
        "eps": eps0 / lr,
        "sigma": sigma0 / lr,
        "steps_per_time": 1.0 / (lr * lr),
    }


@cached
def _adam_fields(per_sample_loss):
    def drift(t, y, args):
        grads, gbar, w = _weighted(per_sample_loss, y["theta"], args["data"], args["weights"])
        diag = _tmap(lambda g, m: jnp.tensordot(w, (g - m[None]) ** 2, axes=1), grads, gbar)
        dt = lambda x, c: jnp.asarray(c).astype(x.dtype)  # noqa: E731 - a cast

        def dtheta(g, d, m, u, wm, wu):
            mhat, uhat = bias_corrected(m, wm, g), bias_corrected(u, wu, d)
            return -mhat / (dt(m, args["sigma0"]) * jnp.sqrt(jnp.maximum(uhat, 0.0)) + dt(m, args["eps0"]))

        c1, c2 = args["c1"], args["c2"]
        return {
            "theta": _tmap(dtheta, gbar, diag, y["m"], y["u"], y["m_weight"], y["u_weight"]),
            "m": _tmap(lambda g, m: dt(m, c1) * (g - m), gbar, y["m"]),
            "u": _tmap(lambda d, u: dt(u, c2) * (d - u), diag, y["u"]),
            "m_weight": _tmap(lambda x: dt(x, c1) * (1.0 - x), y["m_weight"]),
            "u_weight": _tmap(lambda x: dt(x, c2) * (1.0 - x), y["u_weight"]),
        }

    def diffusion(t, y, args):
        G = noise_factor(per_sample_loss, y["theta"], args["data"], args["weights"])
        n = args["weights"].shape[0]
        scale = args["c1"] * args["sigma0"] * args["noise"]
        zeros = lambda x: jnp.zeros(jnp.shape(x) + (n,), jnp.result_type(x))  # noqa: E731
        return {
            "theta": _tmap(zeros, y["theta"]),
            "m": _tmap(lambda g: jnp.asarray(scale).astype(g.dtype) * g, G),
            "u": _tmap(zeros, y["u"]),
            "m_weight": _tmap(zeros, y["m_weight"]),
            "u_weight": _tmap(zeros, y["u_weight"]),
        }

    return drift, diffusion


def _adam_initial_state(theta0):
    theta = _tmap(lambda x: jnp.asarray(x, jnp.result_type(x, float)), theta0)
    zeros = _tmap(lambda x: jnp.zeros((), x.dtype), theta)
    return {
        "theta": theta,
        "m": _tmap(jnp.zeros_like, theta),
        "u": _tmap(jnp.zeros_like, theta),
        "m_weight": zeros,
        "u_weight": zeros,
    }


def adam_sde(per_sample_loss, data, *, c1, c2, sigma0, eps0, noise: bool = True, weights=None) -> AdamSDE:
    """The Adam SDE of Malladi et al. 2022 (module docstring) on the per-sample gradient covariance Sigma of
    `data` (1/n normalisation, or the population `weights` as in `sgd_sde`), clock t = lr^2 * step.

    **Arguments:** `per_sample_loss(theta, sample)`, `data` (leading sample axis n) as in `sgd_sde`; `c1`, `c2`
    (> 0): (1 - b) / lr^2; `sigma0` (>= 0): lr times the gradient-noise scale (lr sqrt(c / B) for minibatch
    noise); `eps0` (> 0): lr * eps; `noise`: False drops the Brownian term (the drift keeps sigma0).
    `adam_sde_hyper` gives the discrete settings of one scaling. Solve with `flows.solve_sde(sde.drift,
    sde.initial_state(theta0), diffusion=sde.diffusion, noise_shape=sde.noise_shape, args=sde.args, ...)`.
    """
    _check_loss(per_sample_loss)
    n = _num_samples(data)
    c1, c2 = check_real("c1", c1, low=0.0, strict=True), check_real("c2", c2, low=0.0, strict=True)
    sigma0 = check_real("sigma0", sigma0, low=0.0)
    eps0 = check_real("eps0", eps0, low=0.0, strict=True)
    noise = check_bool("noise", noise)
    drift, diffusion = _adam_fields(per_sample_loss)
    dtype, w = _dtype_and_weights(data, n, weights)
    args = {
        "data": data,
        "weights": jnp.asarray(w, dtype),
        **{
            k: jnp.asarray(v, dtype)
            for k, v in (("c1", c1), ("c2", c2), ("sigma0", sigma0), ("eps0", eps0), ("noise", 1.0 if noise else 0.0))
        },
    }
    return AdamSDE(drift, diffusion, (n,), args, _adam_initial_state, lambda y: y["theta"], n)
