"""`solve`: the one wrapper over `diffrax.diffeqsolve` that every flow in this library goes through.

It returns a `Trajectory` record in the spirit of scipy's `OdeResult`: saved times and states, observables
computed on save, a `status` with a human-readable `message`, step counts, and compile/run timings measured
separately (ahead-of-time lowering, then a timed call).

Failures are never silent. A non-finite state, a state whose max-norm passes `blowup`, an exhausted
`max_steps` budget or a step size that collapsed give `status != "ok"` with a message saying what happened
and at which time; the single (non-batched) call then raises `FlowError` unless `throw=False`.

The parts live by concern: `flows.trajectory` (the record, statuses, messages), `flows.grids` (save grids),
`flows.events` (`Event`), `flows._inputs` (validation of the state, the vector field, the save times and the
observables), `flows._program` (the compiled diffrax program of an ODE or SDE and its cache),
`flows._stiffness` (the stiffness detection of `solver="auto"`), `flows._chunked` (running the program over a
save grid, switching solvers, continuing past non-stopping events). This module validates the call and runs it;
`solve_batch` vmaps it, optionally with the batch axis split over the devices of a `jax.sharding.Mesh`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from . import _sweep as sweep
from ._checks import INT_MAX, check_bool, check_choice, check_finite_tree, check_int, check_real, forwarded_options
from ._chunked import SAVE_CHUNK, call_cap, execute
from ._inputs import as_state, check_observables, check_save_times, check_state, warn_precision
from ._program import AUTO, FIXED_STEP_ONLY, SOLVER_NAMES, SOLVERS
from .events import Event
from .grids import check_horizon, linear_grid, log_grid
from .trajectory import FlowError, Trajectory

__all__ = [
    "AUTO",
    "SAVE_CHUNK",
    "SOLVERS",
    "Event",
    "FlowError",
    "Trajectory",
    "batch_mesh",
    "horizon_steps",
    "linear_grid",
    "log_grid",
    "solve",
    "solve_batch",
]


#: The solver options of `solve` and `solve_batch`, in the order of their part of a compiled program's key.
OPTIONS = tuple("solver rtol atol dt0 max_steps observables save_states event blowup progress constant_step".split())

#: The options of `solve` that `solve_batch` takes (a batch shows no progress bar and adapts its steps).
BATCH_OPTIONS = tuple(k for k in OPTIONS if k not in ("progress", "constant_step"))


#: The default step budget per decade of the horizon (`horizon_steps`).
STEPS_PER_DECADE = 100_000


def horizon_steps(t0: float, t1: float) -> int:
    """The default `max_steps` of a solve over [t0, t1]: `STEPS_PER_DECADE` for each decade the horizon spans
    above 1 and one more (100,000 up to t1 - t0 = 1, 600,000 for 1e5): with the stiff phase of a gradient flow
    taken by the implicit solver of `solver="auto"`, whose steps grow geometrically once the flow has
    converged, the steps a solve needs grow with the horizon's logarithm."""
    decades = math.ceil(math.log10(max(float(t1) - float(t0), 1.0)) - 1e-12)
    return STEPS_PER_DECADE * (1 + max(decades, 0))


def _prepare(vector_field, y0, t0, t1, ts, args, options: dict):
    """Validate a call: returns (ts, t0, t1 as host arrays of y0's dtype, the checked `options`, the part of the
    compiled program's key that they decide)."""
    if not callable(vector_field):
        raise ValueError("vector_field must be callable f(t, y, args)")
    for name in ("constant_step", "save_states", "progress"):
        options[name] = check_bool(name, options[name])
    check_choice("solver", options["solver"], SOLVER_NAMES)
    for name in ("rtol", "atol"):
        options[name] = check_real(name, options[name], low=0.0, strict=True)
    check_horizon(t0, t1)
    max_steps = horizon_steps(t0, t1) if options["max_steps"] is None else options["max_steps"]
    if options["max_steps"] is None and options["constant_step"] and options["dt0"] is not None:
        # the constant steps the horizon needs (a bad dt0 is reported below)
        step = check_real("dt0", options["dt0"], low=0.0, strict=True)
        max_steps = max(max_steps, min(math.ceil((float(t1) - float(t0)) / step - 1e-9), INT_MAX))
    options["max_steps"] = max_steps = check_int("max_steps", max_steps, 1)
    if options["blowup"] is not None:  # inf is allowed (never diverges), NaN is not
        options["blowup"] = check_real("blowup", options["blowup"], low=0.0, strict=True, finite=False)
    dt0 = options["dt0"] = None if options["dt0"] is None else check_real("dt0", options["dt0"], low=0.0, strict=True)
    ts = check_save_times(ts, t0, t1)
    if options["constant_step"]:
        if options["solver"] == AUTO:  # no step-size history to watch: the explicit solver
            options["solver"] = "tsit5"
        if dt0 is None:
            raise ValueError("dt0 (the step size) must be given with constant_step=True")
        needed = math.ceil((float(t1) - float(t0)) / dt0 - 1e-9)
        if needed > max_steps:
            raise ValueError(
                f"max_steps = {max_steps} is too small for constant steps dt0 = {dt0} over "
                f"[{t0}, {t1}] ({needed} steps needed)"
            )
    elif options["solver"] in FIXED_STEP_ONLY:
        raise ValueError(f"solver {options['solver']!r} has no error estimate: pass constant_step=True and dt0")
    obs_key = check_observables(options["observables"], options["save_states"])
    if options["event"] is not None and not isinstance(options["event"], Event):
        raise ValueError("event must be a flows.Event")
    dtype = check_state(y0)
    if not options["constant_step"]:  # the tolerances steer the step size only when it adapts
        warn_precision(options["rtol"], dtype)
    check_finite_tree("args", args)
    # the budget beyond one call's cap is counted on the host: every budget from the cap up is one program
    compiled_in = dict(options, observables=obs_key, max_steps=call_cap(max_steps))
    key_opts = (vector_field, *(compiled_in[k] for k in OPTIONS))
    # host arrays: the compiled program takes them as they are (a jnp.asarray is a dispatch each)
    return np.asarray(ts, dtype=dtype), np.asarray(t0, dtype=dtype), np.asarray(t1, dtype=dtype), options, key_opts


def solve(
    vector_field: Callable,
    y0,
    *,
    t1: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args=None,
    solver: str = "auto",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int | None = None,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    event: Event | None = None,
    blowup: float | None = 1e10,
    progress: bool = False,
    throw: bool = True,
    constant_step: bool = False,
) -> Trajectory:
    """Integrate `dy/dt = vector_field(t, y, args)` from `t0` to `t1` with diffrax.

    **Arguments:**

    - `vector_field`: `f(t, y, args)` written with array operations; `y` is an array or small pytree.
    - `y0`: the initial state, an array or any pytree of float arrays; its dtype sets the precision of the solve
      (leaves of mixed precisions are integrated at the widest, which the vector field then sees; the saved
      states keep each leaf's dtype).
    - `t1`, `t0`: the horizon.
    - `ts`: save times within `[t0, t1]` (see `linear_grid`, `log_grid`); default: only `t1`.
    - `args`: parameters passed to `vector_field` (arrays are traced, so new values do not recompile).
    - `solver`: `"auto"` (default: Tsit5, switching to Kvaerno5 where the flow turns stiff, as a gradient
      flow does near a minimum, and back where the explicit steps would be as long; `traj.segments` says
      which ran where), `"tsit5"`, `"dopri5"`, `"dopri8"` (tight tolerances), `"kvaerno5"` (stiff), `"heun"`,
      `"euler"` (explicit Euler; constant steps only: with step eta it is gradient descent).
    - `rtol`, `atol`: tolerances of the PID step-size controller.
    - `constant_step`: take constant steps of size `dt0` (`diffrax.ConstantStepSize`) instead of adaptive
      ones (`"auto"` is then Tsit5): n = ceil((t1 - t0) / dt0) equal steps (t1 - t0) / n over the horizon (`dt0`
      itself where it divides t1 - t0), the same steps whatever the save grid; `dt0` is then required and
      `max_steps` must cover n (default: at least n).
    - `max_steps`: the step budget over the whole solve (checked between calls of the compiled program, which
      takes at most 100,000 steps per call); exhausting it is reported as `status="max_steps"`. Default
      `None`: from the horizon (`horizon_steps`: 100,000 per decade of t1 - t0 above 1, plus 100,000).
    - `observables`: `{name: g(t, y, args)}` computed at every saved time, or one function
      `g(t, y, args) -> {name: array}` (when the observables share an expensive intermediate).
    - `save_states`: set `False` to save only the observables (bounded memory for big states).
    - `event`: a `flows.Event` to stop at (or, with `stop=False`, to locate) a condition.
    - `blowup`: the solve stops with `status="diverged"` once `max|y|` passes this (`None` disables).
    - `progress`: show a tqdm progress bar over `[t0, t1]`.
    - `throw`: raise `FlowError` (carrying the partial trajectory) when the status is not ok/event.

    **Returns:** a `Trajectory`.

    **Raises:** `ValueError` for bad arguments (naming the argument); `FlowError` for a failed solve.
    """
    throw = check_bool("throw", throw)
    y0 = as_state(y0)
    options = {k: v for k, v in locals().items() if k in OPTIONS}
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(vector_field, y0, t0, t1, ts, args, options)
    call_args = (y0, args, t0_arr, t1_arr, ts_arr, np.asarray(True), ())
    traj = execute(vector_field, options, key_opts, call_args, in_axes=None)
    if throw and not traj.ok:
        raise FlowError(f"flow failed: {traj.message}", traj)
    return traj


def batch_mesh(num_devices: int | None = None) -> jax.sharding.Mesh:
    """A one-axis mesh `("batch",)` over the first `num_devices` devices JAX sees (default: all, which after
    `jax.distributed.initialize` includes every host's) for `solve_batch(..., mesh=...)`."""
    available = jax.device_count()
    n = available if num_devices is None else num_devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(
            f"num_devices must be an integer in [1, {available}] (the devices JAX sees), got {num_devices!r}"
        )
    return jax.make_mesh((n,), ("batch",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:n])


def _shard_batch(call_args, in_axes, mesh):
    """Pad the batch axis to a multiple of the mesh size (on the host) and return (padded call args, padded
    size, place), where `place(x, axis)` puts a pytree of one call on the mesh: leaves with `axis == 0` split
    along their leading axis, the others replicated."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if not isinstance(mesh, jax.sharding.Mesh) or len(mesh.axis_names) != 1:
        raise ValueError("mesh must be a jax.sharding.Mesh with one axis (see flows.batch_mesh)")
    (axis,) = mesh.axis_names
    devices = mesh.shape[axis]
    size = np.shape(call_args[2])[0]  # t0 always carries the batch axis
    padded = -(-size // devices) * devices

    def pad(x):
        host = np.asarray(x)
        return np.concatenate([host, np.repeat(host[-1:], padded - size, axis=0)]) if padded != size else host

    # call_args[4] is the save grid, shared by the members (the compiled program gets it per member)
    padded_args = tuple(
        jax.tree_util.tree_map(pad, arg) if ax == 0 and i != 4 else arg
        for i, (arg, ax) in enumerate(zip(call_args, in_axes, strict=True))
    )

    def place_leaf(x, batched):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x  # already on the mesh (a multi-host output)
        host = np.asarray(x)
        spec = P(axis, *([None] * (host.ndim - 1))) if batched else P()
        return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), lambda idx, h=host: h[idx])

    def place(tree, ax):
        return jax.tree_util.tree_map(lambda x: place_leaf(x, ax == 0), tree)

    return padded_args, padded, place


def solve_batch(
    vector_field: Callable,
    y0,
    *,
    args=None,
    batch_y0: bool = False,
    batch_args: bool = True,
    throw: bool = False,
    mesh: jax.sharding.Mesh | None = None,
    **options: Any,
) -> Trajectory:
    """A sweep: one compilation, one solution per member of the batch.

    `args` (if `batch_args`) and/or `y0` (if `batch_y0`) carry a leading batch axis on every array leaf.
    Without an event or a mesh the members are solved in lockstep (`flows._sweep`): one solve of the stacked
    members whose step-size control holds every member to `rtol`/`atol` as its own solve would (each member's
    results agree with its own solve to the tolerances; `num_steps` is the shared count); with an event, on a
    mesh, or when the lockstep solve fails (a member diverges, turns non-finite or exhausts `max_steps`), each
    member gets its own solve, vmapped, and its own status.
    Every field of the returned `Trajectory` gains that leading axis; `status` and `message` become tuples,
    and `traj[i]` extracts member `i`. The batch does not raise unless `throw=True` (then `FlowError` lists
    the failed members); inspect `traj.status`.

    `mesh`: a one-axis `jax.sharding.Mesh` (e.g. `batch_mesh()`) to split the batch over its devices: every
    batched input is placed with its leading axis sharded over the mesh axis (unbatched `args` are
    replicated) and the one compiled program runs on all devices at once (SPMD). A batch whose size is not a
    multiple of the number of devices is padded with copies of its last member, which are dropped from the
    result. After `jax.distributed.initialize` the mesh may span hosts: every process passes the same
    (seeded) inputs and receives the whole result.

    `options`: the horizon and the solver options of `solve`, with its defaults and meanings: `t1` (required),
    `t0`, `ts`, and `BATCH_OPTIONS` (`solver`, `rtol`, `atol`, `dt0`, `max_steps`, `observables`, `save_states`,
    `event`, `blowup`; not `progress` or `constant_step`); an unknown one is a `TypeError` naming it. `args`,
    `throw` as in `solve`.
    """
    options = forwarded_options("solve_batch", options, solve, ("t1", "t0", "ts", *BATCH_OPTIONS))
    t1, t0, ts = options.pop("t1"), options.pop("t0"), options.pop("ts")
    options.update(progress=False, constant_step=False)
    batch_y0, batch_args = check_bool("batch_y0", batch_y0), check_bool("batch_args", batch_args)
    throw = check_bool("throw", throw)
    if not (batch_y0 or batch_args):
        raise ValueError("solve_batch needs batch_y0=True or batch_args=True")
    y0 = as_state(y0)
    check_state(y0)
    check_finite_tree("args", args)
    sizes: set = set()  # the leading sizes (None: a scalar leaf)
    if batch_args:
        leaves = jax.tree_util.tree_leaves(args)
        if not leaves:
            raise ValueError("batch_args=True but args has no array leaves to batch over")
        sizes |= {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if batch_y0:
        sizes |= {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(y0)}
    if None in sizes or len(sizes) != 1:
        raise ValueError(f"batched leaves of args/y0 must share one leading axis size, got {sizes}")
    example_y0 = jax.tree_util.tree_map(lambda a: a[0], y0) if batch_y0 else y0
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(vector_field, example_y0, t0, t1, ts, None, options)
    # Everything but args (if unbatched) and t1 carries the batch axis, so that a continuation after an
    # event (other start times, other states) reuses the same compiled program.
    (size,) = sizes
    # host-side broadcasts: eager jnp ops would each compile a small program on the first call
    if not batch_y0:
        y0 = jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (size,) + np.shape(a)), y0)
    call_args = (y0, args, np.full((size,), np.asarray(t0_arr)), t1_arr, np.asarray(ts_arr), np.ones((size,), bool), ())
    in_axes = (0, 0 if batch_args else None, 0, None, 0, 0, ())
    padded, place = size, None
    if mesh is not None:
        event = options["event"]
        if event is not None and not event.stop and jax.process_count() > 1:
            raise ValueError("event with stop=False is not supported on a mesh spanning several processes")
        call_args, padded, place = _shard_batch(call_args, in_axes, mesh)
    traj = sweep.run(vector_field, options, key_opts, call_args, in_axes=in_axes, place=place)
    if padded != size:
        traj = traj[:size]  # drop the padding of a sharded batch
    if throw and not traj.ok:
        bad = [i for i, s in enumerate(traj.status) if s not in ("ok", "event")]
        raise FlowError(
            f"{len(bad)} of {len(traj.status)} solves failed, e.g. member {bad[0]}: {traj.message[bad[0]]}", traj
        )
    return traj
