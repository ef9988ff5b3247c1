"""``python -m flows reproduce``: run the example scripts, resume, and write ``REPORT.md``.

Part of the command line (it prints progress to stdout); the library never imports it.
Each example ``examples/<stem>.py`` is run as ``python <script> --out OUT/<stem> [--quick]``
and writes a run record there (:mod:`flows.records`).  An example whose record is already
complete is skipped unless ``--force``, so an interrupted ``reproduce`` resumes where it stopped.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shlex
import site
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flows import records

_PACKAGE_PARENT = Path(__file__).resolve().parent.parent
_LOG_TAIL = 20
_FOOTER = "[reproduce] "


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


def _logged_wall_s(log_path: Path) -> float | None:
    """Wall time from the footer of a finished run.log, if there is one."""
    try:
        last = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-1]
    except (OSError, IndexError):
        return None
    match = re.fullmatch(re.escape(_FOOTER) + r"exit code 0 after ([0-9.]+) s", last)
    return float(match.group(1)) if match else None


def _predictions(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, dict) and "holds" in v}


def _holding(rec_dir: Path) -> str:
    try:
        preds = _predictions(records.load_record(rec_dir)["metrics"])
    except (OSError, ValueError):
        return "?/? predictions hold"
    v = [records.verdict(p) for p in preds.values()]
    text = f"{v.count(records.HOLDS)}/{len(preds)} predictions hold"
    return text + (f", {v.count(records.NOT_TESTED)} not tested at this size" if records.NOT_TESTED in v else "")


def _counts(rec_dir: Path) -> tuple[str, str, str]:
    """("holding/total", "failing", "not tested") of a record, for the summary table."""
    try:
        preds = _predictions(records.load_record(rec_dir)["metrics"])
    except (OSError, ValueError):
        return "?", "?", "?"
    v = [records.verdict(p) for p in preds.values()]
    return f"{v.count(records.HOLDS)}/{len(v)}", str(v.count(records.FAILS)), str(v.count(records.NOT_TESTED))


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


# --------------------------------------------------------------------------- report


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        shown = [_fmt(v) for v in (value if len(value) <= 6 else value[:3])]
        more = "" if len(value) <= 6 else f", ... ({len(value)} values)"
        return "[" + ", ".join(shown) + more + "]"
    if isinstance(value, dict):
        text = json.dumps(value, sort_keys=True)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(value)


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no run.log)"
    return "\n".join(lines[-_LOG_TAIL:]) or "(run.log is empty)"


def _link(stem: str, fname: str) -> str:
    target = f"{stem}/{fname}"
    return f"<{target}>" if " " in target else target


_STATUS = {"ok": "ok", "skipped": "complete (earlier run)", "failed": "FAILED",
           "interrupted": "interrupted", "not run": "not run"}


def _section(o: Outcome, out: Path) -> list[str]:
    rec_dir = out / o.stem
    lines = [f"## {o.stem}", ""]
    if o.status not in ("ok", "skipped"):
        lines.append(f"**{_STATUS[o.status]}**" + (f" ({o.note})." if o.note else "."))
        if o.status != "not run":
            lines += ["", f"Last {_LOG_TAIL} lines of `{o.stem}/run.log`:", "", "```",
                      _log_tail(rec_dir / "run.log"), "```"]
        return lines + [""]
    rec = records.load_record(rec_dir)
    meta, metrics = rec["meta"], rec["metrics"]
    lines.append(f"Status: {_STATUS[o.status]}; finished {meta.get('finished', '?')}, "
                 f"seed {meta.get('seed')}, quick={meta.get('quick')}.")
    lines.append("")
    for fname in meta.get("figures") or rec["figures"]:
        lines += [f"![{Path(fname).stem}]({_link(o.stem, fname)})", ""]
    scalars = {k: v for k, v in metrics.items() if not isinstance(v, dict)}
    if scalars:
        lines += ["| Metric | Value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(_fmt(v))} |" for k, v in sorted(scalars.items())]
        lines.append("")
    preds = _predictions(metrics)
    if preds:
        lines += ["Predictions:", ""]
        for name, p in preds.items():
            extra = {k: v for k, v in p.items() if k not in ("measured", "expected", "holds", "verdict")}
            more = ", ".join(f"{k} = {_fmt(v)}" for k, v in sorted(extra.items()))
            lines.append(f"- {records.verdict_tag(p)} {name}: measured = "
                         f"{_fmt(p.get('measured'))}, expected {p.get('expected', '?')}"
                         + (f" ({more})" if more else ""))
        lines.append("")
    if meta.get("solver"):
        lines += ["| Solve | Status | Steps | Compile (s) | Run (s) |", "|---|---|---|---|---|"]
        for name, s in sorted(meta["solver"].items()):
            lines.append(f"| {_cell(name)} | {_cell(_fmt(s.get('status')))} | "
                         f"{_fmt(s.get('num_steps'))} | {_fmt(s.get('compile_s'))} | "
                         f"{_fmt(s.get('run_s'))} |")
        lines.append("")
    return lines


def render_report(outcomes: list[Outcome], out: Path, argv: list[str], *, quick: bool) -> str:
    """Markdown report: summary table, then one section per example (links relative to out)."""
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    lines = ["# Reproduction report" + (" (quick)" if quick else ""), "",
             f"Command: `python -m flows {shlex.join(argv)}`  ", f"Date: {now}", ""]
    versions = None
    for o in outcomes:
        if o.status in ("ok", "skipped"):
            versions = records.load_record(out / o.stem)["meta"].get("versions")
            break
    if versions:
        keys = ("flows", "git_sha", "python", "jax", "diffrax", "jax_backend", "jax_enable_x64")
        lines += ["Versions: " + ", ".join(f"{k} {versions.get(k)}" for k in keys), ""]
    lines += ["## Summary", "",
              "| Example | Status | Wall time (s) | Predictions holding | Failing | Not tested at this size |",
              "|---|---|---|---|---|---|"]
    sections = []
    for o in outcomes:
        wall, counts = o.wall_s, ("-", "-", "-")
        if o.status in ("ok", "skipped"):
            counts = _counts(out / o.stem)
            if wall is None:  # skipped: the earlier run's time, else the record's own
                wall = (_logged_wall_s(out / o.stem / "run.log")
                        or records.load_record(out / o.stem)["meta"].get("wall_s"))
        wall_text = f"{wall:.1f}" if isinstance(wall, (int, float)) else "-"
        lines.append(f"| [{o.stem}](#{o.stem.lower()}) | {_STATUS[o.status]} | {wall_text} | "
                     + " | ".join(counts) + " |")
        sections += _section(o, out)
    return "\n".join(lines + [""] + sections).rstrip() + "\n"
