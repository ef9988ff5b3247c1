"""Mean-field PDE on a grid against the particle flow: cost per unit flow time at equal error in Q.

The charted mean-field transformer of `examples/mean_field_pde.py` (one scalar per head, depth L = 2, 16
prompts, weight decay 0.01, Gaussian initial law) integrated to tau = 1 two ways (float64):

- `mean_field_pde/grid(n=...)`: `grid.solve_grid` on n MUSCL cells (tsit5, rtol 1e-9); error = |Q_n(1) -
  Q_ref(1)| against the grid of `n_ref` cells; run_s_min per unit tau (compiled, best of repeats). The row
  carries its best peer (`floor`, kind "peer"; `peer_s_per_tau`): `flows._xla.jit` of a bare
  `diffrax.diffeqsolve` (`benchmarks._sweeps.bare_solve`: tsit5, PID controller with the same rtol and atol,
  from 0 to tau saved at the same times; no flows) of the library's own grid vector field
  (`grid.grid_limit(flow).vector_field`, i.e. `GridFlow.rhs`, on the args `solve_grid` passes it) from the same
  initial state (`GridFlow.initial_state`), timed the same way. It must solve the same problem: Q of its final
  state (`GridFlow.summary`) agrees with the grid solve's Q(1) to `PEER_RTOL` (relative), else the benchmark
  raises; the difference is recorded (`peer_Q_rel_diff`; in the equal_error rows, the largest over the run's
  grids).
- `mean_field_pde/particles(M=...)`: `chart.solve_charted` (tsit5, rtol 1e-9) of M particles drawn from the
  same law; error = the RMS over `draws` clouds of Q_M(1) - Q_ref(1) (the Monte-Carlo error); run_s_min per
  unit tau of one cloud.
- `mean_field_pde/equal_error(eps=...)`: for a target error eps, the grid cost at the smallest n with
  error <= eps (log-log interpolation between measured n) against the particle cost at the M where the fitted
  RMS error C M^(-1/2)... reaches eps (power-law fits of error and time against M, `flows.fitting`); ratio =
  particle cost / grid cost (> 1: the grid is cheaper), no target. Its best peer (`floor`, kind "peer") is the
  bare diffeqsolve above at equal error: its times at the grid sizes, interpolated between the same bracketing
  grids with the same weights as the grid cost (`_at_error`).
"""

from __future__ import annotations

import sys
import time

import diffrax
import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks._harness import bench_main, best_of, ratio, row, versus  # noqa: E402
from benchmarks._sweeps import bare_solve  # noqa: E402
from flows import _xla, fitting  # noqa: E402
from flows.mean_field import Config, training_set  # noqa: E402
from flows.mean_field import chart as ch  # noqa: E402
from flows.mean_field import grid as gd  # noqa: E402
from flows.mean_field import grid_laws as gl  # noqa: E402
from flows.mean_field.observables import make_args  # noqa: E402

CFG = Config(d=2, D=3, N=4, L=2, M=8, n_train=16, lam=0.01, seed=0)
BOX = ((-3.0,), (5.0,))
MEAN0, STD0, TAU, RTOL, ATOL = 0.5, 0.5, 1.0, 1e-9, 1e-12
#: the largest relative difference in Q(1) allowed between the grid solve and its bare-diffrax peer
PEER_RTOL = 1e-8
PEER = "jax.jit of a bare diffeqsolve of the same grid field and state (tsit5, same tolerances and saves)"
SIZES = {
    "quick": dict(cells=(25, 50, 100), n_ref=400, Ms=(16, 64, 256), draws=8, repeats=3, eps=(1e-3, 3e-4)),
    "full": dict(
        cells=(25, 50, 100, 200, 400), n_ref=1600, Ms=(16, 64, 256, 1024, 4096), draws=16, repeats=3, eps=(1e-3, 1e-4)
    ),
}


def _chart():
    A = np.zeros((1, 2, 3, 3))
    A[0, 0, 2, 2] = 1.0
    A[0, 1] = 0.5 * np.eye(3)
    return ch.Chart(A)


def _flow(n):
    box = gd.Box(*BOX, (n,))
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, flux="muscl")
    return flow, {"attention": gl.gaussian_masses(box, MEAN0, STD0)}


def _grid(n):
    flow, masses = _flow(n)

    def call():
        return gd.solve_grid(flow, [0.0, TAU], masses, rtol=RTOL, atol=ATOL)

    t = time.perf_counter()
    sol = call()
    first = time.perf_counter() - t
    return call, sol, first


def peer(n):
    """The best peer of `_grid(n)`'s solve (module docstring): `flows._xla.jit` of a bare `diffrax.diffeqsolve`
    (tsit5, PID controller, rtol `RTOL`, atol `ATOL`, from 0 to `TAU` saved at 0 and `TAU`) of the library's grid
    field from the same state, on the args `solve_grid` gives it. Returns `(call, q)`: `call()` runs the
    compiled solve (its saved states), `q(sol)` is Q of a solution's final state (`GridFlow.summary`)."""
    flow, masses = _flow(n)
    limit = gd.grid_limit(flow)
    args = limit.field_args(make_args(CFG, training_set(CFG)))
    y0 = flow.initial_state(masses)
    solve = bare_solve(limit.vector_field, solver="tsit5", rtol=RTOL, atol=ATOL, t1=TAU, ts=[0.0, TAU])
    fn = _xla.jit(lambda y0, args: solve(y0, args))
    summary = _xla.jit(flow.summary)

    def q(sol):
        if not bool(sol.result == diffrax.RESULTS.successful):
            raise RuntimeError(f"the bare diffrax peer of the grid (n={n}) failed: {sol.result}")
        return float(summary(TAU, jax.tree.map(lambda v: v[-1], sol.ys), args)["Q"])

    return (lambda: fn(y0, args)), q


def _peer_run(n, q_flows, repeats):
    """(s per tau, steps, relative difference of Q(1) to the flows grid solve's `q_flows`) of `peer(n)`; raises
    when the difference passes `PEER_RTOL` (the peer then does not solve the same problem)."""
    call, q = peer(n)
    sol = call()
    diff = abs(q(sol) - q_flows) / abs(q_flows)
    if not diff <= PEER_RTOL:
        raise RuntimeError(
            f"the bare diffrax peer's Q(1) differs from the grid's (n={n}) by {diff:.3g} > {PEER_RTOL:g}"
        )
    return best_of(lambda: call().ys, repeats) / TAU, int(sol.stats["num_steps"]), diff


def _at_error(errors, values, eps):
    """The value (a time per tau) at error `eps` of a series measured at increasing grid sizes: at the smallest
    size with error <= eps, log-log interpolated against the error from the size before it where that one
    misses eps; None where no size reaches eps."""
    errors, values = np.asarray(errors, float), np.asarray(values, float)
    ok = np.nonzero(errors <= eps)[0]
    if ok.size == 0:
        return None
    i = int(ok[0])
    if i == 0:
        return float(values[0])
    w = np.log(eps / errors[i - 1]) / np.log(errors[i] / errors[i - 1])
    return float(np.exp((1 - w) * np.log(values[i - 1]) + w * np.log(values[i])))


def _particles(M, seed):
    cfg = CFG.replace(M=M, M_mlp=1)
    box = gd.Box(*BOX, (2,))
    x = gl.sample_gaussian(box, MEAN0, STD0, (cfg.L, M), 1000 * M + seed)
    c = {"attention": jnp.asarray(x), "mlp": jnp.zeros((cfg.L, 1, 0))}
    data = training_set(CFG)

    def call():
        return ch.solve_charted(cfg, _chart(), [0.0, TAU], c, data=data, rtol=RTOL, atol=ATOL)

    return call


def run(quick: bool, sizes: dict | None = None) -> list[dict]:
    """The rows at the quick or full `SIZES`, or at `sizes` (a dict with the same keys) where given."""
    S = SIZES["quick" if quick else "full"] if sizes is None else sizes
    _, ref, _ = _grid(S["n_ref"])
    q_ref = float(ref.observables["Q"][-1])
    rows, grid_pts, part_pts, peer_diffs = [], [], [], []
    for n in S["cells"]:
        call, sol, first = _grid(n)
        t = best_of(lambda call=call: call().observables["Q"], S["repeats"]) / TAU
        q_n = float(sol.observables["Q"][-1])
        err = abs(q_n - q_ref)
        peer_t, peer_steps, peer_diff = _peer_run(n, q_n, S["repeats"])
        grid_pts.append((n, err, t, peer_t))
        peer_diffs.append(peer_diff)
        rows.append(
            row(
                f"mean_field_pde/grid(n={n})",
                params={"cells": n, "n_ref": S["n_ref"], "tau": TAU, "rtol": RTOL},
                compile_s=sol.trajectory.compile_s,
                run_s_min=t,
                repeats=S["repeats"],
                steps=int(sol.trajectory.num_steps),
                error=err,
                first_call_s=first,
                floor=versus(t, peer_t, PEER, kind="peer"),
                peer_s_per_tau=peer_t,
                peer_steps=peer_steps,
                peer_Q_rel_diff=peer_diff,
            )
        )
    for M in S["Ms"]:
        gaps, compile_s, t = [], None, None
        for s in range(S["draws"]):
            call = _particles(M, s)
            traj = call()
            compile_s = traj.compile_s if compile_s is None else compile_s
            gaps.append(float(traj.observables["Q"][-1]) - q_ref)
            if s == 0:
                t = best_of(lambda call=call: call().observables["Q"], S["repeats"]) / TAU
        err = float(np.sqrt(np.mean(np.square(gaps))))
        part_pts.append((M, err, t))
        rows.append(
            row(
                f"mean_field_pde/particles(M={M})",
                params={"M": M, "draws": S["draws"], "tau": TAU, "rtol": RTOL},
                compile_s=compile_s,
                run_s_min=t,
                repeats=S["repeats"],
                steps=int(traj.num_steps),
                error=err,
            )
        )
    g = np.array(grid_pts)
    p = np.array(part_pts)
    err_fit = fitting.power_law_fit(p[:, 0], p[:, 1], n_boot=200)
    time_fit = fitting.power_law_fit(p[:, 0], p[:, 2], n_boot=200)
    for eps in S["eps"]:
        grid_t = _at_error(g[:, 1], g[:, 2], eps)
        if grid_t is None:
            rows.append(
                row(
                    f"mean_field_pde/equal_error(eps={eps:g})",
                    params={"eps": eps},
                    compile_s=None,
                    run_s_min=None,
                    note="no measured grid reaches eps",
                )
            )
            continue
        peer_t = _at_error(g[:, 1], g[:, 3], eps)  # the same bracketing grids and weights as grid_t
        M_eps = float((eps / err_fit.prefactor) ** (1.0 / err_fit.slope))
        part_t = float(time_fit.predict(M_eps))
        rows.append(
            row(
                f"mean_field_pde/equal_error(eps={eps:g})",
                params={"eps": eps},
                compile_s=None,
                run_s_min=grid_t,
                error=eps,
                grid_s_per_tau=grid_t,
                particles_s_per_tau=part_t,
                particles_M_needed=M_eps,
                particle_error_slope=err_fit.slope,
                particle_time_slope=time_fit.slope,
                extrapolated=bool(M_eps > p[-1, 0]),
                ratio=ratio(part_t / grid_t, "particle flow s per tau / grid s per tau at equal error in Q"),
                floor=versus(grid_t, peer_t, PEER + ", at equal error in Q", kind="peer"),
                peer_s_per_tau=peer_t,
                peer_Q_rel_diff=max(peer_diffs),  # over every grid of the run
            )
        )
    return rows


def main(argv=None) -> int:
    return bench_main("mean_field_pde", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
