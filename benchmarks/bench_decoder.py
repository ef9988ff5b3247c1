"""Decoder h-flow (Tian et al. 2023, Lemma 6): flows.solve vs scipy.integrate.solve_ivp on the same RHS,
and a vmapped sweep over eta_Y vs a Python loop over single solves.

Every row: {"bench", "params", "compile_s", "run_s_min", "repeats", "num_steps", "error_vs_ref", ...};
the reference is the closed form theory.h (eq. 45). Ratios are measured in the same run. The best peer of each
flows.solve run is `jax.jit` of a bare `diffrax.diffeqsolve` of the same field (Dopri8, the same tolerances and
save times, no flows; `bare_diffrax_run_s`): the scipy row carries the flows run against it (`floor`, kind
"peer"), as `benchmarks/bench_solve.py`'s scipy rows do. The sweep's floor is
the vector-field evaluations of the members' own solves, batched (`benchmarks._sweeps`), and `vmapped_s` the
same sweep vmapped (`flows._sweep`'s other strategy).
"""

from __future__ import annotations

import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from benchmarks import _sweeps as sweeps  # noqa: E402
from benchmarks._harness import bench_main, best_of, ratio, row, versus  # noqa: E402
from flows import _sweep  # noqa: E402
from flows.scan_snap import solve_decoder, theory  # noqa: E402
from flows.scan_snap.decoder import decoder_vector_field  # noqa: E402


def bare_diffrax(M: float, eta: float, ts: np.ndarray, rtol: float, atol: float):
    """The best peer of `solve_decoder`: `jax.jit` of a bare `diffrax.diffeqsolve` of the decoder field
    (`benchmarks._sweeps.bare_solve`: Dopri8, PID controller, saved at `ts`; no flows) and its args, as
    (fn, args): `fn(args)` is h at `ts`."""
    solve = sweeps.bare_solve(decoder_vector_field, solver="dopri8", rtol=rtol, atol=atol, t1=float(ts[-1]), ts=ts)
    return jax.jit(lambda args: solve(jnp.zeros(()), args).ys), {"M": jnp.asarray(M), "eta_Y": jnp.asarray(eta)}


def bare_diffrax_run_s(M: float, eta: float, ts: np.ndarray, rtol: float, atol: float, repeats: int) -> float:
    """`bare_diffrax`'s run, best of `repeats` after compile."""
    fn, args = bare_diffrax(M, eta, ts, rtol, atol)
    jax.block_until_ready(fn(args))
    return best_of(lambda: fn(args), repeats)


def run(quick: bool) -> list[dict]:
    M, eta = 1000.0, 1.0
    ts = np.concatenate([[0.0], np.geomspace(1e-3, 1e4, 200)])
    ref = np.asarray(theory.h(ts, M, eta))
    repeats = 3 if quick else 10
    rows = []
    for rtol in [1e-8] if quick else [1e-6, 1e-8, 1e-10, 1e-12]:
        start = time.perf_counter()
        traj = solve_decoder(M, eta, ts, rtol=rtol, atol=1e-30)
        first = time.perf_counter() - start
        run_s = best_of(lambda rtol=rtol: solve_decoder(M, eta, ts, rtol=rtol, atol=1e-30).ys, repeats)
        err = float(np.max(np.abs(np.asarray(traj.ys)[1:] - ref[1:]) / ref[1:]))
        rows.append(
            row(
                "decoder_h/flows.solve(dopri8)",
                params={"M": M, "eta_Y": eta, "rtol": rtol},
                compile_s=traj.compile_s or first,
                run_s_min=run_s,
                repeats=repeats,
                steps=int(traj.num_steps),
                error=err,
            )
        )

        def rhs(t, y):
            return eta / ((M - 1) + np.exp(M * y))

        sol = solve_ivp(rhs, (0.0, ts[-1]), [0.0], method="DOP853", t_eval=ts, rtol=rtol, atol=1e-30)
        scipy_s = best_of(
            lambda rtol=rtol: solve_ivp(rhs, (0.0, ts[-1]), [0.0], method="DOP853", t_eval=ts, rtol=rtol, atol=1e-30).y,
            repeats,
        )
        err_s = float(np.max(np.abs(sol.y[0][1:] - ref[1:]) / ref[1:]))
        bare_s = bare_diffrax_run_s(M, eta, ts, rtol, 1e-30, repeats)
        peer = "jax.jit of a bare diffeqsolve (dopri8, same tolerances and saves)"
        rows.append(
            row(
                "decoder_h/scipy.solve_ivp(DOP853)",
                params={"M": M, "eta_Y": eta, "rtol": rtol},
                compile_s=0.0,
                run_s_min=scipy_s,
                repeats=repeats,
                steps=int(sol.nfev),
                error=err_s,
                task="solver",
                ratio=ratio(scipy_s / run_s, "scipy run / flows.solve run"),
                floor=versus(run_s, bare_s, peer, kind="peer"),
                bare_diffrax_run_s=bare_s,
            )
        )

    n = 16 if quick else 64
    etas = np.geomspace(0.01, 1.0, n)
    grid = np.linspace(0.0, 1e3, 50)
    sweep = solve_decoder(M, etas, grid)
    sweep_s = best_of(lambda: solve_decoder(M, etas, grid).ys, repeats)
    _sweep.config.strategy = "vmap"
    try:
        vmapped = solve_decoder(M, etas, grid)  # the members' own step counts
        vmapped_s = best_of(lambda: solve_decoder(M, etas, grid).ys, repeats)
    finally:
        _sweep.config.strategy = "auto"
    solve_decoder(M, etas[0], grid)  # compile the single solve once
    loop_s = best_of(lambda: [solve_decoder(M, e, grid).ys for e in etas], max(1, repeats // 2))
    bargs = {"M": np.full(n, M), "eta_Y": etas}
    evals = sweeps.evaluations(vmapped.num_steps, "dopri8")
    floor_s, eval_s = sweeps.field_floor(decoder_vector_field, np.zeros(n), bargs, 0, evals, repeats=5)
    rows.append(
        row(
            "decoder_h/sweep_vmap",
            params={"M": M, "n": n},
            compile_s=sweep.compile_s,
            run_s_min=sweep_s,
            repeats=repeats,
            steps=int(np.max(sweep.num_steps)),
            task="sweep",
            ratio=ratio(loop_s / sweep_s, "Python loop of cached solves / sweep"),
            floor=versus(sweep_s, floor_s, "the vector-field evaluations of the members' own solves, batched"),
            member_steps=sweeps.member_steps(vmapped.num_steps),
            vmapped_s=vmapped_s,
            field_eval_s=eval_s,
        )
    )
    rows.append(
        row(
            "decoder_h/sweep_python_loop",
            params={"M": M, "n": n},
            compile_s=0.0,
            run_s_min=loop_s,
            repeats=max(1, repeats // 2),
        )
    )
    return rows


def main(argv=None) -> int:
    return bench_main("decoder", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
