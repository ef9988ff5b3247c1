"""`python -m benchmarks.summary [RESULTS...]`: the measures of the committed rows as Markdown, grouped by what a
user does (a first call, a rerun with the compile cache, a long run, a sweep, the network beside its limit;
then compiles, solvers and the library's workarounds): each row with its ratio to the alternative a user would
otherwise use, its ratio to its floor or best peer (and where that was measured), the target and whether it is
met, then the machine and the dates of the runs. The documentation's Performance page is generated with
`table`.

Default: every `benchmarks/results/*.json`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.plot_scaling import read_rows

# the folder of the committed rows (benchmarks._harness.RESULTS_DIR, without importing the harness and jax)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: What a user does, in the order the performance page shows them (a row's `task`; the harness reads it here:
#: the site's build reads this module without importing jax).
TASKS = (
    "first call",
    "rerun with the compile cache",
    "long run",
    "sweep",
    "network beside its limit",
    "compile",
    "solver",
    "workaround",
)
#: The task of a row written before rows carried one: the first pattern its name contains.
TASK_OF_NAME = (
    ("workarounds/", "workaround"),
    ("first_call_cached", "rerun with the compile cache"),
    ("first_call_ratio", "network beside its limit"),
    ("first_call_equal_accuracy", "network beside its limit"),
    ("gd_torch", "network beside its limit"),
    ("gd_flop_rate", "network beside its limit"),
    ("adam_ode_ratio", "network beside its limit"),
    ("first_call", "first call"),
    ("long_horizon", "long run"),
    ("sweep", "sweep"),
    ("compile", "compile"),
    ("new_save_grid", "compile"),
    ("solve_vs_scipy", "solver"),
    ("event_cost", "solver"),
)
_INTRO = {
    "first call": "A fresh process, nothing compiled: imports, data, initial state, tracing and compiling, the solve.",
    "rerun with the compile cache": "The same script run again: its programs come from the persistent compilation "
    "cache.",
    "long run": "A flow to a horizon far past its convergence, where it turns stiff.",
    "sweep": "Many configurations in one batched call.",
    "network beside its limit": "The finite network trained step by step against its limit, on one clock.",
    "compile": "Compile times against their budgets.",
    "solver": "`flows.solve` against the other solvers of the same equations.",
    "workaround": "Each of the library's performance workarounds (`flows._xla`) against the same call without it: "
    "a workaround stays while it pays at least 10%.",
}

__all__ = ["RESULTS_DIR", "TASKS", "main", "result_paths", "table", "task_of", "verdict"]


def result_paths(results_dir: Path | str = RESULTS_DIR) -> list[str]:
    """The committed result files: every ``*.json`` of `results_dir` but the ``--quick`` timing record.

    **Arguments:**

    - `results_dir`: the folder (default: ``benchmarks/results``).

    **Returns:** the paths, sorted.
    """
    return sorted(str(p) for p in Path(results_dir).glob("*.json") if p.name != "reproduce_quick.json")


def task_of(r: dict) -> str | None:
    """The task of row `r`: its `task`, else the first of `TASK_OF_NAME` its name contains, else None."""
    if r.get("task"):
        return r["task"]
    return next((task for pattern, task in TASK_OF_NAME if pattern in r["bench"]), None)


def verdict(r: dict) -> bool | None:
    """Whether row `r` meets its target: the one on its floor where it has one, else the one on its ratio;
    None without a target."""
    fl = r.get("floor") or {}
    if fl.get("target") is not None:
        return bool(fl["met"])
    rat = r.get("ratio") or {}
    return None if rat.get("target") is None else bool(rat["met"])


def _machine(m: dict) -> str:
    return f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, {m.get('platform')}"


def _seconds(x: float, unit: str = "s") -> str:
    return f"{x:.3g} {unit}"


def _line(r: dict, notes: list[str]) -> str:
    rat, fl = r.get("ratio") or {}, r.get("floor") or {}
    measured = fl.get("measured_s", r.get("run_s_min"))
    alt = f"{rat['value']:.3g}x ({rat['of']})" if rat else ""
    if fl:
        where = "" if fl["source"] == "this run" else f"; from {fl['source']}"
        floor = _seconds(fl["floor_s"], fl.get("unit", "s"))
        vs = f"{1 / fl['value']:.3g}x its {fl['kind']} ({floor}: {fl['of']}{where})"
    else:
        vs = "not measured"
    if fl.get("target") is not None:
        target = f"<= {1 / fl['target']:.3g}x the {fl['kind']}"
    elif rat.get("target") is not None:
        target = f">= {rat['target']:g}x"
    else:
        target = "-"
    if rat.get("restated"):
        notes.append(f"`{r['bench']}`: {rat['restated']}.")
        target += f" (note {len(notes)})"
    v = verdict(r)
    mark = "-" if v is None else ("met" if v else "**missed**")
    shown = "-" if measured is None else _seconds(measured, fl.get("unit", "s"))
    return f"| `{r['bench']}` | {shown} | {alt or '-'} | {vs} | {target} | {mark} |"


def table(rows: list[dict]) -> str:
    """The measures as Markdown, one section per task (`TASKS`): the rows that carry a ratio or a floor, each with
    the time measured, its ratio to the alternative, its ratio to its floor or best peer, the target and the
    verdict; then a count of targets met and one line per machine with the dates of its runs.

    **Arguments:**

    - `rows`: benchmark rows (``benchmarks._harness.row``), as read by `read_rows`.

    **Returns:** the sections and the machine lines, as Markdown.
    """
    shown = [r for r in rows if r.get("ratio") or r.get("floor")]
    groups: dict[str, list[dict]] = {}
    for r in shown:
        groups.setdefault(task_of(r) or "other", []).append(r)
    notes: list[str] = []
    out = []
    head = (
        "| benchmark | measured | against the alternative | against its floor or best peer | target | verdict |\n"
        "|---|---|---|---|---|---|"
    )
    for task in (*TASKS, "other"):
        if task not in groups:
            continue
        out += [f"### {task[0].upper() + task[1:]}", "", _INTRO.get(task, ""), "", head]
        out += [_line(r, notes) for r in groups[task]]
        out.append("")
    verdicts = [verdict(r) for r in shown]
    met, missed = sum(v is True for v in verdicts), sum(v is False for v in verdicts)
    without = sum(1 for r in shown if not r.get("floor"))
    out.append(
        f"{met} targets met, {missed} missed; {without} of {len(shown)} measures without a floor or peer measured yet."
    )
    out.append("")
    if notes:
        out += ["Notes:", ""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]
    runs: dict[str, set[str]] = {}
    for r in shown:
        m = r.get("machine") or {}
        if m:
            runs.setdefault(_machine(m), set()).add(str(m.get("date")))
    if not runs:
        out.append("Machine: not recorded.")
    for machine, dates in runs.items():
        out.append(f"Machine: {machine}; date {', '.join(sorted(dates))}.")
    return "\n".join(out)


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
