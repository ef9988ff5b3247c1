"""How `flows.solve_batch` runs a sweep: in lockstep (the members stacked into one state that one adaptive solve
advances with one step size) or vmapped (one adaptive solve per member, `jax.vmap` over the solve).

A vmapped adaptive solve is a vmapped `while_loop`: every iteration steps every member (the finished ones
too, their results masked); its conditionals become selects, so the saved observables are computed at every
step for every member, not only at the save times; and on CPU each Runge-Kutta stage copies the whole batch of
stage values into another layout and each save is a scatter looping over the members. On small states these
copies cost about as much as the vector field itself. The lockstep solve has no batched control flow: the
vector field is vmapped over the members inside one `diffrax.diffeqsolve`, whose step-size controller measures
the error of every member separately (the RMS norm of each member's scaled error, the largest of them), so that
every member meets `rtol`/`atol` as its own solve would. It takes the step sequence the most demanding member
asks for at each time, so its step count is at least the largest of the members' own; each member's results
agree with its own solve to the tolerances, not bit for bit.

A lockstep solve pays for members that need small steps at different times (it takes them all); a vmapped one
for the spread of the members' step counts (every member steps until the slowest is done). So a large batch is
solved in lockstep chunks of consecutive members (`config.chunk`, 64: the batch split into equal chunks of at
most that many, the last padded with copies of the last member, one program for all chunks; a small state takes
more members per chunk, `config.chunk_entries`): a sweep over a grid
of parameters lists neighbours together, whose step demands peak together, so each chunk takes about the steps
of its slowest member rather than those of the whole batch (the rows `scan_snap/sweep...` of
`benchmarks/bench_scan_snap.py` record each chunk's steps against the members' own).

`config.strategy` chooses: `"auto"` (default) runs in lockstep where it applies (no event, no mesh, a state
of one floating dtype, two members or more) and falls back to the vmapped solve for the members of a chunk whose
lockstep solve fails (a member diverges, turns non-finite or exhausts `max_steps`), so that each member's
status and message are its own; `"vmap"` always vmaps.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np

from ._chunked import execute
from ._inputs import check_field
from ._program import saved_outputs, signature
from ._xla import options_key
from .trajectory import Trajectory

logger = logging.getLogger(__name__)

__all__ = ["STRATEGIES", "SweepConfig", "chunks", "config", "lockstep_applies", "run"]

STRATEGIES = ("auto", "vmap")
#: the name under which the stacked solve saves the members' states (an observable of the single solve)
_STATE = "__members_y__"
#: lockstep programs whose member field was checked (`check_field`), most recent last
_CHECKED: dict = {}


@dataclasses.dataclass
class SweepConfig:
    """How `solve_batch` runs a sweep (read at every call).

    **Arguments:**

    - `strategy`: `"auto"` (lockstep where it applies, else vmapped) or `"vmap"` (module docstring).
    - `chunk`: the most members one lockstep solve takes, unless that many hold fewer than `chunk_entries` state
      entries; a larger batch is solved in equal chunks of consecutive members (module docstring).
    - `chunk_entries`: the fewest state entries (members times a member's state size) worth a chunk of its own:
      each chunk is one more call of the compiled solve, which a chunk of a small state does not pay back (the
      3-entry class-symmetric flow's sweep, `scan_snap/sweep_symmetric` of `benchmarks/bench_scan_snap.py`).
    """

    strategy: str = "auto"
    chunk: int = 64
    chunk_entries: int = 4096


config = SweepConfig()


def lockstep_applies(options: dict, in_axes: tuple, call_args: tuple, mesh_placed: bool) -> bool:
    """Can this batch run in lockstep? Not with an event (each member stops or continues at its own time), not on
    a mesh, not for a state of several dtypes, not for a batch of one."""
    if config.strategy not in STRATEGIES:
        raise ValueError(f"flows._sweep.config.strategy must be one of {STRATEGIES}, got {config.strategy!r}")
    for name, low in (("chunk", 2), ("chunk_entries", 0)):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"flows._sweep.config.{name} must be an integer >= {low}, got {value!r}")
    if config.strategy == "vmap" or mesh_placed or options["event"] is not None:
        return False
    leaves = jax.tree_util.tree_leaves(call_args[0])
    size = np.shape(call_args[2])[0]
    return size > 1 and len({jnp.result_type(x) for x in leaves}) == 1


def run(vector_field, options: dict, key_opts: tuple, call_args: tuple, *, in_axes: tuple, place=None) -> Trajectory:
    """Run the batch `call_args` (as `flows._chunked.execute` takes it, batched along `in_axes`) in lockstep or
    vmapped (module docstring); the `Trajectory` is the same either way: every field with a leading batch axis."""
    if not lockstep_applies(options, in_axes, call_args, place is not None):
        return execute(vector_field, options, key_opts, call_args, in_axes=in_axes, place=place)
    size = int(np.shape(call_args[2])[0])
    leaves = jax.tree_util.tree_leaves(call_args[0])
    width = sum(int(np.prod(np.shape(x)[1:] if in_axes[0] == 0 else np.shape(x), dtype=int)) for x in leaves)
    parts = []
    for index, real in chunks(size, width):
        part = _take(call_args, in_axes, index) if len(index) < size else call_args
        traj = _lockstep(vector_field, options, key_opts, part, in_axes)
        if not traj.ok:
            logger.debug("solve_batch: the lockstep solve ended %s; solving its members vmapped", traj.status[0])
            part = _take(call_args, in_axes, index[:real])
            traj = execute(vector_field, options, key_opts, part, in_axes=in_axes)
        parts.append(traj[:real] if real < len(index) else traj)
    return parts[0] if len(parts) == 1 else _concatenate(parts)


def chunks(size: int, width: int) -> list[tuple[np.ndarray, int]]:
    """The lockstep chunks of a batch of `size` members whose states hold `width` entries each (module
    docstring; `config.chunk` and `config.chunk_entries`): `(index, real)` per chunk, `index` the members it
    solves (consecutive; every chunk as long, the last padded with the last member) and `real` how many of them
    are its own."""
    chunk = max(int(config.chunk), -(-int(config.chunk_entries) // max(int(width), 1)))
    count = -(-size // chunk)
    length = -(-size // count)
    out = []
    for i in range(count):
        index = np.arange(i * length, (i + 1) * length)
        out.append((np.minimum(index, size - 1), int(min(length, size - i * length))))
    return out


def _take(call_args, in_axes, index):
    """The members `index` of the batch `call_args = (y0, args, t0, t1, grid, event_on, extra)` as `execute`
    takes it: y0 and args where batched (`in_axes`), t0 and event_on; t1, the save grid and the ODE's empty
    `extra` are shared."""
    y0, args, t0, t1, grid, on, extra = call_args
    take = lambda tree: jax.tree_util.tree_map(lambda a: np.asarray(a)[index], tree)  # noqa: E731
    y0 = take(y0) if in_axes[0] == 0 else y0
    args = take(args) if in_axes[1] == 0 else args
    return (y0, args, take(t0), t1, grid, take(on), extra)


def _concatenate(parts: list[Trajectory]) -> Trajectory:
    """The batched trajectories of consecutive chunks as one: per-member fields joined along the batch axis, the
    compile and run seconds summed."""
    join = lambda *xs: np.concatenate([np.asarray(x) for x in xs])  # noqa: E731
    first = parts[0]

    def joined(name: str) -> np.ndarray:
        return join(*[getattr(p, name) for p in parts])

    return dataclasses.replace(
        first,
        ts=joined("ts"),
        ys=None if first.ys is None else jax.tree_util.tree_map(join, *[p.ys for p in parts]),
        observables=jax.tree_util.tree_map(join, *[p.observables for p in parts]),
        status=sum((tuple(p.status) for p in parts), ()),
        message=sum((tuple(p.message) for p in parts), ()),
        t_final=joined("t_final"),
        t_event=joined("t_event"),
        num_steps=joined("num_steps"),
        num_accepted_steps=joined("num_accepted_steps"),
        num_rejected_steps=joined("num_rejected_steps"),
        segments=sum((tuple(p.segments) for p in parts), ()),
        compile_s=float(sum(p.compile_s for p in parts)),
        run_s=float(sum(p.run_s for p in parts)),
    )


def _member(tree, axis):
    """Member 0 of a batched pytree (`axis == 0`), or the pytree itself (`axis is None`)."""
    return jax.tree_util.tree_map(lambda a: a[0], tree) if axis == 0 else tree


def _lockstep(vector_field, options, key_opts, call_args, in_axes) -> Trajectory:
    """One solve of the stacked members (module docstring), as a batched `Trajectory`."""
    y0, args, t0, t1, grid, _, extra = call_args
    size = int(np.shape(t0)[0])
    y_member = _member(y0, in_axes[0])
    if in_axes[0] != 0:
        y0 = jax.tree_util.tree_map(lambda a: np.broadcast_to(np.asarray(a), (size,) + np.shape(a)), y0)
    stacked_y0, unstack, widths = _leaf_major(y0, size)
    width = int(sum(widths))
    args_axis = in_axes[1]
    save_member = saved_outputs(options["observables"], options["save_states"])
    members = lambda f: jax.vmap(f, in_axes=(None, 0, args_axis))  # noqa: E731

    def field(t, ys, a):
        out = members(vector_field)(t, unstack(ys), a)
        return jnp.concatenate([jnp.ravel(x).astype(ys.dtype) for x in jax.tree_util.tree_leaves(out)])

    def observables(t, ys, a):
        def one(t, y, b):
            out = save_member(t, y, b)
            return out if "__y__" not in out else {**out, _STATE: out.pop("__y__")}

        return members(one)(t, unstack(ys), a)

    def error_norm(scaled_error):
        """The largest of the members' RMS norms of their scaled errors (each member as strict as alone)."""
        blocks = jax.tree_util.tree_leaves(unstack(scaled_error))
        squares = sum(jnp.sum(jnp.reshape(x, (size, -1)) ** 2, axis=1) for x in blocks)
        return jnp.sqrt(jnp.max(squares) / width)

    t0_scalar = np.asarray(t0)[0]
    stacked_args = (stacked_y0, args, t0_scalar, t1, grid, np.asarray(True), extra)
    member_shapes = tuple((tuple(np.shape(x)), jnp.result_type(x).name) for x in jax.tree_util.tree_leaves(y_member))
    key = ("lockstep", key_opts, args_axis, jax.tree_util.tree_structure(y_member), member_shapes)
    checked = (key, signature(stacked_args), options_key())
    if checked not in _CHECKED:
        # the member's field checked as the vmapped path checks it (errors name the member's shapes), once per
        # program: the check is an abstract trace of the field
        check_field(vector_field, t0_scalar, y_member, _member(args, args_axis))
        if len(_CHECKED) >= 64:
            _CHECKED.pop(next(iter(_CHECKED)))
        _CHECKED[checked] = True
    opts = dict(options, observables=observables, save_states=False, norm=error_norm)
    one = execute(field, opts, key, stacked_args, in_axes=None, stacked=True)
    return _unstack(one, size, options["save_states"])


def _leaf_major(y0, size: int):
    """The batched pytree `y0` (every leaf with leading axis `size`) as one flat host array, leaf after leaf
    (each leaf's block holds the members in order, row-major), and `unstack` mapping such a flat array (traced)
    back to the batched pytree; and each leaf's width per member. Leaf-major blocks are contiguous, so the
    stacking and unstacking at every vector-field evaluation are block copies and reshapes, not a strided
    interleave of the members' raveled states."""
    leaves, treedef = jax.tree_util.tree_flatten(y0)
    shapes = [np.shape(x)[1:] for x in leaves]
    widths = [int(np.prod(s, dtype=int)) for s in shapes]
    flat = np.concatenate([np.asarray(x).reshape(-1) for x in leaves])
    bounds = np.cumsum([0] + [size * w for w in widths])

    def unstack(ys):
        parts = [ys[bounds[i] : bounds[i + 1]].reshape((size,) + shapes[i]) for i in range(len(shapes))]
        return jax.tree_util.tree_unflatten(treedef, parts)

    return flat, unstack, widths


def _unstack(traj: Trajectory, size: int, save_states: bool) -> Trajectory:
    """The single `Trajectory` of the stacked solve as the batched one of `size` members: saved arrays
    (n_saves, size, ...) become (size, n_saves, ...); the counters, statuses and segments, shared, are repeated."""
    swap = lambda a: np.moveaxis(np.asarray(a), 1, 0)  # noqa: E731
    saved = {k: jax.tree_util.tree_map(swap, v) for k, v in traj.observables.items()}
    ys = saved.pop(_STATE) if save_states else None
    ts = np.asarray(traj.ts)
    full = lambda x: np.full((size,), np.asarray(x))  # noqa: E731
    return dataclasses.replace(
        traj,
        ts=np.broadcast_to(ts, (size,) + ts.shape).copy(),
        ys=ys,
        observables=saved,
        status=(traj.status,) * size,
        message=(traj.message,) * size,
        t_final=full(traj.t_final),
        t_event=full(traj.t_event),
        num_steps=full(traj.num_steps),
        num_accepted_steps=full(traj.num_accepted_steps),
        num_rejected_steps=full(traj.num_rejected_steps),
        segments=(traj.segments,) * size,  # the solvers `auto` ran, shared by the members
    )
