"""A theory as a spec: `System`, the finite network of a theory written as plain functions, and `Reduced`, a
named limit of it other than the optimiser limits of its full parameters.

One driver runs any spec (`flows.train`, `flows.solve_flow`, `flows.compare`); the built-in systems are specs
like a user's (`flows.linear_attention.system(config)`).

**The contract.**

- `init(source) -> params`: the initial parameters, a dict whose top-level keys are the parameter groups (the
  keys of a per-group learning rate and of `rate_scale`); each value an array or a pytree of arrays.
- `loss(params, batch) -> scalar`: the loss on a batch; the full-batch loss is `loss(params, data)` (the exact
  population loss where a system has one). Minibatch SGD and its SDE need the loss of a batch to be the mean
  of the per-row losses of its rows.
- `data`: the training data, a pytree (dict) of arrays, or `data(source) -> pytree`.
- `observe(params, data) -> dict[str, array]`: named observables, recorded by the network and the flow under
  the same names (default: `{"loss": loss(params, data)}`).
- `sample(key, data, batch_size) -> batch`: a minibatch, drawn with the `jax.random` key of the step; default:
  `batch_size` rows of the leading axis without replacement (`take_rows`), of every leaf of `data` or only of
  the `rows` entries of a dict `data` (the rest is passed whole: population statistics, fixed test sets).
- `rows`: the keys of a dict `data` that hold the samples (their leading axis is the sample axis n): what the
  default `sample` draws from and what the SGD noise of `flows.solve_flow(noise=True)` is computed over
  (`None`: every leaf).
- `rate_scale`: group -> factor of its learning rate on the clock t = lr * step (the mean field's M L; groups
  not named run at 1): the optimiser trains group g at lr * rate_scale[g] and every limit runs that group's
  clock at rate_scale[g].
- `name`; `config`: what the system was built from (kept on the records).
- `reduced`: name -> `Reduced`, the named limits a system keeps beside the generic optimiser limits (reduced
  and generated flows, Gram flows, particle and grid flows).
- `predictions(trajectory) -> {name: {"measured", "expected", "holds"}}`: the theory's checkable predictions on
  a flow trajectory (`flows.compare` records them).
- `finite(params) -> bool`: whether the parameters of a training step are acceptable, a traced boolean
  (default: every entry finite); `flows.train` stops a run at the first step that fails it, as at a NaN
  (`flows.TrainingError`). A system whose network passes a bound before it overflows says so here (Scan and
  Snap: logits past ln of the largest float).

**Seeds.** Every random draw of the driver comes from `streams(seed)`, a dict of four streams: `"init"` (what
`init` is called with), `"data"` (what `data` is called with when it is a function), `"batch"` (the
`jax.random` key the minibatches start from) and `"noise"` (the `jax.random` key of an SDE's Brownian motion).
The default gives `jax.random` keys, `fold_in(PRNGKey(seed), i)` for i = 0, 1, 2, 3; a system whose config
has its own streams maps the seed to them (a built-in system's `init` takes its config re-seeded, whose numpy
generators it draws from). `seed` is the system's own seed, used where the driver is given `seed=None`.
`key_schedule` says how the minibatch key moves from step to step: `"chain"` (`key, sub = split(key)` each
step, `sub` draws the batch) or `"split"` (`split(key, steps)`, step i draws with the i-th key).

`sign_eps` is the system's default smoothing of sign descent (its gradients' scale sets it); `solver` holds the
default options of its ODE solves (`flows.solve` keywords), which a call's own keywords override.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import SEED_MAX, check_choice, check_int, check_real, real_array

__all__ = ["KEY_SCHEDULES", "STREAMS", "Reduced", "System", "default_streams", "num_rows", "params_like", "take_rows"]

#: the random streams of `System.streams(seed)`.
STREAMS = ("init", "data", "batch", "noise")
#: how the minibatch key moves from step to step.
KEY_SCHEDULES = ("chain", "split")

PyTree = Any
#: parameters as a flat dict, parameter group -> array (what most systems' `init` returns)
Params = dict[str, jax.Array]
#: data as a flat dict, name -> array (what most systems' `loss` reads)
Batch = dict[str, jax.Array]


def _callable(owner: str, name: str, value: Any, signature: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not callable(value):
        raise ValueError(f"{owner}.{name} must be a function {signature}, got {value!r}")


def _frozen(owner: str, name: str, value: Any) -> Mapping:
    if value is None:
        return types.MappingProxyType({})
    if not isinstance(value, Mapping):
        raise ValueError(f"{owner}.{name} must be a dict, got {type(value).__name__}")
    return types.MappingProxyType(dict(value))


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class Reduced:
    """A named limit of a `System` (module docstring): a vector field `f(t, y, args)` on a state of its own,
    with maps from and to the full parameters.

    **Arguments:**

    - `vector_field(t, y, args)`: the right-hand side, called with the field's own `args` (below).
    - `initial(params, data) -> y0`: the state at t = 0 from the system's initial parameters (a projection
      onto the reduced coordinates, or the reduction's own start).
    - `to_params(y) -> params` (optional): the full parameters at a reduced state; the trajectory's
      observables are then the system's `observe` at them.
    - `args`: the field's args, a pytree, or `args(data) -> pytree` (default `None`).
    - `observe(t, y, args) -> dict` (optional): observables of the reduced state itself, with `args` the
      field's args (for states that are not parameters: Gram matrices, particle clouds; an `args(data)` can
      carry what they read of the data); it replaces the observables of `to_params`.
    - `solver`: default `flows.solve` options of this limit (over the system's).
    - `description`: one line (equation, paper reference).

    **Raises:** `ValueError` naming the field.
    """

    vector_field: Callable
    initial: Callable
    to_params: Callable | None = None
    args: Any = None
    observe: Callable | None = None
    solver: Mapping = dataclasses.field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        _callable("Reduced", "vector_field", self.vector_field, "f(t, y, args)")
        _callable("Reduced", "initial", self.initial, "initial(params, data) -> y0")
        _callable("Reduced", "to_params", self.to_params, "to_params(y) -> params", optional=True)
        _callable("Reduced", "observe", self.observe, "observe(t, y, args) -> dict", optional=True)
        object.__setattr__(self, "solver", _frozen("Reduced", "solver", self.solver))
        if not isinstance(self.description, str):
            raise ValueError(f"Reduced.description must be a string, got {self.description!r}")

    def field_args(self, data: PyTree) -> PyTree:
        """The field's args for the system's `data`."""
        return self.args(data) if callable(self.args) else self.args


def default_streams(seed: int) -> dict:
    """The `jax.random` keys of the four streams of `seed`: `fold_in(PRNGKey(seed), i)` for `STREAMS[i]`."""
    root = jax.random.PRNGKey(seed)
    return {name: jax.random.fold_in(root, i) for i, name in enumerate(STREAMS)}


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class System:
    """A theory's finite network as a spec of plain functions (module docstring: the contract).

    **Arguments** (keywords): `init`, `loss`, `data` (required); `observe`, `sample`, `rows`, `rate_scale`,
    `name`, `reduced`, `predictions`, `finite`, `seed`, `streams`, `key_schedule`, `sign_eps`, `solver`, `config`.

    **Raises:** `ValueError` naming the field (a value that is not callable where a function is due, a
    non-positive rate scale, an unknown key schedule, ...). What needs the parameters or the data (the groups
    of `rate_scale`, the `rows` keys) is checked where the driver first builds them.

    **Example** (a linear model on a fixed regression set):

        system = flows.System(
            init=lambda key: {"w": 0.1 * jax.random.normal(key, (4,))},
            loss=lambda params, batch: 0.5 * jnp.mean((batch["x"] @ params["w"] - batch["y"]) ** 2),
            data={"x": X, "y": y},
        )
        record = flows.train(system, "gd", lr=0.05, steps=200)
    """

    init: Callable
    loss: Callable
    data: Any
    observe: Callable | None = None
    sample: Callable | None = None
    rows: tuple[str, ...] | None = None
    rate_scale: Mapping[str, float] | None = None
    name: str = "system"
    reduced: Mapping[str, Reduced] = dataclasses.field(default_factory=dict)
    predictions: Callable | None = None
    finite: Callable | None = None
    seed: int = 0
    streams: Callable | None = None
    key_schedule: str = "chain"
    sign_eps: float = 1e-3
    solver: Mapping = dataclasses.field(default_factory=dict)
    config: Any = None

    def __post_init__(self) -> None:
        _callable("System", "init", self.init, "init(key) -> params")
        _callable("System", "loss", self.loss, "loss(params, batch) -> scalar")
        if self.data is None:
            raise ValueError("System.data must be a pytree of arrays or a function data(key) -> pytree, got None")
        _callable("System", "observe", self.observe, "observe(params, data) -> dict", optional=True)
        _callable("System", "sample", self.sample, "sample(key, data, batch_size) -> batch", optional=True)
        _callable("System", "predictions", self.predictions, "predictions(trajectory) -> dict", optional=True)
        _callable("System", "finite", self.finite, "finite(params) -> bool", optional=True)
        _callable("System", "streams", self.streams, "streams(seed) -> dict of the streams", optional=True)
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"System.name must be a non-empty identifier (letters, digits, _), got {self.name!r}")
        if self.rows is not None:
            rows = (self.rows,) if isinstance(self.rows, str) else self.rows
            if not isinstance(rows, (tuple, list)) or not rows or not all(isinstance(k, str) for k in rows):
                raise ValueError(f"System.rows must be None or a non-empty tuple of keys of data, got {self.rows!r}")
            object.__setattr__(self, "rows", tuple(rows))
            if isinstance(self.data, Mapping) and set(rows) - set(self.data):
                raise ValueError(f"System.rows: {sorted(set(rows) - set(self.data))} are not keys of data")
            if not callable(self.data) and not isinstance(self.data, Mapping):
                raise ValueError("System.rows needs data to be a dict (rows names some of its keys)")
        if self.rate_scale is not None:
            scale = _frozen("System", "rate_scale", self.rate_scale)
            for g, s in scale.items():
                check_real(f"System.rate_scale[{g!r}]", s, low=0.0, strict=True)
            object.__setattr__(self, "rate_scale", types.MappingProxyType({g: float(s) for g, s in scale.items()}))
        reduced = _frozen("System", "reduced", self.reduced)
        for key, value in reduced.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"System.reduced keys must be non-empty names, got {key!r}")
            if not isinstance(value, Reduced):
                raise ValueError(f"System.reduced[{key!r}] must be a flows.Reduced, got {type(value).__name__}")
        object.__setattr__(self, "reduced", reduced)
        check_int("System.seed", self.seed, 0, SEED_MAX)
        check_choice("System.key_schedule", self.key_schedule, KEY_SCHEDULES)
        object.__setattr__(self, "sign_eps", check_real("System.sign_eps", self.sign_eps, low=0.0, strict=True))
        object.__setattr__(self, "solver", _frozen("System", "solver", self.solver))

    def replace(self, **changes: Any) -> System:
        """A copy with `changes` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    # -- what the driver builds from the spec ------------------------------------------------------------------

    def keys(self, seed: int | None = None) -> dict:
        """The four streams of `seed` (`None`: the system's own `seed`), `STREAMS` -> source."""
        seed = self.seed if seed is None else check_int("seed", seed, 0, SEED_MAX)
        streams = (self.streams or default_streams)(seed)
        if not isinstance(streams, Mapping) or set(streams) != set(STREAMS):
            got = sorted(streams) if isinstance(streams, Mapping) else type(streams).__name__
            raise ValueError(f"System.streams(seed) must return a dict with the keys {STREAMS}, got {got}")
        return dict(streams)

    def dataset(self, source: Any) -> PyTree:
        """The data: `data(source)` when `data` is a function, else `data`; the leaves as JAX arrays."""
        data = self.data(source) if callable(self.data) else self.data
        if self.rows is not None:
            if not isinstance(data, Mapping) or set(self.rows) - set(data):
                got = sorted(data) if isinstance(data, Mapping) else type(data).__name__
                raise ValueError(f"System.rows {self.rows} must be keys of the dict data, got {got}")
        return jax.tree_util.tree_map(jnp.asarray, data)

    def initial_params(self, source: Any) -> dict:
        """`init(source)` checked to be a dict of parameter groups of floating arrays."""
        params = self.init(source)
        if not isinstance(params, Mapping) or not params:
            raise ValueError(
                f"System.init must return a non-empty dict of parameter groups, got {type(params).__name__}"
            )
        params = jax.tree_util.tree_map(jnp.asarray, dict(params))
        for leaf in jax.tree_util.tree_leaves(params):
            if not jnp.issubdtype(leaf.dtype, jnp.floating):
                raise ValueError(f"System.init must return floating-point arrays, got dtype {leaf.dtype}")
        if self.rate_scale and set(self.rate_scale) - set(params):
            raise ValueError(
                f"System.rate_scale names {sorted(set(self.rate_scale) - set(params))}, not parameter groups "
                f"{sorted(params)}"
            )
        return params

    def observables(self, params: dict, data: PyTree) -> dict:
        """`observe(params, data)`, or `{"loss": loss(params, data)}` without one."""
        if self.observe is None:
            return {"loss": self.loss(params, data)}
        return dict(self.observe(params, data))

    def batch(self, key: Any, data: PyTree, batch_size: int) -> PyTree:
        """`sample(key, data, batch_size)`, or `take_rows` of the `rows` without one."""
        if self.sample is None:
            return take_rows(key, data, batch_size, self.rows)
        return self.sample(key, data, batch_size)


def _row_part(data: PyTree, rows: tuple[str, ...] | None) -> PyTree:
    return data if rows is None else {k: data[k] for k in rows}


def num_rows(data: PyTree, rows: tuple[str, ...] | None = None) -> int:
    """The number n of samples: the shared leading size of the leaves of `data` (or of its `rows` entries).

    **Raises:** `ValueError` when they do not share one leading axis."""
    leaves = jax.tree_util.tree_leaves(_row_part(data, rows))
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if not leaves or None in sizes or len(sizes) != 1:
        what = "the rows of data" if rows is None else f"data[{list(rows)}]"
        raise ValueError(
            f"{what} must be arrays sharing one leading sample axis (the default sample draws rows of it), got "
            f"leading sizes {sorted(map(str, sizes))}; give System.rows or System.sample"
        )
    n = sizes.pop()
    assert n is not None  # None was refused above
    return int(n)


def take_rows(key: Any, data: PyTree, batch_size: int, rows: tuple[str, ...] | None = None) -> PyTree:
    """`batch_size` rows of the leading axis drawn without replacement, `permutation(key, n)[:batch_size]`, of
    every leaf of `data` (or of its `rows` entries, the others kept whole): the default `System.sample`."""
    part = _row_part(data, rows)
    n = jax.tree_util.tree_leaves(part)[0].shape[0]
    idx = jax.random.permutation(key, n)[:batch_size]
    taken = jax.tree_util.tree_map(lambda a: a[idx], part)
    return taken if rows is None else {**data, **taken}


def _same_structure(a, b):
    return jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)


def params_like(y0: Any, params: dict) -> dict:
    """`y0` as a parameter dict structured and shaped like `params`, in their dtypes: a start given to the
    driver (ValueError naming `y0`)."""
    if not isinstance(y0, dict) or not _same_structure(y0, params):
        got = sorted(y0) if isinstance(y0, dict) else type(y0).__name__
        raise ValueError(f"y0 must be a parameter dict structured like System.init's {sorted(params)}, got {got}")
    out = {}
    for k in params:
        arr = jax.tree_util.tree_map(lambda v, p, k=k: real_array(f"y0[{k!r}]", v).astype(p.dtype), y0[k], params[k])
        bad = [
            a.shape
            for a, p in zip(jax.tree_util.tree_leaves(arr), jax.tree_util.tree_leaves(params[k]), strict=True)
            if a.shape != p.shape
        ]
        if bad:
            raise ValueError(f"y0[{k!r}] must have the shapes of System.init's, got {bad[0]}")
        out[k] = jax.tree_util.tree_map(jnp.asarray, arr)
    return out
