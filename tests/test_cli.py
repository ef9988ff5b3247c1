"""The command line: ``derive`` and ``reproduce`` (run, skip complete, resume, failures)."""

import subprocess
import sys
import types

import pytest

from flows import records
from flows.__main__ import main

_SCRIPT = '''\
"""Tiny example for the CLI tests."""
import argparse
import sys
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    counter = Path(__file__).with_suffix(".count")
    counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
    {body}
    from flows.records import RunRecord
    from flows.plotting import figure

    with RunRecord(args.out, name="{name}", config={{"quick": args.quick}}, seed=0,
                   quick=args.quick) as rec:
        rec.add_metric("answer", 42.0)
        rec.add_prediction("{pred}", measured={measured}, expected="== 1", holds={holds})
        rec.add_prediction("{pred}_big", measured=0.5, expected="== 1 at full size", holds=None,
                           tested_at="the full run")
        fig, ax = figure()
        ax.plot([0, 1], [0, 1])
        rec.save_figure(fig, "line.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _write_script(folder, stem, *, holds=True, body="pass"):
    text = _SCRIPT.format(name=stem, pred=f"{stem}_pred", measured=1.0 if holds else 2.0,
                          holds=holds, body=body)
    (folder / f"{stem}.py").write_text(text)


def _count(folder, stem):
    path = folder / f"{stem}.count"
    return int(path.read_text()) if path.exists() else 0


@pytest.fixture
def examples(tmp_path):
    d = tmp_path / "examples"
    d.mkdir()
    _write_script(d, "alpha", holds=True)
    _write_script(d, "beta", holds=False)
    (d / "_helper.py").write_text("raise SystemExit('helpers are not examples')\n")
    return d


def test_reproduce_run_skip_resume(examples, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["reproduce", "--quick", "--examples-dir", str(examples), "--out", str(out), "--jobs", "1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "[1/2] alpha: running ..." in text and "[2/2] beta: done in" in text
    assert text.index("alpha: done in") < text.index("beta: running")  # one at a time
    assert "(1/2 predictions hold, 1 not tested at this size)" in text
    assert "(0/2 predictions hold, 1 not tested at this size)" in text
    assert records.is_complete(out / "alpha") and records.is_complete(out / "beta")
    assert records.load_record(out / "alpha")["meta"]["quick"] is True
    assert (out / "alpha" / "run.log").exists()
    report = (out / "REPORT.md").read_text()
    assert "## alpha" in report and "## beta" in report
    assert "](alpha/line.png)" in report and "](beta/line.png)" in report
    assert "- PASS alpha_pred: measured = 1, expected == 1" in report
    assert "- FAIL beta_pred: measured = 2, expected == 1" in report
    assert "- NOT TESTED beta_pred_big: measured = 0.5, expected == 1 at full size (tested_at = the full run)" \
        in report
    assert "| Predictions holding | Failing | Not tested at this size |" in report
    assert "| 1/2 | 0 | 1 |" in report and "| 0/2 | 1 | 1 |" in report
    assert "| answer | 42 |" in report
    assert str(out) not in report.split("## Summary")[1]  # links are relative

    # Second run: everything is complete, nothing reruns.
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "[1/2] alpha: complete, skipped" in text and "[2/2] beta: complete, skipped" in text
    assert _count(examples, "alpha") == 1 and _count(examples, "beta") == 1
    report = (out / "REPORT.md").read_text()
    assert "- FAIL beta_pred" in report and "complete (earlier run)" in report

    # An interrupted run leaves no meta.json: only that example reruns.
    (out / "beta" / "meta.json").unlink()
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "alpha: complete, skipped" in text and "beta: done in" in text
    assert _count(examples, "alpha") == 1 and _count(examples, "beta") == 2

    # --force and --only rerun just the named one.
    assert main(args + ["--force", "--only", "alpha"]) == 0
    assert _count(examples, "alpha") == 2 and _count(examples, "beta") == 2
    assert "## beta" not in (out / "REPORT.md").read_text()


def test_reproduce_failures(tmp_path, capsys):
    d = tmp_path / "examples"
    d.mkdir()
    _write_script(d, "good")
    _write_script(d, "raises", body="raise RuntimeError('deliberate failure')")
    _write_script(d, "silent", body="return 0")  # exits 0 without a complete record
    out = tmp_path / "out"
    assert main(["reproduce", "--examples-dir", str(d), "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "raises: FAILED (exit code 1), see" in text
    assert "silent: FAILED (exit code 0 but the record is incomplete)" in text
    report = (out / "REPORT.md").read_text()
    assert "**FAILED** (exit code 1)" in report
    assert "RuntimeError: deliberate failure" in report  # tail of run.log
    assert "- PASS good_pred" in report
    assert not records.is_complete(out / "raises")


def test_reproduce_interrupt(tmp_path, capsys):
    d = tmp_path / "examples"
    d.mkdir()
    _write_script(d, "a_first")
    # Simulate Ctrl-C: the example sends SIGINT to the reproduce process, then hangs.
    body = "import os, signal, time; os.kill(os.getppid(), signal.SIGINT); time.sleep(60)"
    _write_script(d, "b_hangs", body=body)
    _write_script(d, "c_never")
    out = tmp_path / "out"
    assert main(["reproduce", "--examples-dir", str(d), "--out", str(out), "--jobs", "1"]) == 130
    text = capsys.readouterr().out
    assert "interrupted while running b_hangs" in text
    assert records.is_complete(out / "a_first") and not records.is_complete(out / "b_hangs")
    assert _count(d, "c_never") == 0
    report = (out / "REPORT.md").read_text()
    assert "- PASS a_first_pred" in report and "**interrupted**" in report
    assert "**not run**" in report


def test_reproduce_parallel_jobs(tmp_path, capsys):
    """--jobs 2 runs two examples at once (each waits for the other to start), a failure among them is
    reported as in a serial run, and the report keeps the examples' order."""
    d = tmp_path / "examples"
    d.mkdir()
    wait = ("import time; me = Path(__file__); other = me.with_name('{other}.started'); "
            "me.with_suffix('.started').write_text('1'); deadline = time.time() + 60\n"
            "    while not other.exists() and time.time() < deadline: time.sleep(0.02)\n"
            "    assert other.exists(), 'ran alone'")
    _write_script(d, "p_one", body=wait.format(other="p_two"))
    _write_script(d, "p_two", body=wait.format(other="p_one"))
    _write_script(d, "p_three", body="raise RuntimeError('deliberate failure')")
    out = tmp_path / "out"
    assert main(["reproduce", "--examples-dir", str(d), "--out", str(out), "--jobs", "2"]) == 1
    text = capsys.readouterr().out
    assert "p_one: done in" in text and "p_two: done in" in text, text
    assert "p_three: FAILED (exit code 1)" in text
    assert "3 example(s) in" in text and "(2 at once)" in text
    report = (out / "REPORT.md").read_text()
    assert report.index("## p_one") < report.index("## p_three") < report.index("## p_two")
    assert records.is_complete(out / "p_one") and records.is_complete(out / "p_two")


def test_reproduce_bad_arguments(examples, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["reproduce", "--examples-dir", str(examples), "--out", out,
                 "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "alpha" in err and "beta" in err and "_helper" not in err
    assert main(["reproduce", "--examples-dir", str(tmp_path / "missing")]) == 2
    assert main(["reproduce", "--examples-dir", str(examples), "--out", out, "--jobs", "0"]) == 2
    assert "--jobs must be >= 1" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["--help"]) == 0


class _Derivation:
    def __init__(self, name):
        self.name = name

    def to_text(self):
        return f"text of {self.name}"

    def to_latex(self):
        return rf"\text{{latex of {self.name}}}"


def test_derive_with_fake_module(monkeypatch, capsys):
    fake = types.ModuleType("derivations")
    fake.available = lambda: ["toy", "other"]
    fake.derive = _Derivation
    monkeypatch.setitem(sys.modules, "derivations", fake)
    assert main(["derive", "toy"]) == 0
    assert capsys.readouterr().out.strip() == "text of toy"
    assert main(["derive", "toy", "--latex"]) == 0
    assert capsys.readouterr().out.strip() == r"\text{latex of toy}"
    assert main(["derive", "missing"]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and "toy" in err and "other" in err


def test_derive_real_decoder(capsys):
    try:
        import derivations
    except ImportError:
        pytest.skip("derivations is not importable")
    available = getattr(derivations, "available", None)
    if available is None or "scan_snap-decoder" not in available():
        pytest.skip("derivation scan_snap-decoder is not available yet")
    assert main(["derive", "scan_snap-decoder"]) == 0
    assert "eta_Y" in capsys.readouterr().out
    assert main(["derive", "scan_snap-decoder", "--latex"]) == 0
    assert capsys.readouterr().out.strip()


def test_python_dash_m_help():
    res = subprocess.run([sys.executable, "-m", "flows", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "reproduce" in res.stdout and "derive" in res.stdout

