"""Rendering ``REPORT.md`` of ``python -m flows reproduce``: one section per example with its figures, metrics
and a PASS / FAIL / KNOWN FINDING / NOT TESTED line per prediction, a summary table counting the four verdicts,
and a last section explaining the known findings the report links to (`flows.experiments.findings`). A failed example's
section states the simple cause (its last exception line, or the signal that killed it) above its log's tail."""

from __future__ import annotations

import datetime as _dt
import re
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path

from . import findings, records

__all__ = [
    "FOOTER",
    "SHORT_ENTRIES",
    "Outcome",
    "failure_cause",
    "holding",
    "logged_wall_s",
    "render_report",
    "short_form",
]

_LOG_TAIL = 20
#: the prefix of the lines `reproduce` appends to each example's run.log
FOOTER = "[reproduce] "


@dataclass
class Outcome:
    """What happened to one example in one ``reproduce`` invocation."""

    stem: str
    status: str  # "ok", "skipped", "failed", "interrupted", "not run"
    wall_s: float | None = None
    returncode: int | None = None
    note: str = ""


def _predictions(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, dict) and "holds" in v}


def logged_wall_s(log_path: Path) -> float | None:
    """Wall time from the footer of a finished run.log, if there is one."""
    try:
        last = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-1]
    except (OSError, IndexError):
        return None
    match = re.fullmatch(re.escape(FOOTER) + r"exit code 0 after ([0-9.]+) s", last)
    return float(match.group(1)) if match else None


def _verdicts(rec_dir: Path) -> list[str] | None:
    """The verdicts of a record's predictions, None where the record cannot be read."""
    try:
        preds = _predictions(records.load_record(rec_dir)["metrics"])
    except (OSError, ValueError):
        return None
    return [records.verdict(p) for p in preds.values()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def holding(rec_dir: Path) -> str:
    """The verdicts of a record in words, e.g. "5/5 decided predictions hold, 1 not tested at this size": the
    fraction counts only the predictions this size decides, so a record with nothing failing never reads as a
    failure (a record that decides none: "1 prediction not tested at this size")."""
    v = _verdicts(rec_dir)
    if v is None:
        return "?/? predictions hold"
    n_fails, n_known, n_untested = (v.count(k) for k in (records.FAILS, records.KNOWN, records.NOT_TESTED))
    decided = len(v) - n_untested
    parts = []
    if decided:
        parts.append(f"{v.count(records.HOLDS)}/{decided} decided predictions hold")
    if n_fails:
        parts.append(f"{n_fails} fail{'s' if n_fails == 1 else ''}")
    if n_known:
        parts.append(_plural(n_known, "known finding"))
    if n_untested:
        what = "" if decided else (" prediction" if n_untested == 1 else " predictions")
        parts.append(f"{n_untested}{what} not tested at this size")
    return ", ".join(parts) or "no predictions"


def _counts(rec_dir: Path) -> tuple[str, str, str, str]:
    """("holding/decided", "failing", "not tested", "known findings") of a record, for the summary table (known
    findings last, so that the other columns keep their places). Decided: every verdict but not tested at this
    size; a record that decides nothing shows "none decided"."""
    v = _verdicts(rec_dir)
    if v is None:
        return "?", "?", "?", "?"
    decided = len(v) - v.count(records.NOT_TESTED)
    return (
        f"{v.count(records.HOLDS)}/{decided}" if decided else "none decided",
        str(v.count(records.FAILS)),
        str(v.count(records.NOT_TESTED)),
        str(v.count(records.KNOWN)),
    )


_TRACEBACK = "Traceback (most recent call last):"


def failure_cause(log_path: Path, returncode: int | None = None, note: str = "") -> str:
    """The simple cause of a failed example, one line of Markdown: the signal that killed it (a negative
    `returncode`, as `subprocess` reports it), its last exception line from `log_path` (e.g.
    ``ModuleNotFoundError: No module named 'ot'``), or else `note` (e.g. "exit code 0 but the record is
    incomplete")."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    lines = [line for line in lines if not line.startswith(FOOTER)]
    exception = None
    if _TRACEBACK in lines:
        start = len(lines) - lines[::-1].index(_TRACEBACK)
        # the exception line is the first unindented line after the last traceback's frames
        exception = next((line for line in lines[start:] if line.strip() and not line[0].isspace()), None)
    parts = []
    if isinstance(returncode, int) and returncode < 0:
        try:
            parts.append(f"killed by signal {signal.Signals(-returncode).name}")
        except ValueError:
            parts.append(f"killed by signal {-returncode}")
    if exception:
        parts.append(_code(exception.strip()))
    if not parts:
        parts.append(note or (f"exit code {returncode}" if returncode is not None else "unknown"))
    return "; ".join(parts)


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: at most this many entries of a list or a dict are shown in the report (its record holds them all)
SHORT_ENTRIES = 6


def short_form(value: object, *, digits: int = 6, entries: int = SHORT_ENTRIES) -> str:
    """`value` (a metric or a prediction's measured value, as stored in metrics.json) in a short form for the
    report, never cut inside a number or a structure: floats to `digits` significant digits, lists and dicts
    (recursively; nested ones to 4 digits) to their first `entries` entries, then "... (n values)" or
    "... (n keys)", every bracket closed. The record keeps the whole structure."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, list):
        shown = [short_form(v, digits=4, entries=entries) for v in value[:entries]]
        more = [f"... ({len(value)} values)"] if len(value) > entries else []
        return "[" + ", ".join(shown + more) + "]"
    if isinstance(value, dict):
        items = list(value.items())
        shown = [f"{k}: {short_form(v, digits=4, entries=entries)}" for k, v in items[:entries]]
        more = [f"... ({len(items)} keys)"] if len(items) > entries else []
        return "{" + ", ".join(shown + more) + "}"
    return str(value)


def _shortened(value: object, entries: int = SHORT_ENTRIES) -> bool:
    """True when `short_form` leaves entries of `value` out."""
    if isinstance(value, list | dict):
        inner = value.values() if isinstance(value, dict) else value
        return len(value) > entries or any(_shortened(v, entries) for v in inner)
    return False


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no run.log)"
    return "\n".join(lines[-_LOG_TAIL:]) or "(run.log is empty)"


def _link(stem: str, fname: str) -> str:
    target = f"{stem}/{fname}"
    return f"<{target}>" if " " in target else target


_STATUS = {
    "ok": "ok",
    "skipped": "complete (earlier run)",
    "failed": "FAILED",
    "interrupted": "interrupted",
    "not run": "not run",
}


def _finding_link(pred: dict) -> str:
    """The link of a known finding to its heading in this report's "Known findings" section (a link inside the
    report holds wherever the report is written); "" for the other verdicts."""
    if records.verdict(pred) != records.KNOWN:
        return ""
    anchor = str(pred["known_finding"])
    f = findings.by_anchor(anchor)
    if f is None:  # a record older than the current list of findings
        return f" -- known finding `{anchor}` (no longer in flows.experiments.findings)"
    return f" -- see [{f.title}](#{anchor})"


def _section(o: Outcome, out: Path) -> tuple[list[str], list[str]]:
    """The lines of an example's section and the anchors of its known findings."""
    rec_dir = out / o.stem
    lines = [f"## {o.stem}", ""]
    if o.status not in ("ok", "skipped"):
        lines.append(f"**{_STATUS[o.status]}**" + (f" ({o.note})." if o.note else "."))
        if o.status == "failed":
            cause = failure_cause(rec_dir / "run.log", o.returncode, o.note)
            lines += ["", f"Cause: {cause}"]
        if o.status != "not run":
            log = _log_tail(rec_dir / "run.log")
            lines += ["", f"Last {_LOG_TAIL} lines of `{o.stem}/run.log`:", "", "```", log, "```"]
        return lines + [""], []
    rec = records.load_record(rec_dir)
    meta, metrics = rec["meta"], rec["metrics"]
    status = f"Status: {_STATUS[o.status]}; finished {meta.get('finished', '?')}, seed {meta.get('seed')}, "
    lines += [status + f"quick={meta.get('quick')}.", ""]
    for fname in meta.get("figures") or rec["figures"]:
        lines += [f"![{Path(fname).stem}]({_link(o.stem, fname)})", ""]
    scalars = {k: v for k, v in metrics.items() if not isinstance(v, dict)}
    if scalars:
        lines += ["| Metric | Value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(short_form(v))} |" for k, v in sorted(scalars.items())]
        lines.append("")
    preds = _predictions(metrics)
    if preds:
        lines += ["Predictions:", ""]
        for name, p in preds.items():
            shown = ("measured", "expected", "holds", "verdict", "known_finding", "tested_at")
            more = ", ".join(f"{k} = {short_form(v)}" for k, v in sorted(p.items()) if k not in shown)
            untested = f"; not decided at this size, decided by {p['tested_at']}" if p.get("tested_at") else ""
            lines.append(
                f"- {records.verdict_tag(p)} {name}: measured = "
                f"{short_form(p.get('measured'))}, expected {p.get('expected', '?')}"
                + (f" ({more})" if more else "")
                + untested
                + _finding_link(p)
            )
        lines.append("")
        if any(_shortened(p.get("measured")) for p in preds.values()):
            lines += [
                f"(Lists and dicts are shown to {SHORT_ENTRIES} entries; `{o.stem}/metrics.json` has them all.)",
                "",
            ]
    if meta.get("solver"):
        lines += ["| Solve | Status | Steps | Compile (s) | Run (s) |", "|---|---|---|---|---|"]
        for name, s in sorted(meta["solver"].items()):
            numbers = [short_form(s.get(k)) for k in ("num_steps", "compile_s", "run_s")]
            cells = [_cell(name), _cell(short_form(s.get("status"))), *numbers]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines, [str(p["known_finding"]) for p in preds.values() if records.verdict(p) == records.KNOWN]


def render_report(outcomes: list[Outcome], out: Path, argv: list[str], *, quick: bool) -> str:
    """Markdown report: summary table, then one section per example (links relative to out)."""
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    lines = [
        "# Reproduction report" + (" (quick)" if quick else ""),
        "",
        f"Command: `python -m flows {shlex.join(argv)}`  ",
        f"Date: {now}",
        "",
    ]
    done = [o.stem for o in outcomes if o.status in ("ok", "skipped")]
    versions = records.load_record(out / done[0])["meta"].get("versions") if done else None
    if versions:
        keys = ("flows", "git_sha", "python", "jax", "diffrax", "jax_backend", "jax_enable_x64")
        lines += ["Versions: " + ", ".join(f"{k} {versions.get(k)}" for k in keys), ""]
    lines += [
        "## Summary",
        "",
        "| Example | Status | Wall time (s) | Predictions holding | Failing | Not tested at this size "
        "| Known findings |",
        "|---|---|---|---|---|---|---|",
    ]
    sections: list[str] = []
    anchors: list[str] = []
    for o in outcomes:
        wall, counts = o.wall_s, ("-", "-", "-", "-")
        if o.status in ("ok", "skipped"):
            counts = _counts(out / o.stem)
            if wall is None:  # skipped: the earlier run's time, else the record's own
                wall = logged_wall_s(out / o.stem / "run.log") or records.load_record(out / o.stem)["meta"].get(
                    "wall_s"
                )
        wall_text = f"{wall:.1f}" if isinstance(wall, (int, float)) else "-"
        lines.append(
            f"| [{o.stem}](#{o.stem.lower()}) | {_STATUS[o.status]} | {wall_text} | " + " | ".join(counts) + " |"
        )
        section, known = _section(o, out)
        sections += section
        anchors += known
    explained = findings.report_markdown(anchors)
    if explained:
        sections += [
            "## Known findings",
            "",
            "The predictions marked KNOWN FINDING above fail as documented: each is a disagreement with its "
            "paper that the full run measures and explains (`flows.experiments.findings`; docs/findings.md), not "
            "a defect of the library.",
            "",
            explained,
        ]
    return "\n".join(lines + [""] + sections).rstrip() + "\n"
