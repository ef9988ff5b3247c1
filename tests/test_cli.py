"""The command line: ``derive`` and ``reproduce`` (run, skip complete, resume, failures, interruption)."""

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from flows.__main__ import main
from flows.experiments import records

ROOT = Path(__file__).resolve().parent.parent
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
    from flows.experiments.records import RunRecord
    from flows.experiments.plotting import figure

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
    text = _SCRIPT.format(name=stem, pred=f"{stem}_pred", measured=1.0 if holds else 2.0, holds=holds, body=body)
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
    assert "(1/1 decided predictions hold, 1 not tested at this size)" in text
    assert "(0/1 decided predictions hold, 1 fails, 1 not tested at this size)" in text
    assert records.is_complete(out / "alpha") and records.is_complete(out / "beta")
    assert records.load_record(out / "alpha")["meta"]["quick"] is True
    assert (out / "alpha" / "run.log").exists()
    report = (out / "REPORT.md").read_text()
    assert "## alpha" in report and "## beta" in report
    assert "](alpha/line.png)" in report and "](beta/line.png)" in report
    assert "- PASS alpha_pred: measured = 1, expected == 1" in report
    assert "- FAIL beta_pred: measured = 2, expected == 1" in report
    assert (
        "- NOT TESTED beta_pred_big: measured = 0.5, expected == 1 at full size; not decided at this size, decided "
        "by the full run" in report
    )
    assert "| Predictions holding | Failing | Not tested at this size |" in report
    assert "| 1/1 | 0 | 1 |" in report and "| 0/1 | 1 | 1 |" in report  # of the decided predictions
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


# Interruption. `reproduce` runs in a process of its own whose SIGINT handler is Python's KeyboardInterrupt
# whatever this process inherited: a suite launched in the background (`pytest &` from a script, `nohup`)
# ignores SIGINT, and an ignored signal stays ignored across fork and exec, so a child started plainly would
# never see it. The test sends SIGINT only after the example has written a file saying it is running, so no
# sleep decides when the signal arrives; the deadlines below only bound a failure.
_WITH_KEYBOARD_INTERRUPT = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from flows.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def _reproduce_process(*args):
    """`python -m flows reproduce ARGS` with SIGINT raising KeyboardInterrupt, output on a pipe; in a session
    of its own, so that a failing test can end it together with its examples (`_end`)."""
    return subprocess.Popen(
        [sys.executable, "-c", _WITH_KEYBOARD_INTERRUPT, "reproduce", *args],
        cwd=ROOT,
        env={**os.environ, "MPLBACKEND": "Agg"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _end(proc):
    """Kill `proc` and the examples it started (its process group); its output so far."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.communicate()[0]


def _finish(proc, timeout=120.0):
    """The output of `proc` once it exits; fail (ending it and its examples) after `timeout` seconds."""
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        pytest.fail(f"reproduce did not exit within {timeout:.0f} s:\n{_end(proc)}")


def _wait_for_file(path, proc, timeout=120.0):
    """Block until `path` exists; fail (ending `proc` and its examples) if `proc` ends first or after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{path.name} never appeared (exit code {proc.returncode}):\n{_end(proc)}")
        time.sleep(0.02)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_reproduce_interrupt(tmp_path):
    """Ctrl-C while the second of three examples runs: exit code 130, the running example is terminated
    (its log says so, its record stays incomplete), the third never starts, the report says which is which."""
    d = tmp_path / "examples"
    d.mkdir()
    _write_script(d, "a_first")
    # the example says it is running (its pid in a file), then hangs until it is terminated
    body = (
        "Path(__file__).with_suffix('.ready').write_text(str(__import__('os').getpid())); __import__('time').sleep(120)"
    )
    _write_script(d, "b_hangs", body=body)
    _write_script(d, "c_never")
    out = tmp_path / "out"
    proc = _reproduce_process("--examples-dir", str(d), "--out", str(out), "--jobs", "1")
    ready = d / "b_hangs.ready"
    _wait_for_file(ready, proc)
    pid = int(ready.read_text())
    try:
        proc.send_signal(signal.SIGINT)
        text = _finish(proc)
        assert proc.returncode == 130, text
        assert "interrupted while running b_hangs; rerun the same command to resume" in text
        assert not _alive(pid), "the interrupted example is still running"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert "interrupted after" in (out / "b_hangs" / "run.log").read_text()
    assert records.is_complete(out / "a_first") and not records.is_complete(out / "b_hangs")
    assert _count(d, "c_never") == 0 and not (out / "c_never").exists()
    report = (out / "REPORT.md").read_text()
    assert "- PASS a_first_pred" in report and "**interrupted**" in report
    assert "**not run**" in report


# An example that is interrupted inside its record: on its first run it writes a metric, says it is waiting
# (a file), then waits in the record (as a long example does) until the test interrupts `reproduce`. The
# resume logic is the CLI's, so a toy example tests it as well as a real one.
_INTERRUPTIBLE = '''\
"""An example that is slow on its first run only."""
import argparse
import sys
import time
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from flows.experiments.plotting import figure
    from flows.experiments.records import RunRecord

    first = Path(__file__).with_suffix(".started")
    with RunRecord(args.out, name="slow_once", config={"quick": args.quick}, seed=0, quick=args.quick) as rec:
        rec.add_metric("answer", 42.0)
        if not first.exists():
            first.write_text("1")
            time.sleep(120)
        rec.add_prediction("answer_is_42", measured=42.0, expected="== 42", holds=True)
        fig, ax = figure()
        ax.plot([0, 1], [0, 1])
        rec.save_figure(fig, "line.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def test_reproduce_interrupted_inside_a_record_then_resumed(tmp_path):
    """Interrupted while the example is inside its record: exit code 130 and an incomplete record; the
    rerun finishes it (report with its figure and verdict); a third run skips it."""
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "slow_once.py").write_text(_INTERRUPTIBLE)
    out = tmp_path / "rep"
    record = out / "slow_once"
    args = ("--quick", "--examples-dir", str(examples), "--out", str(out))
    proc = _reproduce_process(*args)
    _wait_for_file(examples / "slow_once.started", proc)
    proc.send_signal(signal.SIGINT)
    log = _finish(proc)
    assert proc.returncode == 130, log
    assert not records.is_complete(record)
    # Rerun: it finishes the interrupted example and writes the report with its figure.
    proc = _reproduce_process(*args)
    log = _finish(proc)
    assert proc.returncode == 0, log
    assert records.is_complete(record)
    assert (record / "line.png").stat().st_size > 1_000
    report = (out / "REPORT.md").read_text()
    assert "slow_once/line.png" in report
    assert "PASS answer_is_42" in report
    # Rerun again: nothing left to do, the finished example is skipped.
    proc = _reproduce_process(*args)
    log = _finish(proc)
    assert proc.returncode == 0 and "complete, skipped" in log, log


def test_reproduce_parallel_jobs(tmp_path, capsys):
    """--jobs 2 runs two examples at once (each waits for the other to start), a failure among them is
    reported as in a serial run, and the report keeps the examples' order."""
    d = tmp_path / "examples"
    d.mkdir()
    wait = (
        "import time; me = Path(__file__); other = me.with_name('{other}.started'); "
        "me.with_suffix('.started').write_text('1'); deadline = time.time() + 60\n"
        "    while not other.exists() and time.time() < deadline: time.sleep(0.02)\n"
        "    assert other.exists(), 'ran alone'"
    )
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
    assert main(["reproduce", "--examples-dir", str(examples), "--out", out, "--only", "nope"]) == 2
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
    res = subprocess.run([sys.executable, "-m", "flows", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "reproduce" in res.stdout and "derive" in res.stdout
