"""Running the compiled solve of `flows._program` over a save grid: in chunks of `SAVE_CHUNK` save points (so a
new number of save points never recompiles), continuing past a non-stopping event, probing the vector field
where a solve got stuck, and decoding the result into a `Trajectory`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _program
from ._inputs import check_field
from ._program import all_finite, build, is_compiled, signature
from ._xla import jit as xla_jit
from .events import continue_after_event
from .trajectory import MAX_STEPS, OK, STUCK, decode

logger = logging.getLogger(__name__)

__all__ = ["SAVE_CHUNK", "execute", "program"]

#: Save points per call of the compiled program. A grid of n save times runs as ceil(n / SAVE_CHUNK) calls of
#: one program (each from where the last stopped, the last one to t1; a shorter piece is padded with NaN
#: times, never reached), so a new number of save points never recompiles. A grid longer than one
#: chunk restarts the step-size controller at each chunk's last save time: results agree with one long solve
#: to the tolerances, not bit for bit.
SAVE_CHUNK = 64


def execute(vector_field, options, key_opts, call_args, *, in_axes, place=None):
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
    pieces = [grid[i : i + SAVE_CHUNK] for i in range(0, grid.shape[0], SAVE_CHUNK)]

    def chunk_call(y, start, piece, end, on):
        start = np.asarray(start, grid.dtype)
        # the slots after a short piece get NaN times: diffrax's save loop (`ts[i] <= t_next`) and its checks
        # (increasing, within [t0, t1]) are false for NaN, so those slots are never reached and their
        # observables never run (they ran once per slot with the last time repeated); _merge_chunk drops them
        padded = np.concatenate([piece, np.full(SAVE_CHUNK - piece.shape[0], np.nan, grid.dtype)])
        ts_c = np.clip(np.broadcast_to(padded, (size, SAVE_CHUNK)), start[:, None], end) if batched else padded
        return (
            place(y, 0 if batched else None),
            args_placed,
            place(start, 0 if batched else None),
            t1_placed if end is None else place(np.asarray(end, grid.dtype), None),
            place(np.asarray(ts_c), 0 if batched else None),
            place(np.asarray(on), 0 if batched else None),
        )

    example = chunk_call(y0, np.asarray(t0), pieces[0], None, event_on)
    key = ("batch" if batched else "single", in_axes, key_opts, signature(example))

    if not is_compiled(key):  # a new program: check the vector field's output before tracing the solve
        member = (
            (lambda tree, ax: jax.tree_util.tree_map(lambda a: a[0], tree) if ax == 0 else tree)
            if batched
            else (lambda tree, ax: tree)
        )
        check_field(vector_field, member(example[2], 0), member(y0, 0), member(args, in_axes[1] if batched else None))
    # the one compile hook of every solve (a test stops solves there)
    fn, compile_s = _program.compiled(key, functools.partial(program, vector_field, options, in_axes), example)
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


def program(vector_field, options: dict, in_axes: tuple | None) -> Callable:
    """The function compiled for a solve: `flows._program.build`'s, vmapped over `in_axes` for a batch."""
    run = build(vector_field, **options)
    return run if in_axes is None else jax.vmap(run, in_axes=in_axes)


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
        saved = jax.tree_util.tree_map(lambda a: _unreached(np.take(a, np.zeros(count, int), axis=axis)), out["saved"])
    else:
        ts = np.where(mask(cut(raw["ts"])), cut(raw["ts"]), np.inf)
        saved = jax.tree_util.tree_map(lambda a: np.where(mask(cut(a)), cut(a), _unreached(cut(a))), raw["saved"])
    if out is None:
        return dict(raw, ts=ts, saved=saved)
    join = lambda a, b: np.concatenate([a, b], axis=axis)  # noqa: E731
    merged = dict(out, ts=join(out["ts"], ts), saved=jax.tree_util.tree_map(join, out["saved"], saved))
    if raw is None:
        return merged
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
