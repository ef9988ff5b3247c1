"""The SGD SDE (the diffusion limit of minibatch SGD, with a low-rank noise factor) and the Adam SDE.

- `sgd_sde`: d theta = -grad L dt + sqrt(lr c / B) G dW on the clock t = lr * step (Li, Tai, E 2019, JMLR 20,
  the stochastic modified equation of SGD), G = [g_1 - gbar, ..., g_n - gbar] / sqrt(n) the per-sample
  gradient deviations (Sigma = G G^T, never formed), c = 1 with replacement, (n - B) / (n - 1) without.
  `weights=` makes the data a finite population (c = 1, the exact population covariance).
- `adam_sde`: the Adam SDE of the square-root scaling rule (Malladi, Lyu, Panigrahi, Arora 2022, NeurIPS,
  Definition and Theorem of the Adam SDE), clock lr^2 * step, noise-dominated regime.
- `run_sgd`: the discrete minibatch SGD the SGD SDE is held against.

See docs/systems/optim_limits.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from .._checks import INT_MAX, check_bool, check_finite_tree, check_int, check_real
from .._inputs import check_loss_call, check_params, widest_dtype
from ..training import ArrayLike, PyTree, run_training, training_program
from ..trajectory import Trajectory
from ._checks import check_field_traces, raise_if_nonfinite
from .ode import adam_state, bias_corrected, cached

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
    """n, the leading sample axis every leaf of `data` shares (>= 2); every entry numeric and finite."""
    leaves = jax.tree_util.tree_leaves(data)
    if not leaves:
        raise ValueError("data must contain at least one array (leading axis = samples)")
    check_finite_tree("data", data)
    sizes: set = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        raise ValueError(
            f"data leaves must share one leading sample axis, got leading sizes {sorted(str(s) for s in sizes)}"
        )
    n = sizes.pop()
    if n < 2:
        raise ValueError(f"data must hold at least 2 samples, got {n}")
    return int(n)


def _check_sample_loss(per_sample_loss, theta, data) -> None:
    """`per_sample_loss(theta, sample)` runs on the first sample of `data` and returns a real scalar (a
    ValueError naming data and theta0 otherwise: a wrong data shape)."""
    first = jax.tree_util.tree_map(lambda x: x[0], data)
    check_loss_call(per_sample_loss, theta, first, names=("per_sample_loss", "theta0", "data[0]"))


def per_sample_grads(per_sample_loss: Callable, theta: PyTree, data: PyTree) -> PyTree:
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


def noise_factor(per_sample_loss: Callable, theta: PyTree, data: PyTree, weights: ArrayLike | None = None) -> PyTree:
    """G = [g_1 - gbar, ..., g_n - gbar] / sqrt(n): for each leaf of theta an array of shape leaf.shape + (n,),
    so that Sigma = G G^T (leaves flattened) is the per-sample gradient covariance (1/n normalisation).
    With population `weights` w (n,) (summing to 1): columns sqrt(w_i) (g_i - gbar), gbar = sum_i w_i g_i."""
    grads, gbar, w = _weighted(per_sample_loss, theta, data, weights)
    root = jnp.sqrt(w)

    def leaf(g, m):
        dev = jnp.moveaxis(g - m[None], 0, -1)
        return dev * root.reshape((1,) * (dev.ndim - 1) + (-1,))

    return _tmap(leaf, grads, gbar)


def gradient_covariance(
    per_sample_loss: Callable, theta: PyTree, data: PyTree, weights: ArrayLike | None = None
) -> jax.Array:
    """The DENSE per-sample gradient covariance Sigma (P x P, theta flattened with `ravel_pytree`); for checks
    on small P only (the SDE uses `noise_factor`). `weights` as in `noise_factor`."""
    grads, _, w = _weighted(per_sample_loss, theta, data, weights)
    flat = jax.vmap(lambda g: ravel_pytree(g)[0])(grads)  # (n, P)
    dev = flat - jnp.tensordot(w, flat, axes=1)[None]
    return (dev * w[:, None]).T @ dev


def batch_covariance_factor(n: int, batch_size: int | None, replacement: bool = False) -> float:
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
    dtype = widest_dtype(*floats) if floats else jnp.result_type(float)
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
    per_sample_loss: Callable,
    data: PyTree,
    batch_size: int | None,
    lr: float,
    *,
    replacement: bool = False,
    noise: bool = True,
    weights: ArrayLike | None = None,
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
    sde: SGDSDE, theta0: PyTree, ts: ArrayLike, *, dt: float, brownian: str = "increments", **options: Any
) -> Trajectory:
    """`flows.solve_sde(sde.drift, theta0, diffusion=sde.diffusion, noise_shape=sde.noise_shape, args=sde.args,
    t1=ts[-1], ts=ts, dt=dt, ...)` from t0 = 0 (Euler-Maruyama). `dt` should be well below `sde.lr` (the SDE,
    not SGD's own discretisation of it). Observables are functions of (t, theta, args) with
    `args = sde.args`. `brownian="increments"` (default here: an independent Gaussian increment per step,
    the cheap choice for moments over many paths) or `"tree"`; `options` go to `flows.solve_sde`, which defines
    them, their defaults and their checks (`key`, `seed`, `num_paths`, `observables`, `save_states`, `tol`,
    `max_steps`, `throw`, `solver`). `theta0`: any pytree of float arrays of one dtype (the noise acts on the
    flattened parameters); a ValueError names it when the loss fails on it (a wrong shape)."""
    from ..sde import solve_sde

    if not isinstance(sde, SGDSDE):
        raise ValueError(f"sde must be an SGDSDE (see sgd_sde), got {type(sde).__name__}")
    theta0 = check_params("theta0", theta0)
    if len({x.dtype for x in jax.tree_util.tree_leaves(theta0)}) > 1:
        raise ValueError(
            "theta0 must have leaves of one dtype for the SGD SDE (its noise acts on the flattened parameters): "
            "cast them, e.g. jax.tree_util.tree_map(lambda x: x.astype(jnp.float64), theta0)"
        )
    check_field_traces(
        sde.drift, theta0, sde.args, theta0, loss="per-sample loss", data="data", source="the data of the SDE"
    )
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
        brownian=brownian,
        **options,
    )


def run_sgd(
    per_sample_loss: Callable,
    theta0: PyTree,
    data: PyTree,
    batch_size: int,
    lr: float,
    steps: int,
    *,
    num_runs: int | None = None,
    seed: int = 0,
    keys: jax.Array | None = None,
    save_every: int | None = None,
    replacement: bool = False,
    observables: Mapping[str, Callable] | Callable,
    extra_args: dict | None = None,
) -> dict:
    """`num_runs` independent minibatch runs of `optax.sgd(lr)` (one vmapped program over batch seeds): the
    observables at steps 0, save_every, ..., steps, as `{"steps", "ts" (= lr * steps), name: (runs, saves)}`.

    Batches: run r uses the key `jax.random.split(jax.random.key(seed), num_runs)[r]` (or `keys[r]`, a
    1-D batch of keys given instead of `num_runs`); at each step
    `key, sub = split(key)` and the batch is `permutation(sub, n)[:B]` (without replacement, as
    `flows.cooccurrence.train` draws it) or `randint(sub, (B,), 0, n)` (`replacement=True`). The loss is the
    batch mean of `per_sample_loss`. `observables`: name -> f(t, theta, args) with args = {"data": data,
    **extra_args} (the signature of the SDE's observables; `extra_args` travel traced), or one function
    returning a dict of them. `theta0` is any pytree of real arrays (mixed precisions too).

    **Raises:** `ValueError` naming the argument: NaN or inf in `theta0`, `data` or `extra_args`, a per-sample
    loss that fails on one sample (a wrong data shape) or is not a real scalar, observables that fail at
    theta0. `flows.TrainingError` (the failed-run rule of `flows.training.finish`) when a run's parameters or
    observables go non-finite (a diverging learning rate): its `record` is the dict above truncated before
    the first non-finite step of any run."""

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
    theta0 = check_params("theta0", theta0)
    check_finite_tree("extra_args", extra_args)
    _check_sample_loss(per_sample_loss, theta0, data)
    dtype = widest_dtype(*jax.tree_util.tree_leaves(theta0))
    lr_arr = jnp.asarray(lr, dtype)
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=lr_arr)  # lr in the state: one program for every lr

    def sample(data, key, step):
        n = jax.tree_util.tree_leaves(data["data"])[0].shape[0]
        key, sub = jax.random.split(key)
        idx = (
            jax.random.randint(sub, (batch_size,), 0, n) if replacement else jax.random.permutation(sub, n)[:batch_size]
        )
        return key, _tmap(lambda x: x[idx], data["data"])

    def observe(theta, data, step):
        t, args = data["lr"] * step.astype(data["lr"].dtype), {"data": data["data"], **data["extra"]}
        return dict(obs_items(t, theta, args)) if callable(obs_items) else {k: f(t, theta, args) for k, f in obs_items}

    def build():
        loss = lambda th, _, batch: jnp.mean(jax.vmap(per_sample_loss, in_axes=(None, 0))(th, batch))  # noqa: E731
        run = training_program(loss, observe, opt, sample=sample, timed=True)
        return jax.vmap(run, in_axes=(None, None, 0, None, None, None))

    saved = np.arange(0, steps + 1, save_every)
    structure = (per_sample_loss, batch_size, replacement, obs_items)
    data = {"data": data, "lr": lr_arr, "extra": extra_args}
    _check_observables(observe, theta0, data)
    with jax.numpy_dtype_promotion("standard"):  # optax's state of a theta of mixed precisions
        state = opt.init(theta0)
    _, out, _, _, bad, _, _ = run_training("run_sgd", structure, build, theta0, state, keys, saved, data)
    if {"steps", "ts"} & set(out):
        raise ValueError("observables may not use the reserved names 'steps', 'ts'")
    raise_if_nonfinite(
        saved,
        out,
        bad,
        lambda keep: {"steps": saved[keep], "ts": lr * saved[keep], **{k: v[:, keep] for k, v in out.items()}},
        setting=f"run_sgd, lr={lr}, batch_size={batch_size}",
        hint="lower the learning rate, or check that the loss and the observables are finite along the run",
    )
    return {"steps": saved, "ts": lr * saved, **out}


def _check_observables(observe, theta0, data) -> None:
    """The observables of `run_sgd` run at theta0 (traced abstractly): a failing one is a ValueError naming
    observables, not an error from inside the compiled loop."""
    try:
        jax.eval_shape(observe, theta0, data, jnp.asarray(0, jnp.int32))
    except Exception as err:  # noqa: BLE001 -- any error of the user's observables
        raise ValueError(
            f"observables failed at theta0 (f(t, theta, args) with args = {{'data': data, **extra_args}}): "
            f"{type(err).__name__}: {str(err)[:400]}"
        ) from err


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


def adam_sde_hyper(lr: float, c1: float, c2: float, sigma0: float, eps0: float) -> dict:
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
    return adam_state(check_params("theta0", theta0), "u")


def adam_sde(
    per_sample_loss: Callable,
    data: PyTree,
    *,
    c1: float,
    c2: float,
    sigma0: float,
    eps0: float,
    noise: bool = True,
    weights: ArrayLike | None = None,
) -> AdamSDE:
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
