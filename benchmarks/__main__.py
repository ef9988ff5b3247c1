"""`python -m benchmarks [--quick] [--out FILE]`: run every benchmarks/bench_*.py, print one table."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import benchmarks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="few repeats, small sweeps")
    p.add_argument("--out", default="out/benchmarks/results.jsonl", help="JSON-lines file (appended)")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="cold compiles: do not use the persistent compilation cache (flows.compile_cache)")
    ns = p.parse_args(argv)
    out = Path(ns.out)
    start = sum(1 for _ in out.open()) if out.exists() else 0
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    for name in names:
        mod = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name}")
        mod.main((["--quick"] if ns.quick else []) + ["--out", str(out)]
                 + (["--no-compile-cache"] if ns.no_compile_cache else []))
    rows = [json.loads(line) for line in out.read_text().splitlines()[start:]]
    print(f"\n{'bench':45s} {'run_s_min':>12s} {'compile_s':>10s} {'steps':>7s} {'err_vs_ref':>11s}  ratio")
    for r in rows:
        ratio = r.get("speedup_of_flows") or r.get("speedup_vs_python_loop")
        err = r["error_vs_ref"]
        print(f"{r['bench']:45s} {r['run_s_min']:12.6f} {r['compile_s']:10.3f} {str(r['num_steps']):>7s} "
              f"{(f'{err:.2e}' if err is not None else '-'):>11s}  {f'{ratio:.1f}x' if ratio else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
