"""Shared protocol of every benchmark (diffrax FAQ style) and the row format they write.

- Compile once, then time the best of repeats with `block_until_ready` (`best_of`).
- First calls (what a user running one script pays: imports, data, initial state, compile, solve) are timed
  in a **fresh process** with the persistent compilation cache off (`fresh_process`), so nothing is warm.
- Ratios against the alternative a user would otherwise use (GD training, scipy, a Python loop, PyTorch)
  are measured in the same run and stored with what they compare and the issue's target (`ratio`).

A row (`row`) is one JSON object: `bench`, `params`, `compile_s`, `run_s_min`, `repeats`, `steps`, `error`
(`None` where nothing is compared), optionally `task` (what a user does: one of `TASKS`), `ratio = {"value",
"of", "target", "met"}` (against the alternative a user would otherwise use), `floor` (`versus`: the measure
against its floor or best peer, measured in the same run where possible) and whatever else the benchmark
measures; `write_rows` adds `machine` (CPU, cores, memory, BLAS kernel, date) and `versions`.

A floor is what the measure cannot go below on this stack (a bare `diffrax.diffeqsolve` compiled and run in
a fresh process, the vector-field evaluations a sweep needs, the matrix products of a training run at the
measured GEMM rate); a best peer is the best other tool doing the same job (raw diffrax, scipy, PyTorch). A
target on a ratio that the floor does not allow (the alternative over the floor is below it) is restated as a
target on the ratio to the floor (`restate`), naming the floor's measurement.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax

from benchmarks import summary as _summary
from flows.experiments import records

__all__ = [
    "FLOOR_TARGET",
    "TASKS",
    "bare_diffrax",
    "best_of",
    "bench_main",
    "fresh_process",
    "machine",
    "numpy_kernel_env",
    "parser",
    "ratio",
    "restate",
    "row",
    "start",
    "write_results",
    "versus",
    "write_rows",
]

#: What a user does, in the order the performance page shows them (a row's `task`): one tuple, kept in
#: `benchmarks.summary` (which the site's build reads without importing jax).
TASKS = _summary.TASKS
#: The default target of a measure against its floor: within 1.5x of it (floor / measured >= 1 / 1.5).
FLOOR_TARGET = 1 / 1.5

#: Committed results (one JSON file per benchmark module) live here.
RESULTS_DIR = Path(__file__).resolve().parent / "results"
_ROW_KEYS = ("bench", "params", "compile_s", "run_s_min", "repeats", "steps", "error")


def best_of(fn, repeats: int) -> float:
    """Minimum wall time of `repeats` calls of `fn()` (results blocked until ready)."""
    best = float("inf")
    for _ in range(max(1, int(repeats))):
        begin = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - begin)
    return best


def ratio(value: float, of: str, target: float | None = None) -> dict:
    """A measured ratio (`value` = how many times cheaper/faster), what it compares (`of`, e.g.
    "GD first call / flow first call") and the issue's target (met when value >= target)."""
    value = float(value)
    return {"value": value, "of": of, "target": target, "met": None if target is None else bool(value >= target)}


def versus(
    measured_s: float,
    floor_s: float,
    of: str,
    *,
    kind: str = "floor",
    target: float | None = None,
    source: str = "this run",
    unit: str = "s",
) -> dict:
    """A measure against its floor or best peer: `value` = floor_s / measured_s (1: at the floor; 0.5: twice
    it), what the floor is (`of`), `kind` ("floor" or "peer"), where it was measured (`source`: "this run", or
    the row or file it comes from) and the target on `value` (met when value >= target; None where the row's
    target is on its ratio to the alternative, see `restate`). `unit`: what `measured_s` and `floor_s` count
    when not seconds (e.g. "steps"; recorded as `unit`)."""
    if kind not in ("floor", "peer"):
        raise ValueError(f"kind must be 'floor' or 'peer', got {kind!r}")
    measured_s, floor_s = float(measured_s), float(floor_s)
    value = floor_s / measured_s
    met = None if target is None else bool(value >= target)
    out = {
        "value": value,
        "measured_s": measured_s,
        "floor_s": floor_s,
        "of": of,
        "kind": kind,
        "source": source,
        "target": target,
        "met": met,
    }
    return out if unit == "s" else {**out, "unit": unit}


def restate(rat: dict, best_possible: float, floor: dict) -> tuple[dict, dict]:
    """`(ratio, floor)` with the target of `rat` moved to `floor` when the floor does not allow it: the best
    ratio any implementation could reach (`best_possible`, the alternative over the floor) is below the target.
    The ratio then keeps its value without a target and says why (`restated`), and the floor gets the target
    `FLOOR_TARGET` (within 1.5x of it); otherwise both are returned unchanged."""
    target = rat.get("target")
    if target is None or best_possible >= target:
        return rat, floor
    why = (
        f"target {target:g}x is above the {best_possible:.3g}x that the floor allows ({floor['of']}, "
        f"{floor['source']}): restated as within {1 / FLOOR_TARGET:.3g}x of the floor"
    )
    floor = {**floor, "target": FLOOR_TARGET, "met": bool(floor["value"] >= FLOOR_TARGET)}
    return {**rat, "target": None, "met": None, "best_possible": float(best_possible), "restated": why}, floor


def row(
    bench: str,
    *,
    params: dict,
    compile_s: float | None,
    run_s_min: float | None,
    repeats: int = 1,
    steps=None,
    error: float | None = None,
    **extra,
) -> dict:
    """One benchmark row in the common format (see the module docstring)."""
    if "task" in extra and extra["task"] not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {extra['task']!r}")
    return {
        "bench": bench,
        "params": params,
        "compile_s": compile_s,
        "run_s_min": run_s_min,
        "repeats": int(repeats),
        "steps": steps,
        "error": error,
        **extra,
    }


def numpy_kernel_env(env: dict | None = None) -> dict:
    """A copy of the environment without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (set on some machines for old
    OpenBLAS builds; they slow a current numpy). Used only for a benchmark's own subprocess."""
    env = dict(os.environ if env is None else env)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    return env


def blas_kernel() -> dict:
    """Which BLAS numpy runs here (threadpoolctl if installed, else numpy's build config)."""
    info = {
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
    }
    try:
        import threadpoolctl

        libs = threadpoolctl.threadpool_info()
        info["libraries"] = [
            {k: lib.get(k) for k in ("internal_api", "version", "architecture", "num_threads")} for lib in libs
        ]
    except ImportError:
        info["libraries"] = None
    return info


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine() -> dict:
    """CPU model, core count, memory, platform, the BLAS kernel numpy runs, and today's date."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "blas": blas_kernel(),
    }


def fresh_process(code: str, *, timeout: float = 600.0, env: dict | None = None, cache_dir=None) -> dict:
    """Run `code` (Python source) in a fresh interpreter with the persistent compilation cache off (or, with
    `cache_dir`, on in that folder: the child enables it with `flows.experiments.compile_cache.enable()`) and
    return its wall time and the JSON object it prints on its last stdout line.

    This is how first calls are measured: imports, data, initial state, tracing, compile and run, nothing
    warm; a rerun with the compile cache is the same child run twice with one `cache_dir`. The child must
    print one JSON line last (e.g. its own stage timings).
    """
    child_env = dict(os.environ if env is None else env)
    if cache_dir is None:
        child_env["FLOWS_NO_COMPILE_CACHE"] = "1"
    else:
        child_env.pop("FLOWS_NO_COMPILE_CACHE", None)
        child_env["FLOWS_CACHE_DIR"] = str(cache_dir)
    child_env.setdefault("MPLBACKEND", "Agg")
    root = str(Path(__file__).resolve().parent.parent)
    child_env["PYTHONPATH"] = root + (os.pathsep + child_env["PYTHONPATH"] if child_env.get("PYTHONPATH") else "")
    begin = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=child_env, cwd=root
    )
    wall = time.perf_counter() - begin
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    out = json.loads(lines[-1]) if lines else {}
    return {"wall_s": wall, **out}


_BARE_CHILD = """
import json, time
t_start = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import diffrax
imports = time.perf_counter() - t_start

def run(y0, ts):
    sol = diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, a: -y), diffrax.Tsit5(), 0.0, ts[-1], None, y0,
                              saveat=diffrax.SaveAt(ts=ts), max_steps=200_000, throw=False,
                              stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10))
    return sol.ys[-1]

y0, ts = jnp.ones({size}), jnp.linspace(0.0, 1.0, {saves})
t = time.perf_counter()
traced = jax.jit(run).trace(y0, ts)
t_trace = time.perf_counter() - t
t = time.perf_counter()
lowered = traced.lower()
t_lower = time.perf_counter() - t
t = time.perf_counter()
fn = lowered.compile()
t_compile = time.perf_counter() - t
jax.block_until_ready(fn(y0, ts))
print(json.dumps({{"imports": imports, "trace": t_trace, "lower": t_lower, "compile": t_compile,
                  "total": time.perf_counter() - t_start}}))
"""


def bare_diffrax(state_size: int, save_points: int) -> dict:
    """What any diffrax flow pays before its own vector field, in a fresh process: the interpreter's start and
    importing jax + diffrax (`imports`), tracing, lowering and compiling a bare `diffrax.diffeqsolve` (Tsit5,
    PID controller, `save_points` save times) of dy/dt = -y on a flat state of `state_size` (`trace`, `lower`,
    `compile`; `compile_total` their sum), without flows: the floor of a flow's first call is these plus the
    flow's own data, initial state and run."""
    out = fresh_process(_BARE_CHILD.format(size=int(state_size), saves=int(save_points)))
    out["imports"] += out["wall_s"] - out["total"]  # the interpreter's start counts with the imports
    out["compile_total"] = out["trace"] + out["lower"] + out["compile"]
    return out


def parser(description: str):
    """The argument parser of a benchmark module: `--quick`, `--out`, `--no-compile-cache`."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--out", default="out/benchmarks/results.jsonl", help="JSON-lines file (appended)")
    p.add_argument(
        "--results",
        default=None,
        help="also write the rows to DIR/<module>.json (the committed results: benchmarks/results)",
    )
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="do not use the persistent compilation cache (flows.experiments.compile_cache): cold compiles",
    )
    return p


def start(ns) -> None:
    """Turn on the persistent compilation cache unless `--no-compile-cache` (rows then record it)."""
    from flows.experiments import compile_cache

    compile_cache.enable(opt_out=ns.no_compile_cache)


def _env() -> dict:
    from flows.experiments import compile_cache

    cache = compile_cache.enabled_dir()
    return {
        "versions": {
            k: v
            for k, v in records.versions().items()
            if k in ("jax", "jaxlib", "diffrax", "numpy", "scipy", "jax_backend", "jax_enable_x64", "git_sha")
        },
        "machine": machine(),
        "compile_cache": cache is not None,
    }  # True: compile_s may be a cache read, not a cold compile


def _check(rows: list[dict]) -> None:
    for r in rows:
        missing = [k for k in _ROW_KEYS if k not in r]
        if missing:
            raise ValueError(f"benchmark row {r.get('bench')!r} lacks {missing} (use benchmarks._harness.row)")


def write_rows(rows: list[dict], out: Path) -> list[dict]:
    """Append rows (one JSON object per line, with machine and versions) to `out`, atomically rewriting
    the file. Returns the rows as written."""
    _check(rows)
    out = Path(out)
    old = out.read_text() if out.exists() else ""
    env = _env()
    full = [{**r, **env} for r in rows]
    new = "".join(json.dumps(r, sort_keys=True, default=float) + "\n" for r in full)
    records.atomic_write_text(out, old + new)
    return full


def write_results(name: str, rows: list[dict], folder: Path | str = RESULTS_DIR) -> Path:
    """Write `rows` (as returned by `write_rows`) to `folder/<name>.json`, atomically."""
    path = Path(folder) / f"{name}.json"
    records.atomic_write_text(path, json.dumps(rows, indent=1, sort_keys=True, default=float) + "\n")
    return path


def format_row(r: dict) -> str:
    """One table line: bench, compile, best run, steps, error, ratio (what over what) and its target."""

    def num(x, fmt):
        width = int(fmt.split(".")[0])
        return f"{'-':>{width}s}" if x is None else format(x, fmt)

    rat = r.get("ratio")
    rat_s = (
        ""
        if not rat
        else (
            f"{rat['value']:.3g}x ({rat['of']})"
            + ("" if rat["target"] is None else f" target >= {rat['target']:g}: {'met' if rat['met'] else 'MISSED'}")
        )
    )
    fl = r.get("floor")
    if fl:
        rat_s += (" | " if rat_s else "") + f"{1 / fl['value']:.3g}x its {fl['kind']} ({fl['of']})"
        if fl.get("target") is not None:
            rat_s += f" target <= {1 / fl['target']:.3g}x: {'met' if fl['met'] else 'MISSED'}"
    return (
        f"{r['bench']:48s} {num(r['compile_s'], '10.3f')} {num(r['run_s_min'], '12.5f')} "
        f"{str(r['steps']) if r['steps'] is not None else '-':>8s} {num(r['error'], '10.2e')}  {rat_s}"
    )


HEADER = f"{'bench':48s} {'compile_s':>10s} {'run_s_min':>12s} {'steps':>8s} {'error':>10s}  ratio"


def bench_main(name: str, run, description: str, argv=None) -> int:
    """The `main(argv)` of a benchmark module: parse, enable the cache, `run(quick)`, write, print."""
    ns = parser(description).parse_args(argv)
    start(ns)
    rows = write_rows(run(ns.quick), Path(ns.out))
    if ns.results:
        write_results(name, rows, ns.results)
    print(HEADER)
    for r in rows:
        print(format_row(r))
    return 0
