"""Run the benchmark modules (benchmarks/bench_*.py), append their rows to a JSON-lines file and print one
table with the ratios and whether each meets its target.

`--only cooccurrence solve` runs `bench_cooccurrence` and `bench_solve`; `--results benchmarks/results` also
writes one JSON file per module there (the committed results docs/performance.md is generated from). A row
meets its target on its floor where it carries one, else on its ratio (`benchmarks.summary.verdict`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from pathlib import Path

import benchmarks
from benchmarks._harness import HEADER, format_row
from benchmarks.summary import verdict


def available() -> list[str]:
    """Names of the benchmark modules, without the `bench_` prefix."""
    return sorted(
        m.name[len("bench_") :] for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--only", nargs="+", metavar="NAME", help=f"run only these modules (of {available()})")
    p.add_argument("--out", metavar="FILE", default="out/benchmarks/results.jsonl", help="JSON-lines file (appended)")
    p.add_argument("--results", metavar="DIR", default=None, help="also write DIR/<module>.json per module")
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="cold compiles: do not use the persistent compilation cache (flows.experiments.compile_cache)",
    )
    ns = p.parse_args(argv)
    names = available()
    if ns.only:
        unknown = [n for n in ns.only if n.removeprefix("bench_") not in names]
        if unknown:
            p.error(f"unknown benchmark(s) {unknown}; available: {names}")
        names = [n for n in names if n in {o.removeprefix("bench_") for o in ns.only}]
    out = Path(ns.out)
    first_line = sum(1 for _ in out.open()) if out.exists() else 0
    for name in names:
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"== bench_{name}", flush=True)
        mod.main(
            (["--quick"] if ns.quick else [])
            + ["--out", str(out)]
            + (["--results", ns.results] if ns.results else [])
            + (["--no-compile-cache"] if ns.no_compile_cache else [])
        )
    rows = [json.loads(line) for line in out.read_text().splitlines()[first_line:]]
    print("\n" + HEADER)
    for r in rows:
        print(format_row(r))
    verdicts = [verdict(r) for r in rows]
    print(f"\n{sum(v is True for v in verdicts)} targets met, {sum(v is False for v in verdicts)} missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
