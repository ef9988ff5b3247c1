"""The README's examples run as written (one per system), its set-up lines are the ones CI runs, and it stays a
user guide: at most 150 lines, no time of day, no date but the citation's (which lives in CITATION.cff)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _block(heading: str) -> str:
    """The python block of the README section whose heading starts with `heading`."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"\n## {re.escape(heading)}[^\n]*\n(.*?)(?=\n## |\Z)", text, re.S)
    assert match, f"README has no section starting {heading!r}"
    blocks = re.findall(r"```python\n(.*?)```", match.group(1), re.S)
    assert len(blocks) == 1, f"section {heading!r}: expected one python block, found {len(blocks)}"
    return blocks[0]


def _run(block: str, capsys) -> str:
    exec(compile(block, "README.md", "exec"), {})
    return capsys.readouterr().out


def test_readme_is_a_short_user_guide():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\b\d{1,2}:\d{2}\b", text), "a time of day in the README"
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", text), "a date in the README (history goes to CHANGELOG.md)"
    # the import names, the distribution name and the citation file are stated
    assert "`transformer-gradient-flows`" in text and "`flows`" in text and "`derivations`" in text
    assert "CITATION.cff" in text and (ROOT / "CITATION.cff").is_file()
    # every relative link points to a file of the repository
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if not (ROOT / target).exists():
            assert target.startswith("docs/systems/"), f"README links to a missing file: {target}"


def test_readme_api_example_runs(capsys):
    block = _block("Scan and Snap")
    assert len(block.strip().splitlines()) <= 25
    out = _run(block, capsys)
    assert "dh/dt = eta_Y/(M + exp(M*h) - 1)" in out
    assert "event 0.533" in out


@pytest.mark.slow  # CI runs it (a slow step of .ci/run); the API example stays in the default run
def test_readme_network_example_runs(capsys):
    out = _run(_block("Word co-occurrence"), capsys)
    gap = float(re.search(r"flow vs GD: ([0-9.e+-]+);", out).group(1))
    assert gap < 1e-3, out
    # T1 found on the GD record by flows.event_time (saved every 0.1) against the flow's located event
    t_flow, t_gd = (float(v) for v in re.search(r"T1 = ([0-9.]+) \(flow\), ([0-9.]+) \(GD\)", out).groups())
    assert abs(t_gd - t_flow) <= 0.01, out


def test_readme_setup_lines_and_ci_agree():
    text = README.read_text(encoding="utf-8")
    assert "pip install -e . && python -m flows reproduce --quick" in text
    assert "pip install -e '.[test]' && pytest" in text
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow  # CI runs it (a slow step of .ci/run); the API example stays in the default run
def test_readme_mean_field_example_runs(capsys):
    out = _run(_block("Mean field"), capsys)
    gaps = [float(g) for g in re.findall(r"max \|Q_GD - Q_flow\| = ([0-9.e+-]+)", out)]
    assert len(gaps) == 2 and 1.6 < gaps[0] / gaps[1] < 2.5, out  # first order in eta_tau


def test_readme_optimiser_limits_example_runs(capsys):
    out = _run(_block("Optimiser limits"), capsys)
    gaps = [float(g) for g in re.findall(r"vs its ODE at t = 1: ([0-9.e+-]+)", out)]
    assert len(gaps) == 2 and gaps[0] < 0.05 and 1.6 < gaps[0] / gaps[1] < 2.5, out  # first order in lr


@pytest.mark.slow  # CI runs it (a slow step of .ci/run); the API example stays in the default run
def test_readme_linear_attention_example_runs(capsys):
    out = _run(_block("Linear attention"), capsys)
    rows = re.findall(r"loss ([0-9.]+) -> ([0-9.]+) \(L\* = ([0-9.]+)\), \|GD - flow\| = ([0-9.e+-]+)", out)
    assert len(rows) == 2, out
    (l0, l1, l_min, gap_a), (_, _, _, gap_b) = [[float(v) for v in row] for row in rows]
    assert l_min < l1 < 0.25 * l0 + 0.75 * l_min, out  # most of the way to the minimum of ZFB's Theorem 4.1
    assert gap_a < 1e-3 and 1.6 < gap_a / gap_b < 2.5, out  # first order in lr
