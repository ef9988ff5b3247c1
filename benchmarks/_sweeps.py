"""What a batched sweep of `flows.solve_batch` is measured against (shared by the sweep benchmarks).

- The vector-field floor (`field_floor`): the evaluations of the vector field that the members need in their
  own adaptive solves (`evaluations`: the stages of a step less the reused one, 6 for Tsit5, accepted or
  rejected, and 3 to start), done as one vmapped, jitted evaluation of all members at once, timed, times the
  mean number per member. No batched solve can evaluate less; the Runge-Kutta updates, the error norm and the
  saves come on top.
- The best peer (`diffrax_vmap`): `jax.vmap` of a bare `diffrax.diffeqsolve` (Tsit5, the same tolerances and
  save times, no flows), what a diffrax user writes. `bare_solve` is that solve for one member, the best peer
  of every single `flows.solve` the benchmarks time (`bench_solve`, `bench_decoder`, the Adam ODE).
- Where the time goes (`member_steps`): the members' own step counts (their spread is what a vmapped solve
  pays: every member steps until the slowest is done).
"""

from __future__ import annotations

import diffrax
import jax
import numpy as np

import flows
from benchmarks._harness import best_of
from flows import _xla

__all__ = ["FLOOR_CHAIN", "STAGES_PER_STEP", "bare_solve", "diffrax_vmap", "evaluations", "field_floor", "member_steps"]


def _new_stages(solver) -> int:
    """New vector-field evaluations per step of an explicit Runge-Kutta solver of diffrax: its stages, less the
    first when it reuses the last (FSAL)."""
    tableau = solver.tableau
    return len(tableau.a_lower) + 1 - int(tableau.fsal)


#: new vector-field evaluations per step (accepted or rejected) of the explicit solvers the sweeps use
STAGES_PER_STEP = {name: _new_stages(s) for name, s in (("tsit5", diffrax.Tsit5), ("dopri5", diffrax.Dopri5),
                                                         ("dopri8", diffrax.Dopri8))}  # fmt: skip


def evaluations(num_steps, solver: str = "tsit5") -> np.ndarray:
    """The vector-field evaluations of adaptive solves that took `num_steps` steps each: `STAGES_PER_STEP` per
    step and 3 to start (two for the initial step size, one for the first stage)."""
    return STAGES_PER_STEP[solver] * np.asarray(num_steps, float) + 3.0


def member_steps(num_steps) -> dict:
    """min, median, max and sum of the members' step counts, and max / mean (what the slowest member costs a
    vmapped solve, in which every member steps until the slowest is done)."""
    n = np.asarray(num_steps, float)
    return {
        "min": int(n.min()),
        "median": float(np.median(n)),
        "max": int(n.max()),
        "sum": int(n.sum()),
        "max_over_mean": float(n.max() / n.mean()),
    }


#: evaluations per timed call of `field_floor` (one call's dispatch is then negligible)
FLOOR_CHAIN = 64


def field_floor(vector_field, ys, args, args_axis, evals, repeats: int = 5) -> tuple[float, float]:
    """(floor_s, eval_s): `eval_s` one evaluation of `vector_field` at all the members' states `ys` (every leaf
    with the leading member axis; `args` batched along `args_axis`, 0 or None), vmapped and jitted with the
    library's compile options for a sweep's program (`flows._xla`), timed as a chain of `FLOOR_CHAIN` evaluations
    in one program (each from a state moved by 1e-30 of the last: nothing is reused) and divided, best of
    `repeats`; `floor_s` = eval_s times the mean of `evals` per member."""
    field = jax.vmap(lambda y, a: vector_field(0.0, y, a), in_axes=(0, args_axis))

    def chain(y, a):
        step = lambda i, y: jax.tree_util.tree_map(lambda u, f: u + 1e-30 * f, y, field(y, a))  # noqa: E731
        return jax.lax.fori_loop(0, FLOOR_CHAIN, step, y)

    fn = _xla.jit(chain, batched=True)
    ys = jax.tree_util.tree_map(lambda a: jax.numpy.asarray(a, float), ys)
    jax.block_until_ready(fn(ys, args))
    eval_s = best_of(lambda: fn(ys, args), repeats) / FLOOR_CHAIN
    return eval_s * float(np.mean(evals)), eval_s


def bare_solve(vector_field, *, solver: str, rtol: float, atol: float, t1: float, t0: float = 0.0, ts=None,
               max_steps: int = 100_000):  # fmt: skip
    """`(y0, args) -> diffrax.Solution`: a bare `diffrax.diffeqsolve` of `vector_field` (`solver` a name of
    `flows.SOLVERS`, PID controller with `rtol`, `atol`, from `t0` to `t1`, saved at `ts`, or at t1 when `ts` is
    None; no flows), unjitted (the caller jits it, alone or vmapped)."""
    solver_obj = flows.SOLVERS[solver]()
    saveat = diffrax.SaveAt(t1=True) if ts is None else diffrax.SaveAt(ts=np.asarray(ts, float))

    def run(y0, args):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            solver_obj,
            t0,
            t1,
            None,
            y0,
            args,
            saveat=saveat,
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            max_steps=max_steps,
            throw=False,
        )

    return run


def diffrax_vmap(vector_field, y0, args, ts, *, rtol: float, atol: float, batch_y0: bool, batch_args: bool,
                 repeats: int = 3, max_steps: int = 100_000, solver: str = "tsit5") -> dict:  # fmt: skip
    """The best peer of a sweep: `jax.vmap` of a bare `diffrax.diffeqsolve` (`solver`, PID controller with `rtol`,
    `atol`, saved at `ts`), jitted with the library's compile options for a sweep's program. Returns its best
    time of `repeats` (`run_s`), the members' step counts (`num_steps`) and the final states (`final`)."""
    ts = np.asarray(ts, float)
    solve = bare_solve(vector_field, solver=solver, rtol=rtol, atol=atol, t0=float(ts[0]), t1=float(ts[-1]), ts=ts,
                       max_steps=max_steps)  # fmt: skip

    def one(y, a):
        sol = solve(y, a)
        return sol.ys, sol.stats["num_steps"]

    fn = _xla.jit(jax.vmap(one, in_axes=(0 if batch_y0 else None, 0 if batch_args else None)), batched=True)
    ys, steps = jax.block_until_ready(fn(y0, args))
    run_s = best_of(lambda: fn(y0, args), repeats)
    final = jax.tree_util.tree_map(lambda a: np.asarray(a)[:, -1], ys)
    return {"run_s": run_s, "num_steps": np.asarray(steps), "final": final}
