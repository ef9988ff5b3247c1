"""Deterministic optimiser limits: gradient flow, heavy-ball momentum, sign descent, the Adam ODE.

The equations, clocks and references are in the package docstring (`flows.optim_limits`). Each factory takes
a loss `loss(theta, batch)` (a JAX function of a parameter pytree and the data) and returns a `Limit`. The
vector fields read the data and every rate from `args` (built by `Limit.make_args`), and one factory call
per loss is cached, so `flows.solve` compiles one program per loss and shape, whatever the rates.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._checks import check_choice, check_finite_tree, check_int, check_real
from .._inputs import check_loss_call, check_params
from ..training import ArrayLike, PyTree, run_training, training_program
from ..trajectory import Trajectory
from ._checks import FACTORIES, check_field_traces, check_limit_args, make_args_of, raise_if_nonfinite

__all__ = [
    "Limit",
    "adam",
    "adam_betas",
    "adam_rates",
    "gradient_flow",
    "heavy_ball",
    "momentum_friction",
    "run_optax",
    "sign_descent",
    "sign_eps",
    "solve_limit",
]

_tmap = jax.tree_util.tree_map


class Limit(NamedTuple):
    """One optimiser limit.

    - `name`: "gd", "momentum", "sign" or "adam".
    - `vector_field(t, y, args)`: the right-hand side for `flows.solve`.
    - `initial_state(theta0)`: the state at t = 0 (theta0 itself, or a dict with the optimiser's zeroed
      moments, as optax initialises them).
    - `params(y)`: theta read back from a state (also from saved states with a leading time axis).
    - `make_args(batch, **rates)`: the `args` pytree of the vector field (data and rates).
    """

    name: str
    vector_field: Callable
    initial_state: Callable
    params: Callable
    make_args: Callable


def _check_loss(loss):
    if not callable(loss):
        raise ValueError(f"loss must be callable loss(theta, batch) -> scalar, got {loss!r}")


def cached(builder):
    """`builder(loss, *options)` built once per (loss, options): the same function objects on every call, so
    `flows.solve` compiles once per loss; unhashable callables are built anew."""
    cache = functools.lru_cache(maxsize=64)(builder)

    @functools.wraps(builder)
    def get(loss, *options):
        try:
            return cache(loss, *options)
        except TypeError:
            return builder(loss, *options)

    return get


def _floats(theta0):
    """theta0 as a pytree of floating JAX arrays (integers promoted to the default float); a ValueError naming
    theta0 for an empty tree, a non-real leaf, NaN or inf."""
    return check_params("theta0", theta0)


def _rate(x, like):
    return jnp.asarray(x).astype(like.dtype)


def _pos(name, value, *, zero=False):
    return check_real(name, value, low=0.0, strict=not zero)


def _positive_tree(name, value):
    """A positive number, or a pytree of positive numbers (one per parameter leaf), as float arrays."""
    leaves, treedef = jax.tree_util.tree_flatten(value)
    if not leaves:
        raise ValueError(f"{name} must be a positive number or a pytree of them, got {value!r}")
    checked = [
        check_real(f"{name}" if len(leaves) == 1 else f"{name} (each entry)", v, low=0.0, strict=True) for v in leaves
    ]
    return jax.tree_util.tree_unflatten(treedef, [np.asarray(v) for v in checked])


def _per_leaf(x, theta, name):
    """`x` as a pytree like `theta`: x itself if it is structured like theta, one value for every leaf if it is
    one number (not a container: `{"w": 2.0}` for a theta without the key "w" is an error, not a broadcast)."""
    if jax.tree_util.tree_structure(x) == jax.tree_util.tree_structure(theta):
        return x
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(x)):
        return _tmap(lambda _: x, theta)
    raise ValueError(
        f"{name} must be one number or a pytree structured like theta "
        f"({jax.tree_util.tree_structure(theta)}), got {jax.tree_util.tree_structure(x)}"
    )


def _with_rates(args, rates):
    if rates is not None:
        args["rates"] = _positive_tree("rates", rates)
    return args


def _clocked(dy, theta, args):
    """The per-leaf clocks: each leaf's derivative times its rate (`args["rates"]`, absent: 1)."""
    if "rates" not in args:
        return dy
    rates = _per_leaf(args["rates"], theta, "rates")
    return _tmap(lambda d, r: _rate(r, d) * d, dy, rates)


def _loss_grad(loss, name, params=lambda y: y):
    """`(y, args) -> grad L(params(y), args["batch"])`, `args` first checked to be the `make_args` of the limit
    `name` (every limit's vector field starts so)."""
    grad = jax.grad(loss)

    def at(y, args):
        check_limit_args(name, args)
        return grad(params(y), args["batch"])

    return at


def _theta(y):
    return y["theta"]


@make_args_of("gd", ("rates",))
def _batch_args(batch, *, rates=None):
    return _with_rates({"batch": batch}, rates)


# -- gradient flow ---------------------------------------------------------------------------------------------


@cached
def _gradient_flow(loss):
    grad = _loss_grad(loss, "gd")

    def vector_field(t, theta, args):
        return _clocked(_tmap(jnp.negative, grad(theta, args)), theta, args)

    return Limit("gd", vector_field, _floats, lambda y: y, _batch_args)


def gradient_flow(loss: Callable) -> Limit:
    """dtheta/dt = -grad L(theta) on the clock t = lr * step (`optax.sgd(lr)`); the state is theta.
    `make_args(batch, rates=None)`.

    `rates` (every limit): per-parameter-group clocks, a pytree like theta of positive numbers (or one
    number): leaf i runs on its own clock t_i = rates_i * t, i.e. its derivative is multiplied by rates_i
    (groups trained at learning rates lr_i = rates_i * lr); the other rates (friction, c1, c2, eps) are in
    each leaf's own clock."""
    _check_loss(loss)
    return _gradient_flow(loss)


# -- heavy-ball momentum ---------------------------------------------------------------------------------------


def momentum_friction(lr: float, beta: float) -> float:
    """The friction c = (1 - beta)^2 / lr of the heavy-ball ODE for `optax.sgd(lr, momentum=beta)`."""
    lr = _pos("lr", lr)
    beta = check_real("beta", beta, low=0.0, high=1.0, high_strict=True)
    return (1.0 - beta) ** 2 / lr


@cached
def _heavy_ball(loss):
    grad = _loss_grad(loss, "momentum", _theta)

    def vector_field(t, y, args):
        g = grad(y, args)
        friction = _per_leaf(args["friction"], y["v"], "friction")
        dy = {
            "theta": _tmap(jnp.negative, y["v"]),
            "v": _tmap(lambda gi, vi, ci: _rate(ci, vi) * (gi - vi), g, y["v"], friction),
        }
        return {k: _clocked(d, y["theta"], args) for k, d in dy.items()}

    def initial_state(theta0):
        theta = _floats(theta0)
        return {"theta": theta, "v": _tmap(jnp.zeros_like, theta)}

    @make_args_of("momentum", ("friction", "rates"), required=("friction",))
    def make_args(batch, *, friction=None, rates=None):
        return _with_rates({"batch": batch, "friction": _positive_tree("friction", friction)}, rates)

    return Limit("momentum", vector_field, initial_state, _theta, make_args)


def heavy_ball(loss: Callable) -> Limit:
    """The heavy-ball ODE of `optax.sgd(lr, momentum=beta)` on the clock s = lr * step / (1 - beta):
    dtheta/ds = -v, dv/ds = c (grad L - v), v = (1 - beta) p, c = (1 - beta)^2 / lr, v(0) = 0.

    State `{"theta", "v"}`; `make_args(batch, friction=c)` (c = `momentum_friction(lr, beta)`, one number or
    a pytree like theta), and `rates=` as in `gradient_flow`. One optax step is exactly one semi-implicit Euler
    step of size h = lr / (1 - beta) (v, then theta with the new v). Large c is stiff: use `solver="kvaerno5"`
    there; c -> inf is gradient flow on the clock s, with a gap O(1/c)."""
    _check_loss(loss)
    return _heavy_ball(loss)


# -- sign descent ----------------------------------------------------------------------------------------------

SIGN_FORMS = ("sqrt", "adam")


def sign_eps(g: jax.Array, eps: float | jax.Array, form: str = "sqrt") -> jax.Array:
    """The smoothed sign: g / sqrt(g^2 + eps^2) (`form="sqrt"`) or g / (|g| + eps) (`form="adam"`, the
    direction of the Adam ODE when m = g, v = g^2); both -> sign(g) as eps -> 0, both Lipschitz for eps > 0."""
    eps = jnp.asarray(eps).astype(jnp.result_type(g))
    if form == "sqrt":
        return g / jnp.sqrt(g * g + eps * eps)
    return g / (jnp.abs(g) + eps)


@cached
def _sign_descent(loss, form):
    grad = _loss_grad(loss, "sign")

    def vector_field(t, theta, args):
        return _clocked(_tmap(lambda gi: -sign_eps(gi, args["eps"], form), grad(theta, args)), theta, args)

    @make_args_of("sign", ("eps", "rates"), required=("eps",))
    def make_args(batch, *, eps=None, rates=None):
        return _with_rates({"batch": batch, "eps": _pos("eps", eps)}, rates)

    return Limit("sign", vector_field, _floats, lambda y: y, make_args)


def sign_descent(loss: Callable, form: str = "sqrt") -> Limit:
    """dtheta/dt = -sign_eps(grad L) on the clock t = lr * step (`optax.sign_sgd(lr)` as eps -> 0; see
    `sign_eps` for `form`). The state is theta; `make_args(batch, eps=, rates=None)`. Small eps is stiff where a
    component of the gradient changes sign (the smoothed Filippov sliding mode): use `solver="kvaerno5"`. The
    gap to `optax.sign_sgd(lr)` is O(lr) with eps tied to the learning rate, eps = kappa * lr; where several
    components vanish together on one sliding surface the Filippov solution is not unique and the smoothed flow
    is not sign_sgd's limit (docs/systems/optim_limits.md)."""
    _check_loss(loss)
    return _sign_descent(loss, check_choice("form", form, SIGN_FORMS))


# -- Adam ------------------------------------------------------------------------------------------------------


def adam_rates(lr: float, b1: float, b2: float) -> tuple[float, float]:
    """(c1, c2) = ((1 - b1) / lr, (1 - b2) / lr): the rates of the Adam ODE for `optax.adam(lr, b1, b2)`."""
    lr = _pos("lr", lr)
    b1 = check_real("b1", b1, low=0.0, high=1.0, high_strict=True)
    b2 = check_real("b2", b2, low=0.0, high=1.0, high_strict=True)
    return (1.0 - b1) / lr, (1.0 - b2) / lr


def adam_betas(lr: float, c1: float, c2: float) -> tuple[float, float]:
    """(b1, b2) = (1 - c1 lr, 1 - c2 lr): the optax settings whose lr -> 0 limit is the Adam ODE (c1, c2)."""
    lr, c1, c2 = _pos("lr", lr), _pos("c1", c1), _pos("c2", c2)
    for name, c in (("c1", c1), ("c2", c2)):
        if c * lr >= 1.0:
            raise ValueError(f"{name} * lr must be < 1 (beta = 1 - {name} lr in [0, 1)), got {c * lr}")
    return 1.0 - c1 * lr, 1.0 - c2 * lr


def bias_corrected(moment, weight, limit):
    """moment / weight (Adam's bias correction, the weight 1 - e^{-c t} integrated as a state), and its limit
    `limit` where weight = 0 (t = 0, where both vanish)."""
    weight = weight.astype(moment.dtype)
    ok = weight > 0
    return jnp.where(ok, moment / jnp.where(ok, weight, 1.0), limit)


def adam_state(theta: PyTree, second: str) -> dict:
    """Adam's state at its start: `theta`, the moments "m" and `second` (the second moment's name) at zero like
    theta, and their bias-correction weights "m_weight" and `second + "_weight"` at zero (one scalar per leaf)."""
    zeros = _tmap(lambda x: jnp.zeros((), x.dtype), theta)
    moments = {"m": _tmap(jnp.zeros_like, theta), second: _tmap(jnp.zeros_like, theta)}
    return {"theta": theta, **moments, "m_weight": zeros, f"{second}_weight": zeros}


@cached
def _adam(loss):
    grad = _loss_grad(loss, "adam", _theta)

    def vector_field(t, y, args):
        g = grad(y, args)

        def dtheta(gi, mi, vi, wm, wv):
            mhat = bias_corrected(mi, wm, gi)
            vhat = bias_corrected(vi, wv, gi * gi)
            return -mhat / (jnp.sqrt(jnp.maximum(vhat, 0.0)) + _rate(args["eps"], mi))

        c1, c2 = _per_leaf(args["c1"], g, "c1"), _per_leaf(args["c2"], g, "c2")
        dy = {
            "theta": _tmap(dtheta, g, y["m"], y["v"], y["m_weight"], y["v_weight"]),
            "m": _tmap(lambda gi, mi, c: _rate(c, mi) * (gi - mi), g, y["m"], c1),
            "v": _tmap(lambda gi, vi, c: _rate(c, vi) * (gi * gi - vi), g, y["v"], c2),
            "m_weight": _tmap(lambda w, c: _rate(c, w) * (1.0 - w), y["m_weight"], c1),
            "v_weight": _tmap(lambda w, c: _rate(c, w) * (1.0 - w), y["v_weight"], c2),
        }
        return {k: _clocked(d, y["theta"], args) for k, d in dy.items()}

    def initial_state(theta0):
        return adam_state(_floats(theta0), "v")

    @make_args_of("adam", ("c1", "c2", "eps", "rates"), required=("c1", "c2"))
    def make_args(batch, *, c1=None, c2=None, eps=1e-8, rates=None):
        return _with_rates(
            {"batch": batch, "c1": _positive_tree("c1", c1), "c2": _positive_tree("c2", c2), "eps": _pos("eps", eps)},
            rates,
        )

    return Limit("adam", vector_field, initial_state, _theta, make_args)


def adam(loss: Callable) -> Limit:
    """The Adam ODE of `optax.adam(lr, b1=1 - c1 lr, b2=1 - c2 lr, eps=eps)` on the clock t = lr * step:
    dm/dt = c1 (g - m), dv/dt = c2 (g^2 - v), dtheta/dt = -mhat / (sqrt(vhat) + eps), mhat = m / (1 -
    exp(-c1 t)), vhat = v / (1 - exp(-c2 t)); m(0) = v(0) = 0, and at t = 0 mhat = g, vhat = g^2 (the limit).

    State `{"theta", "m", "v", "m_weight", "v_weight"}`: the bias-correction weights 1 - exp(-c t) (one scalar
    per parameter leaf, on that leaf's clock) are states too, dw/dt = c (1 - w), w(0) = 0 (the moment of the
    constant 1, as optax's 1 - beta^step is), so that mhat = m / m_weight divides two quantities the solver
    integrates alike: on a constant gradient mhat = g at every stage of every step, and the 1/t amplification
    of the solver's error in m near t = 0 cancels. `make_args(batch, c1=, c2=, eps=1e-8)` (c1, c2 one number
    or a pytree like theta; `adam_rates(lr, b1, b2)` for optax's settings), and `rates=` as in
    `gradient_flow`. Large c1, c2 are stiff (then
    m -> g, v -> g^2 and the flow is sign descent with `form="adam"`)."""
    _check_loss(loss)
    return _adam(loss)


# -- solving and the discrete counterparts ---------------------------------------------------------------------


def solve_limit(
    limit: Limit,
    theta0: PyTree,
    args: PyTree,
    ts: ArrayLike,
    *,
    observables: Mapping | Callable | None = None,
    **solve_kwargs: Any,
) -> Trajectory:
    """`flows.solve(limit.vector_field, limit.initial_state(theta0), t1=ts[-1], ts=ts, args=args, ...)` from
    t0 = 0. `observables` as in `flows.solve` (functions of (t, y, args); `limit.params(y)` is theta).

    **Arguments:** `limit` a `Limit` (e.g. `gradient_flow(loss)`); `theta0` any pytree of real arrays (a dict,
    a tuple, nested; scalars, vectors, matrices); `args` the limit's `make_args(batch, ...)`; `ts` the save
    times (1-D); `solve_kwargs` go to `flows.solve`.

    **Raises:** `ValueError` naming `limit`, `theta0`, `args` or `batch` (the data given to `make_args`: a loss
    that fails on it, e.g. a wrong shape), or a rate whose structure is not theta's; `flows.FlowError` for a
    failed solve.
    """
    from .._solve import solve

    if not isinstance(limit, Limit):
        factory = getattr(limit, "__name__", None)
        hint = f": call it on the loss first, {factory}(loss)" if factory in FACTORIES.values() else ""
        raise ValueError(f"limit must be a flows.optim_limits.Limit, got {type(limit).__name__}{hint}")
    try:
        ts = np.asarray(ts, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got {ts!r}") from err
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    check_limit_args(limit.name, args)
    y0 = limit.initial_state(theta0)
    theta = limit.params(y0)
    for key in ("rates", "friction", "c1", "c2"):
        if key in args:
            _per_leaf(args[key], theta, key)
    check_field_traces(
        limit.vector_field, y0, args, theta, loss="loss", data="batch", source="the data given to make_args"
    )
    return solve(limit.vector_field, y0, t1=float(ts[-1]), ts=ts, args=args, observables=observables, **solve_kwargs)


def run_optax(
    loss: Callable,
    theta0: PyTree,
    batch: PyTree,
    optimizer: optax.GradientTransformation | Callable,
    steps: int,
    save_every: int = 1,
    *,
    hyper: PyTree = None,
) -> dict:
    """Full-batch training with an optax optimiser on `loss(theta, batch)` (the loop of
    `flows.training.training_program`): the parameters at steps 0, save_every, ..., steps (a pytree with a
    leading axis over the saved steps) and those steps, as `{"steps": array, "params": pytree}`.

    `optimizer`: an `optax.GradientTransformation` (one program compiled per call), or, with `hyper` (a
    pytree of numbers, e.g. the learning rate), a function `optimizer(hyper) -> GradientTransformation`
    built inside the compiled program from the traced `hyper`: then one program per (loss, optimizer, shapes,
    number of saves) serves every `hyper`, `steps` and `save_every`.

    `theta0` is any pytree of real arrays (dicts, tuples, nested; scalars, vectors, matrices); `batch` the data
    `loss` reads (any pytree of numeric arrays, or None).

    **Raises:** `ValueError` naming the argument: NaN or inf in `theta0` or `batch`, a loss that fails on them
    (a wrong data shape) or does not return a real scalar, an optimiser that does not fit `theta0`.
    `flows.TrainingError` (the failed-run rule of `flows.training.finish`) when the parameters go non-finite
    (a diverging learning rate): its `record` is the dict above truncated before the first non-finite step."""
    _check_loss(loss)
    if hyper is None and not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError(
            f"optimizer must be an optax.GradientTransformation (or a function of hyper, with "
            f"hyper=), got {type(optimizer).__name__}"
        )
    if hyper is not None and (isinstance(optimizer, optax.GradientTransformation) or not callable(optimizer)):
        raise ValueError("with hyper=, optimizer must be a function hyper -> optax.GradientTransformation")
    steps = check_int("steps", steps, 1)
    save_every = check_int("save_every", save_every, 1, steps)
    if steps % save_every:
        raise ValueError(f"save_every = {save_every} must divide steps = {steps}")
    theta0 = _floats(theta0)
    check_finite_tree("batch", batch)
    try:
        check_loss_call(loss, theta0, batch)
    except ValueError as err:
        if isinstance(batch, Mapping) and "batch" in batch:  # the reverse of args=data in solve_limit
            raise ValueError(f"{err}; batch is the data itself, not a limit's make_args(data)") from err.__cause__
        raise
    if hyper is not None:
        hyper = _tmap(lambda h: jnp.asarray(check_real("hyper (each entry)", h)), hyper)
    try:
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes python floats and int counts
            if isinstance(optimizer, optax.GradientTransformation):
                state = optimizer.init(theta0)
            else:  # a function of hyper
                state = (hyper, optimizer(hyper).init(theta0))
    except Exception as err:  # noqa: BLE001 -- optax's error, reported as the optimiser's
        raise ValueError(
            f"optimizer.init(theta0) failed: {type(err).__name__}: {str(err)[:300]}; the optimiser must fit "
            f"theta0's structure (e.g. the labels of optax.multi_transform)"
        ) from err

    def build():
        opt = optimizer if hyper is None else _hyper_in_state(optimizer)
        return training_program(lambda th, b, _: loss(th, b), lambda th, b: {}, opt, snapshot=lambda th: th)

    save = np.arange(0, steps + 1, save_every)
    structure = (loss, optimizer, hyper is None)
    _, _, params, _, bad, _, _ = run_training("run_optax", structure, build, theta0, state, None, save, batch)
    raise_if_nonfinite(
        save,
        {},
        bad,
        lambda keep: {"steps": save[keep], "params": _tmap(lambda a: np.asarray(a)[keep], params)},
        setting="run_optax" if hyper is None else f"run_optax, hyper={_tmap(float, hyper)}",
        hint="lower the learning rate, or check that the loss is finite along the run",
    )
    return {"steps": save, "params": params}


def _hyper_in_state(make):
    """The optimiser `make(hyper)` with `hyper` carried (traced) in its state `(hyper, state of make(hyper))`."""

    def update(grads, state, params):
        updates, inner = make(state[0]).update(grads, state[1], params)
        return updates, (state[0], inner)

    return optax.GradientTransformation(lambda params: None, update)  # the state is built by run_optax
