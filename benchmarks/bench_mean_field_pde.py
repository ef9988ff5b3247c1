"""Mean-field PDE on a grid against the particle flow: cost per unit flow time at equal error in Q.

The charted mean-field transformer of `examples/mean_field_pde.py` (one scalar per head, depth L = 2, 16
prompts, weight decay 0.01, Gaussian initial law) integrated to tau = 1 two ways (float64):

- `mean_field_pde/grid(n=...)`: `grid.solve_grid` on n MUSCL cells (tsit5, rtol 1e-9); error = |Q_n(1) -
  Q_ref(1)| against the grid of `n_ref` cells; run_s_min per unit tau (compiled, best of repeats).
- `mean_field_pde/particles(M=...)`: `chart.solve_charted` (tsit5, rtol 1e-9) of M particles drawn from the
  same law; error = the RMS over `draws` clouds of Q_M(1) - Q_ref(1) (the Monte-Carlo error); run_s_min per
  unit tau of one cloud.
- `mean_field_pde/equal_error(eps=...)`: for a target error eps, the grid cost at the smallest n with
  error <= eps (log-log interpolation between measured n) against the particle cost at the M where the fitted
  RMS error C M^(-1/2)... reaches eps (power-law fits of error and time against M, `flows.fitting`); ratio =
  particle cost / grid cost (> 1: the grid is cheaper), no target.
"""

from __future__ import annotations

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks._harness import bench_main, best_of, ratio, row  # noqa: E402
from flows import fitting  # noqa: E402
from flows.mean_field import Config, training_set  # noqa: E402
from flows.mean_field import chart as ch  # noqa: E402
from flows.mean_field import grid as gd  # noqa: E402
from flows.mean_field import grid_laws as gl  # noqa: E402

CFG = Config(d=2, D=3, N=4, L=2, M=8, n_train=16, lam=0.01, seed=0)
BOX = ((-3.0,), (5.0,))
MEAN0, STD0, TAU, RTOL = 0.5, 0.5, 1.0, 1e-9
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


def _grid(n):
    box = gd.Box(*BOX, (n,))
    flow = gd.GridFlow(CFG, _chart(), {"attention": box}, flux="muscl")
    masses = {"attention": gl.gaussian_masses(box, MEAN0, STD0)}

    def call():
        return gd.solve_grid(flow, [0.0, TAU], masses, rtol=RTOL, atol=1e-12)

    t = time.perf_counter()
    sol = call()
    first = time.perf_counter() - t
    return call, sol, first


def _particles(M, seed):
    cfg = CFG.replace(M=M, M_mlp=1)
    box = gd.Box(*BOX, (2,))
    x = gl.sample_gaussian(box, MEAN0, STD0, (cfg.L, M), 1000 * M + seed)
    c = {"attention": jnp.asarray(x), "mlp": jnp.zeros((cfg.L, 1, 0))}
    data = training_set(CFG)

    def call():
        return ch.solve_charted(cfg, _chart(), [0.0, TAU], c, data=data, rtol=RTOL, atol=1e-12)

    return call


def run(quick: bool) -> list[dict]:
    S = SIZES["quick" if quick else "full"]
    _, ref, _ = _grid(S["n_ref"])
    q_ref = float(ref.observables["Q"][-1])
    rows, grid_pts, part_pts = [], [], []
    for n in S["cells"]:
        call, sol, first = _grid(n)
        t = best_of(lambda call=call: call().observables["Q"], S["repeats"]) / TAU
        err = abs(float(sol.observables["Q"][-1]) - q_ref)
        grid_pts.append((n, err, t))
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
        ok = np.nonzero(g[:, 1] <= eps)[0]
        if ok.size == 0:
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
        i = int(ok[0])
        if i > 0:  # log-log interpolation of time against error between the bracketing grids
            w = np.log(eps / g[i - 1, 1]) / np.log(g[i, 1] / g[i - 1, 1])
            grid_t = float(np.exp((1 - w) * np.log(g[i - 1, 2]) + w * np.log(g[i, 2])))
        else:
            grid_t = float(g[i, 2])
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
            )
        )
    return rows


def main(argv=None) -> int:
    return bench_main("mean_field_pde", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
