"""REPORT.md's four verdicts and a failed example's cause, rendered from synthetic records.

A prediction that fails as documented in `flows.experiments.findings` (its record carries the ``known_finding``
marker) is a KNOWN FINDING, counted in its own column and linked to its explanation in the report; a failure
without the marker -- a deliberately broken prediction here -- is still a FAIL.
"""

import json
import re

import pytest

from flows.experiments import findings, records
from flows.experiments.report import Outcome, failure_cause, holding, render_report, short_form

RAREST = findings.known("scan_snap_fig4", "etaY1_etaZ1_distinct_logits_rise_network_fraction")
ADAM = findings.known("scan_snap_fig5", "eta0.1_distinct_logits_rise_network_fraction")


def _anchor(heading):
    # GitHub's heading ids, as a reader's browser resolves "#..." links in REPORT.md
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _write(out, stem, preds):
    """A complete record `out/stem` with the given predictions: name -> (holds, known finding or None)."""
    with records.RunRecord(out / stem, name=stem, config={}, seed=0, quick=True) as rec:
        for name, (holds, known) in preds.items():
            kw = {"tested_at": "the full run"} if holds is None else {}
            rec.add_prediction(name, 1.0, "== 1", holds, known_finding=known, **kw)


def _render(out, stems, **statuses):
    outcomes = [Outcome(stem, statuses.get(stem, "ok"), 1.0, 0) for stem in stems]
    return render_report(outcomes, out, ["reproduce", "--quick"], quick=True)


def _summary_row(report, stem):
    return next(line for line in report.splitlines() if line.startswith(f"| [{stem}]"))


def test_known_finding_is_its_own_verdict_and_a_broken_prediction_still_fails(tmp_path):
    _write(
        tmp_path,
        "mixed",
        {
            "holds": (True, None),
            "broken": (False, None),  # a deliberately broken, unmarked prediction
            "rarest": (False, RAREST),  # fails as documented
            "adam": (False, ADAM),
            "marked_but_holds": (True, RAREST),
            "small": (None, None),
        },
    )
    _write(tmp_path, "clean", {"holds": (True, None)})
    report = _render(tmp_path, ["mixed", "clean"])

    assert "| Predictions holding | Failing | Not tested at this size | Known findings |" in report
    assert _summary_row(report, "mixed").endswith("| 2/5 | 1 | 1 | 2 |")  # 5 decided, 1 not tested
    assert _summary_row(report, "clean").endswith("| 1/1 | 0 | 0 | 0 |")

    lines = report.splitlines()
    tags = {m[2]: m[1] for line in lines if (m := re.match(r"- (PASS|FAIL|KNOWN FINDING|NOT TESTED) (\w+):", line))}
    assert tags == {
        "holds": "PASS",
        "broken": "FAIL",
        "rarest": "KNOWN FINDING",
        "adam": "KNOWN FINDING",
        "marked_but_holds": "PASS",
        "small": "NOT TESTED",
    }
    rarest = next(line for line in lines if line.startswith("- KNOWN FINDING rarest:"))
    assert f"[{RAREST.title}](#{RAREST.anchor})" in rarest and RAREST.reason in rarest
    broken = next(line for line in lines if line.startswith("- FAIL broken:"))
    assert "known finding" not in broken.lower() and "](#" not in broken

    # the explanations, once each, after the examples' sections; every in-report link lands on a heading
    tail = report.split("\n## Known findings\n", 1)[1]
    assert tail.count(f"### {RAREST.title}\n") == 1 and tail.count(f"### {ADAM.title}\n") == 1
    assert RAREST.claim in tail and RAREST.measured in tail and ADAM.reason in tail
    headings = {_anchor(line.lstrip("#")) for line in lines if line.startswith("#")}
    links = set(re.findall(r"\]\(#([^)]+)\)", report))
    assert {RAREST.anchor, ADAM.anchor, "mixed", "clean"} <= links
    assert links <= headings, links - headings


def test_no_known_findings_section_without_known_findings(tmp_path):
    # a marked prediction that holds is no known finding, and nothing links to an explanation
    _write(tmp_path, "clean", {"holds": (True, None), "marked_but_holds": (True, RAREST)})
    report = _render(tmp_path, ["clean"])
    assert "## Known findings" not in report and "KNOWN FINDING" not in report
    assert holding(tmp_path / "clean") == "2/2 decided predictions hold"


def test_holding_counts_known_findings_apart(tmp_path):
    _write(tmp_path, "ex", {"a": (True, None), "b": (False, RAREST), "c": (False, None), "d": (None, None)})
    assert (
        holding(tmp_path / "ex") == "1/3 decided predictions hold, 1 fails, 1 known finding, 1 not tested at this size"
    )


def test_a_record_with_nothing_failing_never_reads_as_a_failure(tmp_path):
    """The counts are over the predictions this size decides: one prediction not tested at this size is not
    "0/1 predictions hold"."""
    _write(tmp_path, "untested", {"speed": (None, None)})
    _write(tmp_path, "some", {"a": (True, None), "b": (None, None), "c": (None, None)})
    assert holding(tmp_path / "untested") == "1 prediction not tested at this size"
    assert holding(tmp_path / "some") == "1/1 decided predictions hold, 2 not tested at this size"
    report = _render(tmp_path, ["untested", "some"])
    assert _summary_row(report, "untested").endswith("| none decided | 0 | 1 | 0 |")
    assert _summary_row(report, "some").endswith("| 1/1 | 0 | 2 | 0 |")
    assert "0/1" not in report and "1/3" not in report
    line = next(line for line in report.splitlines() if line.startswith("- NOT TESTED speed:"))
    assert line.endswith("; not decided at this size, decided by the full run")


def test_short_form_never_cuts_a_value_mid_structure():
    """A structured measured value is shown whole to its first entries, every bracket closed, with the count
    of what is left out (the record keeps it all)."""
    value = {
        "m16": 4.993102731067768,
        "nested": {"a": [1.0, 2.0], "b": {"c": 0.123456789}},
        "long": list(range(40)),
        **{f"k{i}": float(i) for i in range(10)},
    }
    text = short_form(value)
    assert text.startswith(
        "{m16: 4.993, nested: {a: [1, 2], b: {c: 0.1235}}, long: [0, 1, 2, 3, 4, 5, ... (40 values)]"
    )
    assert text.endswith(", ... (13 keys)}")
    depth = 0
    for char in text:
        depth += {"{": 1, "[": 1, "}": -1, "]": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0
    assert short_form([0.5, 0.25]) == "[0.5, 0.25]" and short_form(1 / 3) == "0.333333"
    assert short_form({"x": 1.0}) == "{x: 1}" and short_form(None) == "None" and short_form(True) == "True"


def test_report_points_to_the_record_for_a_shortened_value(tmp_path):
    with records.RunRecord(tmp_path / "s", name="s", config={}) as rec:
        rec.add_prediction("curve", list(range(20)), "increasing", True)
        rec.add_prediction("pair", [1.0, 2.0], "ordered", True)
    report = _render(tmp_path, ["s"])
    assert "- PASS curve: measured = [0, 1, 2, 3, 4, 5, ... (20 values)], expected increasing" in report
    assert "`s/metrics.json` has them all" in report
    assert records.load_record(tmp_path / "s")["metrics"]["curve"]["measured"] == list(range(20))


def test_old_records_without_the_marker_still_load_and_fail(tmp_path):
    """A record written before the marker existed: its failure is a FAIL; one whose marker names a finding
    that is no longer listed is still a known finding, without a link that would lead nowhere."""
    _write(tmp_path, "old", {"gone": (False, RAREST), "failed": (False, None)})
    path = tmp_path / "old" / records.METRICS_FILE
    metrics = json.loads(path.read_text())
    metrics["gone"]["known_finding"] = "a-finding-since-renamed"
    metrics["failed"] = {"measured": 2.0, "expected": "== 1", "holds": False}  # the old format: no verdict, no marker
    path.write_text(json.dumps(metrics))
    report = _render(tmp_path, ["old"])
    assert "- FAIL failed: measured = 2, expected == 1" in report
    gone = next(line for line in report.splitlines() if line.startswith("- KNOWN FINDING gone:"))
    assert "`a-finding-since-renamed` (no longer in flows.experiments.findings)" in gone and "](#" not in gone
    assert "## Known findings" not in report
    assert _summary_row(report, "old").endswith("| 0/2 | 1 | 0 | 1 |")


def test_verdict_needs_both_a_failure_and_the_marker():
    marker = {"known_finding": RAREST.anchor}
    assert records.verdict({"holds": False, **marker}) == records.KNOWN
    assert records.verdict({"holds": False}) == records.FAILS
    assert records.verdict({"holds": False, "known_finding": ""}) == records.FAILS
    assert records.verdict({"holds": True, **marker}) == records.HOLDS
    assert records.verdict({"holds": None, **marker}) == records.NOT_TESTED
    assert records.verdict_tag({"holds": False, **marker}) == "KNOWN FINDING"
    preds = {
        "a": {"holds": True},
        "b": {"holds": False},
        "c": {"holds": False, **marker},
        "d": {"holds": False, **marker},
    }
    assert records.verdict_counts(preds) == "1 hold, 1 fails, 2 known findings, 0 not tested at this size"


def test_add_prediction_stores_the_marker_and_the_note(tmp_path):
    rec = records.RunRecord(tmp_path / "r", name="r", config={})
    rec.add_prediction("p", 0.9, "1.0", False, known_finding=RAREST)
    rec.add_prediction("q", 1.0, "1.0", True)
    p, q = rec.predictions["p"], rec.predictions["q"]
    assert p["known_finding"] == RAREST.anchor and p["verdict"] == records.KNOWN
    assert p["expected"] == "1.0" + RAREST.note and RAREST.reason in p["expected"]
    assert "known_finding" not in q and q["verdict"] == records.HOLDS
    for bad in ("scan-and-snap-fig-4-the-rarest-distinct-tokens", True, {"title": "x"}):
        with pytest.raises(ValueError, match="known_finding"):
            rec.add_prediction("x", 1.0, "1.0", False, known_finding=bad)


def test_finding_anchors_are_unique_and_resolve():
    distinct = set(findings.KNOWN_FINDINGS.values())
    assert len({f.anchor for f in distinct}) == len(distinct)
    for f in distinct:
        assert findings.by_anchor(f.anchor) is f
        assert f.anchor == _anchor(f.title) and re.fullmatch(r"[a-z0-9_-]+", f.anchor)
    assert findings.by_anchor("no-such-finding") is None
    assert RAREST.anchor == "scan-and-snap-fig-4-the-rarest-distinct-tokens"
    assert findings.known("scan_snap_fig4", "no_such_prediction") is None


# --------------------------------------------------------------------------- a failed example's cause

_MISSING_OT = """\
$ python examples/mean_field_w2.py --out out/mean_field_w2 --quick
loading data
Traceback (most recent call last):
  File "examples/mean_field_w2.py", line 12, in <module>
    import ot
ModuleNotFoundError: No module named 'ot'
[reproduce] exit code 1 after 3.2 s
"""

_CHAINED = """\
Traceback (most recent call last):
  File "a.py", line 1, in f
    g()
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in <module>
    f()
    ^^^
ValueError: lam must be > 0, got -1
  more text of the message
"""


@pytest.mark.parametrize(
    "log, rc, note, cause",
    [
        (_MISSING_OT, 1, "exit code 1", "`ModuleNotFoundError: No module named 'ot'`"),
        (_CHAINED, 1, "exit code 1", "`ValueError: lam must be > 0, got -1`"),
        ("step 10\nstep 11\n", -9, "exit code -9", "killed by signal SIGKILL"),
        (
            _MISSING_OT.replace("1 after", "-2 after").replace(
                "ModuleNotFoundError: No module named 'ot'", "KeyboardInterrupt"
            ),
            -2,
            "exit code -2",
            "killed by signal SIGINT; `KeyboardInterrupt`",
        ),
        ("done\n", 0, "exit code 0 but the record is incomplete", "exit code 0 but the record is incomplete"),
        (
            "Traceback (most recent call last):\n  File 'x'\nRuntimeError: a `quoted` name\n",
            1,
            "",
            "`` RuntimeError: a `quoted` name ``",
        ),
    ],
)
def test_failure_cause(tmp_path, log, rc, note, cause):
    path = tmp_path / "run.log"
    path.write_text(log)
    assert failure_cause(path, rc, note) == cause


def test_failure_cause_without_a_log(tmp_path):
    assert failure_cause(tmp_path / "missing.log", 3, "") == "exit code 3"
    assert failure_cause(tmp_path / "missing.log", -15, "exit code -15") == "killed by signal SIGTERM"


def test_failed_section_states_the_cause_above_the_log_tail(tmp_path):
    (tmp_path / "w2").mkdir()
    (tmp_path / "w2" / "run.log").write_text(_MISSING_OT)
    _write(tmp_path, "fine", {"holds": (True, None)})
    outcomes = [Outcome("w2", "failed", 3.2, 1, "exit code 1"), Outcome("fine", "ok", 1.0, 0)]
    report = render_report(outcomes, tmp_path, ["reproduce"], quick=False)
    section = report.split("\n## w2\n", 1)[1].split("\n## ", 1)[0]
    cause = "Cause: `ModuleNotFoundError: No module named 'ot'`"
    assert cause in section
    assert section.index("**FAILED** (exit code 1).") < section.index(cause) < section.index("Last 20 lines")
    assert _summary_row(report, "w2").endswith("| - | - | - | - |")
