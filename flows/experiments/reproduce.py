"""``python -m flows reproduce``: run the example scripts (each writes a run record under ``OUT/<stem>``),
skip those whose record is complete unless ``--force`` (so an interrupted run resumes), and write ``REPORT.md``
(`flows.experiments.report`). ``--seed S`` passes ``--seed S`` to every example (a complete record of another
seed is then rerun), so that a run at another seed checks that no verdict is the luck of one seed. For
``--quick`` the banner estimates the time from ``benchmarks/results/reproduce_quick.json``."""

from __future__ import annotations

import json
import math
import os
import shlex
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import compile_cache, records
from .report import FOOTER, Outcome, holding, render_report

#: the folder that holds the package ``flows`` (a checkout's root)
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- discovery


def find_examples_dir(explicit: str | None) -> Path:
    """``explicit`` if given, else ``./examples``, else ``examples/`` of the checkout."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_dir():
            raise ValueError(f"--examples-dir {explicit!r} is not a directory")
        return path
    for candidate in (Path.cwd() / "examples", _PACKAGE_PARENT / "examples"):
        if candidate.is_dir():
            return candidate
    raise ValueError("no examples folder found: pass --examples-dir")


def list_scripts(examples_dir: Path) -> list[Path]:
    """Example scripts: ``*.py`` whose name does not start with ``_``, sorted."""
    return sorted(p for p in examples_dir.glob("*.py") if not p.name.startswith("_"))


def _child_env(cache: bool) -> dict:
    """Environment for an example: Agg backend, unbuffered output, ``flows`` importable, and with the `cache`
    the equinox setting that lets the cache store solve programs (`compile_cache.child_environment`)."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    env = compile_cache.child_environment(env) if cache else env
    site_dirs = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if _PACKAGE_PARENT not in site_dirs:  # a checkout, perhaps not installed: make it importable
        parts = [str(_PACKAGE_PARENT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


#: the measured ``--quick`` wall times, relative to the folder that holds ``examples/`` (a checkout)
QUICK_TIMES = Path("benchmarks") / "results" / "reproduce_quick.json"


def load_quick_times(root: Path) -> dict | None:
    """The measured ``--quick`` times under `root` (:data:`QUICK_TIMES`: ``examples`` stem -> wall s, ``jobs``,
    ``cpus``, optionally ``total_wall_s``), or None where there are none or the file is malformed (warned)."""
    path = root / QUICK_TIMES
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        walls = data["examples"]
        ok = (
            isinstance(walls, dict)
            and bool(walls)
            and all(_positive_number(v) for v in walls.values())
            and _positive_int(data.get("jobs"))
            and _positive_int(data.get("cpus"))
            and (data.get("total_wall_s") is None or _positive_number(data["total_wall_s"]))
        )
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        print(f"warning: {path} is not a file of measured times (examples, jobs, cpus); no estimate", file=sys.stderr)
        return None
    return data


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _positive_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def estimate_s(stems: list[str], times: dict) -> float | None:
    """About how long the examples `stems` take in one ``--quick`` run: the sum of their measured times scaled
    by the measured run's total over its sum (``1 / jobs`` without a total); None where one is missing."""
    walls = times["examples"]
    if not stems or any(s not in walls for s in stems):
        return None
    total = times.get("total_wall_s")
    scale = total / sum(walls.values()) if total else 1.0 / times["jobs"]
    return scale * sum(walls[s] for s in stems)


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))} s" if seconds < 90 else f"{round(seconds / 60)} min"


def banner(n: int, pending: list[str], *, quick: bool, times: dict | None) -> str:
    """The first line of ``reproduce``: how many examples, how many run, and about how long (measured)."""
    plural = "example" if n == 1 else "examples"
    text = f"[reproduce] {n} {plural}" + (" (--quick)" if quick else "")
    if len(pending) < n:
        text += f": {n - len(pending)} complete (skipped), {len(pending)} to run"
    if not pending:
        return text
    eta = estimate_s(pending, times) if (quick and times) else None
    if eta is not None and times:
        text += f", about {_duration(eta)} (measured on {times['cpus']} CPU cores, {times['jobs']} at once)"
    return text


# --------------------------------------------------------------------------- running


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _log_footer(log_path: Path, text: str) -> None:
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"{FOOTER}{text}\n")


@dataclass
class _Running:
    """An example's process while it runs."""

    index: int
    stem: str
    rec_dir: Path
    log_path: Path
    proc: subprocess.Popen
    t0: float
    tag: str


@dataclass(frozen=True)
class _Launch:
    """How every example of one ``reproduce`` run is started: `--quick`, `--seed` (None: the example's own), the
    compile cache on or off, from the checkout's folder `cwd`."""

    quick: bool
    cwd: Path
    cache: bool = True
    seed: int | None = None

    def command(self, script: Path, rec_dir: Path) -> list[str]:
        cmd = [sys.executable, str(script.resolve()), "--out", str(rec_dir.resolve())]
        cmd += ["--quick"] if self.quick else []
        cmd += [] if self.seed is None else ["--seed", str(self.seed)]
        cmd += [] if self.cache else ["--no-compile-cache"]
        return cmd


def _start(running: list[_Running], job: tuple[int, Path, Path, str], launch: _Launch) -> None:
    """Start the example of `job` (index, script, record folder, tag) and append it to `running` (the list the
    interrupt handler terminates), so that a Ctrl-C landing between the process's start and its registration
    cannot leave it running."""
    index, script, rec_dir, tag = job
    rec_dir.mkdir(parents=True, exist_ok=True)
    log_path = rec_dir / "run.log"
    cmd = launch.command(script, rec_dir)
    print(f"{tag} {script.stem}: running ...", flush=True)
    proc = None
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(cmd)}\n")
            log.flush()
            env = _child_env(launch.cache)
            proc = subprocess.Popen(
                cmd, cwd=launch.cwd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        running.append(_Running(index, script.stem, rec_dir, log_path, proc, time.perf_counter(), tag))
    except BaseException:
        if proc is not None:
            _terminate(proc)
        raise


def _finish(run: _Running, rc: int) -> Outcome:
    wall = time.perf_counter() - run.t0
    _log_footer(run.log_path, f"exit code {rc} after {wall:.1f} s")
    if rc == 0 and records.is_complete(run.rec_dir):
        print(f"{run.tag} {run.stem}: done in {wall:.1f} s ({holding(run.rec_dir)})", flush=True)
        return Outcome(run.stem, "ok", wall, rc)
    note = f"exit code {rc}" if rc != 0 else "exit code 0 but the record is incomplete"
    print(f"{run.tag} {run.stem}: FAILED ({note}), see {run.log_path}", flush=True)
    return Outcome(run.stem, "failed", wall, rc, note)


def default_jobs() -> int:
    """Examples run at once by default: the CPUs this process may use, at most 4 (each example's XLA
    program uses every core while it runs, but compiling and tracing, most of a quick run, use one)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def _run_all(
    pending: list[tuple[int, Path, Path, str]], outcomes: list[Outcome], *, jobs: int, launch: _Launch
) -> None:
    """Run `pending` (index, script, record folder, tag) as `launch` says, at most `jobs` at once, in order of
    start; fills `outcomes[index]`. On KeyboardInterrupt every running example is terminated (its log says so,
    its outcome stays "interrupted") and the interrupt propagates."""
    queue = list(pending)
    running: list[_Running] = []
    try:
        while queue or running:
            while queue and len(running) < jobs:
                job = index, script, rec_dir, _ = queue.pop(0)
                (rec_dir / records.META_FILE).unlink(missing_ok=True)
                outcomes[index] = Outcome(script.stem, "interrupted")
                _start(running, job, launch)
            if len(running) == 1 and not queue:
                running[0].proc.wait()
            else:
                time.sleep(0.05)
            for run in [r for r in running if r.proc.poll() is not None]:
                running.remove(run)
                outcomes[run.index] = _finish(run, run.proc.returncode)
    except BaseException:
        for run in running:
            _terminate(run.proc)
            _log_footer(run.log_path, f"interrupted after {time.perf_counter() - run.t0:.1f} s")
        raise


def _same_seed(rec_dir: Path, seed: int | None) -> bool:
    """The complete record in `rec_dir` answers a run at `seed` (None: any seed, the examples' own)."""
    return seed is None or records.load_record(rec_dir)["meta"].get("seed") == seed


def reproduce(args, argv: list[str]) -> int:
    """Entry point of the ``reproduce`` sub-command; returns the exit code."""
    try:
        examples_dir = find_examples_dir(args.examples_dir)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    scripts = list_scripts(examples_dir)
    available = [s.stem for s in scripts]
    if not scripts:
        print(f"error: no example scripts in {examples_dir}", file=sys.stderr)
        return 2
    if args.only:
        wanted = [n[:-3] if n.endswith(".py") else n for n in args.only]
        unknown = [n for n in wanted if n not in available]
        if unknown:
            print(f"error: unknown example(s) {', '.join(unknown)}; available: {', '.join(available)}", file=sys.stderr)
            return 2
        scripts = [s for s in scripts if s.stem in wanted]
    out = Path(args.out or ("out/reproduce-quick" if args.quick else "out/reproduce"))
    out.mkdir(parents=True, exist_ok=True)
    cwd = examples_dir.resolve().parent

    jobs = default_jobs() if getattr(args, "jobs", None) is None else args.jobs
    if jobs < 1:
        print(f"error: --jobs must be >= 1, got {jobs}", file=sys.stderr)
        return 2
    seed = getattr(args, "seed", None)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        print(f"error: --seed must be an integer >= 0, got {seed!r}", file=sys.stderr)
        return 2
    n = len(scripts)
    outcomes = [Outcome(s.stem, "not run") for s in scripts]
    pending, skipped = [], []
    for i, script in enumerate(scripts):
        tag, rec_dir = f"[{i + 1}/{n}]", out / script.stem
        if records.is_complete(rec_dir) and not args.force and _same_seed(rec_dir, seed):
            skipped.append(f"{tag} {script.stem}: complete, skipped")
            outcomes[i] = Outcome(script.stem, "skipped")
        else:
            pending.append((i, script, rec_dir, tag))
    times = load_quick_times(cwd) if args.quick else None
    print(banner(n, [p[1].stem for p in pending], quick=args.quick, times=times), flush=True)
    for line in skipped:
        print(line, flush=True)
    interrupted = False
    t0 = time.perf_counter()
    try:
        cache = not getattr(args, "no_compile_cache", False)
        _run_all(pending, outcomes, jobs=jobs, launch=_Launch(quick=args.quick, cwd=cwd, cache=cache, seed=seed))
    except KeyboardInterrupt:
        interrupted = True
        current = [o.stem for o in outcomes if o.status == "interrupted"]
        where = f" while running {', '.join(current)}" if current else ""
        print(f"\ninterrupted{where}; rerun the same command to resume", flush=True)
    if pending and not interrupted:
        print(
            f"{len(pending)} example(s) in {time.perf_counter() - t0:.1f} s ({min(jobs, len(pending))} at once)",
            flush=True,
        )

    report = out / "REPORT.md"
    records.atomic_write_text(report, render_report(outcomes, out, argv, quick=args.quick))
    print(f"report: {report}", flush=True)
    if interrupted:
        return 130
    return 0 if all(o.status in ("ok", "skipped") for o in outcomes) else 1
