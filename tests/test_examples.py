"""Every example runs under --quick and writes a complete record; the main job resumes after interruption."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows import records

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def _check_fig4(out):
    trace = json.loads((out / "loss_trace.json").read_text())
    assert set(trace) == {"etaY1_etaZ1", "etaY10_etaZ1"} and len(trace["etaY1_etaZ1"]) == 30


def _check_fig6(out):
    table = json.loads((out / "entropy_table.json").read_text())
    assert {"K", "eta_Z", "ratio", "mean", "sem"} <= set(table[0])


# Files an example promises beyond the standard record.
EXTRA_CHECKS = {"scan_snap_fig4": _check_fig4, "scan_snap_fig6": _check_fig6}


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_quick_writes_a_complete_record(script, tmp_path):
    spec = importlib.util.spec_from_file_location(f"example_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / script.stem
    assert module.main(["--quick", "--out", str(out)]) in (0, None)
    assert records.is_complete(out)
    rec = records.load_record(out)
    assert rec["figures"], "an example must draw at least one figure"
    assert rec["meta"]["quick"] is True
    preds = {k: v for k, v in rec["metrics"].items() if isinstance(v, dict) and "holds" in v}
    assert preds, "an example must record at least one checked prediction"
    if script.stem in EXTRA_CHECKS:
        EXTRA_CHECKS[script.stem](out)


def _reproduce(out, *extra):
    cmd = [sys.executable, "-m", "flows", "reproduce", "--quick", "--only", "scan_snap_decoder_h",
           "--out", str(out), *extra]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_reproduce_quick_interrupted_then_resumed(tmp_path):
    out = tmp_path / "rep"
    record = out / "scan_snap_decoder_h"
    # Interrupt the main job while the example is running.
    proc = _reproduce(out)
    deadline = time.time() + 60
    while not (record / "run.log").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, log
    assert not records.is_complete(record)
    # Rerun: it finishes the interrupted example and writes the report with the Fig. 8 PNG.
    proc = _reproduce(out)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    assert records.is_complete(record)
    assert (record / "fig8_h_staircase.png").stat().st_size > 10_000
    report = (out / "REPORT.md").read_text()
    assert "scan_snap_decoder_h/fig8_h_staircase.png" in report
    assert "PASS ode_vs_closed_form_max_rel_err" in report
    # Rerun again: nothing left to do, the finished example is skipped.
    proc = _reproduce(out)
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "complete, skipped" in log, log
