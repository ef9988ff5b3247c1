"""The README's API example runs as written, and its set-up lines are the ones CI runs."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_api_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## API in 20 lines\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(block.strip().splitlines()) <= 25
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "dh/dt = eta_Y/(M + exp(M*h) - 1)" in out
    assert "event 0.533" in out


def test_readme_network_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"Hold a flow against the real network.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    gap = float(re.search(r"flow vs GD: ([0-9.e+-]+);", out).group(1))
    assert gap < 1e-3, out
    # T1 found on the GD record by flows.event_time (saved every 0.1) against the flow's located event
    t_flow, t_gd = (float(v) for v in re.search(r"T1 = ([0-9.]+) \(flow\), ([0-9.]+) \(GD\)", out).groups())
    assert abs(t_gd - t_flow) <= 0.01, out


def test_readme_setup_lines_and_ci_agree():
    text = (ROOT / "README.md").read_text()
    assert "pip install -e . && python -m flows reproduce --quick" in text
    assert "pip install -e '.[test]' && pytest" in text
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()


def test_readme_mean_field_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    block = re.search(r"Hold the particle Wasserstein flow.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    gaps = [float(g) for g in re.findall(r"max \|Q_GD - Q_flow\| = ([0-9.e+-]+)", out)]
    assert len(gaps) == 2 and 1.6 < gaps[0] / gaps[1] < 2.5, out  # first order in eta_tau
