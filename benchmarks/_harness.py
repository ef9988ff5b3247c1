"""Shared protocol of every benchmark (diffrax FAQ style) and the row format they write.

- Compile once, then time the best of repeats with `block_until_ready` (`best_of`).
- First calls (what a user running one script pays: imports, data, initial state, compile, solve) are timed
  in a **fresh process** with the persistent compilation cache off (`fresh_process`), so nothing is warm.
- Ratios against the alternative a user would otherwise use (GD training, scipy, a Python loop, PyTorch)
  are measured in the same run and stored with what they compare and the issue's target (`ratio`).

A row (`row`) is one JSON object: `bench`, `params`, `compile_s`, `run_s_min`, `repeats`, `steps`, `error`
(`None` where nothing is compared), optionally `ratio = {"value", "of", "target", "met"}`, and whatever else
the benchmark measures; `write_rows` adds `machine` (CPU, cores, memory, BLAS kernel, date) and `versions`.
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

from flows.experiments import records

__all__ = [
    "best_of",
    "bench_main",
    "fresh_process",
    "machine",
    "numpy_kernel_env",
    "parser",
    "ratio",
    "row",
    "start",
    "write_results",
    "write_rows",
]

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


def fresh_process(code: str, *, timeout: float = 600.0, env: dict | None = None) -> dict:
    """Run `code` (Python source) in a fresh interpreter with the persistent compilation cache off and
    return its wall time and the JSON object it prints on its last stdout line.

    This is how first calls are measured: imports, data, initial state, tracing, compile and run, nothing
    warm. The child must print one JSON line last (e.g. its own stage timings).
    """
    child_env = dict(os.environ if env is None else env)
    child_env["FLOWS_NO_COMPILE_CACHE"] = "1"
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
