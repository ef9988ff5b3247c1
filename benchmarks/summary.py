"""`python -m benchmarks.summary [RESULTS...]`: the rows with a target as a Markdown table (ratio, what it
compares, target, met or missed), then the machine and the date of the runs they come from: the table of the
documentation's Performance page, which the site's build generates with `table`.

Default: every `benchmarks/results/*.json`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.plot_scaling import read_rows

# the folder of the committed rows (benchmarks._harness.RESULTS_DIR, without importing the harness and jax)
RESULTS_DIR = Path(__file__).resolve().parent / "results"

__all__ = ["RESULTS_DIR", "main", "result_paths", "table"]


def result_paths(results_dir: Path | str = RESULTS_DIR) -> list[str]:
    """The committed result files: every ``*.json`` of `results_dir` but the ``--quick`` timing record.

    **Arguments:**

    - `results_dir`: the folder (default: ``benchmarks/results``).

    **Returns:** the paths, sorted.
    """
    return sorted(str(p) for p in Path(results_dir).glob("*.json") if p.name != "reproduce_quick.json")


def _machine(m: dict) -> str:
    return f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, {m.get('platform')}"


def table(rows: list[dict]) -> str:
    """The Markdown table of the rows that carry a ratio with a target, one row per measure, then one line per
    machine with the dates of its runs.

    **Arguments:**

    - `rows`: benchmark rows (``benchmarks._harness.row``), as read by `read_rows`.

    **Returns:** the table and the machine lines, as Markdown.
    """
    lines = ["| benchmark | ratio | what over what | target | verdict |", "|---|---|---|---|---|"]
    runs: dict[str, set[str]] = {}
    for r in rows:
        rat = r.get("ratio")
        if not rat or rat.get("target") is None:
            continue
        lines.append(
            f"| `{r['bench']}` | {rat['value']:.3g} | {rat['of']} | >= {rat['target']:g} | "
            f"{'met' if rat['met'] else '**missed**'} |"
        )
        m = r.get("machine") or {}
        if m:
            runs.setdefault(_machine(m), set()).add(str(m.get("date")))
    lines.append("")
    if not runs:
        lines.append("Machine: not recorded.")
    for machine, dates in runs.items():
        lines.append(f"Machine: {machine}; date {', '.join(sorted(dates))}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: print the table of the given result files (default: `result_paths`).

    **Arguments:**

    - `argv`: the arguments (default: ``sys.argv[1:]``).

    **Returns:** the exit status, 0.
    """
    p = argparse.ArgumentParser(prog="python -m benchmarks.summary", description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="*", help="result files (default: benchmarks/results/*.json)")
    ns = p.parse_args(argv)
    print(table(read_rows(ns.results or result_paths())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
