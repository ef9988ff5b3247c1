"""Mean-field transformer (Gao et al. 2024): compile and run time of the adaptive particle solve, and GD
throughput in particle-steps per second, at the issue's size (L = 8, M = 256, D = 4, N = 8, 64 prompts).

Rows: `mean_field/particle_solve(tsit5)` (compile_s = the first compile of the solve with Q and R saved,
run_s_min over repeats, error_vs_ref = |Q(tau_end)| relative gap to a dopri8 solve at rtol 1e-10) and
`mean_field/gd` (compile_s, run_s_min of `steps` GD steps, `particle_steps_per_s` = steps L (M + M_mlp) /
run_s). `--quick` uses L = 4, M = 32 and fewer repeats.

Scaling rows `mean_field/gd_scaling(P=...)`: GD throughput against the particle count P = L (M + M_mlp)
at L = 4, N = 4, 16 prompts (the size at which P = 10^5 fits in memory with room), P from 128 to 10^5
(quick: 128 to 2048, a smoke test), one compile per shape (not timed), best of repeats of a few steps. The
row `mean_field/gd_scaling_fit` holds the fitted exponent alpha of run time per step ~ P^alpha (log-log
least squares over P >= 2048, where the per-step overhead no longer dominates, with a bootstrap interval
from `flows.fitting.power_law_fit`): alpha = 1 is linear cost per particle, so particle-steps/s ~
P^(1 - alpha).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from benchmarks._harness import best_of, write_rows  # noqa: E402
from benchmarks._harness import parser as harness_parser  # noqa: E402
from benchmarks._harness import start as harness_start  # noqa: E402
from flows import fitting  # noqa: E402
from flows import mean_field as mf  # noqa: E402

SCALING_M = (16, 64, 256, 1024, 4096, 12500)  # P = 8 M at L = 4: 128 ... 100000 particles
SCALING_PROMPTS = 16  # N = 4, 16 prompts: the attention intermediates of P = 1e5 stay near 2 GB


def run(quick: bool) -> list[dict]:
    shape = dict(d=3, D=4, N=8, L=4, M=32, n_train=64) if quick else dict(d=3, D=4, N=8, L=8, M=256, n_train=64)
    cfg = mf.Config(**shape, lam=1e-3, init_scale=2.0, seed=0)
    params = {**shape, "M_mlp": cfg.M_mlp, "particles": cfg.num_particles}
    repeats = 2 if quick else 3
    ts = np.array([0.0, 0.25, 0.5])
    rows = []
    start = time.perf_counter()
    traj = mf.solve_particles(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8)
    first = time.perf_counter() - start
    run_s = best_of(lambda: mf.solve_particles(cfg, ts, observables="basic", rtol=1e-6, atol=1e-8).observables,
                    repeats)
    q = float(traj.observables["Q"][-1])
    if quick:  # the reference solve compiles a second program; the full run measures the error
        q_ref = float("nan")
    else:
        ref = mf.solve_particles(cfg, ts, observables="basic", solver="dopri8", rtol=1e-10, atol=1e-12)
        q_ref = float(ref.observables["Q"][-1])
    rows.append({"bench": "mean_field/particle_solve(tsit5)", "params": {**params, "tau": float(ts[-1]),
                                                                         "rtol": 1e-6},
                 "compile_s": traj.compile_s, "first_call_s": first, "run_s_min": run_s, "repeats": repeats,
                 "num_steps": int(traj.num_steps),
                 "error_vs_ref": None if quick else abs(q - q_ref) / abs(q_ref)})
    steps = 10 if quick else 20
    start = time.perf_counter()
    rec = mf.train_gd(cfg, 0.05, steps, save_every=steps)
    first = time.perf_counter() - start
    gd_s = best_of(lambda: mf.train_gd(cfg, 0.05, steps, save_every=steps).particles, repeats)
    rows.append({"bench": "mean_field/gd", "params": {**params, "steps": steps}, "compile_s": rec.compile_s,
                 "first_call_s": first, "run_s_min": gd_s, "repeats": repeats, "num_steps": steps,
                 "error_vs_ref": None, "particle_steps_per_s": steps * cfg.num_particles / gd_s})
    rows += scaling(quick)
    return rows


def scaling(quick: bool) -> list[dict]:
    """GD particle-steps per second against the particle count, and the fitted exponent of time per step."""
    Ms = SCALING_M[:3] if quick else SCALING_M  # quick: P = 128 ... 2048, fitted over all three
    rows = []
    for M in Ms:
        cfg = mf.Config(d=3, D=4, N=4, L=4, M=M, n_train=SCALING_PROMPTS, lam=1e-3, init_scale=2.0, seed=0)
        P = cfg.num_particles
        steps = 2 if P >= 32768 or quick else 5
        repeats = 1 if P >= 32768 or quick else 3
        rec = mf.train_gd(cfg, 0.05, steps, save_every=steps)  # compiles
        run_s = best_of(lambda cfg=cfg, steps=steps: mf.train_gd(cfg, 0.05, steps, save_every=steps).particles,
                        repeats)
        rows.append({"bench": f"mean_field/gd_scaling(P={P})", "params": {"L": cfg.L, "M": M, "M_mlp": cfg.M_mlp,
                                                                           "particles": P, "N": 4,
                                                                           "n_train": SCALING_PROMPTS,
                                                                           "steps": steps},
                     "compile_s": rec.compile_s, "run_s_min": run_s, "repeats": repeats, "num_steps": steps,
                     "error_vs_ref": None, "particle_steps_per_s": steps * P / run_s,
                     "s_per_step": run_s / steps})
    P = np.array([r["params"]["particles"] for r in rows], float)
    per_step = np.array([r["s_per_step"] for r in rows])
    big = P >= (0 if quick else 2048)
    fit = fitting.power_law_fit(P[big], per_step[big], n_boot=2000, rng=0, interval="percentile") \
        if big.sum() >= 3 else None
    rows.append({"bench": "mean_field/gd_scaling_fit", "params": {"P": P.tolist(), "fit_over": P[big].tolist()},
                 "compile_s": 0.0, "run_s_min": float(per_step[-1]), "repeats": 0, "num_steps": None,
                 "error_vs_ref": None, "exponent_time_per_step": None if fit is None else fit.slope,
                 "exponent_ci": None if fit is None else list(fit.slope_ci),
                 "particle_steps_per_s_max_P": rows[-1]["particle_steps_per_s"]})
    return rows


def main(argv=None) -> int:
    ns = harness_parser(__doc__.splitlines()[0]).parse_args(argv)
    harness_start(ns)
    rows = run(ns.quick)
    write_rows(rows, Path(ns.out))
    for r in rows:
        extra = f"  {r['particle_steps_per_s']:.3g} particle-steps/s" if "particle_steps_per_s" in r else ""
        if r.get("exponent_time_per_step") is not None:
            extra = (f"  time per step ~ P^{r['exponent_time_per_step']:.3f} "
                     f"[{r['exponent_ci'][0]:.3f}, {r['exponent_ci'][1]:.3f}]")
        print(f"{r['bench']:40s} run {r['run_s_min'] * 1e3:9.1f} ms  compile {r['compile_s']:.2f} s  "
              f"steps {r['num_steps']}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
