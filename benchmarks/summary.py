"""`python -m benchmarks.summary [RESULTS...]`: the rows with a target as a Markdown table (ratio, what it
compares, target, met or MISSED, the run it came from), as quoted in the README's Performance section.

Default: every `benchmarks/results/*.json`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks._harness import RESULTS_DIR
from benchmarks.plot_scaling import read_rows


def table(rows: list[dict]) -> str:
    lines = ["| benchmark | ratio | what over what | target | |", "|---|---|---|---|---|"]
    for r in rows:
        rat = r.get("ratio")
        if not rat or rat.get("target") is None:
            continue
        lines.append(
            f"| `{r['bench']}` | {rat['value']:.3g} | {rat['of']} | >= {rat['target']:g} | "
            f"{'met' if rat['met'] else '**missed**'} |"
        )
    machine = next((r.get("machine") for r in rows if r.get("machine")), None) or {}
    lines.append("")
    lines.append(
        f"Machine: {machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB, "
        f"{machine.get('platform')}; date {machine.get('date')}."
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="*", help="result files (default: benchmarks/results/*.json)")
    ns = p.parse_args(argv)
    paths = ns.results or sorted(str(x) for x in Path(RESULTS_DIR).glob("*.json"))
    print(table(read_rows(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
