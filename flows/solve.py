"""`solve`: the one wrapper over `diffrax.diffeqsolve` that every flow in this library goes through.

It returns a `Trajectory` record in the spirit of scipy's `OdeResult`: saved times and states, observables
computed on save, a `status` with a human-readable `message`, step counts, and compile/run timings measured
separately (ahead-of-time lowering, then a timed call).

Failures are never silent. A non-finite state, a state whose max-norm passes `blowup`, an exhausted
`max_steps` budget or a step size that collapsed give `status != "ok"` with a message saying what happened
and at which time; the single (non-batched) call then raises `FlowError` unless `throw=False`.

The parts live by concern: `flows.trajectory` (the record, statuses, messages), `flows.grids` (save grids),
`flows.events` (`Event`, continuing past a non-stopping event), `flows._program` (the compiled diffrax
program and its cache). This module validates the call and runs it; `solve_batch` vmaps it, optionally
with the batch axis split over the devices of a `jax.sharding.Mesh`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_bool, check_choice, check_finite_tree, check_int, check_real, real_array
from ._program import _COMPILED, FIXED_STEP_ONLY, SOLVERS, all_finite, build, compiled, is_compiled, max_abs, signature
from ._xla import jit as xla_jit
from .events import Event, continue_after_event
from .grids import check_horizon, linear_grid, log_grid
from .trajectory import MAX_STEPS, OK, STATUS_NAMES, STUCK, FlowError, Trajectory, decode

logger = logging.getLogger(__name__)

__all__ = [
    "SOLVERS",
    "Event",
    "FlowError",
    "Trajectory",
    "batch_mesh",
    "linear_grid",
    "log_grid",
    "solve",
    "solve_batch",
]

# private names other modules of the package use (flows.sde, flows.mean_field)
_STATUS_NAMES, _check_horizon, _compiled, _signature = STATUS_NAMES, check_horizon, compiled, signature
_all_finite, _max_abs = all_finite, max_abs
_ = _COMPILED  # re-exported for tests that clear the program cache


def _validate(solver, rtol, atol, t0, t1, ts, max_steps, blowup, dt0):
    check_choice("solver", solver, sorted(SOLVERS))
    rtol = check_real("rtol", rtol, low=0.0, strict=True)
    atol = check_real("atol", atol, low=0.0, strict=True)
    check_horizon(t0, t1)
    max_steps = check_int("max_steps", max_steps, 1)
    if blowup is not None:  # inf is allowed (never diverges), NaN is not
        blowup = check_real("blowup", blowup, low=0.0, strict=True, finite=False)
    if dt0 is not None:
        dt0 = check_real("dt0", dt0, low=0.0, strict=True)
    ts = np.array([float(t1)]) if ts is None else real_array("ts", ts, finite=False)
    if ts.ndim != 1 or ts.size == 0:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError("ts must be finite")
    if np.any(np.diff(ts) < 0):
        raise ValueError("ts must be non-decreasing")
    if ts[0] < t0 or ts[-1] > t1:
        raise ValueError(f"ts must lie within [t0, t1] = [{t0}, {t1}], got [{ts[0]}, {ts[-1]}]")
    return ts, rtol, atol, max_steps, blowup, dt0


def _as_state(y0):
    """A list or tuple of plain numbers (or nested lists of them) becomes one array (it would otherwise
    reach the vector field as a Python list); integers become floats of JAX's default precision."""
    if isinstance(y0, (list, tuple)) and y0 and all(
            isinstance(x, (int, float, np.number)) and not isinstance(x, bool)
            for x in jax.tree_util.tree_leaves(y0)):
        try:
            arr = np.asarray(y0)
        except ValueError as err:
            raise ValueError(f"y0 must be an array or a pytree of arrays, got a ragged {type(y0).__name__}") \
                from err
        return jnp.asarray(arr, dtype=jnp.result_type(float) if not np.issubdtype(arr.dtype, np.floating)
                           else None)
    return y0


def _check_field(vector_field, t0, y0, args):
    """Trace `vector_field(t0, y0, args)` abstractly (no compile) and check that it returns a state of the
    same structure, shapes and dtypes as `y0`: a wrong-shaped output or a failing vector field is a
    ValueError here instead of an error from inside diffrax."""
    try:
        out = jax.eval_shape(vector_field, t0, y0, args)
    except Exception as err:  # noqa: BLE001 -- any error of the user's function, reported with the shapes
        shapes = jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), y0)
        raise ValueError(f"vector_field(t0, y0, args) failed for y0 of shape {shapes}: "
                         f"{type(err).__name__}: {err}") from err
    want = jax.tree_util.tree_structure(y0)
    got = jax.tree_util.tree_structure(out)
    if got != want:
        raise ValueError(f"vector_field must return a state structured like y0 ({want}), got {got}")
    for path, a, b in zip(jax.tree_util.tree_leaves_with_path(y0), jax.tree_util.tree_leaves(y0),
                          jax.tree_util.tree_leaves(out), strict=True):
        where = jax.tree_util.keystr(path[0]) or "y"
        if tuple(np.shape(a)) != tuple(b.shape):
            raise ValueError(f"vector_field returned shape {tuple(b.shape)} for y0{where if where != 'y' else ''} of "
                             f"shape {tuple(np.shape(a))}: dy/dt must have the shape of y")
        if jnp.result_type(a) != b.dtype:
            raise ValueError(f"vector_field returned dtype {b.dtype} for y0{where if where != 'y' else ''} of dtype "
                             f"{jnp.result_type(a)}: dy/dt must have the dtype of y")


def _check_state(y0):
    """y0: a floating array or a pytree of floating arrays, every entry finite."""
    leaves = jax.tree_util.tree_leaves(y0)
    if not leaves:
        raise ValueError("y0 must contain at least one array")
    check_finite_tree("y0", y0)
    dtype = jnp.result_type(*leaves)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"y0 must be floating point, got dtype {dtype}")
    return dtype


def _prepare(vector_field, y0, t0, t1, ts, args, solver, rtol, atol, dt0, max_steps, observables,
             save_states, event, blowup, progress, constant_step=False):
    if not callable(vector_field):
        raise ValueError("vector_field must be callable f(t, y, args)")
    constant_step = check_bool("constant_step", constant_step)
    save_states = check_bool("save_states", save_states)
    progress = check_bool("progress", progress)
    ts, rtol, atol, max_steps, blowup, dt0 = _validate(solver, rtol, atol, t0, t1, ts, max_steps, blowup, dt0)
    if constant_step:
        if dt0 is None:
            raise ValueError("dt0 (the step size) must be given with constant_step=True")
        needed = math.ceil((float(t1) - float(t0)) / dt0 - 1e-9)
        if needed > max_steps:
            raise ValueError(f"max_steps = {max_steps} is too small for constant steps dt0 = {dt0} over "
                             f"[{t0}, {t1}] ({needed} steps needed)")
    elif solver in FIXED_STEP_ONLY:
        raise ValueError(f"solver {solver!r} has no error estimate: pass constant_step=True and dt0")
    if observables is not None and not callable(observables):
        if not isinstance(observables, Mapping) or not all(callable(f) for f in observables.values()):
            raise ValueError("observables must be a mapping name -> f(t, y, args), or one function "
                             "f(t, y, args) -> dict of named arrays")
        if "__y__" in observables:
            raise ValueError("observables may not use the reserved name '__y__'")
    if not save_states and not observables:
        raise ValueError("save_states=False needs at least one observable to save")
    if event is not None and not isinstance(event, Event):
        raise ValueError("event must be a flows.Event")
    dtype = _check_state(y0)
    check_finite_tree("args", args)
    # host arrays: the compiled program takes them as they are (a jnp.asarray is a dispatch each)
    ts_arr = np.asarray(ts, dtype=dtype)
    t0_arr = np.asarray(t0, dtype=dtype)
    t1_arr = np.asarray(t1, dtype=dtype)
    options = dict(
        solver=solver, rtol=rtol, atol=atol, dt0=dt0, max_steps=max_steps,
        observables=observables, save_states=save_states, event=event, blowup=blowup,
        progress=progress, constant_step=constant_step,
    )
    key_opts = (
        vector_field, solver, rtol, atol, dt0, max_steps,
        observables if callable(observables) else tuple(sorted((observables or {}).items(), key=lambda kv: kv[0])),
        save_states, event, blowup,
        progress, constant_step,
    )
    return ts_arr, t0_arr, t1_arr, options, key_opts


#: Save points per call of the compiled program. A grid of n save times runs as ceil(n / SAVE_CHUNK) calls of
#: one program (each from where the last stopped, the last one to t1; a shorter piece is padded with NaN
#: times, never reached), so a new number of save points never recompiles (issue 11). A grid longer than one
#: chunk restarts the step-size controller at each chunk's last save time: results agree with one long solve
#: to the tolerances, not bit for bit.
SAVE_CHUNK = 64


def _execute(vector_field, options, key_opts, call_args, *, in_axes, place=None):
    """Compile (cached) and run the save grid chunk by chunk; continue after a non-stopping event; decode into
    a Trajectory. `call_args[4]` is the 1-D save grid (shared by every member of a batch); `place` puts the
    host arrays of one call on a mesh (`solve_batch(mesh=...)`)."""
    batched = in_axes is not None
    y0, args, t0, t1, grid, event_on = call_args
    grid = np.asarray(grid)
    size = np.shape(t0)[0] if batched else None
    place = place or (lambda x, axis: x)
    args_placed = place(args, in_axes[1] if batched else None)
    t1_placed = place(np.asarray(t1), None)
    event = options["event"]
    pieces = [grid[i:i + SAVE_CHUNK] for i in range(0, grid.shape[0], SAVE_CHUNK)]

    def chunk_call(y, start, piece, end, on):
        start = np.asarray(start, grid.dtype)
        # the slots after a short piece get NaN times: diffrax's save loop (`ts[i] <= t_next`) and its checks
        # (increasing, within [t0, t1]) are false for NaN, so those slots are never reached and their
        # observables never run (they ran once per slot with the last time repeated); _merge_chunk drops them
        padded = np.concatenate([piece, np.full(SAVE_CHUNK - piece.shape[0], np.nan, grid.dtype)])
        ts_c = np.clip(np.broadcast_to(padded, (size, SAVE_CHUNK)), start[:, None], end) if batched else padded
        return (place(y, 0 if batched else None), args_placed, place(start, 0 if batched else None),
                t1_placed if end is None else place(np.asarray(end, grid.dtype), None),
                place(np.asarray(ts_c), 0 if batched else None), place(np.asarray(on), 0 if batched else None))

    example = chunk_call(y0, np.asarray(t0), pieces[0], None, event_on)
    key = ("batch" if batched else "single", in_axes, key_opts, signature(example))

    def make():
        run = build(vector_field, **options)
        return jax.vmap(run, in_axes=in_axes) if batched else run

    if not is_compiled(key):  # a new program: check the vector field's output before tracing the solve
        member = (lambda tree, ax: jax.tree_util.tree_map(lambda a: a[0], tree) if ax == 0 else tree) if batched \
            else (lambda tree, ax: tree)
        _check_field(vector_field, member(example[2], 0), member(y0, 0),
                     member(args, in_axes[1] if batched else None))
    fn, compile_s = compiled(key, make, example)
    start_clock = time.perf_counter()
    y, start, on = y0, np.asarray(t0), np.asarray(event_on)
    active = np.ones(size if batched else (), bool)
    out = None
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        end = float(t1) if last else float(piece[-1])
        if batched and not np.all(active):  # stopped members: a zero-length run from the chunk's end
            start = np.where(active, start, end)
        ca = chunk_call(y, start, piece, None if last else end, on)
        raw = fn(*ca)
        if event is not None and not event.stop:
            raw = continue_after_event(fn, raw, ca[1], ca[2], ca[3], ca[4], batched)
        raw = jax.tree_util.tree_map(np.asarray, _addressable(jax.block_until_ready(raw)))
        out = _merge_chunk(out, raw, active, piece.shape[0])
        code = np.asarray(raw["code"])
        if event is not None and not event.stop:
            on = on & ~(active & np.isfinite(np.asarray(raw["t_event"])))
        if not last and np.any(active):
            over = active & (code == OK) & (out["num_steps"] >= options["max_steps"])
            out["code"] = np.where(over, MAX_STEPS, out["code"])
        active = active & (out["code"] == OK)
        if not np.any(active):
            break
        y, start = raw["y_end"], raw["t_final"]
    for j in range(i + 1, len(pieces)):  # chunks nobody reached
        out = _merge_chunk(out, None, np.zeros_like(active), pieces[j].shape[0])
    run_s = time.perf_counter() - start_clock
    out = dict(out, rhs_finite=_probe_rhs(vector_field, out, call_args, in_axes))
    traj = decode(out, options, float(t1), batched, compile_s, run_s)
    logger.debug("solve: %s (compile %.3f s, run %.3f s, %d chunks)", traj.status, compile_s, run_s, len(pieces))
    return traj


def _unreached(a):
    return np.full_like(a, np.inf) if np.issubdtype(a.dtype, np.floating) else a


def _merge_chunk(out, raw, active, count):
    """Append one chunk's first `count` save points to `out`; members not `active` in this chunk keep their
    earlier end results and get unreached (inf) save points, as diffrax marks the points after a stop."""
    axis = active.ndim  # the save axis: 0 for a single solve, 1 for a batch

    def cut(a):
        return np.take(a, np.arange(count), axis=axis)

    def mask(a):
        return active.reshape(active.shape + (1,) * (a.ndim - active.ndim))

    if raw is None:  # nobody reached this chunk: copy the shapes of the last one
        ts = np.full(out["ts"].shape[:axis] + (count,), np.inf, out["ts"].dtype)
        saved = jax.tree_util.tree_map(lambda a: _unreached(np.take(a, np.zeros(count, int), axis=axis)),
                                       out["saved"])
        return dict(out, ts=np.concatenate([out["ts"], ts], axis=axis),
                    saved=jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=axis), out["saved"], saved))
    ts = np.where(mask(cut(raw["ts"])), cut(raw["ts"]), np.inf)
    saved = jax.tree_util.tree_map(lambda a: np.where(mask(cut(a)), cut(a), _unreached(cut(a))), raw["saved"])
    if out is None:
        return dict(raw, ts=ts, saved=saved)
    merged = dict(out, ts=np.concatenate([out["ts"], ts], axis=axis),
                  saved=jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=axis), out["saved"], saved))
    for k in ("code", "t_final", "y_end_max"):
        merged[k] = np.where(active, raw[k], out[k])
    merged["y_end"] = jax.tree_util.tree_map(lambda a, b: np.where(mask(a), b, a), out["y_end"], raw["y_end"])
    first = active & ~np.isfinite(out["t_event"])
    merged["t_event"] = np.where(first, raw["t_event"], out["t_event"])
    for k in ("num_steps", "num_accepted_steps", "num_rejected_steps"):
        merged[k] = out[k] + np.where(active, raw[k], 0)
    return merged


def _addressable(tree):
    """Arrays sharded over several processes gathered to every process (multi-host sweeps)."""
    def gather(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return multihost_utils.process_allgather(x, tiled=True)
        return x

    return jax.tree_util.tree_map(gather, tree)


def _probe_rhs(vector_field, raw, call_args, in_axes):
    """Is the vector field itself non-finite where a stuck solve stopped (at or just after t_final)?

    Evaluated only when some solve ended stuck (max_steps, dt_min, failed), in a separate small program, so
    that the solve's own program does not trace the vector field for this diagnosis.
    """
    codes = np.atleast_1d(np.asarray(raw["code"]))
    if not np.any(np.isin(codes, STUCK)):
        return np.ones(codes.shape, bool)
    args, t1 = call_args[1], call_args[3]

    def probe(t_end, y_end, a):
        t_probe = t_end + 1e-9 * jnp.maximum(t1 - t_end, 0.0)
        return all_finite(vector_field(t_end, y_end, a)) & all_finite(vector_field(t_probe, y_end, a))

    fn = jax.vmap(probe, in_axes=(0, 0, in_axes[1])) if in_axes is not None else probe
    return np.atleast_1d(np.asarray(xla_jit(fn)(raw["t_final"], raw["y_end"], args)))


def solve(
    vector_field: Callable,
    y0,
    *,
    t1: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args=None,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int = 100_000,
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
    - `y0`: the initial state; its dtype sets the precision of the solve.
    - `t1`, `t0`: the horizon.
    - `ts`: save times within `[t0, t1]` (see `linear_grid`, `log_grid`); default: only `t1`.
    - `args`: parameters passed to `vector_field` (arrays are traced, so new values do not recompile).
    - `solver`: `"tsit5"` (default), `"dopri5"`, `"dopri8"` (tight tolerances), `"kvaerno5"` (stiff),
      `"heun"`, `"euler"` (explicit Euler; constant steps only: with step eta it is gradient descent).
    - `rtol`, `atol`: tolerances of the PID step-size controller.
    - `constant_step`: take constant steps of size `dt0` (`diffrax.ConstantStepSize`) instead of adaptive
      ones; `dt0` is then required and `max_steps` must cover (t1 - t0) / dt0.
    - `max_steps`: the step budget; exhausting it is reported as `status="max_steps"`.
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
    y0 = _as_state(y0)
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(
        vector_field, y0, t0, t1, ts, args, solver, rtol, atol, dt0, max_steps, observables,
        save_states, event, blowup, progress, constant_step,
    )
    call_args = (y0, args, t0_arr, t1_arr, ts_arr, np.asarray(True))
    traj = _execute(vector_field, options, key_opts, call_args, in_axes=None)
    if throw and not traj.ok:
        raise FlowError(f"flow failed: {traj.message}", traj)
    return traj


def batch_mesh(num_devices: int | None = None) -> jax.sharding.Mesh:
    """A one-axis mesh `("batch",)` over the first `num_devices` devices JAX sees (default: all, which after
    `jax.distributed.initialize` includes every host's) for `solve_batch(..., mesh=...)`."""
    available = jax.device_count()
    n = available if num_devices is None else num_devices
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= available:
        raise ValueError(f"num_devices must be an integer in [1, {available}] (the devices JAX sees), got "
                         f"{num_devices!r}")
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
    padded_args = tuple(jax.tree_util.tree_map(pad, arg) if ax == 0 and i != 4 else arg
                        for i, (arg, ax) in enumerate(zip(call_args, in_axes, strict=True)))

    def place_leaf(x, batched):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x  # already on the mesh (a multi-host output)
        host = np.asarray(x)
        spec = P(axis, *([None] * (host.ndim - 1))) if batched else P()
        return jax.make_array_from_callback(host.shape, NamedSharding(mesh, spec), lambda idx, h=host: h[idx])

    def place(tree, ax):
        return jax.tree_util.tree_map(lambda x: place_leaf(x, ax == 0), tree)

    return padded_args, padded, place


def _take_members(traj: Trajectory, size: int) -> Trajectory:
    """The first `size` members of a batched trajectory (drops the padding of a sharded batch)."""
    import dataclasses

    take = lambda x: jax.tree_util.tree_map(lambda a: a[:size], x)  # noqa: E731
    return dataclasses.replace(
        traj, ts=traj.ts[:size], ys=None if traj.ys is None else take(traj.ys), observables=take(traj.observables),
        status=traj.status[:size], message=traj.message[:size], t_final=traj.t_final[:size],
        t_event=traj.t_event[:size], num_steps=traj.num_steps[:size],
        num_accepted_steps=traj.num_accepted_steps[:size], num_rejected_steps=traj.num_rejected_steps[:size])


def solve_batch(
    vector_field: Callable,
    y0,
    *,
    t1: float,
    t0: float = 0.0,
    ts: Sequence[float] | np.ndarray | None = None,
    args=None,
    batch_y0: bool = False,
    batch_args: bool = True,
    solver: str = "tsit5",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    dt0: float | None = None,
    max_steps: int = 100_000,
    observables: Mapping[str, Callable] | Callable | None = None,
    save_states: bool = True,
    event: Event | None = None,
    blowup: float | None = 1e10,
    throw: bool = False,
    mesh: jax.sharding.Mesh | None = None,
) -> Trajectory:
    """A vmapped sweep: one compilation, one solve per member of the batch.

    `args` (if `batch_args`) and/or `y0` (if `batch_y0`) carry a leading batch axis on every array leaf.
    Every field of the returned `Trajectory` gains that leading axis; `status` and `message` become tuples,
    and `traj[i]` extracts member `i`. The batch does not raise unless `throw=True` (then `FlowError` lists
    the failed members); inspect `traj.status`.

    `mesh`: a one-axis `jax.sharding.Mesh` (e.g. `batch_mesh()`) to split the batch over its devices: every
    batched input is placed with its leading axis sharded over the mesh axis (unbatched `args` are
    replicated) and the one compiled program runs on all devices at once (SPMD). A batch whose size is not a
    multiple of the number of devices is padded with copies of its last member, which are dropped from the
    result. After `jax.distributed.initialize` the mesh may span hosts: every process passes the same
    (seeded) inputs and receives the whole result.

    Other arguments as in `solve`.
    """
    batch_y0, batch_args = check_bool("batch_y0", batch_y0), check_bool("batch_args", batch_args)
    throw = check_bool("throw", throw)
    if not (batch_y0 or batch_args):
        raise ValueError("solve_batch needs batch_y0=True or batch_args=True")
    y0 = _as_state(y0)
    _check_state(y0)
    check_finite_tree("args", args)
    sizes = set()
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
    ts_arr, t0_arr, t1_arr, options, key_opts = _prepare(
        vector_field, example_y0, t0, t1, ts, None, solver, rtol, atol, dt0, max_steps, observables,
        save_states, event, blowup, False,
    )
    # Everything but args (if unbatched) and t1 carries the batch axis, so that a continuation after an
    # event (other start times, other states) reuses the same compiled program.
    (size,) = sizes
    # host-side broadcasts: eager jnp ops would each compile a small program on the first call
    if not batch_y0:
        y0 = jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (size,) + np.shape(a)), y0)
    call_args = (y0, args, np.full((size,), np.asarray(t0_arr)), t1_arr, np.asarray(ts_arr), np.ones((size,), bool))
    in_axes = (0, 0 if batch_args else None, 0, None, 0, 0)
    padded, place = size, None
    if mesh is not None:
        if event is not None and not event.stop and jax.process_count() > 1:
            raise ValueError("event with stop=False is not supported on a mesh spanning several processes")
        call_args, padded, place = _shard_batch(call_args, in_axes, mesh)
    traj = _execute(vector_field, options, key_opts, call_args, in_axes=in_axes, place=place)
    if padded != size:
        traj = _take_members(traj, size)
    if throw and not traj.ok:
        bad = [i for i, s in enumerate(traj.status) if s not in ("ok", "event")]
        raise FlowError(f"{len(bad)} of {len(traj.status)} solves failed, e.g. member {bad[0]}: "
                        f"{traj.message[bad[0]]}", traj)
    return traj
