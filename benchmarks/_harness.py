"""Shared protocol (diffrax FAQ style): compile once, time the best of repeats with block_until_ready."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jax

from flows import records


def best_of(fn, repeats: int) -> float:
    """Minimum wall time of `repeats` calls of `fn()` (results blocked until ready)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best


def parser(description: str):
    """The argument parser of a benchmark module: `--quick`, `--out`, `--no-compile-cache`."""
    import argparse

    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="out/benchmarks/results.jsonl")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use the persistent compilation cache (flows.compile_cache): cold compiles")
    return p


def start(ns) -> None:
    """Turn on the persistent compilation cache unless `--no-compile-cache` (rows then record it)."""
    from flows import compile_cache

    compile_cache.enable(opt_out=ns.no_compile_cache)


def write_rows(rows: list[dict], out: Path) -> None:
    """Append rows (one JSON object per line) to `out`, atomically rewriting the file."""
    out = Path(out)
    old = out.read_text() if out.exists() else ""
    from flows import compile_cache

    cache = compile_cache.enabled_dir()
    env = {"versions": {k: v for k, v in records.versions().items()
                        if k in ("jax", "diffrax", "numpy", "scipy", "jax_backend", "jax_enable_x64")},
           "compile_cache": cache is not None}  # True: compile_s may be a cache read, not a cold compile
    new = "".join(json.dumps({**row, **env}, sort_keys=True, default=float) + "\n" for row in rows)
    records.atomic_write_text(out, old + new)
