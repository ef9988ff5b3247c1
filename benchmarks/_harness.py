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


def write_rows(rows: list[dict], out: Path) -> None:
    """Append rows (one JSON object per line) to `out`, atomically rewriting the file."""
    out = Path(out)
    old = out.read_text() if out.exists() else ""
    env = {"versions": {k: v for k, v in records.versions().items()
                        if k in ("jax", "diffrax", "numpy", "scipy", "jax_backend", "jax_enable_x64")}}
    new = "".join(json.dumps({**row, **env}, sort_keys=True, default=float) + "\n" for row in rows)
    records.atomic_write_text(out, old + new)
