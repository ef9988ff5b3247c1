"""Running the compiled solve of `flows._program` over a save grid and decoding the result into a `Trajectory`:
in chunks of `SAVE_CHUNK` save points (so a new number of save points never recompiles a single solve; a batch
pads its grid to a power of two of save slots, `batch_slots`), each chunk in one or
more calls, a member of a batch going on from where its last call stopped when that call stopped early for a
reason that is not the end of its solve: a non-stopping event (then with the event off), a switch of solver
(`solver="auto"`: Tsit5 until the flow turns stiff, then Kvaerno5, and back; `flows._stiffness`), or the step
cap of one call (`flows._program.CALL_STEPS`, below the step budget). Where a solve got stuck the vector field
is probed. An SDE runs its whole grid in one call: its Brownian path and its constant steps start at t0.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _program
from ._inputs import check_field
from ._program import AUTO, CALL_STEPS, SWITCH, all_finite, build, is_compiled, signature
from ._stiffness import EXPLICIT, IMPLICIT
from ._xla import jit as xla_jit
from .trajectory import EVENT, MAX_STEPS, OK, STUCK, decode

logger = logging.getLogger(__name__)

__all__ = ["BATCH_MIN_SLOTS", "SAVE_CHUNK", "batch_slots", "call_cap", "execute", "program"]

#: Save points per call of the compiled program. A grid of n save times runs as ceil(n / SAVE_CHUNK) chunks of
#: one program (each from where the last stopped, the last one to t1; a shorter piece is padded with NaN
#: times, never reached), so a new number of save points never recompiles. A grid longer than one
#: chunk restarts the step-size controller at each chunk's last save time: results agree with one long solve
#: to the tolerances, not bit for bit.
SAVE_CHUNK = 64
#: The fewest save slots of a batch's program (`batch_slots`).
BATCH_MIN_SLOTS = 4


def batch_slots(n_saves: int) -> int:
    """The save slots per call of a batch's program for a grid of `n_saves` points: the smallest power of two
    holding the grid (at least `BATCH_MIN_SLOTS`), at most `SAVE_CHUNK`. A batch's save buffer is the batch
    size times a single solve's, and every slot is initialised, carried through the step loop and checked for
    finite values whether or not a save fills it; so a batch's grid is padded to its power of two only (one
    program per power, at most five) where a single solve pads every grid to `SAVE_CHUNK` (one program). The
    chunks, and so the results, are those of `SAVE_CHUNK` either way: a grid of more than `SAVE_CHUNK` points
    runs in chunks of `SAVE_CHUNK`."""
    return min(SAVE_CHUNK, max(BATCH_MIN_SLOTS, 1 << max(0, int(n_saves) - 1).bit_length()))


#: The counters a Trajectory sums over calls.
COUNTERS = ("num_steps", "num_accepted_steps", "num_rejected_steps")


def execute(vector_field, options, key_opts, call_args, *, in_axes, place=None, stacked=False):
    """Compile (cached) and run the save grid chunk by chunk, each member of a batch until the chunk's end or
    its stop; decode into a Trajectory. `call_args = (y0, args, t0, t1, grid, event_on, extra)`: `grid` is the
    1-D save grid (shared by every member of a batch), `extra` the SDE's traced inputs (`()` for an ODE);
    `options["max_steps"]` is the step budget over every call. `place` puts the host arrays of one call on a
    mesh (`solve_batch(mesh=...)`). `stacked`: the single solve is a batch stacked into one state
    (`flows._sweep`), whose save slots are sized as a batch's (`batch_slots`)."""
    batched = in_axes is not None
    y0, args, t0, t1, grid, event_on, extra = call_args
    grid = np.asarray(grid)
    solvers = (EXPLICIT, IMPLICIT) if options["solver"] == AUTO else (options["solver"],)
    if len(solvers) > 1:  # the watching explicit solver is told the whole solve's horizon
        extra = (np.asarray(t1, grid.dtype),)
        in_axes = None if in_axes is None else (*in_axes[:6], (None,))
    # constant steps: one uniform step grid over [t0, t1] (as one diffrax solve would take it), each call's step
    # traced (its span divided into whole steps of that grid), so that the chunks take the steps of one solve
    steady = options["constant_step"] and options.get("noise") is None
    if steady:
        extra = (np.zeros(np.shape(t0), grid.dtype),)
        in_axes = None if in_axes is None else (*in_axes[:6], (0,))
    size = np.shape(t0)[0] if batched else 1
    place = place or (lambda x, axis: x)
    args_placed = place(args, in_axes[1] if batched else None)
    extra_axes = in_axes[6] if batched else (None,) * len(extra)
    extra_placed = tuple(place(x, ax) for x, ax in zip(extra, extra_axes, strict=True))
    t1_placed = place(np.asarray(t1), None)
    event, budget = options["event"], options["max_steps"]
    if options.get("noise") is not None:
        chunk = grid.shape[0]
    else:
        chunk = batch_slots(grid.shape[0]) if batched or stacked else SAVE_CHUNK

    # the host's view of every member (a single solve is a batch of one here)
    def lead(tree):
        return tree if batched else jax.tree_util.tree_map(lambda a: np.asarray(a)[None], tree)

    def strip(tree):
        return tree if batched else jax.tree_util.tree_map(lambda a: a[0], tree)

    def chunk_call(y, start, piece, end, on, dt=None):
        # the slots after a short piece get NaN times: diffrax's save loop (`ts[i] <= t_next`) and its checks
        # (increasing, within [t0, t1]) are false for NaN, so those slots are never reached and their
        # observables never run; a continuation's earlier save times are clipped to its start (saved already)
        padded = np.concatenate([piece, np.full(chunk - piece.shape[0], np.nan, grid.dtype)])
        top = float(t1) if end is None else end
        ts_c = np.clip(np.broadcast_to(padded, (size, chunk)), start[:, None], top).astype(grid.dtype)
        axis = 0 if batched else None
        return (
            place(strip(y), axis),
            args_placed,
            place(strip(np.asarray(start, grid.dtype)), axis),
            t1_placed if end is None else place(np.asarray(end, grid.dtype), None),
            place(strip(ts_c), axis),
            place(strip(np.asarray(on)), axis),
            extra_placed if dt is None else (place(strip(np.asarray(dt, grid.dtype)), axis),),
        )

    y, start, on = lead(y0), lead(np.asarray(t0, grid.dtype)), lead(np.asarray(event_on))
    origin = float(np.ravel(np.asarray(t0))[0])
    span = float(t1) - origin
    # diffrax's count of constant steps over [t0, t1] (`ConstantStepSize`), and the uniform step it spreads them to
    h = span / max(1, math.ceil(span / np.nextafter(options["dt0"], np.inf))) if steady else None
    example = chunk_call(y, start, grid[:chunk], None, on, dt=np.full(size, h) if steady else None)
    base = ("batch" if batched else "single", in_axes, key_opts, signature(example))
    member = lambda tree, ax: jax.tree_util.tree_map(lambda a: a[0], tree) if ax == 0 else tree  # noqa: E731
    one = (start[0], member(y, 0), member(args, in_axes[1] if batched else None))
    if len(solvers) > 1 and not _forward_mode(vector_field, base, *one):
        solvers = (EXPLICIT,)  # no implicit solver without forward-mode derivatives: Tsit5 throughout
    watch = len(solvers) > 1
    sweep = batched or stacked  # a sweep's program: compiled with the options of one (flows._xla)
    keys = [(*base, name, watch) for name in solvers]
    if not is_compiled(keys[0], sweep):  # a new program: check the vector field's output before tracing the solve
        check_field(vector_field, *one)
    programs: dict[int, Callable] = {}
    compile_s = 0.0

    def program_of(m):
        nonlocal compile_s
        if m not in programs:
            watched = solvers[m] if watch else None
            # the one compile hook of every solve (a test stops solves there)
            programs[m], seconds = _program.compiled(
                keys[m], functools.partial(program, vector_field, options, in_axes, watched), example, batched=sweep
            )
            compile_s += seconds
        return programs[m]

    program_of(0)
    compiled_before = compile_s  # a solver `auto` switches to is compiled when first needed: not run time
    start_clock = time.perf_counter()
    mode = np.zeros(size, int)  # index into `solvers` per member
    active = np.ones(size, bool)  # members that have not stopped
    state = {
        "code": np.full(size, OK),
        "t_final": start.copy(),
        "t_event": np.full(size, np.nan, grid.dtype),
        "t_bad": np.full(size, np.inf, grid.dtype),
        "y_end_max": np.zeros(size, grid.dtype),
        **{k: np.zeros(size, np.int64) for k in COUNTERS},
    }
    segments: list[list] = [[] for _ in range(size)]
    ts_out, saved_out = np.full((size, grid.shape[0]), np.inf, grid.dtype), None
    calls = 0
    first = 0
    while first < grid.shape[0]:
        stop, end = _chunk_end(grid, first, chunk, float(t1), origin, h)
        piece, last = grid[first:stop], stop >= grid.shape[0]
        pending, taken = active.copy(), np.zeros((size, piece.shape[0]), bool)
        while np.any(pending):
            for m in range(len(solvers)):
                members = pending & (mode == m)
                if not np.any(members):
                    continue
                # the others run a zero-length solve from the chunk's end; their results are not used
                begin = np.where(members, start, end).astype(grid.dtype)
                dt = None
                if steady:  # whole steps of the uniform grid from where each member starts
                    length = end - begin
                    dt = np.where(length > 0, length / np.maximum(1.0, np.ceil(length / h - 1e-6)), h)
                raw = program_of(m)(*chunk_call(y, begin, piece, None if last else end, on, dt))
                raw = lead(jax.tree_util.tree_map(np.asarray, _addressable(jax.block_until_ready(raw))))
                calls += 1
                # save points: those this call reached that no earlier call of the chunk saved
                reached = members[:, None] & np.isfinite(raw["ts"][:, : piece.shape[0]]) & ~taken
                saved_out = _write(saved_out, raw["saved"], reached, first, grid.shape[0])
                ts_out[:, first : first + piece.shape[0]] = np.where(
                    reached, raw["ts"][:, : piece.shape[0]], ts_out[:, first : first + piece.shape[0]]
                )
                taken |= reached
                code = np.where(members, raw["code"], OK)
                for k in COUNTERS:
                    state[k] = state[k] + np.where(members, raw[k], 0)
                for k in ("t_final", "y_end_max"):
                    state[k] = np.where(members, raw[k], state[k])
                state["t_bad"] = np.where(members & np.isinf(state["t_bad"]), raw["t_bad"], state["t_bad"])
                hit = members & np.isfinite(raw["t_event"])
                state["t_event"] = np.where(hit & np.isnan(state["t_event"]), raw["t_event"], state["t_event"])
                y = _select(members, raw["y_end"], y)
                for i in np.nonzero(members)[0]:
                    _extend(segments[i], solvers[m], float(begin[i]), float(raw["t_final"][i]))
                start = np.where(members, raw["t_final"], start)
                # why did each member stop, and does it go on?
                goes_on = np.zeros(size, bool)
                if event is not None and not event.stop:
                    located = members & (code == EVENT)
                    on = on & ~hit  # located once: the event is off from here
                    goes_on |= located & (raw["t_final"] < end)
                    code = np.where(located & ~(raw["t_final"] < end), OK, code)
                switched = members & (code == SWITCH)
                mode = np.where(switched, 1 - mode, mode)
                goes_on |= switched
                goes_on |= members & (code == MAX_STEPS) & (state["num_steps"] < budget)  # only the call's cap
                stopped = members & ~goes_on
                state["code"] = np.where(stopped, code, state["code"])
                active &= ~(stopped & (code != OK))
                pending &= ~stopped
        if not last:  # the budget counts every chunk
            over = active & (state["num_steps"] >= budget)
            state["code"] = np.where(over, MAX_STEPS, state["code"])
            active &= ~over
        first = stop
        if not np.any(active):
            break
    run_s = time.perf_counter() - start_clock - (compile_s - compiled_before)
    out = strip(dict(state, ts=ts_out, saved=saved_out, y_end=y))
    out["rhs_finite"] = _probe_rhs(vector_field, out, call_args, in_axes)
    spans = tuple(tuple(tuple(s) for s in member) for member in segments)
    traj = decode(out, options, float(t1), batched, compile_s, run_s, spans if batched else spans[0])
    logger.debug("solve: %s (compile %.3f s, run %.3f s, %d calls)", traj.status, compile_s, run_s, calls)
    return traj


def _chunk_end(grid, first: int, chunk: int, t1: float, origin: float, step: float | None) -> tuple[int, float]:
    """(stop, end) of the chunk of save points `grid[first:stop]` (at most `chunk`), solved up to `end`: `t1` for
    the last chunk, else the chunk's last save time, or with constant steps `step` (the uniform grid from
    `origin`) the first step boundary at or after it, so that every chunk starts on the step grid and the steps
    are those of one solve (a literal loop); the chunk is cut short where a later save time would fall before
    that boundary (kept as it was if all of its save times lie within one step)."""
    stop = min(first + chunk, grid.shape[0])
    if stop >= grid.shape[0]:
        return stop, t1
    if step is None:
        return stop, float(grid[stop - 1])
    for j in range(stop - 1, first - 1, -1):
        boundary = min(origin + math.ceil((float(grid[j]) - origin) / step - 1e-6) * step, t1)
        if float(grid[j + 1]) >= boundary:
            return j + 1, boundary
    return stop, float(grid[stop - 1])


def program(vector_field, options: dict, in_axes: tuple | None, watched: str | None = None) -> Callable:
    """The function compiled for a solve: `flows._program.build`'s for `options` (with at most `CALL_STEPS`
    steps per call; `watched`: the watching form of that solver, for `solver="auto"`), vmapped over `in_axes`
    for a batch."""
    opts = dict(options, max_steps=call_cap(options["max_steps"], options.get("noise") is not None))
    if watched is not None:
        opts.update(solver=watched, watch=True)
    run = build(vector_field, **opts)
    return run if in_axes is None else jax.vmap(run, in_axes=in_axes)


#: Whether a vector field has forward-mode derivatives (Kvaerno5's Newton iterations need them), per program.
_FORWARD: dict = {}


def _forward_mode(vector_field, key, t0, y0, args) -> bool:
    """Can `vector_field` be differentiated in forward mode at (t0, y0, args)? Traced abstractly once per
    program key (a field with a `jax.custom_vjp` part cannot; `solver="auto"` then stays explicit)."""
    if key not in _FORWARD:
        try:
            jax.eval_shape(lambda y: jax.jvp(lambda z: vector_field(t0, z, args), (y,), (y,)), y0)
            _FORWARD[key] = True
        except Exception:  # noqa: BLE001 -- any failure to differentiate: the explicit solver alone
            logger.info("solver 'auto': the vector field has no forward-mode derivative; Tsit5 throughout")
            _FORWARD[key] = False
        if len(_FORWARD) > 256:
            _FORWARD.pop(next(iter(_FORWARD)))
    return _FORWARD[key]


def call_cap(max_steps: int, sde: bool = False) -> int:
    """The compiled step cap of a solve with step budget `max_steps` (part of its program's key); an SDE's is
    its budget (one call: its Brownian path and constant steps start at t0)."""
    return max_steps if sde else min(max_steps, CALL_STEPS)


def _extend(spans: list, solver: str, begin: float, end: float) -> None:
    """Append the run of `solver` over [begin, end] to a member's list of spans, joined to the last one when
    the same solver goes on from where it stopped (a new chunk, a continuation)."""
    if spans and spans[-1][0] == solver and spans[-1][2] == begin:
        spans[-1][2] = end
    elif end > begin or not spans:
        spans.append([solver, begin, end])


def _select(mask, new, old):
    """`new` where the member mask is set, else `old` (pytrees of arrays with a leading member axis)."""
    return jax.tree_util.tree_map(
        lambda a, b: np.where(mask.reshape(mask.shape + (1,) * (np.ndim(a) - 1)), a, b), new, old
    )


def _unreached(a):
    return np.full_like(a, np.inf) if np.issubdtype(a.dtype, np.floating) else a


def _write(out, saved, reached, first, total):
    """Write the save slots `reached` (members x slots of this chunk) of one call's `saved` into `out` (the
    whole grid, allocated at the first call, unreached entries inf as diffrax marks them)."""
    if out is None:
        out = jax.tree_util.tree_map(
            lambda a: _unreached(np.zeros(a.shape[:1] + (total,) + a.shape[2:], a.dtype)), saved
        )
    count = reached.shape[1]

    def put(dst, src):
        mask = reached.reshape(reached.shape + (1,) * (src.ndim - 2))
        dst[:, first : first + count] = np.where(mask, src[:, :count], dst[:, first : first + count])
        return dst

    return jax.tree_util.tree_map(put, out, saved)


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
