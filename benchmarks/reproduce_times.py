"""`python -m benchmarks.reproduce_times OUT [--jobs N] [--total-s S] [--output FILE]`: the measured wall time
of each example of a finished `python -m flows reproduce --quick --out OUT`, written to
`benchmarks/results/reproduce_quick.json`, from which `reproduce` estimates its duration at the start, with
each example's predictions and their verdicts (the tables of the documentation's system pages).

Each example's time is the footer `[reproduce] exit code 0 after X s` of `OUT/<stem>/run.log`. The whole run's
wall time is `--total-s` (the `N example(s) in S s` line that `reproduce` prints at the end) or else is read
from the logs: each footer is written when its example ends, X s after it started, so the run spans from the
earliest start to the latest end (valid when every example ran in that one invocation; a resumed run's gap
would count, so then pass `--total-s`). `--jobs` is the examples run at once (default: the run's `--jobs`
from `OUT/REPORT.md`, else what `reproduce` picks on this machine).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path

from flows.experiments.examples import verdict
from flows.experiments.report import logged_wall_s
from flows.experiments.reproduce import default_jobs

RESULTS = Path(__file__).resolve().parent / "results" / "reproduce_quick.json"


def _report_argv(out: Path) -> list[str]:
    """The reproduce command line recorded in OUT/REPORT.md; checks it was a --quick run."""
    report = out / "REPORT.md"
    if not report.is_file():
        raise ValueError(f"OUT {str(out)!r} has no REPORT.md: not a finished reproduce run")
    text = report.read_text(encoding="utf-8")
    if not text.startswith("# Reproduction report (quick)"):
        raise ValueError(f"{report} is not the report of a --quick run")
    match = re.search(r"^Command: `python -m flows (.*)`", text, re.MULTILINE)
    return shlex.split(match.group(1)) if match else []


def _jobs_of(argv: list[str]) -> int | None:
    for i, arg in enumerate(argv):
        if arg in ("--jobs", "-j") and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--jobs="):
            return int(arg.split("=", 1)[1])
    return None


def _without_paths(argv: list[str]) -> list[str]:
    """`argv` with the folders it names (--out, --examples-dir) as placeholders: no path of the machine that
    ran it goes into the committed file."""
    shown, hide = [], False
    for arg in argv:
        key = arg.split("=", 1)[0]
        if hide:
            shown.append("DIR")
            hide = False
        elif key in ("--out", "--examples-dir") and "=" in arg:
            shown.append(f"{key}=DIR")
        else:
            shown.append(arg)
            hide = arg in ("--out", "--examples-dir")
    return shown


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


_PREDICTION_KEYS = ("measured", "expected", "tested_at", "known_finding")


def recorded_predictions(out: Path) -> dict[str, dict[str, dict]]:
    """The predictions of each example of the run in `out`, with their verdicts.

    **Arguments:**

    - `out`: the run's ``--out`` folder.

    **Returns:** ``{stem: {name: {"verdict", "measured", "expected", ...}}}`` for every example whose
    ``metrics.json`` holds predictions (entries with a ``"holds"`` field), in the order the record keeps them.
    """
    preds: dict[str, dict[str, dict]] = {}
    for path in sorted(Path(out).glob("*/metrics.json")):
        metrics = json.loads(path.read_text(encoding="utf-8"))
        mine = {}
        for name, p in metrics.items():
            if isinstance(p, dict) and "holds" in p:
                mine[name] = {"verdict": verdict(p), **{k: p[k] for k in _PREDICTION_KEYS if k in p}}
        if mine:
            preds[path.parent.name] = mine
    return preds


def measured_times(out: Path, *, jobs: int | None = None, total_s: float | None = None) -> dict:
    """The contents of `reproduce_quick.json` from the finished ``--quick`` run in `out`.

    **Arguments:**

    - `out`: the run's ``--out`` folder (with ``REPORT.md`` and one folder per example).
    - `jobs`: examples that ran at once (default: the run's ``--jobs``, else :func:`default_jobs` here).
    - `total_s`: the whole run's wall time (default: from the run.log files, see the module docstring).

    **Raises:** `ValueError` naming the folder when it holds no finished quick run or no example finished.
    """
    out = Path(out)
    argv = _report_argv(out)
    jobs = jobs if jobs is not None else (_jobs_of(argv) or default_jobs())
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    walls, spans = {}, []
    for log in sorted(out.glob("*/run.log")):
        wall = logged_wall_s(log)
        if wall is not None:
            walls[log.parent.name] = round(wall, 1)
            end = log.stat().st_mtime
            spans.append((end - wall, end))
    if not walls:
        raise ValueError(f"no example in {str(out)!r} has a run.log ending '[reproduce] exit code 0 after X s'")
    if total_s is None:
        total_s = max(e for _, e in spans) - min(s for s, _ in spans)
    if not (total_s > 0):
        raise ValueError(f"total_s must be > 0, got {total_s}")
    return {
        "what": "wall time (s) of each example in one `python -m flows reproduce --quick` run (its run.log "
        "footer), jobs of them at once on cpus cores, and of the whole run (total_wall_s)",
        "command": shlex.join(["python", "-m", "flows", *_without_paths(argv)]) if argv else None,
        "cpus": _cpus(),
        "cpu_model": _cpu_model(),
        "jobs": jobs,
        "total_wall_s": round(total_s, 1),
        "date": _dt.date.today().isoformat(),
        "examples": walls,
        "predictions": recorded_predictions(out),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reproduce_times", description=__doc__.splitlines()[0])
    p.add_argument("out", help="the --out folder of a finished `python -m flows reproduce --quick`")
    p.add_argument("--jobs", type=int, default=None, help="examples run at once in that run")
    p.add_argument("--total-s", type=float, default=None, help="the whole run's wall time (s)")
    p.add_argument("--output", default=str(RESULTS), help="where to write (default: %(default)s)")
    ns = p.parse_args(argv)
    try:
        data = measured_times(Path(ns.out), jobs=ns.jobs, total_s=ns.total_s)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    path = Path(ns.output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    n, total = len(data["examples"]), data["total_wall_s"]
    print(
        f"{path}: {n} examples, {sum(data['examples'].values()):.1f} s summed, {total:.1f} s the whole run "
        f"({data['jobs']} at once on {data['cpus']} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
