"""The documented multi-host script: two processes on this machine (CPU devices, gloo collectives) train
with the particle axis sharded over both and equal an unsharded run to 1e-12 (slow: two fresh processes)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "distributed" / "mean_field_multihost.py"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_shard_the_particle_axis():
    port = _free_port()
    env = {**os.environ, "MPLBACKEND": "Agg"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--check",
                "--steps",
                "8",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert "2 process(es), 2 devices" in outs[0], outs[0]
    assert "sharded vs unsharded" in outs[0]


@pytest.mark.slow
def test_single_process_run_of_the_script(capsys):
    """Without distributed flags the script runs on the local devices (the tests' two CPU devices)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mean_field_multihost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check", "--steps", "4", "--M", "4", "--local-devices", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 process(es)" in out and "max |Q gap|" in out
