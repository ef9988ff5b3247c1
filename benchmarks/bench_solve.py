"""flows.solve against scipy.integrate.solve_ivp on the same RHS in numpy, and work-precision of auto, tsit5,
dopri5, dopri8 and kvaerno5, on the three systems (co-occurrence Gram ODE, Scan-and-Snap reduced Z-flow, mean-field
particle flow).

**scipy comparison** (`solve_vs_scipy/<system>/...`): the system's JAX vector field solved by `flows.solve`
and the same right-hand side written in numpy (`benchmarks/_numpy_rhs.py`, checked equal to the JAX one by
`tests/test_bench_solve.py`) solved by `scipy.integrate.solve_ivp`, with equal tolerances (rtol 1e-8,
atol 1e-10) and the same method: `RK45` vs `dopri5` (the same Dormand-Prince 5(4) tableau; the row with the
issue's target, ratio = scipy run / flows.solve run >= 10) and `DOP853` vs `dopri8` (ratio recorded, no
target). Run times are the best of repeats after compile (the whole `flows.solve` call, as a user pays it);
the JAX compile time is `compile_s`. The best peer of each flows.solve run is `jax.jit` of a bare
`diffrax.diffeqsolve` of the same field, solver and tolerances (`bare_diffrax_run_s`, this run): the scipy row
carries the flows run against it (`floor`, kind "peer"); a target above scipy / bare diffrax is restated as
the flows run within 1.5x of bare diffrax. `error` is the relative max-norm error of the final state against a
tight reference (`dopri8` at rtol 1e-12, atol 1e-14) at the final time. The scipy side runs in its own
subprocess with `OPENBLAS_CORETYPE` / `OPENBLAS_L2_SIZE` unset (`_harness.numpy_kernel_env`); its row records
the BLAS kernel numpy ran there (`numpy_kernel`: threadpoolctl internal_api, architecture, version), one
RHS call on each side (`rhs_call_s`, `jax_rhs_call_s`: the jitted JAX RHS, dispatch included) and the time
per step and per RHS evaluation of each solve, which say where a missed ratio comes from. `steps` is
accepted + rejected for flows.solve (diffrax's num_steps) and accepted for scipy (`accepted` in both rows).

**Work-precision** (`solve_wp/<system>/<solver>`): one row per (system, solver, rtol), atol = rtol / 100, the
default solver `auto` among them (its row records the segments it ran), at a
size where the implicit kvaerno5 (dense Jacobian, LU per step) is affordable: the error at the final time
against the tight reference, steps (accepted + rejected), run time after compile and compile time.
`benchmarks/plot_work_precision.py` draws them (error against run time, one panel per system).

Sizes of the scipy comparison (full): co-occurrence n=60, L=5, d=64, m=128, m1=256, variant "paper", to t=300;
Scan and Snap Syn-Small (M=34), eta_Y=10, eta_Z=1, reduced flow to t=300; mean field L=4, M=32, 16 prompts to
tau=2. Work-precision sizes (and the scipy comparison of `--quick`): co-occurrence n=12, L=4, d=8, m=8,
m1=16 (state 265); two Zipfian classes, M=17 (state 292); mean field L=2, M=4, 8 prompts (state 320).
Work precision at rtol 1e-4, 1e-7, 1e-10 (kvaerno5: 1e-4, 1e-7 only; quick: 1e-8, without kvaerno5). Every
flows.solve tolerance is its own compiled program (rtol is part of the compilation key), which is most of the
run time of this module.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import flows  # noqa: E402
from benchmarks import _numpy_rhs  # noqa: E402
from benchmarks._harness import bench_main, best_of, fresh_process, numpy_kernel_env, ratio, restate, row, versus  # noqa: E402
from benchmarks._sweeps import bare_solve  # noqa: E402
from flows import cooccurrence as co  # noqa: E402
from flows import mean_field as mf  # noqa: E402
from flows.scan_snap import flow as ss_flow  # noqa: E402
from flows.scan_snap import syn_small, zipfian  # noqa: E402

logger = logging.getLogger(__name__)

SYSTEMS = ("cooccurrence", "scan_snap_reduced", "mean_field")
WP_SOLVERS = ("auto", "tsit5", "dopri5", "dopri8", "kvaerno5")
PAIRS = (("RK45", "dopri5", 10.0), ("DOP853", "dopri8", None))  # (scipy method, flows solver, target)
RTOL, ATOL = 1e-8, 1e-10
REF = ("dopri8", 1e-12, 1e-14)
WP_RTOLS = {True: (1e-8,), False: (1e-4, 1e-7, 1e-10)}
#: kvaerno5 (implicit: a dense Jacobian and an LU per step) compiled for 72 s and ran 73 steps in 35 s on the
#: small Scan-and-Snap problem at rtol 1e-4 on a busy 2-core machine, so the quick run leaves it out and the
#: full run times it once (no best of repeats) and only at the looser tolerances.
WP_QUICK_SOLVERS = ("auto", "tsit5", "dopri5", "dopri8")
KVAERNO5_MIN_RTOL = 1e-7


@dataclasses.dataclass(frozen=True)
class Problem:
    """One system at one size: the JAX vector field, its initial state and args, the horizon."""

    system: str
    vector_field: Callable
    y0: dict
    args: dict
    t1: float
    params: dict


def cooccurrence_problem(n=60, L=5, d=64, m=128, m1=256, t1=300.0, seed=0) -> Problem:
    cfg = co.Config(n=n, L=L, d=d, m=m, m1=m1, variant="paper", seed=seed)
    args = co.spec.data(cfg, num_test=6)  # the test draws are not read by the vector field
    return Problem(
        "cooccurrence",
        co.vector_field,
        co.initial_state(cfg),
        args,
        float(t1),
        {"n": n, "L": L, "d": d, "m": m, "m1": m1, "variant": "paper", "t1": float(t1)},
    )


def scan_snap_problem(eta_Y=10.0, eta_Z=1.0, t1=300.0, classes="syn_small") -> Problem:
    """Syn-Small (M = 34), or `classes="small"`: two Zipfian classes with 5 distinct and 3 common tokens
    (M = 17, a state of 292 for the dense Jacobian of kvaerno5)."""
    name = classes
    if classes == "syn_small":
        classes = syn_small()
    elif classes == "small":
        classes = zipfian(num_queries=2, next_per_query=1, num_distinct=5, num_common=3)
    else:
        raise ValueError(f"classes must be 'syn_small' or 'small', got {classes!r}")
    M, K = classes.vocab_size, classes.num_classes
    y0 = {"Z": jnp.zeros((M, M)), "h": jnp.zeros(()), "B": jnp.zeros((K,))}
    return Problem(
        "scan_snap_reduced",
        ss_flow.reduced_vector_field,
        y0,
        ss_flow.flow_args(classes, eta_Y, eta_Z),
        float(t1),
        {"classes": name, "M": M, "K": K, "eta_Y": eta_Y, "eta_Z": eta_Z, "t1": float(t1)},
    )


def mean_field_problem(L=4, M=32, n_train=16, t1=2.0, seed=0) -> Problem:
    cfg = mf.Config(L=L, M=M, n_train=n_train, n_test=4, lam=1e-3, init_scale=2.0, seed=seed)
    args = mf.observables.make_args(cfg, mf.training_set(cfg), mf.held_out_set(cfg))
    return Problem(
        "mean_field",
        mf.vector_field,
        mf.init_particles(cfg),
        args,
        float(t1),
        {
            "L": L,
            "M": M,
            "M_mlp": cfg.M_mlp,
            "D": cfg.D,
            "N": cfg.N,
            "n_train": n_train,
            "lam": cfg.lam,
            "init_scale": cfg.init_scale,
            "t1": float(t1),
        },
    )


WP_SIZES = {
    "cooccurrence": dict(n=12, L=4, d=8, m=8, m1=16),
    "scan_snap_reduced": dict(classes="small"),
    "mean_field": dict(L=2, M=4, n_train=8),
}
RATIO_SIZES = {"cooccurrence": {}, "scan_snap_reduced": {}, "mean_field": {}}
BUILDERS = {
    "cooccurrence": cooccurrence_problem,
    "scan_snap_reduced": scan_snap_problem,
    "mean_field": mean_field_problem,
}


def problem(system: str, size: dict | None = None) -> Problem:
    """The problem of `system` at `size` (keyword overrides of its builder)."""
    if system not in BUILDERS:
        raise ValueError(f"system must be one of {SYSTEMS}, got {system!r}")
    return BUILDERS[system](**(size or {}))


def flat(state) -> np.ndarray:
    return _numpy_rhs.flatten(jax.tree_util.tree_map(np.asarray, state))


def rel_error(y, ref) -> float:
    return float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))


def jax_solve(p: Problem, solver: str, rtol: float, atol: float, repeats: int) -> dict:
    """Compile (first call), then the best of `repeats` whole `flows.solve` calls; the final state."""

    def call():
        return flows.solve(p.vector_field, p.y0, t1=p.t1, args=p.args, solver=solver, rtol=rtol, atol=atol, throw=False)

    begin = time.perf_counter()
    first = call()
    first_s = time.perf_counter() - begin
    run_s = best_of(lambda: call().ys, repeats) if repeats else first.run_s
    y = flat(jax.tree_util.tree_map(lambda a: a[-1], first.ys))
    logger.info(
        "%s %s rtol=%g: compile %.2f s, first call %.2f s, run %.4f s, %d steps (%d rejected), %s",
        p.system,
        solver,
        rtol,
        first.compile_s,
        first_s,
        run_s,
        int(first.num_steps),
        int(first.num_rejected_steps),
        first.status,
    )
    return {
        "compile_s": float(first.compile_s),
        "first_call_s": first_s,
        "run_s_min": run_s,
        "run_s_program": float(first.run_s),
        "steps": int(first.num_steps),
        "rejected": int(first.num_rejected_steps),
        "status": first.status,
        "segments": [list(seg) for seg in first.segments],
        "y": y,
    }


def bare_diffrax_run_s(p: Problem, solver: str, rtol: float, atol: float, repeats: int) -> float:
    """The best peer of a `flows.solve` run: `jax.jit` of a bare `diffrax.diffeqsolve` of the same vector field,
    state, solver and tolerances (`benchmarks._sweeps.bare_solve`: PID controller, saved at t1; no flows), best of
    `repeats` after compile."""
    solve = bare_solve(p.vector_field, solver=solver, rtol=rtol, atol=atol, t1=p.t1)
    fn = jax.jit(lambda y0, args: solve(y0, args).ys)
    jax.block_until_ready(fn(p.y0, p.args))
    return best_of(lambda: fn(p.y0, p.args), repeats)


def jax_rhs_call_s(p: Problem, repeats: int = 20) -> float:
    f = jax.jit(p.vector_field)
    jax.block_until_ready(f(0.0, p.y0, p.args))
    return best_of(lambda: f(0.0, p.y0, p.args), repeats)


def reference(p: Problem) -> tuple[np.ndarray, dict]:
    solver, rtol, atol = REF
    out = jax_solve(p, solver, rtol, atol, repeats=0)
    if out["status"] != "ok":
        raise RuntimeError(f"reference solve of {p.system} failed: {out['status']}")
    return out["y"], {
        "solver": solver,
        "rtol": rtol,
        "atol": atol,
        "steps": out["steps"],
        "compile_s": out["compile_s"],
        "run_s": out["run_s_program"],
    }


def scipy_side(p: Problem, ref: np.ndarray, runs, repeats: int) -> dict:
    """Run `_numpy_rhs.scipy_main` on this problem in a fresh process with the numpy kernel environment."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "problem.npz"
        meta = {"system": p.system, "t1": p.t1, "shapes": _numpy_rhs.shapes_of(p.y0)}
        np.savez(
            path,
            meta=np.asarray(json.dumps(meta)),
            y0=flat(p.y0),
            ref=ref,
            **{f"arg_{k}": np.asarray(v) for k, v in p.args.items()},
        )
        code = (
            f"from benchmarks._numpy_rhs import scipy_main; "
            f"scipy_main({str(path)!r}, {[list(r) for r in runs]!r}, {int(repeats)})"
        )
        out = fresh_process(code, env=numpy_kernel_env())
    logger.info(
        "%s scipy: %s (subprocess %.1f s)",
        p.system,
        ", ".join(f"{r['method']} {r['run_s_min']:.4f} s nfev {r['nfev']}" for r in out["runs"]),
        out["wall_s"],
    )
    return out


def scipy_rows(p: Problem, ref: np.ndarray, ref_info: dict, repeats: int, jax_runs: dict, pairs=PAIRS) -> list[dict]:
    """The flows.solve and scipy rows of one system, with the ratio of each (scipy method, solver) pair."""
    rows = []
    for _, solver, _ in pairs:
        if solver not in jax_runs:
            jax_runs[solver] = jax_solve(p, solver, RTOL, ATOL, repeats)
    sp = scipy_side(p, ref, [(method, RTOL, ATOL) for method, _, _ in pairs], repeats)
    rhs_jax = jax_rhs_call_s(p)
    stages = {"dopri5": 6, "dopri8": 12, "tsit5": 6}  # RHS evaluations per step (FSAL: first stage reused)
    for (method, solver, target), s in zip(pairs, sp["runs"], strict=True):
        j = jax_runs[solver]
        params = {**p.params, "rtol": RTOL, "atol": ATOL}
        bare_s = bare_diffrax_run_s(p, solver, RTOL, ATOL, max(1, repeats))
        peer = versus(j["run_s_min"], bare_s, f"jax.jit of a bare diffeqsolve ({solver}, same tolerances)", kind="peer")
        rat, fl = restate(
            ratio(s["run_s_min"] / j["run_s_min"], f"scipy {method} run / flows.solve {solver} run", target=target),
            s["run_s_min"] / bare_s,
            peer,
        )
        rows.append(
            row(
                f"solve_vs_scipy/{p.system}/flows.solve({solver})",
                params=params,
                compile_s=j["compile_s"],
                run_s_min=j["run_s_min"],
                repeats=repeats,
                steps=j["steps"],
                error=rel_error(j["y"], ref),
                rejected=j["rejected"],
                accepted=j["steps"] - j["rejected"],
                status=j["status"],
                first_call_s=j["first_call_s"],
                run_s_program=j["run_s_program"],
                s_per_step=j["run_s_min"] / max(1, j["steps"]),
                jax_rhs_call_s=rhs_jax,
                rhs_evals_per_step=stages[solver],
                reference=ref_info,
                bare_diffrax_run_s=bare_s,
            )
        )
        nfev = s["nfev"]
        rows.append(
            row(
                f"solve_vs_scipy/{p.system}/scipy.solve_ivp({method})",
                params=params,
                compile_s=0.0,
                run_s_min=s["run_s_min"],
                repeats=s.get("repeats", repeats),
                steps=s["steps"],
                error=s["error"],
                nfev=nfev,
                accepted=s["steps"],
                status=s["status"],
                s_per_step=s["run_s_min"] / max(1, s["steps"]),
                s_per_rhs_eval=s["run_s_min"] / max(1, nfev),
                rhs_call_s=sp["rhs_call_s"],
                jax_rhs_call_s=rhs_jax,
                numpy_kernel=sp["numpy_kernel"],
                numpy=sp["numpy"],
                numpy_env="OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE unset",
                subprocess_wall_s=sp["wall_s"],
                task="solver",
                ratio=rat,
                floor=fl,
                bare_diffrax_run_s=bare_s,
            )
        )
    return rows


def wp_rows(
    p: Problem, ref: np.ndarray, ref_info: dict, rtols, repeats: int, jax_runs: dict, solvers=WP_SOLVERS
) -> list[dict]:
    """One row per (solver, rtol); `jax_runs` collects the runs at RTOL/ATOL for reuse."""
    rows = []
    for solver in solvers:
        for rtol in rtols:
            if solver == "kvaerno5" and rtol < KVAERNO5_MIN_RTOL:
                continue
            atol = rtol / 100.0
            j = jax_solve(p, solver, rtol, atol, 1 if solver == "kvaerno5" else repeats)
            if rtol == RTOL and atol == ATOL:
                jax_runs[solver] = j
            rows.append(
                row(
                    f"solve_wp/{p.system}/{solver}",
                    params={**p.params, "solver": solver, "rtol": rtol, "atol": atol},
                    compile_s=j["compile_s"],
                    run_s_min=j["run_s_min"],
                    repeats=1 if solver == "kvaerno5" else repeats,
                    steps=j["steps"],
                    error=rel_error(j["y"], ref) if j["status"] == "ok" else None,
                    rejected=j["rejected"],
                    status=j["status"],
                    segments=j["segments"],
                    system=p.system,
                    solver=solver,
                    rtol=rtol,
                    reference=ref_info,
                )
            )
    return rows


def run(
    quick: bool, systems=SYSTEMS, wp_sizes=None, ratio_sizes=None, rtols=None, repeats=None, solvers=None, pairs=PAIRS
) -> list[dict]:
    """All rows (module docstring). The keywords shrink the run (tests): which systems, their sizes
    (`{system: builder keywords}`), the work-precision tolerances and solvers, the scipy pairs."""
    wp_sizes = WP_SIZES if wp_sizes is None else wp_sizes
    ratio_sizes = ({s: WP_SIZES[s] for s in SYSTEMS} if quick else RATIO_SIZES) if ratio_sizes is None else ratio_sizes
    rtols = WP_RTOLS[quick] if rtols is None else rtols
    solvers = (WP_QUICK_SOLVERS if quick else WP_SOLVERS) if solvers is None else solvers
    repeats = 3 if repeats is None else repeats
    rows = []
    for system in systems:
        runs: dict = {}
        if rtols and solvers:
            p_wp = problem(system, wp_sizes[system])
            ref_wp, info_wp = reference(p_wp)
            rows += wp_rows(p_wp, ref_wp, info_wp, rtols, repeats, runs, solvers)
        if not pairs:
            continue
        if rtols and solvers and ratio_sizes[system] == wp_sizes[system]:
            p_r, ref_r, info_r = p_wp, ref_wp, info_wp
        else:
            p_r = problem(system, ratio_sizes[system])
            ref_r, info_r = reference(p_r)
            runs = {}
        rows += scipy_rows(p_r, ref_r, info_r, repeats, runs, pairs)
    return rows


def main(argv=None) -> int:
    return bench_main("solve", run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
