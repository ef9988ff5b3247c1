"""Work-precision figure of `bench_solve`: error at the final time against run time after compile (and against
steps), one column per system, one line per solver (log-log), each point labelled with its rtol.

Usage: `python -m benchmarks.plot_work_precision ROWS OUT.png`, where ROWS is a JSON-lines file written by
`python -m benchmarks --only solve --out ROWS` or a results file `benchmarks/results/solve.json` (a JSON list).
The `solve_wp/...` rows are drawn; others are skipped. If ROWS holds several runs, the last row of each
(system, solver, rtol) is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

SOLVER_STYLE = {"auto": "*-", "tsit5": "o-", "dopri5": "s-", "dopri8": "^-", "kvaerno5": "D--"}


def load_rows(path) -> list[dict]:
    """Rows from a JSON-lines file or a JSON list."""
    text = Path(path).read_text()
    stripped = text.lstrip()
    if stripped.startswith("["):
        rows = json.loads(stripped)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path}: expected JSON lines or a JSON list of row objects")
    return rows


def work_precision(rows: list[dict]) -> dict:
    """{system: {solver: [(run_s, error, rtol, steps), ...] sorted by rtol (loosest first)}} of the
    `solve_wp/` rows with an error; the last row per (system, solver, rtol) wins."""
    latest = {}
    for r in rows:
        if not str(r.get("bench", "")).startswith("solve_wp/") or r.get("error") is None:
            continue
        system, solver = r["bench"].split("/")[1:3]
        rtol = r["params"]["rtol"]
        latest[(system, solver, rtol)] = (r["run_s_min"], r["error"], rtol, r.get("steps"))
    out: dict = {}
    for (system, solver, _), point in latest.items():
        out.setdefault(system, {}).setdefault(solver, []).append(point)
    for system in out:
        for solver in out[system]:
            out[system][solver].sort(key=lambda p: -p[2])
    return out


def plot(rows: list[dict], out) -> Path:
    """Draw the work-precision panels of `rows` to the PNG `out`: error against run time after compile (top
    row) and against the number of steps (bottom row, which machine load does not move)."""
    data = work_precision(rows)
    if not data:
        raise ValueError("no solve_wp/ rows with an error to plot")
    systems = sorted(data)
    fig, axes = plt.subplots(2, len(systems), figsize=(4.6 * len(systems), 7.6), squeeze=False)
    order = list(SOLVER_STYLE)
    for col, system in enumerate(systems):
        for solver in sorted(data[system], key=lambda s: order.index(s) if s in order else len(order)):
            pts = data[system][solver]
            err = [max(p[1], 1e-17) for p in pts]  # an exact 0 would vanish from a log axis
            for ax, xs in ((axes[0, col], [p[0] for p in pts]), (axes[1, col], [p[3] for p in pts])):
                ax.loglog(xs, err, SOLVER_STYLE.get(solver, "x-"), label=solver, ms=4, lw=1)
                for x, e, p in zip(xs, err, pts, strict=True):
                    ax.annotate(f"{p[2]:.0e}", (x, e), fontsize=6, xytext=(3, 2), textcoords="offset points")
        axes[0, col].set_title(system, fontsize=10)
        axes[0, col].set_xlabel("run time after compile [s]")
        axes[1, col].set_xlabel("steps (accepted + rejected)")
        for ax in axes[:, col]:
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_ylabel("relative max error at t1 vs the reference")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle("flows.solve work-precision (labels: rtol; atol = rtol / 100)", fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", help="JSON-lines rows or a results JSON list (bench_solve's solve_wp/ rows)")
    p.add_argument("out", help="PNG path to write")
    ns = p.parse_args(argv)
    plot(load_rows(ns.rows), ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
