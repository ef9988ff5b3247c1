"""``python -m flows reproduce``: run the example scripts, resume, and write ``REPORT.md``.

Part of the command line (it prints progress to stdout); the library never imports it. REPORT.md is
rendered by :mod:`flows._report`.
Each example ``examples/<stem>.py`` is run as ``python <script> --out OUT/<stem> [--quick]``
and writes a run record there (:mod:`flows.records`).  An example whose record is already
complete is skipped unless ``--force``, so an interrupted ``reproduce`` resumes where it stopped.
"""

from __future__ import annotations

import os
import shlex
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flows import records
from flows._report import FOOTER as _FOOTER
from flows._report import holding as _holding
from flows._report import render_report

_PACKAGE_PARENT = Path(__file__).resolve().parent.parent


@dataclass
class Outcome:
    """What happened to one example in this invocation."""

    stem: str
    status: str  # "ok", "skipped", "failed", "interrupted", "not run"
    wall_s: float | None = None
    returncode: int | None = None
    note: str = ""


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


def _child_env() -> dict:
    """Environment for an example: Agg backend, unbuffered output, ``flows`` importable."""
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    site_dirs = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if _PACKAGE_PARENT not in site_dirs:  # a checkout, perhaps not installed: make it importable
        parts = [str(_PACKAGE_PARENT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


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
        log.write(f"{_FOOTER}{text}\n")


def _run_one(script: Path, rec_dir: Path, *, quick: bool, cwd: Path, tag: str, cache: bool = True) -> Outcome:
    stem = script.stem
    rec_dir.mkdir(parents=True, exist_ok=True)
    log_path = rec_dir / "run.log"
    cmd = [sys.executable, str(script.resolve()), "--out", str(rec_dir.resolve())]
    cmd += ["--quick"] if quick else []
    cmd += [] if cache else ["--no-compile-cache"]
    print(f"{tag} {stem}: running ...", flush=True)
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=_child_env(), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rc = proc.wait()
        except BaseException:
            _terminate(proc)
            _log_footer(log_path, f"interrupted after {time.perf_counter() - t0:.1f} s")
            raise
    wall = time.perf_counter() - t0
    _log_footer(log_path, f"exit code {rc} after {wall:.1f} s")
    if rc == 0 and records.is_complete(rec_dir):
        print(f"{tag} {stem}: done in {wall:.1f} s ({_holding(rec_dir)})",
              flush=True)
        return Outcome(stem, "ok", wall, rc)
    note = f"exit code {rc}" if rc != 0 else "exit code 0 but the record is incomplete"
    print(f"{tag} {stem}: FAILED ({note}), see {log_path}", flush=True)
    return Outcome(stem, "failed", wall, rc, note)


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
            print(f"error: unknown example(s) {', '.join(unknown)}; available: "
                  f"{', '.join(available)}", file=sys.stderr)
            return 2
        scripts = [s for s in scripts if s.stem in wanted]
    out = Path(args.out or ("out/reproduce-quick" if args.quick else "out/reproduce"))
    out.mkdir(parents=True, exist_ok=True)
    cwd = examples_dir.resolve().parent

    n = len(scripts)
    outcomes = [Outcome(s.stem, "not run") for s in scripts]
    interrupted = False
    try:
        for i, script in enumerate(scripts):
            tag, rec_dir = f"[{i + 1}/{n}]", out / script.stem
            if records.is_complete(rec_dir) and not args.force:
                print(f"{tag} {script.stem}: complete, skipped", flush=True)
                outcomes[i] = Outcome(script.stem, "skipped")
                continue
            (rec_dir / records.META_FILE).unlink(missing_ok=True)
            outcomes[i] = Outcome(script.stem, "interrupted")
            outcomes[i] = _run_one(script, rec_dir, quick=args.quick, cwd=cwd, tag=tag,
                                   cache=not getattr(args, "no_compile_cache", False))
    except KeyboardInterrupt:
        interrupted = True
        current = next((o.stem for o in outcomes if o.status == "interrupted"), None)
        where = f" while running {current}" if current else ""
        print(f"\ninterrupted{where}; rerun the same command to resume", flush=True)

    report = out / "REPORT.md"
    records.atomic_write_text(report, render_report(outcomes, out, argv, quick=args.quick))
    print(f"report: {report}", flush=True)
    if interrupted:
        return 130
    return 0 if all(o.status in ("ok", "skipped") for o in outcomes) else 1
