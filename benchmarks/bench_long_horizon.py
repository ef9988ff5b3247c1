"""The default solver ("auto": Tsit5, switching to Kvaerno5 where the flow turns stiff, and back) against the
fixed solvers, on a long-horizon flow of each system and on a short (not stiff) one.

Gradient flows turn stiff as they converge: long after the loss has settled, the fast directions of the
Hessian hold an explicit solver's step at its stability bound. Each system's flow is solved through its own
`solve_flow` (the user's path, default tolerances, default `max_steps` from the horizon) with `auto`,
`tsit5` and `kvaerno5`:

- `long_horizon/<flow>/<solver>`: steps, status, compile time (first call, cold unless the persistent cache
  is on), run time (the best of `repeats` calls after the first; one call for a solve over 60 s), the
  segments `auto` ran, `t_final` (how far the solve got). `auto` runs first; each fixed solver then gets
  `max_steps` = `FIXED_BUDGET` x auto's steps, raised (once) until it runs at least 1.5x auto's run time, and
  never above its default budget (`flows._solve.horizon_steps`), so that a fixed solver far slower than auto
  is stopped at a known multiple of it instead of running for hours. A fixed solver stopped below its default
  budget (`stopped_early`) took more steps and more than 1.5x auto's run time: its steps and time are lower
  bounds of what it needs; one stopped at its default budget failed at default settings and is no peer. On
  the `auto` row, `ratio` and `floor` (the best peer, `kind="peer"`) = (best fixed solver's run time, chosen in
  hindsight among those that reached t1) / (auto's), target >= 1 / 1.5; where none reached t1, the peer is
  the fastest fixed solver stopped early, a lower bound (`peer_reached_t1` false: the ratio is at least this).
  The row `long_horizon/<flow>/auto steps` the same for steps (its peer in steps, `unit="steps"`).
- `short_horizon/<flow>/auto` and `... steps`: the flow over a horizon where it is not stiff, auto against
  tsit5, target >= 1 / 1.1.

Flows (full): linear attention d = 3, N = 12 to t = 1e5 and its separate
heads (3 rank-one heads) to t = 1e7; the Scan-and-Snap reduced Z-flow (Syn-Small) to t = 1e4; the
co-occurrence Gram flow (n = 12, L = 4, d = 8, m = 8, m1 = 16) to t = 1e5; the mean-field particle flow
(L = 2, M = 4, 8 prompts) to tau = 1e3. `--quick`: horizons 100x shorter (and the mean field 10x), one
repeat. `--flows a,b`: only these flows (names of `FLOWS`).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections.abc import Callable

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from benchmarks._harness import bench_main, best_of, ratio, row, versus  # noqa: E402

logger = logging.getLogger(__name__)

SOLVERS = ("auto", "tsit5", "kvaerno5")
#: auto within 1.5x of the best fixed solver on a long horizon, within 1.1x of tsit5 where nothing is stiff
LONG_TARGET, SHORT_TARGET = 1 / 1.5, 1 / 1.1
#: a solve longer than this is timed once (its first call's run time)
LONG_RUN_S = 60.0
#: a fixed solver's step budget on a long horizon, in auto's steps (module docstring)
FIXED_BUDGET = 4


def linear_attention(form: str) -> Callable:
    from flows import linear_attention as la

    heads = {"single": {}, "separate": {"form": "separate", "heads": 3, "rank": 1}}[form]
    config = la.Config(d=3, N=12, eigenvalues=(1.0, 0.5, 0.25), **heads)

    def solve(t1, solver, max_steps=None):
        ts = np.array([0.0, t1 / 100, t1])
        return la.solve_flow(config, ts, solver=solver, throw=False, max_steps=max_steps)

    return solve


def scan_snap() -> Callable:
    from flows import scan_snap as ss

    classes = ss.syn_small()

    def solve(t1, solver, max_steps=None):
        ts = np.array([0.0, t1 / 100, t1])
        return ss.solve_flow(classes, 10.0, 1.0, ts, reduced=True, solver=solver, throw=False, max_steps=max_steps)

    return solve


def cooccurrence() -> Callable:
    from flows import cooccurrence as co

    config = co.Config(n=12, L=4, d=8, m=8, m1=16, variant="paper", seed=0)

    def solve(t1, solver, max_steps=None):
        ts = np.array([0.0, t1 / 100, t1])
        return co.solve_flow(config, ts, solver=solver, throw=False, locate_T1=False, max_steps=max_steps)

    return solve


def mean_field() -> Callable:
    from flows import mean_field as mf

    config = mf.Config(L=2, M=4, n_train=8, n_test=4, lam=1e-3, init_scale=2.0, seed=0)

    def solve(t1, solver, max_steps=None):
        ts = np.array([0.0, t1 / 100, t1])
        return mf.solve_flow(config, ts, solver=solver, throw=False, observables="basic", max_steps=max_steps)

    return solve


#: flow -> (builder, long horizon, short horizon)
FLOWS: dict[str, tuple[Callable, float, float]] = {
    "linear_attention": (lambda: linear_attention("single"), 1e5, 20.0),
    "linear_attention_separate": (lambda: linear_attention("separate"), 1e7, 20.0),
    "scan_snap_reduced": (scan_snap, 1e4, 10.0),
    "cooccurrence": (cooccurrence, 1e5, 10.0),
    "mean_field": (mean_field, 1e3, 1.0),
}


def measure(solve: Callable, t1: float, solver: str, repeats: int, max_steps: int | None = None) -> dict:
    """The first call (compile and run), then the best of `repeats` calls (cached program); `max_steps`:
    the solve's step budget (None: its default)."""
    begin = time.perf_counter()
    first = solve(t1, solver, max_steps)
    first_s = time.perf_counter() - begin
    run_s = float(first.run_s)
    if repeats and first.run_s < LONG_RUN_S:
        run_s = min(run_s, best_of(lambda: solve(t1, solver, max_steps).ts, repeats))
    logger.info(
        "t1=%g %s: %s, %d steps, compile %.2f s, run %.3f s, segments %s",
        t1,
        solver,
        first.status,
        int(first.num_steps),
        first.compile_s,
        run_s,
        first.segments,
    )
    return {
        "status": first.status,
        "steps": int(first.num_steps),
        "rejected": int(first.num_rejected_steps),
        "compile_s": float(first.compile_s),
        "first_call_s": first_s,
        "run_s_min": run_s,
        "segments": [list(s) for s in first.segments],
        "final_loss": float(np.asarray(first.observables["loss"])[-1]) if "loss" in first.observables else None,
        "max_steps": max_steps,
        "t_final": float(first.t_final),
    }


def _fixed_budget(t1: float, auto_steps: int) -> int:
    """A fixed solver's step budget on a long horizon: `FIXED_BUDGET` x auto's steps, at most the default."""
    from flows._solve import horizon_steps

    return min(max(1, int(FIXED_BUDGET * auto_steps)), horizon_steps(0.0, t1))


def _best(runs: dict, key: str) -> tuple[str | None, bool]:
    """The fixed solver with the least `key` among those that reached t1 (True), else among those stopped
    early, below their default budget (False: a lower bound of what any of them needs); None where every fixed
    solver failed at default settings."""
    fixed = {s: r for s, r in runs.items() if s != "auto"}
    done = {s: r for s, r in fixed.items() if r["status"] == "ok"}
    pool = done or {s: r for s, r in fixed.items() if r.get("stopped_early")}
    return (min(pool, key=lambda k: pool[k][key]) if pool else None), bool(done)


def _fixed_run(solve: Callable, t1: float, solver: str, repeats: int, auto: dict) -> dict:
    """A fixed solver on a long horizon at its budget (module docstring): `FIXED_BUDGET` x auto's steps,
    raised once, in proportion, where it stopped before running 1.5x auto's run time; at most its default."""
    from flows._solve import horizon_steps

    default = horizon_steps(0.0, t1)
    budget = _fixed_budget(t1, auto["steps"])
    r = measure(solve, t1, solver, repeats, budget)
    need_s = auto["run_s_min"] / LONG_TARGET
    if r["status"] == "max_steps" and r["run_s_min"] < need_s and budget < default:
        per_step = r["run_s_min"] / max(r["steps"], 1)
        budget = min(default, max(budget + 1, math.ceil(1.2 * need_s / per_step)))
        r = measure(solve, t1, solver, repeats, budget)
    r["stopped_early"] = r["status"] == "max_steps" and budget < default
    return r


def flow_rows(name: str, t1: float, short_t1: float, repeats: int, solvers=SOLVERS) -> list[dict]:
    build, _, _ = FLOWS[name]
    solve = build()
    runs = {}
    if "auto" in solvers:
        runs["auto"] = measure(solve, t1, "auto", repeats)
    for s in solvers:
        if s != "auto":
            runs[s] = (
                _fixed_run(solve, t1, s, repeats, runs["auto"]) if "auto" in runs else measure(solve, t1, s, repeats)
            )
    auto_ok = "auto" in runs and runs["auto"]["status"] == "ok"
    rows = []
    for s, r in runs.items():
        extra = {}
        best, reached = _best(runs, "run_s_min")
        if s == "auto" and auto_ok and best is not None:
            of = f"best fixed solver ({best}) run / auto run" + (
                "" if reached else " (no fixed solver reached t1: stopped early, a lower bound)"
            )
            extra["ratio"] = ratio(runs[best]["run_s_min"] / r["run_s_min"], of, target=LONG_TARGET)
            extra["floor"] = versus(
                r["run_s_min"], runs[best]["run_s_min"], f"the best fixed solver's run ({best})", kind="peer",
                target=LONG_TARGET,
            )  # fmt: skip
            extra["peer_reached_t1"] = reached
        rows.append(
            row(
                f"long_horizon/{name}/{s}",
                params={"flow": name, "t1": t1, "solver": s},
                compile_s=r["compile_s"],
                run_s_min=r["run_s_min"],
                repeats=repeats,
                steps=r["steps"],
                task="long run",
                **{k: v for k, v in r.items() if k not in ("compile_s", "run_s_min", "steps")},
                **extra,
            )
        )
    best, reached = _best(runs, "steps")
    if auto_ok and best is not None:
        of = f"best fixed solver ({best}) steps / auto steps" + (
            "" if reached else " (no fixed solver reached t1: stopped early, a lower bound)"
        )
        rows.append(
            row(
                f"long_horizon/{name}/auto steps",
                params={"flow": name, "t1": t1},
                compile_s=None,
                run_s_min=None,
                steps=runs["auto"]["steps"],
                task="long run",
                peer_reached_t1=reached,
                ratio=ratio(runs[best]["steps"] / runs["auto"]["steps"], of, target=LONG_TARGET),
                floor=versus(
                    runs["auto"]["steps"],
                    runs[best]["steps"],
                    f"the best fixed solver's steps ({best})",
                    kind="peer",
                    target=LONG_TARGET,
                    unit="steps",
                ),  # fmt: skip
            )
        )
    short = {s: measure(solve, short_t1, s, repeats) for s in ("auto", "tsit5")}
    for measure_name, key in (("", "run_s_min"), (" steps", "steps")):
        a, t = short["auto"], short["tsit5"]
        rows.append(
            row(
                f"short_horizon/{name}/auto{measure_name}",
                params={"flow": name, "t1": short_t1},
                compile_s=a["compile_s"] if not measure_name else None,
                run_s_min=a["run_s_min"] if not measure_name else None,
                repeats=repeats,
                steps=a["steps"],
                status=a["status"],
                segments=a["segments"],
                tsit5={k: t[k] for k in ("status", "steps", "compile_s", "run_s_min")},
                task="long run",
                ratio=ratio(t[key] / a[key], f"tsit5 {key} / auto {key}", target=SHORT_TARGET),
                floor=versus(
                    a[key],
                    t[key],
                    f"tsit5's {'steps' if measure_name else 'run'}",
                    kind="peer",
                    unit="steps" if measure_name else "s",
                ),  # fmt: skip
            )
        )
    return rows


def run(quick: bool, flows=None, repeats=None, scale=None) -> list[dict]:
    """All rows (module docstring); `flows`, `repeats` and `scale` (the horizons' factor) shrink the run."""
    names = tuple(FLOWS) if flows is None else flows
    repeats = (1 if quick else 3) if repeats is None else repeats
    rows = []
    for name in names:
        _, t1, short_t1 = FLOWS[name]
        factor = (0.1 if name == "mean_field" else 0.01) if quick and scale is None else (scale or 1.0)
        rows += flow_rows(name, t1 * factor, short_t1, repeats)
    return rows


def main(argv=None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--flows", default=None, help=f"comma-separated names of {tuple(FLOWS)} (default all)")
    ns, rest = pre.parse_known_args(argv)
    names = None if ns.flows is None else tuple(ns.flows.split(","))
    unknown = sorted(set(names or ()) - set(FLOWS))
    if unknown:
        raise SystemExit(f"--flows: unknown {unknown}; choose from {sorted(FLOWS)}")
    return bench_main("long_horizon", lambda quick: run(quick, flows=names), __doc__.splitlines()[0], rest)


if __name__ == "__main__":
    sys.exit(main())
